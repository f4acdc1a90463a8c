package transfer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/memstore"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
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
	fs.Write(fetchwire.AppendRequest(nil, fetchwire.Request{Type: fetchwire.MsgGet, Tag: 7, ID: r.ID, Index: 0, Hash: blob.HashChunk([]byte("zz"))}))
	fs.Write([]byte{0x99, 1, 2, 3})
	br := bufio.NewReader(fs)
	for _, want := range []struct {
		tag    uint32
		status byte
	}{{7, fetchwire.StatusNotFound}, {0, fetchwire.StatusError}} {
		var hdr [fetchwire.ReplyHeaderLen]byte
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			t.Fatal(err)
		}
		tag, st, n := fetchwire.ParseReplyHeader(hdr)
		if err := fetchwire.CheckReplyLen(st, n, blob.MaxChunkSize); err != nil || st != want.status || tag != want.tag {
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

// newEngineWith is newEngine with extra configuration.
func newEngineWith(t testing.TB, cfg func(*Config), from ...*engineNode) *engineNode {
	t.Helper()
	n := &engineNode{h: newTestHost(t), mem: memstore.New(), sources: &staticSources{}}
	for _, f := range from {
		n.h.Peerstore().AddAddrs(f.h.ID(), f.h.Addrs(), time.Hour)
		n.sources.list = append(n.sources.list, Source{ID: f.h.ID(), Kind: KindParent})
	}
	c := Config{Host: n.h, Store: n.mem, Sources: n.sources, DialTimeout: 2 * time.Second, RequestTimeout: 5 * time.Second}
	cfg(&c)
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	n.eng = e
	return n
}

// MaxUploadRate paces what a node sends.
func TestMaxUploadRate(t *testing.T) {
	const rateBps = 4 << 20
	root := newEngineWith(t, func(c *Config) { c.MaxUploadRate = rateBps })
	w := newEngine(t, nil, root)
	data := randBlob(6<<20, 21)
	r := putBlob(t, root.mem, "slow", data, 256<<10)
	start := time.Now()
	if got := readBlob(t, w, r); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	// 6 MiB at 4 MiB/s, less the burst (0.4 MiB): about 1.4 s.
	if el := time.Since(start); el < 1200*time.Millisecond {
		t.Fatalf("6 MiB sent in %v at a 4 MiB/s limit", el)
	}
}

// MaxUploadStreams refuses the fetch streams of peers that are neither
// children nor parents beyond the cap; others are served.
func TestMaxUploadStreams(t *testing.T) {
	src := newEngineWith(t, func(c *Config) { c.MaxUploadStreams = 1; c.StreamsPerPeer = 1 })
	data := randBlob(1<<20, 22)
	r := putBlob(t, src.mem, "x", data, 64<<10)
	a := newEngineWith(t, func(c *Config) { c.StreamsPerPeer = 1 }, src)
	if got := readBlob(t, a, r); !bytes.Equal(got, data) { // a's stream stays open
		t.Fatal("wrong bytes at a")
	}
	b := newEngineWith(t, func(c *Config) { c.StreamsPerPeer = 1 }, src)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.eng.Fetch(ctx, r); err == nil {
		t.Fatal("a second peer was served past the stream cap")
	}
	if st := src.eng.Status(); st.UploadsRefused == 0 {
		t.Fatalf("no refused stream counted: %+v", st)
	}
	// A parent (here: a peer the source counts as its parent) is served.
	src.sources.set(Source{ID: b.h.ID(), Kind: KindParent})
	if err := b.eng.Fetch(ctx, r); err != nil {
		t.Fatalf("a parent was refused: %v", err)
	}
}

// A source that is gone is named once in the error, which wraps
// blob.ErrUnreachable (the dial error used to be wrapped in the peer's
// name twice: "parent X: parent X: ...").
func TestUnreachableSourceNamedOnce(t *testing.T) {
	src := newEngine(t, nil)
	r := putBlob(t, src.mem, "gone", randBlob(64<<10, 23), 16<<10)
	w := newEngine(t, nil, src)
	who := src.sources.Describe(src.h.ID())
	src.eng.Close()
	if err := src.h.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := w.eng.Fetch(ctx, r)
	if !errors.Is(err, blob.ErrUnreachable) {
		t.Fatalf("fetch from a closed source: %v; want ErrUnreachable", err)
	}
	if n := strings.Count(err.Error(), who); n != 1 {
		t.Fatalf("the source is named %d times in %q; want once", n, err)
	}
}

// A server counts the chunk bytes it sends by what the asker is to it: a
// peer that asks with GET_SIBLING (its source kind for the server is
// KindSibling) as a sibling, any other peer as other. A server that speaks
// only 1.1.0 still serves a client that would ask with GET_SIBLING (a
// plain GET), and counts it as other.
func TestBytesOutBySiblingRequest(t *testing.T) {
	data := randBlob(5*blob.MinChunkSize+7, 3)
	read := func(server *engineNode, kind SourceKind) {
		t.Helper()
		rec := putBlob(t, server.mem, "b", data, blob.MinChunkSize)
		c := newEngine(t, nil, server)
		c.sources.set(Source{ID: server.h.ID(), Kind: kind})
		if got := readBlob(t, c, rec); !bytes.Equal(got, data) {
			t.Fatalf("read through a %v source: wrong bytes", kind)
		}
	}
	n := uint64(len(data))
	for _, tc := range []struct {
		kind   SourceKind
		old    bool // the server speaks only /omst/fetch/1.1.0
		counts string
	}{
		{KindSibling, false, "sibling"},
		{KindOther, false, "other"},
		{KindSibling, true, "other"},
	} {
		s := newEngine(t, nil)
		if tc.old {
			s.h.RemoveStreamHandler(ProtoFetch)
			s.h.RemoveStreamHandler(ProtoFetch130)
			s.h.RemoveStreamHandler(ProtoFetch120)
		}
		read(s, tc.kind)
		// The server counts a reply once it is written, which may be
		// after the reader has it: wait (bounded) for the count.
		out := s.eng.Status().BytesOut
		for deadline := time.Now().Add(5 * time.Second); out[tc.counts] < n && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			out = s.eng.Status().BytesOut
		}
		for k, v := range out {
			want := uint64(0)
			if k == tc.counts {
				want = n
			}
			if v != want {
				t.Errorf("asked as %v (server 1.1.0 only: %v): bytes_out %v, want %d bytes as %q only", tc.kind, tc.old, out, n, tc.counts)
				break
			}
		}
	}
}
