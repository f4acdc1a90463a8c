package tree

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

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

// A worker that receives a corrupt chunk from its head tells the head,
// which re-checks its copy, drops it and serves a fresh one from the root.
func TestCorruptReportedToSender(t *testing.T) {
	var liar *lyingStore
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", func(m *memStore) nodeStore { liar = &lyingStore{memStore: m, repairs: true}; return liar })
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

// A head that keeps sending a corrupt chunk (and insists its copy is
// fine) is given up on for that chunk: the worker gets it from its
// fallback parent, the root.
func TestCorruptSourceFallsBack(t *testing.T) {
	var liar *lyingStore
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", func(m *memStore) nodeStore { liar = &lyingStore{memStore: m}; return liar })
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

// A long error message fits a names ERROR frame: code byte plus 1024
// bytes of message, cut at a rune boundary.
func TestLongNamesError(t *testing.T) {
	long := errors.New(strings.Repeat("é", 2000))
	typ, payload, err := readFrame(bufio.NewReader(bytes.NewReader(errorFrame(long))))
	if err != nil {
		t.Fatalf("long ERROR frame rejected: %v", err)
	}
	rep, err := decodeNamesReply(typ, payload)
	if err != nil || rep.Type != msgError || len(rep.Message) > maxErrorMsg || !utf8.ValidString(rep.Message) {
		t.Fatalf("decoded %d-byte message, valid UTF-8 %v, err %v", len(rep.Message), utf8.ValidString(rep.Message), err)
	}
}
