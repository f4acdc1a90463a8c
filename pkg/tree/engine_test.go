package tree

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
)

// eventLog is an engine that records the events its tree tells it before
// passing them on to the node's engine.
type eventLog struct {
	Engine
	mu       sync.Mutex
	preheats []string
	left     []peer.ID
}

func (e *eventLog) Preheat(ctx context.Context, r blob.Record) error {
	e.mu.Lock()
	e.preheats = append(e.preheats, r.Name)
	e.mu.Unlock()
	return e.Engine.Preheat(ctx, r)
}

func (e *eventLog) ChildLeft(p peer.ID) {
	e.mu.Lock()
	e.left = append(e.left, p)
	e.mu.Unlock()
	e.Engine.ChildLeft(p)
}

func (e *eventLog) seen() ([]string, []peer.ID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.preheats...), append([]peer.ID(nil), e.left...)
}

// TestEngineSubscribes: the engine built after the tree subscribes to it
// before Start (once: again, or after Start, is refused), and the tree's
// events reach it: a parent's PREHEAT (the blob is fetched, the parent told
// so) and a child leaving. A tree no engine subscribed to answers a
// PREHEAT with an error.
func TestEngineSubscribes(t *testing.T) {
	rootLog, headLog := &eventLog{}, &eventLog{}
	logTo := func(l *eventLog) nodeOpt {
		return func(c *nodeCfg) { c.Wrap = func(e Engine) Engine { l.Engine = e; return l } }
	}
	root := newNode(t, nil, "master", nil, logTo(rootLog))
	head := newNode(t, root, "a", nil, logTo(headLog))
	waitConnected(t, head)
	if err := head.tree.Subscribe(head.eng); err == nil {
		t.Fatal("a second subscription, after Start, accepted")
	}
	fresh, err := New(Config{Host: newTestHost(t), Store: newMemStore()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Subscribe(nil); err == nil {
		t.Fatal("a nil engine accepted")
	}
	if err := fresh.Subscribe(head.eng); err != nil {
		t.Fatal(err)
	}
	if err := fresh.Subscribe(head.eng); err == nil {
		t.Fatal("a second subscription accepted")
	}

	data := randBlob(300<<10, 21)
	rec := put(t, root, "ev/x", data, 64<<10)
	res := root.tree.Preheat(context.Background(), rec, nil)
	if len(res) != 1 || res[0].Err != nil {
		t.Fatalf("preheat: %+v", res)
	}
	if pre, _ := headLog.seen(); len(pre) != 1 || pre[0] != "ev/x" {
		t.Fatalf("the head's engine was told of preheats %q, want [ev/x]", pre)
	}
	m, err := head.store.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range m.Chunks {
		if !head.mem.HasChunk(h) {
			t.Fatal("the head answered the PREHEAT without the blob")
		}
	}

	// A tree without an engine refuses a PREHEAT.
	bare, err := New(Config{Host: newTestHost(t), Store: newMemStore(), Parent: root.info(), Site: "b",
		DialTimeout: 2 * time.Second, RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := bare.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bare.Close() })
	waitFor(t, "the bare child joined", 10*time.Second, func() bool { return bare.Status().ParentConnected })
	res = root.tree.Preheat(context.Background(), rec, []string{"b"})
	if len(res) != 1 || res[0].Err == nil {
		t.Fatalf("preheat of a tree without an engine: %+v, want an error", res)
	}

	headID := head.h.ID()
	head.stop()
	waitFor(t, "the root's engine told the head left", 15*time.Second, func() bool {
		_, left := rootLog.seen()
		for _, p := range left {
			if p == headID {
				return true
			}
		}
		return false
	})
}

// TestParentsBeforeTree: Parents made before the tree (as the daemon makes
// them for its admission) follow the tree's failover: the fallback first
// once the head died. Parents and Parent together are refused.
func TestParentsBeforeTree(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "a", nil)
	ups, err := NewParents(head.info(), []peer.AddrInfo{*root.info()})
	if err != nil {
		t.Fatal(err)
	}
	if ids := ups.IDs(); len(ids) != 2 || ids[0] != head.h.ID() || ids[1] != root.h.ID() {
		t.Fatalf("before the tree: %v, want the head then the root", ids)
	}
	if _, err := New(Config{Host: newTestHost(t), Store: newMemStore(), Parents: ups, Parent: head.info()}); err == nil {
		t.Fatal("Parents and Parent together accepted")
	}
	if _, err := NewParents(nil, []peer.AddrInfo{*root.info()}); err == nil {
		t.Fatal("fallbacks without a parent accepted")
	}
	w := newNode(t, nil, "a", nil, func(c *nodeCfg) {
		c.Parents = ups
		c.Keepalive = 200 * time.Millisecond
	})
	waitConnected(t, head, w)
	head.stop()
	waitFor(t, "switch to the fallback parent", 15*time.Second, func() bool {
		st := w.tree.Status()
		return st.Parent == root.h.ID() && st.ParentConnected
	})
	if ids := ups.IDs(); len(ids) != 2 || ids[0] != root.h.ID() || ids[1] != head.h.ID() {
		t.Fatalf("after the failover: %v, want the root then the head", ids)
	}
}
