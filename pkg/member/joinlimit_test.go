package member

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/grid"
)

func testPeer(t *testing.T) peer.ID {
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPublicKey(pub)
	return id
}

func TestJoinRate(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	r := newJoinRate(3, 10*time.Second, 4)
	p, q := testPeer(t), testPeer(t)
	for i := range 3 {
		if ok, _ := r.allow(p, t0); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := r.allow(p, t0.Add(time.Second))
	if ok || wait != 9*time.Second {
		t.Fatalf("past the burst: %v, wait %v; want refused for 9 s", ok, wait)
	}
	if ok, _ := r.allow(q, t0.Add(time.Second)); !ok {
		t.Fatal("another peer refused")
	}
	if ok, _ := r.allow(p, t0.Add(10*time.Second)); !ok {
		t.Fatal("refused after a refill")
	}
	if ok, _ := r.allow(p, t0.Add(11*time.Second)); ok {
		t.Fatal("two requests for one refill")
	}
	// A clock that goes back refills nothing.
	if ok, _ := r.allow(p, t0); ok {
		t.Fatal("allowed on a clock gone back")
	}
	// Bounded: peers past the bound evict those whose bucket is full
	// again, then any; p, throttled, is kept while others are idle.
	for range 10 {
		r.allow(testPeer(t), t0.Add(40*time.Second))
	}
	if len(r.b) > 4 {
		t.Fatalf("%d peers remembered, bound 4", len(r.b))
	}
}

func TestCheckJoin(t *testing.T) {
	k, _ := grid.NewKey()
	other, _ := grid.NewKey()
	now := time.Unix(1_800_000_000, 0)
	a, err := New(Config{Now: func() time.Time { return now }}, Material{GridKey: k.Public()})
	if err != nil {
		t.Fatal(err)
	}
	self, fwd := testPeer(t), testPeer(t)
	token := func(k grid.Key, ttl time.Duration, at time.Time) []byte {
		tok, err := k.NewToken(grid.RoleWorker, []string{"w/"}, at, ttl, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := k.Sign(tok)
		return []byte(s)
	}
	cert := func(from, to time.Time, serial uint64) []byte {
		b, err := k.Issue(grid.Cert{Peer: self, Role: grid.RoleWorker, Prefixes: []string{"w/"}, NotBefore: from.Unix(), NotAfter: to.Unix(), Serial: serial})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	past := cert(now.Add(-40*time.Minute), now.Add(20*time.Minute), 5)
	for _, tc := range []struct {
		name   string
		remote peer.ID
		member bool
		q      joinRequest
		want   string // "" ok
	}{
		{"a token for itself", self, false, joinRequest{kindRedeem, self, token(k, time.Hour, now)}, ""},
		{"a token expired within the skew", self, false, joinRequest{kindRedeem, self, token(k, time.Minute, now.Add(-3*time.Minute))}, ""},
		{"a token expired", self, false, joinRequest{kindRedeem, self, token(k, time.Minute, now.Add(-10*time.Minute))}, "expired"},
		{"another grid's token", self, false, joinRequest{kindRedeem, self, token(other, time.Hour, now)}, "another grid"},
		{"garbage", self, false, joinRequest{kindRedeem, self, []byte("omst-join-AAAA")}, "token"},
		{"for another, not a member", fwd, false, joinRequest{kindRedeem, self, token(k, time.Hour, now)}, "not a member that may forward"},
		{"forwarded by a member", fwd, true, joinRequest{kindRedeem, self, token(k, time.Hour, now)}, ""},
		{"a renewal from an outsider", self, false, joinRequest{kindRenew, self, past}, "not an admitted member"},
		{"a renewal", self, true, joinRequest{kindRenew, self, past}, ""},
		{"a renewal forwarded", fwd, true, joinRequest{kindRenew, self, past}, ""},
		{"a renewal too early", self, true, joinRequest{kindRenew, self, cert(now.Add(-10*time.Minute), now.Add(50*time.Minute), 6)}, "half its life"},
		{"a renewal of an expired one", self, true, joinRequest{kindRenew, self, cert(now.Add(-2*time.Hour), now.Add(-time.Hour), 7)}, "expired"},
		{"a renewal of another's", fwd, true, joinRequest{kindRenew, fwd, past}, "shown by"},
	} {
		err := a.checkJoin(tc.remote, tc.member, tc.q, now)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Revoked by the list held.
	l, _ := k.SignRevocations(grid.Revocations{Seq: 1, Serials: []uint64{5}})
	if _, err := a.AdoptRevocations(l); err != nil {
		t.Fatal(err)
	}
	if err := a.checkJoin(self, true, joinRequest{kindRenew, self, past}, now); !errors.Is(err, grid.ErrRevoked) {
		t.Errorf("a revoked certificate's renewal: %v", err)
	}
}

// The memory of revoked peers follows the list: a serial the list no
// longer names is forgotten, and a valid certificate shown clears it.
func TestRevokedFollowsTheList(t *testing.T) {
	k, _ := grid.NewKey()
	now := time.Unix(1_800_000_000, 0)
	a, err := New(Config{Now: func() time.Time { return now }}, Material{GridKey: k.Public()})
	if err != nil {
		t.Fatal(err)
	}
	p := testPeer(t)
	issue := func(serial uint64) []byte {
		b, _ := k.Issue(grid.Cert{Peer: p, Role: grid.RoleReader, NotBefore: now.Unix() - 60, NotAfter: now.Unix() + 3600, Serial: serial})
		return b
	}
	l1, _ := k.SignRevocations(grid.Revocations{Seq: 1, Serials: []uint64{3}})
	if _, err := a.AdoptRevocations(l1); err != nil {
		t.Fatal(err)
	}
	if err := a.admit(p, issue(3)); !errors.Is(err, grid.ErrRevoked) || !a.Revoked(p) {
		t.Fatalf("a revoked certificate: %v, revoked %v", err, a.Revoked(p))
	}
	l2, _ := k.SignRevocations(grid.Revocations{Seq: 2, Serials: []uint64{4}})
	if _, err := a.AdoptRevocations(l2); err != nil {
		t.Fatal(err)
	}
	if a.Revoked(p) {
		t.Fatal("still revoked after a list without its serial")
	}
	if err := a.admit(p, issue(4)); !errors.Is(err, grid.ErrRevoked) || !a.Revoked(p) {
		t.Fatalf("serial 4: %v", err)
	}
	if err := a.admit(p, issue(5)); err != nil || a.Revoked(p) {
		t.Fatalf("a newer serial not on the list: %v, revoked %v", err, a.Revoked(p))
	}
}
