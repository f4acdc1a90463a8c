package transfer

import (
	"errors"
	"testing"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

func sampleID() blob.Record {
	m := &blob.Manifest{Size: 1, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{7}}}
	return blob.Record{Name: "a/b", ID: m.CID(), Size: 1}
}

func TestWireRoundTrip(t *testing.T) {
	r := sampleID()
	for _, q := range []fetchRequest{
		{Type: msgGet, ID: r.ID, Index: 77, Hash: blob.HashChunk([]byte("x"))},
		{Type: msgReport, ID: r.ID, Index: 3, Hash: blob.HashChunk([]byte("y"))},
		{Type: msgManifest, ID: r.ID},
	} {
		enc := appendFetchRequest(nil, q)
		back, err := decodeFetchRequest(enc)
		if err != nil || back != q {
			t.Fatalf("fetch request %+v: %+v %v", q, back, err)
		}
		if enc[0] != q.Type {
			t.Fatalf("request type 0x%02x, want 0x%02x", enc[0], q.Type)
		}
	}
	st, body, err := decodeFetchReply(append(appendFetchReplyHeader(nil, statusOK, 3), 1, 2, 3), blob.MaxChunkSize)
	if err != nil || st != statusOK || len(body) != 3 {
		t.Fatal(st, body, err)
	}
}

func TestWireRejects(t *testing.T) {
	r := sampleID()
	for name, b := range map[string][]byte{
		"huge CID length": {msgGet, 0xff, 0xff},
		"unknown type":    {0x99, 0, 0},
		"zero hash":       appendFetchRequest(nil, fetchRequest{Type: msgGet, ID: r.ID}),
		"truncated":       appendFetchRequest(nil, fetchRequest{Type: msgGet, ID: r.ID, Hash: blob.Hash{1}})[:10],
		"trailing":        append(appendFetchRequest(nil, fetchRequest{Type: msgManifest, ID: r.ID}), 0),
	} {
		if _, err := decodeFetchRequest(b); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, tc := range map[string]struct {
		b     []byte
		limit int
	}{
		"oversize chunk":    {appendFetchReplyHeader(nil, statusOK, blob.MaxChunkSize+1), blob.MaxChunkSize},
		"oversize report":   {appendFetchReplyHeader(nil, statusOK, 2), msgReportLimit()},
		"oversize manifest": {appendFetchReplyHeader(nil, statusOK, maxManifestBytes+1), maxManifestBytes},
		"oversize message":  {appendFetchReplyHeader(nil, statusError, maxErrorMsg+1), blob.MaxChunkSize},
		"unknown status":    {appendFetchReplyHeader(nil, 9, 0), blob.MaxChunkSize},
	} {
		if _, _, err := decodeFetchReply(tc.b, tc.limit); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func msgReportLimit() int { return fetchRequest{Type: msgReport}.replyLimit() }
