package coalesce

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// A request made for a peer never waits on a fetch that asks that very
// peer (it asks us because it lacks the chunk).
func TestJoinable(t *testing.T) {
	a, b := peer.ID("a"), peer.ID("b")
	for _, tc := range []struct {
		c     *Call
		asker peer.ID
		want  bool
	}{
		{nil, "", false},
		{nil, a, false},
		{&Call{src: a}, "", true},
		{&Call{src: a}, b, true},
		{&Call{src: a}, a, false},
	} {
		if got := joinable(tc.c, tc.asker); got != tc.want {
			t.Errorf("joinable(%+v, asker %q) = %v, want %v", tc.c, tc.asker, got, tc.want)
		}
	}
}
