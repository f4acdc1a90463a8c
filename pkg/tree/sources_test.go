package tree

import (
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestSourcesFor(t *testing.T) {
	a, b, c, self := peer.ID("A"), peer.ID("B"), peer.ID("C"), peer.ID("S")
	ps := func(ids ...peer.ID) []peer.ID { return ids }
	for _, tc := range []struct {
		name          string
		via           peer.ID
		parents       []peer.ID
		self, exclude peer.ID
		want          []peer.ID
	}{
		{"via first, then parent", a, ps(b), self, "", ps(a, b)},
		{"no via: parent", "", ps(b), self, "", ps(b)},
		{"root with via", a, nil, self, "", ps(a)},
		{"never back to the asker", a, ps(b), self, a, ps(b)},
		{"asker is the parent", a, ps(b), self, b, ps(a)},
		{"via is self", self, ps(b), self, "", ps(b)},
		{"root, nothing", "", nil, self, "", nil},
		{"via == parent once", b, ps(b), self, "", ps(b)},
		{"fallbacks after the parent", a, ps(b, c), self, "", ps(a, b, c)},
		{"asker is the fallback", "", ps(b, c), self, c, ps(b)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SourcesFor(tc.via, tc.parents, tc.self, tc.exclude); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v want %v", got, tc.want)
			}
		})
	}
}

func TestNextParent(t *testing.T) {
	for _, tc := range []struct{ cur, n, failures, want int }{
		{0, 1, 5, 0}, // no fallback: stay
		{0, 2, 1, 0}, // one failure: retry the same
		{0, 2, switchAfter, 1},
		{1, 2, switchAfter, 0}, // wraps around to the preferred parent
		{1, 3, switchAfter + 3, 2},
	} {
		got, switched := NextParent(tc.cur, tc.n, tc.failures)
		if got != tc.want || switched != (tc.want != tc.cur) {
			t.Errorf("NextParent(%d, %d, %d) = %d, %v; want %d", tc.cur, tc.n, tc.failures, got, switched, tc.want)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{{0, 100 * time.Millisecond}, {1, 200 * time.Millisecond}, {3, 800 * time.Millisecond}, {6, 5 * time.Second}, {50, 5 * time.Second}} {
		if got := BackoffDelay(tc.n, 0.5); got != tc.want {
			t.Errorf("BackoffDelay(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	if BackoffDelay(0, 0) != 50*time.Millisecond || BackoffDelay(0, 0.999) >= 150*time.Millisecond {
		t.Error("jitter range")
	}
}
