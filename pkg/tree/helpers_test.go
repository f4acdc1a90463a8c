package tree

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/pkg/blob"
)

// memStore is an in-memory Store.
type memStore struct {
	mu        sync.Mutex
	chunks    map[blob.Hash][]byte
	manifests map[cid.Cid]*blob.Manifest
	records   map[string]blob.Record
}

func newMemStore() *memStore {
	return &memStore{chunks: map[blob.Hash][]byte{}, manifests: map[cid.Cid]*blob.Manifest{}, records: map[string]blob.Record{}}
}

func (s *memStore) HasChunk(h blob.Hash) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.chunks[h]
	return ok
}

func (s *memStore) ReadChunk(h blob.Hash) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.chunks[h]
	if !ok {
		return nil, fmt.Errorf("chunk %s: %w", h, blob.ErrNotFound)
	}
	return b, nil
}

// RecheckChunk verifies the held bytes and drops them if they are damaged.
func (s *memStore) RecheckChunk(h blob.Hash) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.chunks[h]
	if !ok || h.Verify(b) == nil {
		return false, nil
	}
	delete(s.chunks, h)
	return true, nil
}

func (s *memStore) PutChunk(h blob.Hash, data []byte) error {
	if err := h.Verify(data); err != nil {
		return err
	}
	return s.PutVerifiedChunk(h, data)
}

func (s *memStore) PutVerifiedChunk(h blob.Hash, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chunks[h] = data
	return nil
}

func (s *memStore) Manifest(id cid.Cid) (*blob.Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.manifests[id]
	if !ok {
		return nil, fmt.Errorf("manifest %s: %w", id, blob.ErrNotFound)
	}
	return m, nil
}

func (s *memStore) PutManifest(m *blob.Manifest) (cid.Cid, error) {
	id := m.CID()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.manifests[id] = m
	return id, nil
}

func (s *memStore) Record(name string) (blob.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[name]
	if !ok {
		return r, fmt.Errorf("name %q: %w", name, blob.ErrNotFound)
	}
	return r, nil
}

func (s *memStore) PutRecord(r blob.Record) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.records[r.Name]; ok && !r.Newer(old) {
		return false, nil
	}
	s.records[r.Name] = r
	return true, nil
}

func (s *memStore) List(prefix string) ([]blob.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []blob.Record
	for n, r := range s.records {
		if strings.HasPrefix(n, prefix) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b blob.Record) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func newTestHost(t testing.TB, extra ...libp2p.Option) host.Host {
	t.Helper()
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(rcmgr.InfiniteLimits))
	if err != nil {
		t.Fatal(err)
	}
	opts := []libp2p.Option{
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.DisableRelay(),
		libp2p.ResourceManager(rm),
	}
	h, err := libp2p.New(append(opts, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

type testNode struct {
	h     host.Host
	tree  *Tree
	store Store
	mem   *memStore
	addrs []ma.Multiaddr // listen addresses, kept by stop for restart
}

func (n *testNode) info() *peer.AddrInfo {
	return &peer.AddrInfo{ID: n.h.ID(), Addrs: n.h.Addrs()}
}

func (n *testNode) stop() {
	n.addrs = n.h.Addrs()
	n.tree.Close()
	n.h.Close()
}

type nodeOpt func(*Config)

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("TREE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// newNode starts a tree node under parent (nil for a root). wrap, when not
// nil, wraps the node's memStore.
func newNode(t testing.TB, parent *testNode, site string, wrap func(*memStore) Store, opts ...nodeOpt) *testNode {
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
func newNodeOn(t testing.TB, h host.Host, parent *testNode, site string, wrap func(*memStore) Store, opts ...nodeOpt) *testNode {
	t.Helper()
	mem := newMemStore()
	var st Store = mem
	if wrap != nil {
		st = wrap(mem)
	}
	cfg := Config{Host: h, Store: st, Site: site, Logger: testLogger(t), DialTimeout: 2 * time.Second, RequestTimeout: 10 * time.Second}
	if parent != nil {
		cfg.Parent = parent.info()
	}
	for _, o := range opts {
		o(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return &testNode{h: h, tree: tr, store: st, mem: mem}
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

func readAll(t testing.TB, n *testNode, name string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := n.tree.Lookup(ctx, name)
	if err != nil {
		t.Fatalf("lookup %q: %v", name, err)
	}
	rc, err := n.tree.Open(ctx, r)
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
