package fetchwire

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

func sampleID() blob.Record {
	m := &blob.Manifest{Size: 1, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{7}}}
	return blob.Record{Name: "a/b", ID: m.CID(), Size: 1}
}

func TestWireRoundTrip(t *testing.T) {
	r := sampleID()
	for _, q := range []Request{
		{Type: MsgGet, Tag: 1, ID: r.ID, Index: 77, Hash: blob.HashChunk([]byte("x"))},
		{Type: MsgReport, Tag: 1 << 31, ID: r.ID, Index: 3, Hash: blob.HashChunk([]byte("y"))},
		{Type: MsgManifest, Tag: 3, ID: r.ID},
		{Type: MsgGetDirect, Tag: 4, ID: r.ID, Index: 5, Hash: blob.HashChunk([]byte("z")), Failed: samplePeer(t)},
		{Type: MsgGetDirect, Tag: 5, ID: r.ID, Index: 5, Hash: blob.HashChunk([]byte("z"))},
		{Type: MsgGetDirect, Tag: 6, ID: r.ID, Index: 5, Hash: blob.HashChunk([]byte("z")), Failed: samplePeer(t), Slow: true, IfPresent: true},
		{Type: MsgGetDirect, Tag: 7, ID: r.ID, Index: 5, Hash: blob.HashChunk([]byte("z")), IfPresent: true},
		{Type: MsgGet, Tag: 8, ID: r.ID, Index: 6, Hash: blob.HashChunk([]byte("s")), Sibling: true},
		{Type: MsgGetDirect, Tag: 9, ID: r.ID, Index: 5, Hash: blob.HashChunk([]byte("z")), Failed: samplePeer(t), Deflect: true},
		{Type: MsgGetDirect, Tag: 10, ID: r.ID, Index: 5, Hash: blob.HashChunk([]byte("z")), Deflect: true, Slow: true},
	} {
		enc := AppendRequest(nil, q)
		back, err := DecodeRequest(enc)
		if err != nil || back != q {
			t.Fatalf("fetch request %+v: %+v %v", q, back, err)
		}
		want := q.Type
		if q.Sibling {
			want = MsgGetSibling
		}
		if enc[0] != want {
			t.Fatalf("request type 0x%02x, want 0x%02x", enc[0], want)
		}
	}
	tag, st, body, err := DecodeReply(append(AppendReplyHeader(nil, 9, StatusOK, 3), 1, 2, 3), blob.MaxChunkSize)
	if err != nil || tag != 9 || st != StatusOK || len(body) != 3 {
		t.Fatal(tag, st, body, err)
	}
	rd := Redirect{Peer: samplePeer(t), Addrs: []ma.Multiaddr{ma.StringCast("/ip4/10.1.0.3/tcp/4040"), ma.StringCast("/ip6/::1/udp/9/quic-v1")}}
	back, err := DecodeRedirect(AppendRedirect(nil, rd))
	if err != nil || back.Peer != rd.Peer || len(back.Addrs) != 2 || !back.Addrs[1].Equal(rd.Addrs[1]) {
		t.Fatalf("redirect: %+v %v", back, err)
	}
}

func samplePeer(t testing.TB) peer.ID {
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestWireRejects(t *testing.T) {
	r := sampleID()
	for name, b := range map[string][]byte{
		"huge CID length":    {MsgGet, 0, 0, 0, 1, 0xff, 0xff},
		"unknown type":       {0x99, 0, 0, 0, 0, 0, 0},
		"long peer ID":       append(AppendRequest(nil, Request{Type: MsgGetDirect, ID: r.ID, Hash: blob.Hash{1}})[:reqHeaderLen+len(r.ID.Bytes())+4+blob.HashSize+1], 200),
		"unknown flags":      withByte(AppendRequest(nil, Request{Type: MsgGetDirect, ID: r.ID, Hash: blob.Hash{1}}), reqHeaderLen+len(r.ID.Bytes())+4+blob.HashSize, 0x80),
		"unknown flag 8":     withByte(AppendRequest(nil, Request{Type: MsgGetDirect, ID: r.ID, Hash: blob.Hash{1}}), reqHeaderLen+len(r.ID.Bytes())+4+blob.HashSize, 0x08),
		"deflected hedge":    withByte(AppendRequest(nil, Request{Type: MsgGetDirect, ID: r.ID, Hash: blob.Hash{1}}), reqHeaderLen+len(r.ID.Bytes())+4+blob.HashSize, 0x06),
		"zero hash":          AppendRequest(nil, Request{Type: MsgGet, ID: r.ID}),
		"sibling, zero hash": AppendRequest(nil, Request{Type: MsgGet, ID: r.ID, Sibling: true}),
		"sibling, truncated": AppendRequest(nil, Request{Type: MsgGet, ID: r.ID, Hash: blob.Hash{1}, Sibling: true})[:20],
		"truncated":          AppendRequest(nil, Request{Type: MsgGet, ID: r.ID, Hash: blob.Hash{1}})[:10],
		"trailing":           append(AppendRequest(nil, Request{Type: MsgManifest, ID: r.ID}), 0),
	} {
		if _, err := DecodeRequest(b); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, tc := range map[string]struct {
		b     []byte
		limit int
	}{
		"oversize chunk":    {AppendReplyHeader(nil, 1, StatusOK, blob.MaxChunkSize+1), blob.MaxChunkSize},
		"oversize report":   {AppendReplyHeader(nil, 1, StatusOK, 2), msgReportLimit()},
		"oversize manifest": {AppendReplyHeader(nil, 1, StatusOK, MaxManifestBytes+1), MaxManifestBytes},
		"oversize message":  {AppendReplyHeader(nil, 1, StatusError, MaxErrorMsg+1), blob.MaxChunkSize},
		"oversize redirect": {AppendReplyHeader(nil, 1, StatusRedirect, MaxRedirectBody+1), blob.MaxChunkSize},
		"unknown status":    {AppendReplyHeader(nil, 1, 9, 0), blob.MaxChunkSize},
		"short busy":        {append(AppendReplyHeader(nil, 1, StatusBusy, 3), 0, 0, 1), blob.MaxChunkSize},
		"long busy":         {append(AppendReplyHeader(nil, 1, StatusBusy, 5), 0, 0, 0, 1, 0), blob.MaxChunkSize},
	} {
		if _, _, _, err := DecodeReply(tc.b, tc.limit); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, b := range map[string][]byte{
		"empty":          {},
		"bad peer":       {3, 1, 2, 3, 0},
		"too many addrs": append(AppendRedirect(nil, Redirect{Peer: samplePeer(t)})[:1+38], 9),
		"trailing":       append(AppendRedirect(nil, Redirect{Peer: samplePeer(t)}), 0),
	} {
		if _, err := DecodeRedirect(b); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("redirect %s: %v", name, err)
		}
	}
}

func msgReportLimit() int { return Request{Type: MsgReport}.ReplyLimit() }

// withByte returns b with byte i set to v.
func withByte(b []byte, i int, v byte) []byte {
	b[i] = v
	return b
}

// TestWireVectors pins 1.4.0's new bytes: a GET_DIRECT's deflect flag
// (bit 2) and the BUSY reply (status 6, retry-after u32 milliseconds).
func TestWireVectors(t *testing.T) {
	r := sampleID()
	idb := r.ID.Bytes()
	q := Request{Type: MsgGetDirect, Tag: 0x01020304, ID: r.ID, Index: 9, Hash: blob.Hash{0xaa}, Deflect: true}
	enc := AppendRequest(nil, q)
	flags := reqHeaderLen + len(idb) + 4 + blob.HashSize
	if len(enc) != flags+2 || enc[0] != 0x23 || enc[flags] != 0x04 || enc[flags+1] != 0 {
		t.Fatalf("GET_DIRECT deflect: % x", enc)
	}
	if !q.Deflectable() || (Request{Type: MsgGetDirect}).Deflectable() || (Request{Type: MsgGet, Deflect: true}).Deflectable() {
		t.Fatal("Deflectable")
	}
	rep := append(AppendReplyHeader(nil, 7, StatusBusy, BusyBodyLen), AppendBusy(nil, 1500*time.Millisecond)...)
	want := []byte{0, 0, 0, 7, 6, 0, 0, 0, 4, 0, 0, 0x05, 0xdc}
	if !bytes.Equal(rep, want) {
		t.Fatalf("BUSY reply % x, want % x", rep, want)
	}
	tag, st, body, err := DecodeReply(rep, blob.MaxChunkSize)
	if err != nil || tag != 7 || st != StatusBusy {
		t.Fatal(tag, st, err)
	}
	if d, err := DecodeBusy(body); err != nil || d != 1500*time.Millisecond {
		t.Fatal(d, err)
	}
	// The encoder clamps; the decoder refuses 0 and more than MaxRetryAfter.
	if d, _ := DecodeBusy(AppendBusy(nil, time.Hour)); d != MaxRetryAfter {
		t.Fatal(d)
	}
	if d, _ := DecodeBusy(AppendBusy(nil, 0)); d != time.Millisecond {
		t.Fatal(d)
	}
	for _, b := range [][]byte{{0, 0, 0, 0}, {0, 0, 0x27, 0x11}, {0, 1}, {0, 0, 0, 1, 0}} {
		if _, err := DecodeBusy(b); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("BUSY body % x: %v", b, err)
		}
	}
}
