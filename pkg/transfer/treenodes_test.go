package transfer_test

// The nodes of a tree, each a pkg/tree node and a transfer engine wired as
// the daemon wires them (pkg/node): the engine takes the tree as its source
// provider, the tree calls the engine for preheats, departed children and
// pushes. The engine's tests that need a real tree (sibling exchange,
// hedges, corrupt copies, fallback parents) run on these; pkg/tree imports
// pkg/transfer, so they live in this external test package.

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/internal/memstore"
	"github.com/omst-project/omst/internal/p2ptest"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer"
	"github.com/omst-project/omst/pkg/tree"
)

// memStore is the in-memory store of the tests.
type memStore = memstore.Store

type testNode struct {
	h     host.Host
	tree  *tree.Tree
	eng   *transfer.Engine
	store nodeStore
	mem   *memStore
	addrs []ma.Multiaddr // listen addresses, kept by stop for restart
}

// nodeStore is a store for both the tree and the transfer engine.
type nodeStore interface {
	tree.Store
	transfer.Store
}

func (n *testNode) info() *peer.AddrInfo {
	return &peer.AddrInfo{ID: n.h.ID(), Addrs: n.h.Addrs()}
}

// speaks120 makes n serve fetch 1.2.0 and 1.1.0 only: it sends every
// chunk whole, in one reply, as nodes did before pieces.
func (n *testNode) speaks120() {
	n.h.RemoveStreamHandler(transfer.ProtoFetch)
	n.h.RemoveStreamHandler(transfer.ProtoFetch130)
}

func (n *testNode) stop() {
	n.addrs = n.h.Addrs()
	n.eng.Close()
	n.tree.Close()
	n.h.Close()
}

// nodeCfg configures a test node: its tree and its transfer engine.
type nodeCfg struct {
	tree.Config
	Engine transfer.Config
}

type nodeOpt func(*nodeCfg)

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("TRANSFER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// newNode starts a tree node under parent (nil for a root). wrap, when not
// nil, wraps the node's memStore.
func newNode(t testing.TB, parent *testNode, site string, wrap func(*memStore) nodeStore, opts ...nodeOpt) *testNode {
	t.Helper()
	return newNodeOn(t, p2ptest.NewHost(t), parent, site, wrap, opts...)
}

// restart starts a node again with n's identity and listen address (after
// n.stop), under parent, with an empty store.
func (n *testNode) restart(t testing.TB, parent *testNode, site string) *testNode {
	t.Helper()
	h := p2ptest.NewHost(t, libp2p.Identity(n.h.Peerstore().PrivKey(n.h.ID())), libp2p.ListenAddrs(n.addrs...))
	return newNodeOn(t, h, parent, site, nil)
}

// noReplicate is the engine as these nodes subscribe it to their tree:
// a relay copies no child's put.
type noReplicate struct{ *transfer.Engine }

func (noReplicate) Replicate(blob.Record) {}

// newNodeOn is newNode on the host h.
func newNodeOn(t testing.TB, h host.Host, parent *testNode, site string, wrap func(*memStore) nodeStore, opts ...nodeOpt) *testNode {
	t.Helper()
	mem := memstore.New()
	var st nodeStore = mem
	if wrap != nil {
		st = wrap(mem)
	}
	nc := nodeCfg{Config: tree.Config{Host: h, Store: st, Site: site, Logger: testLogger(t), DialTimeout: 2 * time.Second, RequestTimeout: 10 * time.Second}}
	if parent != nil {
		nc.Parent = parent.info()
	}
	for _, o := range opts {
		o(&nc)
	}
	tr, err := tree.New(nc.Config)
	if err != nil {
		t.Fatal(err)
	}
	ec := nc.Engine
	ec.Host, ec.Store, ec.Sources, ec.Logger = h, st, tr, nc.Logger
	if ec.DialTimeout == 0 {
		ec.DialTimeout = nc.DialTimeout
	}
	if ec.RequestTimeout == 0 {
		ec.RequestTimeout = nc.RequestTimeout
	}
	eng, err := transfer.New(ec)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Subscribe(noReplicate{eng}); err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(); tr.Close() })
	return &testNode{h: h, tree: tr, eng: eng, store: st, mem: mem}
}

func randBlob(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// put stores data under name on n (as a local put does) and announces it.
func put(t testing.TB, n *testNode, name string, data []byte, chunkSize int) blob.Record {
	t.Helper()
	m, err := blob.Split(bytes.NewReader(data), chunkSize, func(_ int, h blob.Hash, c []byte) error {
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
	if _, err := n.mem.PutRecord(r); err != nil {
		t.Fatal(err)
	}
	n.tree.Announce(context.Background(), r)
	return r
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitConnected(t testing.TB, nodes ...*testNode) {
	t.Helper()
	for _, n := range nodes {
		waitFor(t, "parent connection", 10*time.Second, func() bool { return n.tree.Status().ParentConnected })
	}
}

// readAll reads name at n: a lookup (LOOKUP), then the engine.
func readAll(t testing.TB, n *testNode, name string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := n.tree.Lookup(ctx, name)
	if err != nil {
		t.Fatalf("lookup %q: %v", name, err)
	}
	rc, err := n.eng.Open(ctx, r)
	if err != nil {
		t.Fatalf("open %q: %v", name, err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rc); err != nil {
		t.Fatalf("read %q: %v", name, err)
	}
	return buf.Bytes()
}

// slowStore serves chunks one at a time with a delay: a slow upstream link.
type slowStore struct {
	*memStore
	mu    sync.Mutex
	delay time.Duration
}

func (s *slowStore) ReadChunk(h blob.Hash) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	time.Sleep(s.delay)
	return s.memStore.ReadChunk(h)
}
