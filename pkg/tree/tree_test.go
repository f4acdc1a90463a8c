package tree

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/pkg/blob"
)

// root -> head -> w1, w2: a blob put at the root reaches both workers, the
// root sends it once (the head coalesces), and after the root dies a new
// worker still gets name and bytes from the head.
func TestDistributeCoalesceAndRootLoss(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", nil)
	w1 := newNode(t, head, "siteA", nil)
	w2 := newNode(t, head, "siteA", nil)
	waitConnected(t, head, w1, w2)

	data := randBlob(3<<20+1234, 1)
	put(t, root, "shared/input", data, 64<<10)

	var wg sync.WaitGroup
	got := make([][]byte, 2)
	for i, w := range []*testNode{w1, w2} {
		wg.Go(func() { got[i] = readAll(t, w, "shared/input") })
	}
	wg.Wait()
	for i := range got {
		if !bytes.Equal(got[i], data) {
			t.Fatalf("worker %d got %d bytes, not the blob", i+1, len(got[i]))
		}
	}
	served := root.eng.Status().BytesServed
	if served < uint64(len(data)) || served > uint64(len(data))+uint64(len(data))/10 {
		t.Fatalf("root served %d bytes for a %d-byte blob to two workers; want about one blob", served, len(data))
	}
	if hs, es := head.tree.Status(), head.eng.Status(); es.BytesServed < 2*uint64(len(data)) || len(hs.Children) != 2 {
		t.Fatalf("head status %+v, transfers %+v", hs, es)
	}

	root.stop()
	w3 := newNode(t, head, "siteA", nil)
	waitConnected(t, w3)
	if b := readAll(t, w3, "shared/input"); !bytes.Equal(b, data) {
		t.Fatalf("w3 after root loss: got %d bytes", len(b))
	}
}

// A worker's put is found and fetched by its sibling (via the head) and by
// the root (through the head, which follows its route to the worker or
// serves its replica).
func TestResultPath(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", nil, func(c *nodeCfg) { c.Replicate = true })
	w1 := newNode(t, head, "siteA", nil)
	w2 := newNode(t, head, "siteA", nil)
	waitConnected(t, head, w1, w2)

	data := randBlob(700<<10, 2)
	rec := put(t, w1, "run/1/out", data, 16<<10)
	waitFor(t, "record at the root", 10*time.Second, func() bool {
		r, err := root.store.Record("run/1/out")
		return err == nil && r.ID.Equals(rec.ID)
	})
	if routes, err := head.store.Routes(); err != nil || routes["run/1/out"] != w1.h.ID().String() {
		t.Fatalf("head routes %v, %v: want run/1/out via w1", routes, err)
	}
	if routes, _ := root.store.Routes(); routes["run/1/out"] != head.h.ID().String() {
		t.Fatalf("root route %q, want the head", routes["run/1/out"])
	}
	if b := readAll(t, w2, "run/1/out"); !bytes.Equal(b, data) {
		t.Fatal("sibling got wrong bytes")
	}
	if b := readAll(t, root, "run/1/out"); !bytes.Equal(b, data) {
		t.Fatal("root got wrong bytes")
	}
	m, _ := head.store.Manifest(rec.ID)
	waitFor(t, "replica at the head", 10*time.Second, func() bool {
		for _, h := range m.Chunks {
			if !head.store.HasChunk(h) {
				return false
			}
		}
		return true
	})
}

// A parent that restarts gets the subtree's records again.
func TestReannounceOnReconnect(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	w := newNode(t, root, "siteA", nil)
	waitConnected(t, w)
	put(t, w, "a/b", randBlob(10<<10, 3), blob.MinChunkSize)
	waitFor(t, "record at the root", 5*time.Second, func() bool { _, err := root.store.Record("a/b"); return err == nil })
	root.mem.DeleteRecord("a/b") // root "loses" it; the next session restores it
	// Break the session: reset the connection from the root's side.
	for _, c := range root.h.Network().ConnsToPeer(w.h.ID()) {
		c.Close()
	}
	waitFor(t, "re-announced record", 10*time.Second, func() bool { _, err := root.store.Record("a/b"); return err == nil })
}

func TestUnreachableParent(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	_, pub, _ := crypto.GenerateEd25519Key(nil)
	pid, _ := peer.IDFromPublicKey(pub)
	addr := ma.StringCast("/ip4/127.0.0.1/tcp/" + strconv.Itoa(port))
	w := newNode(t, nil, "siteA", nil, func(c *nodeCfg) {
		c.Parent = &peer.AddrInfo{ID: pid, Addrs: []ma.Multiaddr{addr}}
		c.DialTimeout = time.Second
	})
	start := time.Now()
	_, err = w.tree.Lookup(context.Background(), "some/name")
	el := time.Since(start)
	if !errors.Is(err, blob.ErrUnreachable) {
		t.Fatalf("lookup: %v, want ErrUnreachable", err)
	}
	if !strings.Contains(err.Error(), pid.String()) || !strings.Contains(err.Error(), addr.String()) {
		t.Fatalf("error %q does not name the parent %s at %s", err, pid, addr)
	}
	if el > 4*time.Second {
		t.Fatalf("lookup took %v", el)
	}
	if w.tree.Status().ParentConnected {
		t.Fatal("parent reported connected")
	}
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

// The worker's reader gets its first chunk while the head is still far from
// having the last one.
func TestCutThrough(t *testing.T) {
	root := newNode(t, nil, "master", func(m *memStore) nodeStore { return &slowStore{memStore: m, delay: 15 * time.Millisecond} })
	head := newNode(t, root, "siteA", nil)
	w := newNode(t, head, "siteA", nil)
	waitConnected(t, head, w)
	const cs = 16 << 10
	data := randBlob(40*cs, 5)
	rec := put(t, root, "big", data, cs)
	m, _ := root.store.Manifest(rec.ID)
	last := m.Chunks[len(m.Chunks)-1]

	ctx := context.Background()
	r, err := w.tree.Lookup(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rc, err := w.eng.Open(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	first := make([]byte, cs)
	if _, err := io.ReadFull(rc, first); err != nil {
		t.Fatal(err)
	}
	tFirst := time.Since(start)
	if head.store.HasChunk(last) {
		t.Fatalf("the head already had the last chunk when the worker got the first (after %v)", tFirst)
	}
	rest, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	tAll := time.Since(start)
	if !bytes.Equal(append(first, rest...), data) {
		t.Fatal("wrong bytes")
	}
	if tFirst*2 > tAll {
		t.Fatalf("first chunk after %v, whole blob after %v: not cut-through", tFirst, tAll)
	}
	t.Logf("first chunk after %v, all %d chunks after %v", tFirst, len(m.Chunks), tAll)
}

// Fetch of a blob nobody has fails with ErrNotFound; Lookup of a missing
// name too; an invalid name is refused by the parent's decoder of names
// requests (the trust boundary: Lookup does not check it again).
func TestNotFound(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	w := newNode(t, root, "siteA", nil)
	waitConnected(t, w)
	ctx := context.Background()
	if _, err := w.tree.Lookup(ctx, "nope"); !errors.Is(err, blob.ErrNotFound) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("lookup: %v", err)
	}
	if _, err := w.tree.Lookup(ctx, "../x"); !errors.Is(err, blob.ErrInvalidName) {
		t.Fatalf("lookup invalid: %v", err)
	}
	m := &blob.Manifest{Size: 5, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{blob.HashChunk([]byte("hello"))}}
	r := blob.Record{Name: "ghost", ID: m.CID(), Size: 5}
	if err := w.eng.Fetch(ctx, r); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("fetch: %v", err)
	}
	// The manifest is there but the chunk is not.
	root.mem.PutManifest(m)
	if err := w.eng.Fetch(ctx, r); err == nil || !strings.Contains(err.Error(), root.h.ID().String()) {
		t.Fatalf("fetch with missing chunk: %v (want an error naming the root)", err)
	}
}

// The parent lists its children while their sessions live; both sides
// notice when the other goes away.
func TestChildrenAndSessionLoss(t *testing.T) {
	fast := func(c *nodeCfg) { c.Keepalive = 100 * time.Millisecond }
	root := newNode(t, nil, "master", nil, fast)
	head := newNode(t, root, "siteA", nil, fast)
	w := newNode(t, head, "siteA", nil, fast)
	waitConnected(t, head, w)
	st := head.tree.Status()
	if st.Parent != root.h.ID() || !strings.HasSuffix(st.ParentAddr, "/p2p/"+root.h.ID().String()) || st.Site != "siteA" {
		t.Fatalf("head status %+v", st)
	}
	waitFor(t, "child listed", 5*time.Second, func() bool {
		c := head.tree.Status().Children
		return len(c) == 1 && c[0].ID == w.h.ID() && c[0].Connected && c[0].Site == "siteA" && len(c[0].Addrs) > 0
	})
	w.stop()
	waitFor(t, "child listed as disconnected", 5*time.Second, func() bool {
		c := head.tree.Status().Children
		return len(c) == 1 && !c[0].Connected
	})
	root.stop()
	waitFor(t, "parent loss noticed", 5*time.Second, func() bool { return !head.tree.Status().ParentConnected })
}
