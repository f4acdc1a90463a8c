package tree

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/internal/memstore"
	"github.com/omst-project/omst/internal/p2ptest"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer"
)

// memStore is the in-memory store of the tests.
type memStore = memstore.Store

func newMemStore() *memStore { return memstore.New() }

func newTestHost(t testing.TB, extra ...libp2p.Option) host.Host {
	return p2ptest.NewHost(t, extra...)
}

type testNode struct {
	h     host.Host
	tree  *Tree
	eng   *transfer.Engine
	store nodeStore
	mem   *memStore
	addrs []ma.Multiaddr // listen addresses, kept by stop for restart
}

// nodeStore is a store for both the tree and the transfer engine.
type nodeStore interface {
	Store
	transfer.Store
}

func (n *testNode) info() *peer.AddrInfo {
	return &peer.AddrInfo{ID: n.h.ID(), Addrs: n.h.Addrs()}
}

func (n *testNode) stop() {
	n.addrs = n.h.Addrs()
	n.eng.Close()
	n.tree.Close()
	n.h.Close()
}

// nodeCfg configures a test node: its tree and its transfer engine, which
// takes the tree as its source provider and subscribes to it. Replicate
// lets the engine copy the blobs children put, as the daemon does; Wrap,
// when set, is given the engine and what it returns is subscribed instead.
type nodeCfg struct {
	Config
	Engine    transfer.Config
	Replicate bool
	Wrap      func(Engine) Engine
}

// noReplicate is an engine that copies no child's put.
type noReplicate struct{ *transfer.Engine }

func (noReplicate) Replicate(blob.Record) {}

type nodeOpt func(*nodeCfg)

// speaks makes a node of an older names version: it serves and asks with
// only protos.
func speaks(protos ...protocol.ID) nodeOpt {
	return func(c *nodeCfg) { c.namesVersions = protos }
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("TREE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// newNode starts a tree node under parent (nil for a root). wrap, when not
// nil, wraps the node's memStore.
func newNode(t testing.TB, parent *testNode, site string, wrap func(*memStore) nodeStore, opts ...nodeOpt) *testNode {
	t.Helper()
	return newNodeOn(t, newTestHost(t), parent, site, wrap, opts...)
}

// restart starts a node again with n's identity and listen address (after
// n.stop), under parent, with an empty store.
func (n *testNode) restart(t testing.TB, parent *testNode, site string) *testNode {
	t.Helper()
	h := newTestHost(t, libp2p.Identity(n.h.Peerstore().PrivKey(n.h.ID())), libp2p.ListenAddrs(n.addrs...))
	return newNodeOn(t, h, parent, site, nil)
}

// newNodeOn is newNode on the host h.
func newNodeOn(t testing.TB, h host.Host, parent *testNode, site string, wrap func(*memStore) nodeStore, opts ...nodeOpt) *testNode {
	t.Helper()
	mem := newMemStore()
	var st nodeStore = mem
	if wrap != nil {
		st = wrap(mem)
	}
	nc := nodeCfg{Config: Config{Host: h, Store: st, Site: site, Logger: testLogger(t), DialTimeout: 2 * time.Second, RequestTimeout: 10 * time.Second}}
	if parent != nil {
		nc.Parent = parent.info()
	}
	for _, o := range opts {
		o(&nc)
	}
	tr, err := New(nc.Config)
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
	var sub Engine = noReplicate{eng}
	if nc.Replicate {
		sub = eng
	}
	if nc.Wrap != nil {
		sub = nc.Wrap(sub)
	}
	if err := tr.Subscribe(sub); err != nil {
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
	return readWith(t, n, name, n.tree.Lookup)
}

// readWith is readAll with the given lookup (Lookup or LookupToGet).
func readWith(t testing.TB, n *testNode, name string, lookup func(context.Context, string) (blob.Record, error)) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := lookup(ctx, name)
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
