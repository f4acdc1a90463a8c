package transfer

import (
	"bytes"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

func FuzzDecodeFetchRequest(f *testing.F) {
	r := sampleID()
	f.Add(appendFetchRequest(nil, fetchRequest{Type: msgGet, ID: r.ID, Index: 3, Hash: blob.Hash{1}}))
	f.Add(appendFetchRequest(nil, fetchRequest{Type: msgReport, ID: r.ID, Index: 9, Hash: blob.Hash{2}}))
	f.Add(appendFetchRequest(nil, fetchRequest{Type: msgManifest, ID: r.ID}))
	f.Add([]byte{msgGet, 0, 0})
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
	f.Add(append(appendFetchReplyHeader(nil, statusOK, 2), 1, 2), blob.MaxChunkSize)
	f.Add(appendFetchReplyHeader(nil, statusError, 0), 1)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		limit = min(max(limit, 0), maxManifestBytes)
		st, body, err := decodeFetchReply(b, limit)
		if err != nil {
			return
		}
		if st > statusError || (st != statusOK && len(body) > maxErrorMsg) || (st == statusOK && len(body) > limit) {
			t.Fatal("reply over its limits")
		}
	})
}
