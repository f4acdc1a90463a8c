package tree

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/member"
)

func TestMayAdopt(t *testing.T) {
	root := Position{Root: true, Role: grid.RoleClient, Site: "master"}
	headA := Position{Role: grid.RoleHead, Site: "a"}
	for _, tc := range []struct {
		pos  Position
		role grid.Role
		site string
		want string // "" = accepted
	}{
		{root, grid.RoleHead, "a", ""},
		{root, grid.RoleHead, "master", ""},
		{root, grid.RoleWorker, "a", ""}, // a fallback worker (grouped apart: FallbackGroup)
		{root, grid.RoleClient, "", ""},
		{root, grid.RoleReader, "a", "role reader"},
		{headA, grid.RoleWorker, "a", ""},
		{headA, grid.RoleClient, "a", ""},
		{headA, grid.RoleWorker, "b", `a worker of site "b" under the head of site "a"`},
		{headA, grid.RoleWorker, "", `a worker of site "" under the head of site "a"`},
		{headA, grid.RoleHead, "a", "a head's parent is the root"},
		{headA, grid.RoleReader, "a", "role reader"},
		{Position{Role: grid.RoleWorker, Site: "a"}, grid.RoleWorker, "a", "this node is a worker with a parent"},
		{Position{Role: grid.RoleClient, Site: "a"}, grid.RoleWorker, "a", "this node is a client with a parent"},
		{Position{Root: true}, grid.RoleHead, "a", "no membership certificate"},
		{root, grid.Role(9), "a", "role role(9)"},
	} {
		err := MayAdopt(tc.pos, tc.role, tc.site)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v takes a %s of %q: %v", tc.pos, tc.role, tc.site, err)
		case tc.want != "" && (!errors.Is(err, ErrRefused) || !errors.Is(err, blob.ErrForbidden) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v takes a %s of %q: %v, want a refusal saying %q", tc.pos, tc.role, tc.site, err, tc.want)
		}
	}
}

func TestMayRoute(t *testing.T) {
	w1, w2, h := peer.ID("w1"), peer.ID("w2"), peer.ID("h")
	head := grid.Cert{Peer: h, Role: grid.RoleHead, Prefixes: []string{"results/a/"}}
	worker := grid.Cert{Peer: w1, Role: grid.RoleWorker, Prefixes: []string{"results/a/w1/"}}
	client := grid.Cert{Peer: "c", Role: grid.RoleClient}
	reader := grid.Cert{Peer: "r", Role: grid.RoleReader}
	rec := func(name string, origin peer.ID) blob.Record { return blob.Record{Name: name, Origin: origin.String()} }
	for _, tc := range []struct {
		child grid.Cert
		r     blob.Record
		ok    bool
	}{
		{worker, rec("results/a/w1/x", w1), true},
		{worker, rec("results/a/w2/x", w2), false}, // a sibling's record
		{worker, rec("shared/x", "c"), false},      // the master's record
		{head, rec("results/a/w1/x", w1), true},    // its worker's
		{head, rec("results/b/w9/x", "w9"), false}, // another site's
		{head, rec("results/a/x", h), true},
		{client, rec("anything", w2), true},
		{reader, rec("results/a/w1/x", w1), false},
		{reader, rec("x", "r"), true}, // its own (a reader's put is refused by its proof anyway)
	} {
		if err := MayRoute(tc.child, tc.r); (err == nil) != tc.ok {
			t.Errorf("%s announcing %q of %s: %v, want ok %v", tc.child.Role, tc.r.Name, tc.r.Origin, err, tc.ok)
		}
	}
}

// testGrid issues certificates for tree nodes on member-wrapped hosts.
type testGrid struct {
	key    grid.Key
	serial uint64
}

func newTestGrid(t testing.TB) *testGrid {
	k, err := grid.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return &testGrid{key: k}
}

// gridNode is a tree node of a closed grid.
type gridNode struct {
	*testNode
	adm *member.Admission
}

// node starts a tree node of role (with prefixes) claiming site under
// parent (nil: the root), admitted by certificate, checking record proofs
// and, with its Members, its children's roles.
func (g *testGrid) node(t testing.TB, parent *gridNode, role grid.Role, site string, prefixes ...string) *gridNode {
	t.Helper()
	return g.nodeWith(t, parent, role, site, prefixes, nil)
}

// cert issues a certificate of role for p, valid for an hour.
func (g *testGrid) cert(t testing.TB, p peer.ID, role grid.Role, prefixes []string) []byte {
	t.Helper()
	now := time.Now()
	g.serial++
	cert, err := g.key.Issue(grid.Cert{Peer: p, Role: role, Prefixes: prefixes, NotBefore: now.Add(-time.Minute).Unix(), NotAfter: now.Add(time.Hour).Unix(), Serial: g.serial})
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// nodeWith is node with a further option (nil: none).
func (g *testGrid) nodeWith(t testing.TB, parent *gridNode, role grid.Role, site string, prefixes []string, opt nodeOpt) *gridNode {
	t.Helper()
	h := newTestHost(t)
	cert := g.cert(t, h.ID(), role, prefixes)
	adm, err := member.New(member.Config{Logger: slog.New(slog.DiscardHandler)}, member.Material{GridKey: g.key.Public(), Cert: cert})
	if err != nil {
		t.Fatal(err)
	}
	wh := member.Wrap(h, adm)
	t.Cleanup(func() { wh.Close() })
	var p *testNode
	if parent != nil {
		p = parent.testNode
	}
	n := newNodeOn(t, wh, p, site, nil, func(c *nodeCfg) {
		c.Members = adm
		c.CheckRecord = adm.CheckRecord
		if opt != nil {
			opt(c)
		}
	})
	return &gridNode{testNode: n, adm: adm}
}

// signedPut stores data under name on n as a local put does, with n's
// proof, and announces it; it returns the record.
func signedPut(t testing.TB, n *gridNode, name string, data []byte) blob.Record {
	t.Helper()
	r := signed(t, n, name, data)
	if _, err := n.mem.PutRecord(r); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.tree.Announce(ctx, r); err != nil {
		t.Fatalf("announce %q: %v", name, err)
	}
	return r
}

// signed stores data's blob on n and returns a record of it under name,
// with n's proof (n is its origin).
func signed(t testing.TB, n *gridNode, name string, data []byte) blob.Record {
	t.Helper()
	m, err := blob.Split(bytes.NewReader(data), blob.MinChunkSize, func(_ int, h blob.Hash, c []byte) error {
		return n.mem.PutChunk(h, bytes.Clone(c))
	})
	if err != nil {
		t.Fatal(err)
	}
	id, err := n.mem.PutManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	r := blob.Record{Name: name, ID: id, Size: m.Size, Time: time.Now().UnixNano(), Origin: n.h.ID().String()}
	r, err = n.adm.Prove(n.h.Peerstore().PrivKey(n.h.ID()), r)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// In a closed grid a node takes as children only peers whose certificate
// allows it where it stands (issue 24: any member became a child of any
// node, with any site): a worker of another site, a reader and a head are
// refused by a head, with a REFUSED that says why; the root takes heads,
// and takes a worker (a fallback) without letting it stand in the place
// of the head of the site it claims.
func TestTreeRolesClosedGrid(t *testing.T) {
	g := newTestGrid(t)
	root := g.node(t, nil, grid.RoleClient, "master")
	headA := g.node(t, root, grid.RoleHead, "a", "results/a/")
	w1 := g.node(t, headA, grid.RoleWorker, "a", "results/a/w1/")
	waitConnected(t, headA.testNode, w1.testNode)

	wB := g.node(t, headA, grid.RoleWorker, "b", "results/b/wb/")
	reader := g.node(t, headA, grid.RoleReader, "a")
	hh := g.node(t, headA, grid.RoleHead, "a2", "results/a2/")
	waitFor(t, "the head refuses three children", 10*time.Second, func() bool { return headA.tree.Status().ChildrenRefused >= 3 })
	for name, n := range map[string]*gridNode{"a worker of site b": wB, "a reader": reader, "a head": hh} {
		if n.tree.Status().ParentConnected {
			t.Errorf("%s became a child of the head of site a", name)
		}
		if headA.tree.Relation(n.h.ID()).String() == "child" {
			t.Errorf("the head lists %s as its child", name)
		}
	}
	if st := headA.tree.Status(); len(st.Children) != 1 || st.Children[0].ID != w1.h.ID() {
		t.Fatalf("the head's children: %+v", st.Children)
	}

	// The refusal says why (tree 1.1.0 REFUSED).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := reader.h.NewStream(ctx, headA.h.ID(), ProtoTree)
	if err != nil {
		t.Fatal(err)
	}
	s.Write(appendFrame(nil, msgHello, encodeHello(hello{Site: "a"})))
	typ, payload, err := readFrame(bufio.NewReader(s))
	if err != nil || typ != msgRefused || !strings.Contains(decodeRefused(payload), "role reader") {
		t.Fatalf("answer to a reader's HELLO: type 0x%02x %q %v", typ, payload, err)
	}
	s.Reset()

	// A reader still resolves names through the head it may not be a
	// child of.
	r := signedPut(t, w1, "results/a/w1/out", randBlob(10_000, 3))
	if got, err := reader.tree.Lookup(ctx, r.Name); err != nil || !got.ID.Equals(r.ID) {
		t.Fatalf("a reader's lookup through the head: %v", err)
	}

	// Under the root, a worker is a fallback child: grouped with the
	// workers of the site it claims, not with that site's head.
	wRoot := g.node(t, root, grid.RoleWorker, "a", "results/a/w3/")
	waitConnected(t, wRoot.testNode)
	gw, _, ok1 := root.tree.Group(wRoot.h.ID())
	gh, _, ok2 := root.tree.Group(headA.h.ID())
	if !ok1 || !ok2 || gh != "a" || gw == gh || gw != FallbackGroup("a") {
		t.Fatalf("groups at the root: worker %q (%v), head %q (%v)", gw, ok1, gh, ok2)
	}
}

// An ANNOUNCE moves routing only for the records the child put, or whose
// names it may write (a head, for its workers): issue 24, where any child
// became the first source of any blob it announced. A record of another
// member is kept (it is newer) but routes nowhere.
func TestAnnounceRoutesOnlyOwnSubtree(t *testing.T) {
	g := newTestGrid(t)
	root := g.node(t, nil, grid.RoleClient, "master")
	headA := g.node(t, root, grid.RoleHead, "a", "results/a/")
	headB := g.node(t, root, grid.RoleHead, "b", "results/b/")
	w1 := g.node(t, headA, grid.RoleWorker, "a", "results/a/w1/")
	w2 := g.node(t, headA, grid.RoleWorker, "a", "results/a/w2/")
	wB := g.node(t, headB, grid.RoleWorker, "b", "results/b/wb/")
	waitConnected(t, headA.testNode, headB.testNode, w1.testNode, w2.testNode, wB.testNode)

	// A worker's own put: routed at its head through it, at the root
	// through its head.
	r1 := signedPut(t, w1, "results/a/w1/out", randBlob(10_000, 1))
	if routes, _ := headA.mem.Routes(); routes[r1.Name] != w1.h.ID().String() {
		t.Fatalf("head's route of its worker's put: %q", routes[r1.Name])
	}
	if routes, _ := root.mem.Routes(); routes[r1.Name] != headA.h.ID().String() {
		t.Fatalf("root's route of a put of site a: %q", routes[r1.Name])
	}

	// w2 announces records it did not put: one of another site's worker,
	// one of its sibling (newer than the head's), one of the master.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	foreign := signed(t, wB, "results/b/wb/out", randBlob(10_000, 2))
	sibling := signed(t, w1, "results/a/w1/out", randBlob(10_000, 3))
	master := signed(t, root, "shared/input", randBlob(10_000, 4))
	for _, r := range []blob.Record{foreign, sibling, master} {
		if err := w2.tree.Announce(ctx, r); err != nil {
			t.Fatalf("announce %q: %v", r.Name, err)
		}
		got, err := headA.mem.Record(r.Name)
		if err != nil || !got.ID.Equals(r.ID) {
			t.Fatalf("%s: the head did not keep a newer, valid record: %v", r.Name, err)
		}
		if routes, _ := headA.mem.Routes(); routes[r.Name] != "" {
			t.Errorf("%s (put by %s) routes through %s at the head", r.Name, r.Origin, routes[r.Name])
		}
		for _, src := range headA.tree.Sources(r.ID, "") {
			if src.ID == w2.h.ID() {
				t.Errorf("%s: the head fetches its blob from w2, which did not put it: %v", r.Name, headA.tree.Sources(r.ID, ""))
			}
		}
	}
	if n := headA.tree.Status().Unrouted; n != 3 {
		t.Fatalf("Unrouted = %d, want 3", n)
	}
	// Forwarded on, the records route nowhere at the root either (the
	// head may not write another site's or the master's names); the
	// sibling's, whose name the head may write, routes through the head.
	waitFor(t, "the root has the forwarded records", 5*time.Second, func() bool {
		_, err := root.mem.Record(foreign.Name)
		return err == nil
	})
	routes, _ := root.mem.Routes()
	if routes[foreign.Name] != "" || routes[master.Name] != "" || routes[sibling.Name] != headA.h.ID().String() {
		t.Fatalf("root's routes: foreign %q, master %q, sibling %q", routes[foreign.Name], routes[master.Name], routes[sibling.Name])
	}
}

// A child that speaks only tree 1.0.0 (before REFUSED) is still served.
func TestTree10Served(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	c := newTestHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Connect(ctx, *root.info()); err != nil {
		t.Fatal(err)
	}
	s, err := c.NewStream(ctx, root.h.ID(), ProtoTree10)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Reset()
	s.Write(appendFrame(nil, msgHello, encodeHello(hello{Site: "a"})))
	typ, payload, err := readFrame(bufio.NewReader(s))
	if err != nil || typ != msgWelcome {
		t.Fatalf("answer to a 1.0.0 HELLO: type 0x%02x %q %v", typ, payload, err)
	}
	waitFor(t, "the 1.0.0 child is listed", 5*time.Second, func() bool { return root.tree.Relation(c.ID()).String() == "child" })
}

// A child whose certificate no longer allows it (a new one, as a reader)
// loses its session at its next PING, with a REFUSED, and is not taken
// back.
func TestChildDowngradedMidSession(t *testing.T) {
	g := newTestGrid(t)
	fast := func(c *nodeCfg) { c.Keepalive = 200 * time.Millisecond }
	root := g.nodeWith(t, nil, grid.RoleClient, "master", nil, fast)
	headA := g.nodeWith(t, root, grid.RoleHead, "a", []string{"results/a/"}, fast)
	w := g.nodeWith(t, headA, grid.RoleWorker, "a", []string{"results/a/w/"}, fast)
	waitConnected(t, headA.testNode, w.testNode)

	cert := g.cert(t, w.h.ID(), grid.RoleReader, nil)
	if err := w.adm.SetMaterial(member.Material{GridKey: g.key.Public(), Cert: cert}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the head ends the downgraded child's session", 10*time.Second, func() bool {
		return !w.tree.Status().ParentConnected && headA.tree.Status().ChildrenRefused > 0
	})
	time.Sleep(time.Second) // its keeper waits a minute before it asks again
	if w.tree.Status().ParentConnected || headA.tree.isChild(w.h.ID()) {
		t.Fatal("a reader is a child again")
	}
}
