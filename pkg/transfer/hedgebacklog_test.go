package transfer

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
)

// A relay serves a child's hedge (a GET_DIRECT if-present) only while it
// has at most a chunk to write to its children (exchange.
// DefaultHedgeBacklog): while two first copies are being written to
// another child under the upload limit, the hedge is declined (NOT_FOUND,
// counted in HedgesDeclined); once they are out, the same hedge is served.
// Before, the relay served it whatever its port carried.
func TestHedgeDeclinedWhileRelayBusy(t *testing.T) {
	const chunk = 1 << 20
	gs := &groupedSources{children: map[peer.ID][]ma.Multiaddr{}}
	relay := newEngineWith(t, func(c *Config) { c.Sources = gs; c.SiblingExchange = true; c.MaxUploadRate = 512 << 10 })
	data := randBlob(4*chunk, 41)
	rec := putBlob(t, relay.mem, "x", data, chunk)
	m, err := relay.mem.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := newTestHost(t), newTestHost(t)
	open := func(h host.Host) network.Stream {
		t.Helper()
		if err := h.Connect(ctx, peer.AddrInfo{ID: relay.h.ID(), Addrs: relay.h.Addrs()}); err != nil {
			t.Fatal(err)
		}
		gs.cmu.Lock()
		gs.children[h.ID()] = h.Addrs()
		gs.cmu.Unlock()
		s, err := h.NewStream(ctx, relay.h.ID(), ProtoFetch120)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ask := func(s network.Stream, q fetchwire.Request) {
		t.Helper()
		q.ID, q.Hash = rec.ID, m.Chunks[q.Index]
		if _, err := s.Write(fetchwire.AppendRequest(nil, q)); err != nil {
			t.Fatal(err)
		}
	}
	reply := func(br *bufio.Reader) (byte, []byte) {
		t.Helper()
		var hdr [fetchwire.ReplyHeaderLen]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			t.Fatal(err)
		}
		_, st, n := fetchwire.ParseReplyHeader(hdr)
		if err := fetchwire.CheckReplyLen(st, n, blob.MaxChunkSize); err != nil {
			t.Fatal(err)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			t.Fatal(err)
		}
		return st, body
	}

	// a asks plainly for chunks 0 and 1, one per stream: the first asker
	// of each, it is served by the relay, 2 MiB at 512 KiB/s.
	a1, a2 := open(a), open(a)
	ask(a1, fetchwire.Request{Type: fetchwire.MsgGet, Tag: 1, Index: 0})
	ask(a2, fetchwire.Request{Type: fetchwire.MsgGet, Tag: 1, Index: 1})
	time.Sleep(500 * time.Millisecond) // both replies taken up by their writers (written for 3.5 s)

	// b hedges for chunk 2 (never sent into the site: no grace): declined.
	sb := open(b)
	bb := bufio.NewReader(sb)
	ask(sb, fetchwire.Request{Type: fetchwire.MsgGetDirect, Tag: 1, Index: 2, IfPresent: true})
	if st, body := reply(bb); st != fetchwire.StatusNotFound {
		t.Fatalf("a hedge while the relay writes 2 MiB to its site: status %d (%d bytes), want NOT_FOUND", st, len(body))
	} else {
		t.Logf("declined: %s", body)
	}
	if st := relay.eng.Status(); st.HedgesDeclined != 1 {
		t.Fatalf("hedges declined %d, want 1", st.HedgesDeclined)
	}

	// a's chunks arrive; then the same hedge is served.
	for i, s := range []network.Stream{a1, a2} {
		if st, body := reply(bufio.NewReader(s)); st != fetchwire.StatusOK || !bytes.Equal(body, data[i*chunk:(i+1)*chunk]) {
			t.Fatalf("a's chunk %d: status %d, %d bytes", i, st, len(body))
		}
	}
	ask(sb, fetchwire.Request{Type: fetchwire.MsgGetDirect, Tag: 2, Index: 2, IfPresent: true})
	if st, body := reply(bb); st != fetchwire.StatusOK || !bytes.Equal(body, data[2*chunk:3*chunk]) {
		t.Fatalf("a hedge once the relay's port is idle: status %d, %d bytes; want chunk 2", st, len(body))
	}
	// The counters tell the two apart (Status.HedgesBusy, HedgesServed),
	// and count a plain GET_DIRECT served (DirectsServed).
	ask(sb, fetchwire.Request{Type: fetchwire.MsgGetDirect, Tag: 3, Index: 3})
	if st, body := reply(bb); st != fetchwire.StatusOK || !bytes.Equal(body, data[3*chunk:4*chunk]) {
		t.Fatalf("a GET_DIRECT: status %d, %d bytes; want chunk 3", st, len(body))
	}
	if st := relay.eng.Status(); st.HedgesDeclined != 1 || st.HedgesBusy != 1 || st.HedgesServed != 1 || st.DirectsServed != 1 {
		t.Fatalf("hedges declined %d (busy %d), served %d; GET_DIRECTs served %d; want 1 (1), 1; 1",
			st.HedgesDeclined, st.HedgesBusy, st.HedgesServed, st.DirectsServed)
	}
}
