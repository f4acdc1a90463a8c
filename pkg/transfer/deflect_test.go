package transfer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
)

// Fetch 1.4.0, real engines: a child that gives up on a sibling (gone)
// sends the relay a GET_DIRECT that takes a REDIRECT, and the relay, busy
// writing 4 MiB to another child, sends it to a sibling that holds the
// chunk complete (one it wrote the whole chunk to) instead of sending the
// chunk into the site again. Before (fetch
// 1.3.0) every such GET_DIRECT was served from the relay's store; so it is
// still by a relay that speaks 1.3.0 at most (the child sends it no
// deflect flag).
func TestDirectRedirectedToCompleteSibling(t *testing.T) {
	t.Run("1.4.0", func(t *testing.T) { testDirectRedirected(t, false) })
	t.Run("relay 1.3.0", func(t *testing.T) { testDirectRedirected(t, true) })
}

func testDirectRedirected(t *testing.T, relay130 bool) {
	gs := &groupedSources{children: map[peer.ID][]ma.Multiaddr{}}
	relay := newEngineWith(t, func(c *Config) { c.Sources = gs; c.SiblingExchange = true; c.MaxUploadRate = 2 << 20 })
	if relay130 {
		relay.h.RemoveStreamHandler(ProtoFetch)
	}
	x := randBlob(8*16<<10, 51)
	rx := putBlob(t, relay.mem, "x", x, 16<<10)
	var ws []*engineNode
	for range 3 {
		w := newEngine(t, nil, relay)
		gs.connect(w, true)
		ws = append(ws, w)
	}
	w1, w2, w3 := ws[0], ws[1], ws[2]
	for _, w := range ws {
		for _, o := range ws {
			if o != w {
				w.h.Peerstore().AddAddrs(o.h.ID(), o.h.Addrs(), time.Hour)
			}
		}
	}
	// w1 gets every chunk from the relay (complete there); w2 from w1.
	if got := readBlob(t, w1, rx); !bytes.Equal(got, x) {
		t.Fatal("w1: wrong bytes")
	}
	if got := readBlob(t, w2, rx); !bytes.Equal(got, x) {
		t.Fatal("w2: wrong bytes")
	}
	if st := w2.eng.Status(); st.RedirectsTaken == 0 {
		t.Fatalf("w2 was never sent to w1: the test proves nothing (%+v)", st)
	}
	time.Sleep(100 * time.Millisecond) // the relay's writers note their last bytes
	// w2 stops serving (its tree session stays up: still a target); w3 is
	// sent to it, finds it gone, and asks the relay plainly.
	w2.eng.Close()
	// A fourth child keeps the relay's port busy until w3 is done: 16 MiB
	// of first copies at 2 MiB/s, read as they come.
	y := randBlob(16<<20, 53)
	ry := putBlob(t, relay.mem, "y", y, 1<<20)
	hog := newEngine(t, nil, relay)
	gs.connect(hog, true)
	hogCtx, stopHog := context.WithTimeout(context.Background(), 30*time.Second)
	hogDone := make(chan struct{})
	go func() {
		defer close(hogDone)
		rc, err := hog.eng.Open(hogCtx, ry)
		if err != nil {
			return
		}
		defer rc.Close()
		_, _ = io.Copy(io.Discard, rc)
	}()
	for deadline := time.Now().Add(5 * time.Second); relay.eng.Status().BytesOut["child"] < uint64(len(x))*2+1<<20 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // until the relay writes to the hog
	}
	defer func() { stopHog(); <-hogDone }()
	before := relay.eng.Status()
	if got := readBlob(t, w3, rx); !bytes.Equal(got, x) {
		t.Fatal("w3: wrong bytes")
	}
	st, st3 := relay.eng.Status(), w3.eng.Status()
	t.Logf("relay: GET_DIRECTs redirected %d, busy %d, served %d; w3: sibling failures %d, directs %d, redirects taken %d",
		st.DirectsRedirected, st.DirectsBusy, st.DirectsServed, st3.SiblingFailures, st3.Directs, st3.RedirectsTaken)
	if st3.SiblingFailures == 0 || st3.Directs == 0 {
		t.Fatalf("w3 never gave up on w2: the test proves nothing (%+v)", st3)
	}
	if relay130 {
		if st.DirectsRedirected != 0 || st.DirectsServed == before.DirectsServed {
			t.Fatalf("a 1.3.0 relay redirected %d GET_DIRECTs and served %d (before %d): want none redirected, all served",
				st.DirectsRedirected, st.DirectsServed, before.DirectsServed)
		}
		return
	}
	if st.DirectsRedirected == 0 || st.DirectsServed != before.DirectsServed {
		t.Fatalf("GET_DIRECTs redirected %d, served %d (before %d): want them sent to w1, none served", st.DirectsRedirected, st.DirectsServed, before.DirectsServed)
	}
	if in := st3.BytesIn["sibling"]; in != uint64(len(x)) {
		t.Fatalf("w3 took %d bytes from siblings, want the blob's %d (nothing from the relay: %v)", in, len(x), st3.BytesIn)
	}
}

// Fetch 1.4.0 on the wire: a deflectable GET_DIRECT for a chunk no child
// holds complete, while the relay has more than a chunk to write to its
// children (two 1 MiB first copies under a 512 KiB/s upload limit, the
// drain rate measured from its children's asks), is answered BUSY with a
// retry-after; asked again after it, within the bound (MaxDeflect: 2), it
// is served. The same GET_DIRECT without the flag, and any on a 1.3.0
// stream, is served at once as before.
func TestDirectBusyRetried(t *testing.T) {
	const chunk = 1 << 20
	gs := &groupedSources{children: map[peer.ID][]ma.Multiaddr{}}
	relay := newEngineWith(t, func(c *Config) { c.Sources = gs; c.SiblingExchange = true; c.MaxUploadRate = 512 << 10 })
	data := randBlob(6*chunk, 52)
	rec := putBlob(t, relay.mem, "x", data, chunk)
	m, err := relay.mem.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := newTestHost(t), newTestHost(t)
	open := func(h host.Host, proto protocol.ID) (network.Stream, *bufio.Reader) {
		t.Helper()
		if err := h.Connect(ctx, peer.AddrInfo{ID: relay.h.ID(), Addrs: relay.h.Addrs()}); err != nil {
			t.Fatal(err)
		}
		gs.cmu.Lock()
		gs.children[h.ID()] = h.Addrs()
		gs.cmu.Unlock()
		s, err := h.NewStream(ctx, relay.h.ID(), proto)
		if err != nil {
			t.Fatal(err)
		}
		return s, bufio.NewReader(s)
	}
	ask := func(s network.Stream, q fetchwire.Request) {
		t.Helper()
		q.ID, q.Hash = rec.ID, m.Chunks[q.Index]
		if _, err := s.Write(fetchwire.AppendRequest(nil, q)); err != nil {
			t.Fatal(err)
		}
	}
	a1, ra1 := open(a, ProtoFetch)
	a2, ra2 := open(a, ProtoFetch)
	sb, rb := open(b, ProtoFetch)
	// a's first copies of chunks 0 and 1: 2 MiB at 512 KiB/s.
	ask(a1, fetchwire.Request{Type: fetchwire.MsgGet, Tag: 1, Index: 0})
	ask(a2, fetchwire.Request{Type: fetchwire.MsgGet, Tag: 1, Index: 1})
	type got struct {
		st   byte
		body []byte
	}
	aGot := make(chan got, 2)
	for _, r := range []*bufio.Reader{ra1, ra2} {
		go func() { st, b, _ := readReplyErr(r, chunk); aGot <- got{st, b} }() // a reads as a child does
	}
	// b's asks of chunk 4 (a plain GET: redirected to nobody, served) let
	// the relay measure its port while it is busy.
	for i := range 3 {
		time.Sleep(300 * time.Millisecond)
		ask(sb, fetchwire.Request{Type: fetchwire.MsgGetDirect, Tag: uint32(10 + i), Index: 5, IfPresent: true})
		if st, _ := readReply(t, rb, chunk); st != fetchwire.StatusNotFound {
			t.Fatalf("hedge while busy: status %d", st)
		}
	}
	// The deflectable GET_DIRECT for chunk 2: BUSY.
	q := fetchwire.Request{Type: fetchwire.MsgGetDirect, Tag: 1, Index: 2, Deflect: true}
	ask(sb, q)
	st, body := readReply(t, rb, chunk)
	if st != fetchwire.StatusBusy {
		t.Fatalf("a deflectable GET_DIRECT while the relay writes 2 MiB to its site: status %d (%d bytes), want BUSY", st, len(body))
	}
	retry, err := fetchwire.DecodeBusy(body)
	if err != nil || retry < 50*time.Millisecond || retry > 2*time.Second {
		t.Fatalf("retry-after %v (%v): want 50 ms to 2 s", retry, err)
	}
	t.Logf("BUSY: ask again in %v", retry)
	// On a 1.3.0 stream, and without the flag, the same is served at once.
	s130, r130 := open(b, ProtoFetch130)
	ask(s130, fetchwire.Request{Type: fetchwire.MsgGetDirect, Tag: 1, Index: 3})
	if st, got := readReply(t, r130, chunk); st != fetchwire.StatusOK || !bytes.Equal(got, data[3*chunk:4*chunk]) {
		t.Fatalf("a 1.3.0 peer's GET_DIRECT: status %d, %d bytes; want chunk 3", st, len(got))
	}
	// Retried after the retry-after (as a 1.4.0 child does): BUSY at most
	// once more, then served.
	for try := 2; ; try++ {
		time.Sleep(retry)
		q.Tag++
		ask(sb, q)
		st, got := readReply(t, rb, chunk)
		if st == fetchwire.StatusOK {
			if !bytes.Equal(got, data[2*chunk:3*chunk]) {
				t.Fatal("chunk 2: wrong bytes")
			}
			t.Logf("served on try %d", try)
			break
		}
		if st != fetchwire.StatusBusy || try >= 3 {
			t.Fatalf("try %d: status %d; want BUSY at most twice, then the chunk", try, st)
		}
		if retry, err = fetchwire.DecodeBusy(got); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if g := <-aGot; g.st != fetchwire.StatusOK || !(bytes.Equal(g.body, data[:chunk]) || bytes.Equal(g.body, data[chunk:2*chunk])) {
			t.Fatalf("a's chunk: status %d, %d bytes", g.st, len(g.body))
		}
	}
	if st := relay.eng.Status(); st.DirectsBusy == 0 || st.DirectsServed != 2 {
		t.Fatalf("GET_DIRECTs answered BUSY %d, served %d; want some, 2", st.DirectsBusy, st.DirectsServed)
	}
}

// readReply reads one request's reply from br: a whole reply, or one in
// pieces (1.3.0 and later: OUTBOARD, then PIECEs, assembled; not verified
// here), with its status (OK for a chunk in pieces).
func readReply(t *testing.T, br *bufio.Reader, limit int) (byte, []byte) {
	t.Helper()
	st, body, err := readReplyErr(br, limit)
	if err != nil {
		t.Fatal(err)
	}
	return st, body
}

func readReplyErr(br *bufio.Reader, limit int) (byte, []byte, error) {
	var chunk []byte
	for {
		var hdr [fetchwire.ReplyHeaderLen]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return 0, nil, err
		}
		_, st, n := fetchwire.ParseReplyHeader(hdr)
		if err := fetchwire.CheckReplyLen(st, n, limit); err != nil {
			return 0, nil, err
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			return 0, nil, err
		}
		switch st {
		case fetchwire.StatusOutboard:
			if len(body) < 8 || binary.LittleEndian.Uint64(body) > blob.MaxChunkSize {
				return 0, nil, fmt.Errorf("outboard of %d bytes", len(body))
			}
			chunk = make([]byte, 0, binary.LittleEndian.Uint64(body))
		case fetchwire.StatusPiece:
			chunk = append(chunk, body[fetchwire.PieceHeaderLen:]...)
			if len(chunk) >= cap(chunk) {
				return fetchwire.StatusOK, chunk, nil
			}
		default:
			return st, body, nil
		}
	}
}
