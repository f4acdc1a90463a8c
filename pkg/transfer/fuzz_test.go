package transfer

import (
	"bytes"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/pkg/blob"
)

func FuzzDecodeFetchRequest(f *testing.F) {
	r := sampleID()
	f.Add(appendFetchRequest(nil, fetchRequest{Type: msgGet, ID: r.ID, Index: 3, Hash: blob.Hash{1}}))
	f.Add(appendFetchRequest(nil, fetchRequest{Type: msgReport, ID: r.ID, Index: 9, Hash: blob.Hash{2}}))
	f.Add(appendFetchRequest(nil, fetchRequest{Type: msgManifest, ID: r.ID}))
	f.Add(appendFetchRequest(nil, fetchRequest{Type: msgGetDirect, Tag: 3, ID: r.ID, Index: 1, Hash: blob.Hash{3}, Slow: true}))
	f.Add(appendFetchRequest(nil, fetchRequest{Type: msgGet, Tag: 4, ID: r.ID, Index: 2, Hash: blob.Hash{4}, Sibling: true}))
	f.Add([]byte{msgGet, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := decodeFetchRequest(b)
		if err != nil {
			return
		}
		if (q.Type != msgManifest && q.Hash.IsZero()) || !bytes.Equal(appendFetchRequest(nil, q), b) {
			t.Fatal("fetch request not canonical")
		}
	})
}

func FuzzDecodeFetchReply(f *testing.F) {
	f.Add(append(appendFetchReplyHeader(nil, 1, statusOK, 2), 1, 2), blob.MaxChunkSize)
	f.Add(appendFetchReplyHeader(nil, 2, statusError, 0), 1)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		limit = min(max(limit, 0), maxManifestBytes)
		_, st, body, err := decodeFetchReply(b, limit)
		if err != nil {
			return
		}
		if st > statusRedirect || (st == statusRedirect && len(body) > maxRedirectBody) ||
			(st != statusOK && st != statusRedirect && len(body) > maxErrorMsg) || (st == statusOK && len(body) > limit) {
			t.Fatal("reply over its limits")
		}
	})
}

func FuzzDecodeRedirect(f *testing.F) {
	f.Add(appendRedirect(nil, redirect{Peer: peer.ID("\x00\x03abc"), Addrs: []ma.Multiaddr{ma.StringCast("/ip4/1.2.3.4/tcp/5")}}))
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRedirect(b)
		if err != nil {
			return
		}
		if len(r.Addrs) > maxRedirectAddrs || !bytes.Equal(appendRedirect(nil, r), b) {
			t.Fatal("redirect not canonical or over its limits")
		}
	})
}
