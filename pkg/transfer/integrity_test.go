package transfer_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
)

// lyingStore serves a damaged copy of one chunk (as a store that does not
// verify what it reads from a damaged disk would) while bad is set. With
// repairs, RecheckChunk finds the damage, drops the chunk and clears bad;
// without, it insists the chunk is intact.
type lyingStore struct {
	*memStore
	repairs  bool
	mu       sync.Mutex
	target   blob.Hash
	bad      bool
	rechecks atomic.Int32
}

func (s *lyingStore) damage(h blob.Hash) {
	s.mu.Lock()
	s.target, s.bad = h, true
	s.mu.Unlock()
}

func (s *lyingStore) ReadChunk(h blob.Hash) ([]byte, error) {
	b, err := s.memStore.ReadChunk(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && s.bad && h == s.target {
		b = bytes.Clone(b)
		b[len(b)/3] ^= 0x81
	}
	return b, err
}

func (s *lyingStore) RecheckChunk(h blob.Hash) (bool, error) {
	s.rechecks.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.repairs || !s.bad || h != s.target {
		return false, nil
	}
	s.bad = false
	s.memStore.DeleteChunk(h)
	return true, nil
}

// A worker that receives a corrupt chunk from its head (a 1.2.0 head,
// which sends a chunk whole: one that sends pieces finds the damage
// itself, TestDamagedCopyNotSent) tells the head, which re-checks its
// copy, drops it and serves a fresh one from the root.
func TestCorruptReportedToSender(t *testing.T) {
	var liar *lyingStore
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", func(m *memStore) nodeStore { liar = &lyingStore{memStore: m, repairs: true}; return liar })
	head.speaks120()
	w := newNode(t, head, "siteA", nil)
	waitConnected(t, head, w)
	data := randBlob(300<<10, 7)
	rec := put(t, root, "x", data, 16<<10)
	if b := readAll(t, head, "x"); !bytes.Equal(b, data) { // the head caches the blob
		t.Fatal("wrong bytes at the head")
	}
	m, _ := root.store.Manifest(rec.ID)
	liar.damage(m.Chunks[7])

	if b := readAll(t, w, "x"); !bytes.Equal(b, data) {
		t.Fatal("wrong bytes at the worker")
	}
	waitFor(t, "the head to receive the report", 5*time.Second, func() bool { return head.eng.Status().CorruptReports >= 1 })
	if liar.rechecks.Load() < 1 {
		t.Fatal("the head never re-checked its copy")
	}
	if st := w.eng.Status(); st.CorruptReceived != 1 {
		t.Fatalf("worker counted %d corrupt chunks, want 1", st.CorruptReceived)
	}
	if b, err := head.mem.ReadChunk(m.Chunks[7]); err != nil || m.Chunks[7].Verify(b) != nil {
		t.Fatalf("the head did not store a fresh copy: %v", err)
	}
}

// A head (speaking 1.2.0) that keeps sending a corrupt chunk (and insists
// its copy is fine) is given up on for that chunk: the worker gets it
// from its fallback parent, the root.
func TestCorruptSourceFallsBack(t *testing.T) {
	var liar *lyingStore
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", func(m *memStore) nodeStore { liar = &lyingStore{memStore: m}; return liar })
	head.speaks120()
	w := newNode(t, head, "siteA", nil, func(c *nodeCfg) { c.Fallbacks = []peer.AddrInfo{*root.info()} })
	waitConnected(t, head, w)
	data := randBlob(200<<10, 8)
	rec := put(t, root, "y", data, 16<<10)
	if b := readAll(t, head, "y"); !bytes.Equal(b, data) {
		t.Fatal("wrong bytes at the head")
	}
	m, _ := root.store.Manifest(rec.ID)
	liar.damage(m.Chunks[3])

	if b := readAll(t, w, "y"); !bytes.Equal(b, data) {
		t.Fatal("wrong bytes at the worker")
	}
	st := w.eng.Status()
	if st.CorruptReceived < 2 {
		t.Fatalf("worker counted %d corrupt chunks, want >= 2 (once more from the same source, then the fallback)", st.CorruptReceived)
	}
	waitFor(t, "the head to receive the reports", 5*time.Second, func() bool { return head.eng.Status().CorruptReports >= 2 })
}

// An ERROR reply (a relay that could not get the chunk) counts as a peer
// error, as Status.PeerErrors says; NOT_FOUND does not.
func TestErrorRepliesCounted(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", nil)
	w := newNode(t, head, "siteA", nil, func(c *nodeCfg) { c.RequestTimeout = 3 * time.Second; c.DialTimeout = time.Second })
	waitConnected(t, head, w)
	put(t, root, "z", randBlob(64<<10, 9), 16<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := w.tree.Lookup(ctx, "z")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.eng.Manifest(ctx, r.ID); err != nil { // the head keeps a copy of the manifest
		t.Fatal(err)
	}
	root.stop()
	if err := w.eng.Fetch(ctx, r); err == nil {
		t.Fatal("fetch succeeded with the only copy gone")
	}
	if st := w.eng.Status(); st.PeerErrors == 0 {
		t.Fatalf("the head's ERROR replies were not counted as peer errors: %+v", st)
	}
}

// sibling exchange on: the relay redirects its children to each other.
func siblings(c *nodeCfg) { c.Engine.SiblingExchange = true }

// connectSiblings connects every two of ws before a broadcast, so that
// the first requests between siblings do not wait for 30 handshakes at
// once: on a loaded machine under the race detector some took longer than
// the nodes' 2 s DialTimeout, and each such sibling counted as a peer
// error and sent its requester back to the head (6 of 30 runs of
// TestSiblingExchange at load 20-30: 1-4 peer errors, "no answer in
// time", up to 2.8 copies from the head). How a cold sibling is dialled
// is not what these tests are about.
func connectSiblings(t *testing.T, ws []*testNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(ws)*len(ws))
	for i, a := range ws {
		for _, b := range ws[i+1:] {
			wg.Go(func() {
				if err := a.h.Connect(ctx, peer.AddrInfo{ID: b.h.ID(), Addrs: b.h.Addrs()}); err != nil {
					errs <- fmt.Errorf("connect %s to %s: %w", a.h.ID(), b.h.ID(), err)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestSiblingExchange: six workers read a blob at once through their head:
// each gets exact bytes, the head's port carries about one copy (the rest
// goes between siblings), and the root serves one copy. The workers count
// what they serve each other as sent to siblings (GET_SIBLING), at least
// what their siblings verified, and nothing as sent to others.
func TestSiblingExchange(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", nil, siblings)
	var ws []*testNode
	for range 6 {
		ws = append(ws, newNode(t, head, "siteA", nil, siblings))
	}
	waitConnected(t, append([]*testNode{head}, ws...)...)
	connectSiblings(t, ws)
	data := randBlob(4<<20+99, 11)
	put(t, root, "shared/init", data, 64<<10)

	got := readAllAsync(t, ws, "shared/init", -1)
	var fromSiblings, toSiblings uint64
	for i, w := range ws {
		if !bytes.Equal(got[i], data) {
			t.Fatalf("worker %d got wrong bytes", i)
		}
		st := w.eng.Status()
		fromSiblings += st.BytesIn["sibling"]
		toSiblings += st.BytesOut["sibling"]
		if st.BytesOut["other"] != 0 {
			t.Errorf("worker %d counts %d bytes sent to other peers, want them counted as sent to siblings", i, st.BytesOut["other"])
		}
		if st.PeerErrors != 0 {
			t.Errorf("worker %d: %d peer errors", i, st.PeerErrors)
		}
	}
	hs := head.eng.Status()
	n := uint64(len(data))
	t.Logf("head sent %.2f copies to its children, redirected %d requests; siblings carried %.2f copies",
		float64(hs.BytesOut["child"])/float64(n), hs.RedirectsSent, float64(fromSiblings)/float64(n))
	if hs.BytesOut["child"] > n+n/2 {
		t.Errorf("head sent %d bytes to its children for a %d-byte blob: want at most 1.5 copies", hs.BytesOut["child"], n)
	}
	if fromSiblings < 4*n {
		t.Errorf("siblings carried %d bytes, want at least 4 copies of %d", fromSiblings, n)
	}
	if toSiblings < fromSiblings {
		t.Errorf("workers count %d bytes sent to siblings, less than the %d their siblings received", toSiblings, fromSiblings)
	}
	if rs := root.eng.Status(); rs.BytesServed > n+n/10 {
		t.Errorf("root served %d bytes, want about one copy (%d)", rs.BytesServed, n)
	}
}

// corruptOnce serves a wrong copy of one chunk the first time it is read.
type corruptOnce struct {
	*memStore
	target blob.Hash
	done   atomic.Bool
}

func (c *corruptOnce) ReadChunk(h blob.Hash) ([]byte, error) {
	b, err := c.memStore.ReadChunk(h)
	if err == nil && h == c.target && c.done.CompareAndSwap(false, true) {
		b = bytes.Clone(b)
		b[len(b)/2] ^= 0xff
	}
	return b, err
}

func TestCorruptChunkRefetched(t *testing.T) {
	var bad *corruptOnce
	root := newNode(t, nil, "master", func(m *memStore) nodeStore { bad = &corruptOnce{memStore: m}; return bad })
	root.speaks120() // a 1.3.0 root finds the damage before it sends
	w := newNode(t, root, "siteA", nil)
	waitConnected(t, w)
	data := randBlob(200<<10, 4)
	rec := put(t, root, "x", data, 16<<10)
	m, _ := root.store.Manifest(rec.ID)
	bad.target = m.Chunks[5]
	if b := readAll(t, w, "x"); !bytes.Equal(b, data) {
		t.Fatal("wrong bytes")
	}
	if !bad.done.Load() {
		t.Fatal("the corrupt chunk was never served")
	}
	if st := w.eng.Status(); st.PeerErrors < 1 {
		t.Fatalf("peer errors = %d, want >= 1", st.PeerErrors)
	}
}
