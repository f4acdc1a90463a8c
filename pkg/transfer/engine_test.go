package transfer

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
)

// A chain root -> relay -> worker: the worker reads the blob, the relay
// fetches manifest and chunks pull-through and keeps them, the root sends
// each chunk once.
func TestChainPullThrough(t *testing.T) {
	root := newEngine(t, nil)
	relay := newEngine(t, nil, root)
	w := newEngine(t, nil, relay)
	data := randBlob(2<<20+77, 1)
	r := putBlob(t, root.mem, "x", data, 64<<10)
	if got := readBlob(t, w, r); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes at the worker")
	}
	m, err := relay.mem.Manifest(r.ID)
	if err != nil {
		t.Fatalf("relay did not keep the manifest: %v", err)
	}
	for i, h := range m.Chunks {
		if !relay.mem.HasChunk(h) {
			t.Fatalf("relay did not keep chunk %d", i)
		}
	}
	st := root.eng.Status()
	if st.BytesServed < uint64(len(data)) || st.BytesServed > uint64(len(data))+uint64(len(data))/20 {
		t.Fatalf("root served %d bytes for a %d-byte blob", st.BytesServed, len(data))
	}
	if ws := w.eng.Status(); ws.BytesFetched < uint64(len(data)) || ws.PeerErrors != 0 {
		t.Fatalf("worker status %+v", ws)
	}
}

// With no source a fetch fails at once with ErrNotFound.
func TestNoSource(t *testing.T) {
	w := newEngine(t, nil)
	r := putBlob(t, newEngine(t, nil).mem, "x", randBlob(1000, 2), blob.MinChunkSize)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.eng.Fetch(ctx, r); err == nil || !errorsIsNotFound(err) {
		t.Fatalf("fetch with no source: %v", err)
	}
}

// A request made for a peer never waits on a fetch that asks that very
// peer (it asks us because it lacks the chunk).
func TestJoinable(t *testing.T) {
	a, b := peer.ID("a"), peer.ID("b")
	for _, tc := range []struct {
		c     *chunkCall
		asker peer.ID
		want  bool
	}{
		{nil, "", false},
		{nil, a, false},
		{&chunkCall{src: a}, "", true},
		{&chunkCall{src: a}, b, true},
		{&chunkCall{src: a}, a, false},
	} {
		if got := joinable(tc.c, tc.asker); got != tc.want {
			t.Errorf("joinable(%+v, asker %q) = %v, want %v", tc.c, tc.asker, got, tc.want)
		}
	}
}

// A server answers a malformed request with an ERROR reply (tag 0) after
// the replies to the requests before it, closes the stream, and keeps
// serving.
func TestMalformedRequestOnTheWire(t *testing.T) {
	root := newEngine(t, nil)
	c := newTestHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Connect(ctx, peer.AddrInfo{ID: root.h.ID(), Addrs: root.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	fs, err := c.NewStream(ctx, root.h.ID(), ProtoFetch)
	if err != nil {
		t.Fatal(err)
	}
	r := sampleID()
	fs.Write(appendFetchRequest(nil, fetchRequest{Type: msgGet, Tag: 7, ID: r.ID, Index: 0, Hash: blob.HashChunk([]byte("zz"))}))
	fs.Write([]byte{0x99, 1, 2, 3})
	br := bufio.NewReader(fs)
	for _, want := range []struct {
		tag    uint32
		status byte
	}{{7, statusNotFound}, {0, statusError}} {
		var hdr [replyHeaderLen]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			t.Fatal(err)
		}
		tag, st, n := parseFetchReplyHeader(hdr)
		if err := checkReplyLen(st, n, blob.MaxChunkSize); err != nil || st != want.status || tag != want.tag {
			t.Fatalf("reply to tag %d status %d %v, want tag %d status %d", tag, st, err, want.tag, want.status)
		}
		io.CopyN(io.Discard, br, int64(n))
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("stream still open after a malformed request")
	}
	fs.Reset()
	if st := root.eng.Status(); st.PeerErrors != 1 {
		t.Fatalf("malformed request counted %d times, want 1", st.PeerErrors)
	}
	// Still serving.
	data := randBlob(9000, 1)
	rec := putBlob(t, root.mem, "ok", data, blob.MinChunkSize)
	w := newEngine(t, nil, root)
	if got := readBlob(t, w, rec); !bytes.Equal(got, data) {
		t.Fatal("engine stopped serving")
	}
}
