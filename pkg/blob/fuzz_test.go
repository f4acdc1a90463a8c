package blob

import (
	"bytes"
	"testing"
)

func FuzzDecodeManifest(f *testing.F) {
	f.Add((&Manifest{Size: 10, ChunkSize: MinChunkSize, Chunks: []Hash{{1}}}).Encode())
	f.Add((&Manifest{ChunkSize: DefaultChunkSize}).Encode())
	f.Add([]byte("OMF1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			return
		}
		if !bytes.Equal(m.Encode(), b) {
			t.Fatalf("decode/encode not canonical")
		}
		for i := range m.Chunks {
			if m.ChunkLen(i) <= 0 || m.ChunkLen(i) > int(m.ChunkSize) {
				t.Fatalf("chunk %d length %d", i, m.ChunkLen(i))
			}
		}
	})
}

func FuzzDecodeRecord(f *testing.F) {
	m := &Manifest{Size: 1, ChunkSize: MinChunkSize, Chunks: []Hash{{2}}}
	f.Add(Record{Name: "a/b", ID: m.CID(), Size: 1, Time: 5, Origin: "p"}.Encode())
	f.Add([]byte{1, 0, 1, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			return
		}
		if ValidateName(r.Name) != nil {
			t.Fatalf("decoded invalid name %q", r.Name)
		}
		if _, err := DecodeRecord(r.Encode()); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
	})
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", "a/b", "/a", "a/../b", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateName(s) == nil && (len(s) == 0 || len(s) > MaxNameLen || s[0] == '/' || bytes.Contains([]byte(s), []byte{0})) {
			t.Fatalf("accepted %q", s)
		}
	})
}
