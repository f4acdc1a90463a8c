package fetchwire

import (
	"bytes"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
)

func FuzzDecodeFetchRequest(f *testing.F) {
	r := sampleID()
	f.Add(AppendRequest(nil, Request{Type: MsgGet, ID: r.ID, Index: 3, Hash: blob.Hash{1}}))
	f.Add(AppendRequest(nil, Request{Type: MsgReport, ID: r.ID, Index: 9, Hash: blob.Hash{2}}))
	f.Add(AppendRequest(nil, Request{Type: MsgManifest, ID: r.ID}))
	f.Add(AppendRequest(nil, Request{Type: MsgGetDirect, Tag: 3, ID: r.ID, Index: 1, Hash: blob.Hash{3}, Slow: true}))
	f.Add(AppendRequest(nil, Request{Type: MsgGet, Tag: 4, ID: r.ID, Index: 2, Hash: blob.Hash{4}, Sibling: true}))
	f.Add(AppendRequest(nil, Request{Type: MsgGetDirect, Tag: 5, ID: r.ID, Index: 1, Hash: blob.Hash{5}, Deflect: true}))
	f.Add([]byte{MsgGet, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := DecodeRequest(b)
		if err != nil {
			return
		}
		if (q.Type != MsgManifest && q.Hash.IsZero()) || (q.Deflect && (q.IfPresent || q.Type != MsgGetDirect)) || !bytes.Equal(AppendRequest(nil, q), b) {
			t.Fatal("fetch request not canonical")
		}
	})
}

func FuzzDecodeFetchReply(f *testing.F) {
	f.Add(append(AppendReplyHeader(nil, 1, StatusOK, 2), 1, 2), blob.MaxChunkSize)
	f.Add(AppendReplyHeader(nil, 2, StatusError, 0), 1)
	f.Add(append(AppendPieceHeader(nil, 3, 16384, 2), 7, 8), 1<<20)
	f.Add(append(AppendReplyHeader(nil, 4, StatusOutboard, 8), 0, 0, 1, 0, 0, 0, 0, 0), 1<<20)
	f.Add(append(AppendReplyHeader(nil, 5, StatusBusy, 4), AppendBusy(nil, 250*time.Millisecond)...), 1<<20)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		limit = min(max(limit, 0), MaxManifestBytes)
		_, st, body, err := DecodeReply(b, limit)
		if err != nil {
			return
		}
		if st > StatusBusy || (st == StatusBusy && len(body) != BusyBodyLen) || (st == StatusPiece && (len(body) <= PieceHeaderLen || len(body) > PieceHeaderLen+limit)) ||
			(st == StatusOutboard && len(body) > piece.OutboardLen(min(limit, blob.MaxChunkSize))) || (st == StatusRedirect && len(body) > MaxRedirectBody) ||
			((st == StatusNotFound || st == StatusError) && len(body) > MaxErrorMsg) || (st == StatusOK && len(body) > limit) {
			t.Fatal("reply over its limits")
		}
	})
}

func FuzzDecodeRedirect(f *testing.F) {
	f.Add(AppendRedirect(nil, Redirect{Peer: peer.ID("\x00\x03abc"), Addrs: []ma.Multiaddr{ma.StringCast("/ip4/1.2.3.4/tcp/5")}}))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRedirect(b)
		if err != nil {
			return
		}
		if len(r.Addrs) > maxRedirectAddrs || !bytes.Equal(AppendRedirect(nil, r), b) {
			t.Fatal("redirect not canonical or over its limits")
		}
	})
}

func FuzzDecodeBusy(f *testing.F) {
	f.Add(AppendBusy(nil, time.Second))
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeBusy(b)
		if err != nil {
			return
		}
		if d < time.Millisecond || d > MaxRetryAfter || !bytes.Equal(AppendBusy(nil, d), b) {
			t.Fatal("BUSY not canonical or over its limits")
		}
	})
}
