package blob

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ipfs/go-cid"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestSplitAndManifestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		size, cs, want int
	}{
		{0, MinChunkSize, 0},
		{1, MinChunkSize, 1},
		{MinChunkSize, MinChunkSize, 1},
		{MinChunkSize + 1, MinChunkSize, 2},
		{10*MinChunkSize - 3, MinChunkSize, 10},
		{3 << 20, DefaultChunkSize, 3},
	} {
		data := randBytes(tc.size, uint64(tc.size))
		var got []byte
		m, err := Split(bytes.NewReader(data), tc.cs, func(i int, h Hash, c []byte) error {
			if err := h.Verify(c); err != nil {
				t.Fatal(err)
			}
			if len(c) != (&Manifest{Size: uint64(tc.size), ChunkSize: uint32(tc.cs), Chunks: make([]Hash, tc.want)}).ChunkLen(i) {
				t.Fatalf("chunk %d has %d bytes", i, len(c))
			}
			got = append(got, c...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Chunks) != tc.want || m.Size != uint64(tc.size) || !bytes.Equal(got, data) {
			t.Fatalf("size %d: %d chunks, size %d", tc.size, len(m.Chunks), m.Size)
		}
		enc := m.Encode()
		back, err := VerifyManifest(m.CID(), enc)
		if err != nil {
			t.Fatal(err)
		}
		if back.Size != m.Size || back.ChunkSize != m.ChunkSize || len(back.Chunks) != len(m.Chunks) {
			t.Fatalf("round trip changed the manifest")
		}
		if m.CID().Version() != 1 || m.CID().Type() != cid.Raw {
			t.Fatalf("CID %s is not CIDv1 raw", m.CID())
		}
	}
}

func TestVerifyRejectsTampering(t *testing.T) {
	data := randBytes(5000, 7)
	h := HashChunk(data)
	data[100] ^= 1
	if err := h.Verify(data); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("tampered chunk: got %v, want ErrCorrupt", err)
	}
	m, _ := Split(bytes.NewReader(randBytes(9000, 8)), MinChunkSize, func(int, Hash, []byte) error { return nil })
	enc := m.Encode()
	id := m.CID()
	enc[len(enc)-1] ^= 1
	if _, err := VerifyManifest(id, enc); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("tampered manifest: got %v, want ErrCorrupt", err)
	}
}

func TestDecodeManifestRejects(t *testing.T) {
	good := (&Manifest{Size: 10, ChunkSize: MinChunkSize, Chunks: []Hash{{1}}}).Encode()
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, b := range map[string][]byte{
		"empty":       nil,
		"short":       good[:10],
		"magic":       mut(func(b []byte) []byte { b[0] = 'X'; return b }),
		"alg":         mut(func(b []byte) []byte { b[4] = 9; return b }),
		"reserved":    mut(func(b []byte) []byte { b[6] = 1; return b }),
		"chunk size":  mut(func(b []byte) []byte { b[8], b[9], b[10], b[11] = 0, 0, 0, 1; return b }),
		"count":       mut(func(b []byte) []byte { b[23] = 2; return b }),
		"trailing":    append(append([]byte(nil), good...), 0),
		"size/chunks": mut(func(b []byte) []byte { b[17] = 0xff; return b }),
	} {
		if _, err := DecodeManifest(b); !errors.Is(err, ErrBadManifest) {
			t.Errorf("%s: got %v, want ErrBadManifest", name, err)
		}
	}
}

func TestValidateName(t *testing.T) {
	valid := []string{"a", "shared/init", "run-1/out.dat", "日本/データ", strings.Repeat("x", MaxNameLen), "a.b/..c/.d"}
	invalid := []string{"", "/abs", "a/", "a//b", ".", "..", "a/./b", "a/../b", "nul\x00x", "tab\tx", "del\x7f",
		"c1\u0085", string([]byte{0xff, 0xfe}), strings.Repeat("x", MaxNameLen+1)}
	for _, n := range valid {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", n, err)
		}
	}
	for _, n := range invalid {
		if err := ValidateName(n); !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateName(%q) = %v, want ErrInvalidName", n, err)
		}
	}
	for _, p := range []string{"", "a/", "shared", "shared/x"} {
		if err := ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"/", "/a", "a//", "../"} {
		if err := ValidatePrefix(p); err == nil {
			t.Errorf("ValidatePrefix(%q) accepted", p)
		}
	}
}

func TestRecordRoundTripAndOrder(t *testing.T) {
	m := &Manifest{Size: 1, ChunkSize: MinChunkSize, Chunks: []Hash{HashChunk([]byte{1})}}
	r := Record{Name: "a/b", ID: m.CID(), Size: 1, Time: 42, Origin: "12D3KooWxyz"}
	back, err := DecodeRecord(r.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(r) {
		t.Fatalf("round trip: got %+v want %+v", back, r)
	}
	later := r
	later.Time++
	if !later.Newer(r) || r.Newer(later) || r.Newer(r) {
		t.Fatal("Newer ordering by time broken")
	}
	tie := r
	tie.Origin = "12D3KooWzzz"
	if !tie.Newer(r) {
		t.Fatal("Newer tie-break by origin broken")
	}
	bad := r
	bad.Name = "../x"
	if _, err := DecodeRecord(bad.Encode()); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("record with invalid name: %v", err)
	}
	enc := r.Encode()
	if _, err := DecodeRecord(enc[:len(enc)-1]); err == nil {
		t.Fatal("truncated record accepted")
	}
	// Version 1 had a via field after origin: still read, via returned
	// apart (for stores written before version 2).
	v1 := append([]byte{1}, enc[1:]...)
	v1 = append(v1, 0, 3, 'v', 'i', 'a')
	back, via, err := DecodeRecordV1(v1)
	if err != nil || !back.Equal(r) || via != "via" {
		t.Fatalf("version 1 record: %+v via %q %v", back, via, err)
	}
	if _, err := DecodeRecord(append([]byte{3}, enc[1:]...)); err == nil {
		t.Fatal("unknown record version accepted")
	}
}

// cutReader yields n bytes of data, then fails with err (returned with the
// last bytes if withData).
type cutReader struct {
	data     []byte
	err      error
	withData bool
}

func (r *cutReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p[:min(len(p), 1000)], r.data)
	r.data = r.data[n:]
	if len(r.data) == 0 && r.withData {
		return n, r.err
	}
	return n, nil
}

// TestSplitReaderErrorIsNotEnd: only a bare io.EOF from the reader ends the
// input; any other error, io.ErrUnexpectedEOF (bare or wrapped) and a
// wrapped io.EOF included, fails the split.
func TestSplitReaderErrorIsNotEnd(t *testing.T) {
	data := randBytes(3*MinChunkSize+100, 30)
	custom := errors.New("disk on fire")
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"wrapped ErrUnexpectedEOF", fmt.Errorf("put stream: %w", io.ErrUnexpectedEOF)},
		{"bare ErrUnexpectedEOF", io.ErrUnexpectedEOF},
		{"wrapped EOF", fmt.Errorf("connection: %w", io.EOF)},
		{"custom", custom},
	} {
		for _, withData := range []bool{false, true} {
			emitted := 0
			m, err := Split(&cutReader{data: data, err: tc.err, withData: withData}, MinChunkSize,
				func(int, Hash, []byte) error { emitted++; return nil })
			if err == nil || !errors.Is(err, tc.err) {
				t.Errorf("%s (with data %v): Split error %v, want the reader's error", tc.name, withData, err)
			}
			if m != nil {
				t.Errorf("%s (with data %v): Split returned a manifest of %d bytes", tc.name, withData, m.Size)
			}
		}
	}
	// io.EOF itself, with the last bytes or after them, is the end.
	for _, withData := range []bool{false, true} {
		m, err := Split(&cutReader{data: data, err: io.EOF, withData: withData}, MinChunkSize,
			func(int, Hash, []byte) error { return nil })
		if err != nil || m.Size != uint64(len(data)) || len(m.Chunks) != 4 {
			t.Fatalf("EOF (with data %v): %+v %v", withData, m, err)
		}
	}
}

func TestParseID(t *testing.T) {
	id := (&Manifest{Size: 1, ChunkSize: MinChunkSize, Chunks: []Hash{HashChunk([]byte{1})}}).CID()
	if got, ok := ParseID(id.String()); !ok || !got.Equals(id) {
		t.Fatalf("ParseID(%s) = %v, %v", id, got, ok)
	}
	sha := "bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy" // raw, SHA2-256
	for _, s := range []string{"", "results/a/1", "bafy", sha, "QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG"} {
		if _, ok := ParseID(s); ok {
			t.Errorf("ParseID(%q) took it for a blob ID", s)
		}
	}
}

// zeros reads as an endless stream of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// The chunk count is bounded by the chunk size (issue 24): a blob in
// chunks smaller than 1 MiB has at most 65,536 of them, any blob at most
// 4,194,304; a split over the bound stops as soon as it passes it, with
// an error that says which chunk size would do; a manifest over the bound
// does not decode.
func TestChunkBounds(t *testing.T) {
	for _, tc := range []struct {
		size uint64
		cs   int
		want string // "" = within the bounds
	}{
		{256 << 20, MinChunkSize, ""},
		{256<<20 + 1, MinChunkSize, "use a chunk size of 1 MiB or more"},
		{64 << 30, MinChunkSize, "use a chunk size of 1 MiB or more"},
		{4 << 30, 64 << 10, ""},
		{4<<30 + 1, 64 << 10, "exceeds 4 GiB (65536 chunks)"},
		{4 << 40, DefaultChunkSize, ""},
		{4<<40 + 1, DefaultChunkSize, "use a chunk size of 2 MiB or more"},
		{6 << 40, 512 << 10, "use a chunk size of 2 MiB or more"},
		{256 << 40, MaxChunkSize, ""},
		{256<<40 + 1, MaxChunkSize, "no blob may exceed 256 TiB"},
	} {
		err := CheckSize(tc.size, tc.cs)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%d bytes in chunks of %d: %v", tc.size, tc.cs, err)
		case tc.want != "" && (!errors.Is(err, ErrTooBig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%d bytes in chunks of %d: %v, want ErrTooBig saying %q", tc.size, tc.cs, err, tc.want)
		}
	}
	if MaxChunksFor(BigChunkSize-1) != MaxSmallChunks || MaxChunksFor(BigChunkSize) != MaxChunks ||
		EncodedManifestLen(MaxSmallChunks) != 2<<20+24 || MaxManifestLen != 128<<20+24 {
		t.Fatal("bounds")
	}

	// A stream of zeros in 4 KiB chunks: refused once past 256 MiB.
	chunks := 0
	_, err := Split(io.LimitReader(zeros{}, 64<<30), MinChunkSize, func(int, Hash, []byte) error { chunks++; return nil })
	if !errors.Is(err, ErrTooBig) || !strings.Contains(err.Error(), "1 MiB or more") || chunks != MaxSmallChunks {
		t.Fatalf("split of 64 GiB of zeros in 4 KiB chunks: %d chunks emitted, %v", chunks, err)
	}
	// Exactly at the bound: fine.
	m, err := Split(io.LimitReader(zeros{}, MaxSmallChunks*MinChunkSize), MinChunkSize, func(int, Hash, []byte) error { return nil })
	if err != nil || len(m.Chunks) != MaxSmallChunks {
		t.Fatalf("split at the bound: %v", err)
	}
	if _, err := DecodeManifest(m.Encode()); err != nil {
		t.Fatalf("a manifest at the bound: %v", err)
	}
	// One chunk more does not decode, nor check.
	big := &Manifest{Size: m.Size + 1, ChunkSize: MinChunkSize, Chunks: append(slices.Clone(m.Chunks), m.Chunks[0])}
	if err := big.Check(); !errors.Is(err, ErrBadManifest) {
		t.Fatalf("check of %d small chunks: %v", len(big.Chunks), err)
	}
	if _, err := DecodeManifest(big.Encode()); !errors.Is(err, ErrBadManifest) || !strings.Contains(err.Error(), "65537 chunks of 4096 bytes") {
		t.Fatalf("decode of %d small chunks: %v", len(big.Chunks), err)
	}
}
