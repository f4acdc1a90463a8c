package transfer_test

import (
	"bufio"
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/omst-project/omst/pkg/transfer"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
)

// A relay passes a chunk on in verified pieces while it is still
// receiving it: with the root paced to 1 MiB/s and 1 MiB chunks, the head
// sends most of each chunk to its worker before it has the whole chunk
// (Status.BytesPassedOn), and the worker gets exact bytes.
func TestPiecesPassedOn(t *testing.T) {
	root := newNode(t, nil, "master", nil, func(c *nodeCfg) { c.Engine.MaxUploadRate = 1 << 20 })
	head := newNode(t, root, "siteA", nil)
	w := newNode(t, head, "siteA", nil)
	waitConnected(t, head, w)
	data := randBlob(3<<20, 21)
	put(t, root, "p/x", data, 1<<20)
	if b := readAll(t, w, "p/x"); !bytes.Equal(b, data) {
		t.Fatal("wrong bytes at the worker")
	}
	hs := head.eng.Status()
	t.Logf("head passed on %d of %d bytes before it had their chunk", hs.BytesPassedOn, len(data))
	if hs.BytesPassedOn < uint64(len(data))/2 {
		t.Fatalf("head passed on %d bytes before their chunk was complete, want at least half of %d", hs.BytesPassedOn, len(data))
	}
	if ws := w.eng.Status(); ws.CorruptReceived != 0 || ws.PeerErrors != 0 {
		t.Fatalf("worker: %d corrupt, %d peer errors", ws.CorruptReceived, ws.PeerErrors)
	}
}

// A head whose store hands it a damaged copy (a store that failed to
// verify it) does not send it in pieces: computing the outboard finds the
// damage, the head has its store re-check (and drop) the copy and serves a
// fresh one from the root. The worker never sees a corrupt byte.
func TestDamagedCopyNotSent(t *testing.T) {
	var liar *lyingStore
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", func(m *memStore) nodeStore { liar = &lyingStore{memStore: m, repairs: true}; return liar })
	w := newNode(t, head, "siteA", nil)
	waitConnected(t, head, w)
	data := randBlob(300<<10, 7)
	rec := put(t, root, "x", data, 16<<10)
	if b := readAll(t, head, "x"); !bytes.Equal(b, data) {
		t.Fatal("wrong bytes at the head")
	}
	m, _ := root.store.Manifest(rec.ID)
	liar.damage(m.Chunks[7])
	if b := readAll(t, w, "x"); !bytes.Equal(b, data) {
		t.Fatal("wrong bytes at the worker")
	}
	if liar.rechecks.Load() < 1 {
		t.Fatal("the head never re-checked its copy")
	}
	if st := w.eng.Status(); st.CorruptReceived != 0 {
		t.Fatalf("worker received %d corrupt chunks, want 0", st.CorruptReceived)
	}
	if b, err := head.mem.ReadChunk(m.Chunks[7]); err != nil || m.Chunks[7].Verify(b) != nil {
		t.Fatalf("the head did not store a fresh copy: %v", err)
	}
}

// lieInPieces replaces n's fetch 1.3.0 server with one that answers every
// GET with a true outboard and then its chunk with one byte flipped in
// its second piece, MANIFEST truly, REPORT with "intact"; it counts the
// reports.
func lieInPieces(t *testing.T, n *testNode) *atomic.Int32 {
	var reports atomic.Int32
	n.h.RemoveStreamHandler(transfer.ProtoFetch120)
	n.h.RemoveStreamHandler(transfer.ProtoFetch110)
	n.h.SetStreamHandler(transfer.ProtoFetch, func(s network.Stream) {
		defer s.Close()
		br, bw := bufio.NewReader(s), bufio.NewWriter(s)
		for {
			q, err := fetchwire.ReadRequest(br)
			if err != nil {
				return
			}
			var out []byte
			switch q.Type {
			case fetchwire.MsgReport:
				reports.Add(1)
				out = append(fetchwire.AppendReplyHeader(nil, q.Tag, fetchwire.StatusOK, 1), fetchwire.ReportIntact)
			case fetchwire.MsgManifest:
				m, err := n.mem.Manifest(q.ID)
				if err != nil {
					out = fetchwire.AppendReplyHeader(nil, q.Tag, fetchwire.StatusNotFound, 0)
					break
				}
				b := m.Encode()
				out = append(fetchwire.AppendReplyHeader(nil, q.Tag, fetchwire.StatusOK, len(b)), b...)
			default:
				data, err := n.mem.ReadChunk(q.Hash)
				if err != nil {
					out = fetchwire.AppendReplyHeader(nil, q.Tag, fetchwire.StatusNotFound, 0)
					break
				}
				ob, _ := piece.Outboard(data, q.Hash)
				out = append(fetchwire.AppendReplyHeader(nil, q.Tag, fetchwire.StatusOutboard, len(ob)), ob...)
				bad := bytes.Clone(data)
				bad[min(len(bad)-1, piece.GroupSize+5)] ^= 0x40
				out = append(fetchwire.AppendPieceHeader(out, q.Tag, 0, len(bad)), bad...)
			}
			if _, err := bw.Write(out); err != nil || bw.Flush() != nil {
				return
			}
		}
	})
	return &reports
}

// TestCorruptPiecesRefused: a worker that sends its siblings a corrupt
// piece (with a true outboard) has it refused at the first hop: no
// corrupt byte is accepted, each is counted and reported to it, the chunk
// is fetched elsewhere, and the head stops sending children to it.
func TestCorruptPiecesRefused(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", nil, siblings)
	bad := newNode(t, head, "siteA", nil, siblings)
	var ws []*testNode
	for range 4 {
		ws = append(ws, newNode(t, head, "siteA", nil, siblings))
	}
	waitConnected(t, append([]*testNode{head, bad}, ws...)...)
	data := randBlob(64*32<<10, 17)
	put(t, root, "c/p", data, 32<<10)
	readAll(t, bad, "c/p") // it holds (and is asked for) every chunk
	reports := lieInPieces(t, bad)
	got := readAllAsync(t, ws, "c/p", -1)
	var corrupt uint64
	for i := range ws {
		if !bytes.Equal(got[i], data) {
			t.Fatalf("worker %d got wrong bytes", i)
		}
		corrupt += ws[i].eng.Status().CorruptReceived
	}
	t.Logf("workers refused %d corrupt pieces; the liar got %d reports", corrupt, reports.Load())
	if corrupt == 0 {
		t.Fatal("the lying sibling was never asked: the test proves nothing")
	}
	if limit := uint64(2 + len(ws)*transfer.DefaultWindow); corrupt > limit {
		t.Fatalf("%d corrupt pieces received, want at most %d: the liar was not dropped", corrupt, limit)
	}
	waitFor(t, "the liar to be told", 5*time.Second, func() bool { return reports.Load() >= 1 })
}
