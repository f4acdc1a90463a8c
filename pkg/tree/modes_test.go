package tree

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/transfer"
)

// A store-and-forward relay serves no chunk of a blob before it holds all
// of it; the bytes still arrive intact.
func TestStoreForwardRelay(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "a", nil, func(c *nodeCfg) { c.Engine.Mode = transfer.ModeStoreForward })
	w := newNode(t, head, "a", nil)
	waitConnected(t, head, w)
	data := randBlob(3<<20+11, 7)
	rec := put(t, root, "sf/x", data, 64<<10)
	m, err := root.store.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := w.tree.Lookup(ctx, "sf/x")
	if err != nil {
		t.Fatal(err)
	}
	rc, err := w.eng.Open(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	first := make([]byte, 1)
	if _, err := rc.Read(first); err != nil {
		t.Fatal(err)
	}
	// The worker has its first byte: the relay must hold every chunk.
	for i, h := range m.Chunks {
		if !head.store.HasChunk(h) {
			t.Fatalf("the store-and-forward relay served chunk 0 before it had chunk %d", i)
		}
	}
	var rest bytes.Buffer
	if _, err := rest.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(append(first, rest.Bytes()...), data) {
		t.Fatal("bytes differ")
	}
	// A second worker is served from the relay's store directly.
	w2 := newNode(t, head, "a", nil)
	waitConnected(t, w2)
	if !bytes.Equal(readAll(t, w2, "sf/x"), data) {
		t.Fatal("second worker: bytes differ")
	}
}

// A worker whose head node dies switches to its fallback parent (the root)
// and still gets blobs, by name, with correct bytes.
func TestFallbackParent(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "a", nil)
	w := newNode(t, head, "a", nil, func(c *nodeCfg) {
		c.Fallbacks = []peer.AddrInfo{*root.info()}
		c.Keepalive = 200 * time.Millisecond
	})
	waitConnected(t, head, w)
	if st := w.tree.Status(); st.Parent != head.h.ID() {
		t.Fatalf("parent %s, want the head %s", st.Parent, head.h.ID())
	}
	data := randBlob(1<<20+5, 9)
	put(t, root, "fb/x", data, 64<<10)
	head.stop()
	// Before the keeper has switched, the lookup and the fetch fall back
	// to the root on their own.
	if !bytes.Equal(readAll(t, w, "fb/x"), data) {
		t.Fatal("bytes differ after the head died")
	}
	waitFor(t, "switch to the fallback parent", 15*time.Second, func() bool {
		st := w.tree.Status()
		return st.Parent == root.h.ID() && st.ParentConnected
	})
	// A result put at the worker now reaches the root through the fallback.
	res := randBlob(100<<10, 10)
	rec := put(t, w, "fb/result", res, 64<<10)
	waitFor(t, "result announced to the root", 10*time.Second, func() bool {
		r, err := root.store.Record("fb/result")
		return err == nil && r.ID == rec.ID
	})
}

// TestFallbackReturnsToPreferred: a worker that moved to its fallback (the
// root) when its head died goes back to the head once the head is back, so
// that its fetches stop funnelling through the root.
func TestFallbackReturnsToPreferred(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "a", nil)
	w := newNode(t, head, "a", nil, func(c *nodeCfg) {
		c.Fallbacks = []peer.AddrInfo{*root.info()}
		c.Keepalive = 200 * time.Millisecond
		c.RetryPreferred = 300 * time.Millisecond
	})
	waitConnected(t, head, w)
	headID := head.h.ID()
	head.stop()
	waitFor(t, "switch to the fallback parent", 15*time.Second, func() bool {
		st := w.tree.Status()
		return st.Parent == root.h.ID() && st.ParentConnected
	})
	head2 := head.restart(t, root, "a")
	waitFor(t, "back to the head", 15*time.Second, func() bool {
		st := w.tree.Status()
		return st.Parent == headID && st.ParentConnected
	})
	// A fetch goes through the head again: the head caches what it relays.
	data := randBlob(512<<10, 11)
	rec := put(t, root, "back/x", data, 64<<10)
	if !bytes.Equal(readAll(t, w, "back/x"), data) {
		t.Fatal("bytes differ after going back to the head")
	}
	m, err := w.store.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the head caching the relayed chunks", 10*time.Second, func() bool {
		for _, h := range m.Chunks {
			if !head2.mem.HasChunk(h) {
				return false
			}
		}
		return true
	})
}

// TestFallbackStaysWithoutRetry: with RetryPreferred negative the worker
// stays on its fallback after the head is back.
func TestFallbackStaysWithoutRetry(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "a", nil)
	w := newNode(t, head, "a", nil, func(c *nodeCfg) {
		c.Fallbacks = []peer.AddrInfo{*root.info()}
		c.Keepalive = 200 * time.Millisecond
		c.RetryPreferred = -1
	})
	waitConnected(t, head, w)
	head.stop()
	waitFor(t, "switch to the fallback parent", 15*time.Second, func() bool {
		st := w.tree.Status()
		return st.Parent == root.h.ID() && st.ParentConnected
	})
	head.restart(t, root, "a")
	time.Sleep(time.Second)
	if st := w.tree.Status(); st.Parent != root.h.ID() {
		t.Fatalf("parent %s, want still the root %s", st.Parent, root.h.ID())
	}
}

func TestFallbackConfigRejected(t *testing.T) {
	h := newTestHost(t)
	if _, err := New(Config{Host: h, Store: newMemStore(), Fallbacks: []peer.AddrInfo{{ID: "x"}}}); err == nil {
		t.Fatal("fallbacks without a parent accepted")
	}
	p := &peer.AddrInfo{ID: "p"}
	if _, err := New(Config{Host: h, Store: newMemStore(), Parent: p, Fallbacks: []peer.AddrInfo{*p}}); err == nil {
		t.Fatal("a parent given twice accepted")
	}
}
