package member_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/member"
	"github.com/omst-project/omst/pkg/peerhost"
)

const secretProto = "/test/secret/1.0.0"

var secret = []byte("the bytes only members may read")

// testGrid is a grid key with a serial counter and a ledger of redeemed
// tokens: enough of a root for these tests (pkg/gridstore is the real
// one).
type testGrid struct {
	key    grid.Key
	mu     sync.Mutex
	serial uint64
	nonces map[[16]byte]bool
}

func newGrid(t *testing.T) *testGrid {
	k, err := grid.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return &testGrid{key: k, nonces: map[[16]byte]bool{}}
}

func (g *testGrid) cert(t *testing.T, p peer.ID, role grid.Role, from, to time.Time) []byte {
	g.mu.Lock()
	g.serial++
	s := g.serial
	g.mu.Unlock()
	b, err := g.key.Issue(grid.Cert{Peer: p, Role: role, NotBefore: from.Unix(), NotAfter: to.Unix(), Serial: s})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (g *testGrid) Redeem(token string, p peer.ID, now time.Time) ([]byte, error) {
	tok, err := grid.ParseToken(token)
	if err != nil {
		return nil, err
	}
	if err := tok.Redeemable(g.key.Public(), now); err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.nonces[tok.Nonce] {
		return nil, errors.New("token already redeemed")
	}
	g.nonces[tok.Nonce] = true
	g.serial++
	return g.key.Issue(tok.CertFor(p.String(), now, g.serial))
}

func (g *testGrid) Renew(cert []byte, p peer.ID, now time.Time) ([]byte, error) {
	c, err := grid.DecodeCert(cert, g.key.Public())
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.serial++
	c.Serial, c.NotBefore, c.NotAfter = g.serial, now.Unix(), now.Add(time.Hour).Unix()
	return g.key.Issue(c)
}

type node struct {
	h   host.Host
	adm *member.Admission
}

// start makes a host on loopback over transport ("tcp" or "quic"), with
// an Admission whose material mk returns for the host's peer ID (nil:
// open), and a secret protocol served through the wrapped host.
func start(t *testing.T, transport string, cfg member.Config, mk func(peer.ID) member.Material) node {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	var m member.Material
	if mk != nil {
		m = mk(id)
	}
	adm, err := member.New(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	listen := "/ip4/127.0.0.1/tcp/0"
	if transport == "quic" {
		listen = "/ip4/127.0.0.1/udp/0/quic-v1"
	}
	h, err := peerhost.New(peerhost.Options{Key: k, Listen: []string{listen}, Admission: adm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	h.SetStreamHandler(secretProto, func(s network.Stream) {
		defer s.Close()
		s.Write(secret)
	})
	return node{h: h, adm: adm}
}

func (g *testGrid) member(t *testing.T, role grid.Role) func(peer.ID) member.Material {
	return func(p peer.ID) member.Material {
		now := time.Now()
		return member.Material{GridKey: g.key.Public(), Cert: g.cert(t, p, role, now.Add(-time.Minute), now.Add(time.Hour))}
	}
}

// read connects from to to and reads the secret protocol; it returns the
// bytes read (through the raw, unwrapped side when raw).
func read(ctx context.Context, from, to host.Host) ([]byte, error) {
	if err := from.Connect(ctx, peer.AddrInfo{ID: to.ID(), Addrs: to.Addrs()}); err != nil {
		return nil, err
	}
	s, err := from.NewStream(ctx, to.ID(), secretProto)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return io.ReadAll(s)
}

func TestMembersServeEachOther(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			g := newGrid(t)
			a := start(t, tr, member.Config{}, g.member(t, grid.RoleHead))
			b := start(t, tr, member.Config{}, g.member(t, grid.RoleWorker))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := read(ctx, b.h, a.h)
			if err != nil || string(got) != string(secret) {
				t.Fatalf("member read %q, %v", got, err)
			}
			if !a.adm.Admitted(b.h.ID()) || !b.adm.Admitted(a.h.ID()) {
				t.Fatal("members not admitted both ways")
			}
			if st := a.adm.Stats(); st.Open || st.Admitted != 1 || st.Refused != 0 || st.Role != "head" {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// outsider returns a plain libp2p host (no admission at all) on tr.
func outsider(t *testing.T, tr string) host.Host {
	k, _, _ := crypto.GenerateEd25519Key(nil)
	listen := "/ip4/127.0.0.1/tcp/0"
	if tr == "quic" {
		listen = "/ip4/127.0.0.1/udp/0/quic-v1"
	}
	h, err := peerhost.New(peerhost.Options{Key: k, Listen: []string{listen}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestOutsiderReadsNothing(t *testing.T) {
	for _, tr := range []string{"tcp", "quic"} {
		t.Run(tr, func(t *testing.T) {
			g := newGrid(t)
			a := start(t, tr, member.Config{Timeout: 500 * time.Millisecond}, g.member(t, grid.RoleHead))
			o := outsider(t, tr)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := read(ctx, o, a.h)
			if len(got) != 0 {
				t.Fatalf("outsider read %d bytes: %q", len(got), got)
			}
			t.Logf("outsider's read: %v", err)
			// The member asks the outsider nothing either.
			if _, err := a.h.NewStream(ctx, o.ID(), secretProto); !errors.Is(err, member.ErrNotMember) {
				t.Fatalf("member opened a stream to an outsider: %v", err)
			}
			// And the connection is closed once the timeout passed.
			deadline := time.Now().Add(3 * time.Second)
			for a.h.Network().Connectedness(o.ID()) == network.Connected {
				if time.Now().After(deadline) {
					t.Fatal("outsider still connected after the admission timeout")
				}
				time.Sleep(50 * time.Millisecond)
			}
			// Once cut off, it is not dialled again for a while: asking it
			// fails at once (an outsider in the DHT's routing table costs
			// no dial and no timeout).
			t0 := time.Now()
			if _, err := a.h.NewStream(ctx, o.ID(), secretProto); !errors.Is(err, member.ErrNotMember) || time.Since(t0) > 200*time.Millisecond {
				t.Fatalf("a stream to a shunned outsider: %v after %v", err, time.Since(t0))
			}
			for t0 := time.Now(); a.adm.Stats().Denied == 0 && time.Since(t0) < 3*time.Second; {
				time.Sleep(20 * time.Millisecond) // the guard gives up at its own timeout
			}
			if st := a.adm.Stats(); st.Denied == 0 || st.Unshown == 0 {
				t.Fatalf("stats %+v: want a denied stream and an unshown certificate", st)
			}
		})
	}
}

// TestBadCertificatesRefused: expired, revoked, other grid, someone
// else's: no byte read, and the refusal names why.
func TestBadCertificatesRefused(t *testing.T) {
	g, other := newGrid(t), newGrid(t)
	now := time.Now()
	var stolen []byte
	cases := []struct {
		name, want string
		mk         func(peer.ID) member.Material
	}{
		{"expired", "expired", func(p peer.ID) member.Material {
			return member.Material{GridKey: g.key.Public(), Cert: g.cert(t, p, grid.RoleWorker, now.Add(-3*time.Hour), now.Add(-time.Hour))}
		}},
		{"other-grid", "another grid", func(p peer.ID) member.Material {
			return member.Material{GridKey: other.key.Public(), Cert: other.cert(t, p, grid.RoleWorker, now, now.Add(time.Hour))}
		}},
		{"someone-elses", "shown by", func(p peer.ID) member.Material {
			return member.Material{GridKey: g.key.Public(), Cert: stolen}
		}},
		{"revoked", "revoked", func(p peer.ID) member.Material {
			c := g.cert(t, p, grid.RoleWorker, now, now.Add(time.Hour))
			return member.Material{GridKey: g.key.Public(), Cert: c}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := start(t, "tcp", member.Config{Timeout: 500 * time.Millisecond}, g.member(t, grid.RoleHead))
			if tc.name == "someone-elses" {
				stolen = g.cert(t, a.h.ID(), grid.RoleWorker, now, now.Add(time.Hour))
			}
			b := start(t, "tcp", member.Config{Timeout: 500 * time.Millisecond}, tc.mk)
			if tc.name == "revoked" {
				c, _ := b.adm.Cert()
				l, err := g.key.SignRevocations(grid.Revocations{Seq: 1, Serials: []uint64{c.Serial}})
				if err != nil {
					t.Fatal(err)
				}
				if ok, err := a.adm.AdoptRevocations(l); !ok || err != nil {
					t.Fatalf("adopt: %v %v", ok, err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err := read(ctx, b.h, a.h)
			if len(got) != 0 {
				t.Fatalf("read %d bytes", len(got))
			}
			if err == nil {
				t.Fatal("no error")
			}
			deadline := time.Now().Add(3 * time.Second)
			for a.adm.Stats().Refused == 0 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if st := a.adm.Stats(); !strings.Contains(st.LastRefusal, tc.want) {
				t.Fatalf("refusal %q, want it to say %q (%+v)", st.LastRefusal, tc.want, st)
			}
		})
	}
}

// TestRevocationFloods: a list adopted at the root reaches a member two
// hops away, which cuts off the revoked peer.
func TestRevocationFloods(t *testing.T) {
	g := newGrid(t)
	root := start(t, "tcp", member.Config{}, g.member(t, grid.RoleClient))
	head := start(t, "quic", member.Config{}, g.member(t, grid.RoleHead))
	worker := start(t, "tcp", member.Config{}, g.member(t, grid.RoleWorker))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, pair := range [][2]node{{head, root}, {worker, head}} {
		if got, err := read(ctx, pair[0].h, pair[1].h); err != nil || len(got) == 0 {
			t.Fatalf("setup read: %v", err)
		}
	}
	c, _ := worker.adm.Cert()
	l, _ := g.key.SignRevocations(grid.Revocations{Seq: 7, Serials: []uint64{c.Serial}})
	start := time.Now()
	if ok, err := root.adm.AdoptRevocations(l); !ok || err != nil {
		t.Fatalf("adopt: %v %v", ok, err)
	}
	for head.h.Network().Connectedness(worker.h.ID()) == network.Connected {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("worker still connected to its head 5 s after the revocation (head's seq %d)", head.adm.Stats().RevSeq)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("revoked worker cut off by its head %v after the root adopted the list", time.Since(start))
	if head.adm.Stats().RevSeq != 7 || !head.adm.Revoked(worker.h.ID()) {
		t.Fatalf("head: %+v", head.adm.Stats())
	}
	if got, err := read(ctx, worker.h, head.h); len(got) != 0 || err == nil {
		t.Fatalf("revoked worker read %d bytes, %v", len(got), err)
	}
}

// TestJoinThroughTheTree: a node with a token joins through a head (which
// forwards to the root), then reads; the same token again is refused.
func TestJoinThroughTheTree(t *testing.T) {
	g := newGrid(t)
	root := start(t, "tcp", member.Config{Issuer: g}, g.member(t, grid.RoleClient))
	head := start(t, "quic", member.Config{Up: func() []peer.ID { return []peer.ID{root.h.ID()} }}, g.member(t, grid.RoleHead))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := read(ctx, head.h, root.h); err != nil {
		t.Fatal(err)
	}
	tok, _ := g.key.NewToken(grid.RoleWorker, []string{"results/a/"}, time.Now(), time.Hour, time.Hour)
	text, _ := g.key.Sign(tok)
	joiner := start(t, "quic", member.Config{}, nil)
	headAddr := peer.AddrInfo{ID: head.h.ID(), Addrs: head.h.Addrs()}
	m, err := joiner.adm.Join(ctx, headAddr, text)
	if err != nil {
		t.Fatal(err)
	}
	if err := joiner.adm.SetMaterial(m); err != nil {
		t.Fatal(err)
	}
	c, _ := joiner.adm.Cert()
	if c.Role != grid.RoleWorker || c.Prefixes[0] != "results/a/" || c.Peer != joiner.h.ID() {
		t.Fatalf("cert %+v", c)
	}
	got, err := read(ctx, joiner.h, head.h)
	if err != nil || string(got) != string(secret) {
		t.Fatalf("joined node read %q, %v", got, err)
	}
	// Replayed, by another node.
	again := start(t, "tcp", member.Config{}, nil)
	_, err = again.adm.Join(ctx, headAddr, text)
	if err == nil || !strings.Contains(err.Error(), "already redeemed") {
		t.Fatalf("replayed token: %v", err)
	}
	// A garbage token never leaves the node.
	if _, err := again.adm.Join(ctx, headAddr, "omst-join-AAAA"); err == nil {
		t.Fatal("garbage token accepted")
	}
	// Without a parent there is nowhere to renew.
	if _, err := joiner.adm.Renew(ctx); err == nil {
		t.Fatal("renewal without a parent succeeded")
	}
	// Renewal through the head: a new serial, the same role.
	// Renewed too early (the cert is 1 min into a 1 h and 1 min life):
	// refused, so that a member cannot make the root fill its ledger.
	early := start(t, "tcp", member.Config{Up: func() []peer.ID { return []peer.ID{head.h.ID()} }}, g.member(t, grid.RoleWorker))
	if _, err := read(ctx, early.h, head.h); err != nil {
		t.Fatal(err)
	}
	if _, err := early.adm.Renew(ctx); err == nil || !strings.Contains(err.Error(), "half its life") {
		t.Fatalf("an early renewal: %v", err)
	}
	w := start(t, "tcp", member.Config{Up: func() []peer.ID { return []peer.ID{head.h.ID()} }}, func(p peer.ID) member.Material {
		now := time.Now()
		return member.Material{GridKey: g.key.Public(), Cert: g.cert(t, p, grid.RoleWorker, now.Add(-50*time.Minute), now.Add(10*time.Minute))}
	})
	if _, err := read(ctx, w.h, head.h); err != nil {
		t.Fatal(err)
	}
	old, _ := w.adm.Cert()
	if _, err := w.adm.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if c, _ := w.adm.Cert(); c.Serial == old.Serial || c.Role != grid.RoleWorker || c.NotAfter <= old.NotBefore {
		t.Fatalf("renewed %+v from %+v", c, old)
	}
}

func TestRenewDue(t *testing.T) {
	c := grid.Cert{NotBefore: 1000, NotAfter: 1000 + 3000}
	for _, tc := range []struct {
		at   int64
		want bool
	}{{1000, false}, {2999, false}, {3000, true}, {5000, true}} {
		if got := member.RenewDue(c, time.Unix(tc.at, 0)); got != tc.want {
			t.Errorf("RenewDue at %d = %v", tc.at, got)
		}
	}
}

// TestRevokedAdmittedAgain: a node that saw a peer's certificate revoked
// refuses it at the door for ShunFor, then lets it show a newer one (not on
// the list) and admits it, without a restart.
func TestRevokedAdmittedAgain(t *testing.T) {
	g := newGrid(t)
	var skew atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	head := start(t, "tcp", member.Config{Now: clock}, g.member(t, grid.RoleHead))
	worker := start(t, "tcp", member.Config{}, g.member(t, grid.RoleWorker))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := read(ctx, worker.h, head.h); err != nil {
		t.Fatal(err)
	}
	c, _ := worker.adm.Cert()
	l, _ := g.key.SignRevocations(grid.Revocations{Seq: 1, Serials: []uint64{c.Serial}})
	if _, err := head.adm.AdoptRevocations(l); err != nil {
		t.Fatal(err)
	}
	for head.h.Network().Connectedness(worker.h.ID()) == network.Connected {
		time.Sleep(10 * time.Millisecond)
	}
	if !head.adm.Revoked(worker.h.ID()) {
		t.Fatal("the head does not know the worker revoked")
	}
	// Admitted again: a new serial, not on the list.
	now := time.Now()
	if err := worker.adm.SetMaterial(member.Material{GridKey: g.key.Public(), Cert: g.cert(t, worker.h.ID(), grid.RoleReader, now.Add(-time.Minute), now.Add(time.Hour))}); err != nil {
		t.Fatal(err)
	}
	// Within ShunFor of its revoked certificate, the door stays shut.
	if got, err := read(ctx, worker.h, head.h); err == nil || len(got) != 0 {
		t.Fatalf("read %d bytes at once after the revocation: %v", len(got), err)
	}
	skew.Store(int64(member.ShunFor + time.Second))
	got, err := read(ctx, worker.h, head.h)
	if err != nil || string(got) != string(secret) {
		t.Fatalf("the worker admitted again read %q, %v", got, err)
	}
	if head.adm.Revoked(worker.h.ID()) || !head.adm.Admitted(worker.h.ID()) {
		t.Fatal("the head still holds the worker revoked")
	}
}
