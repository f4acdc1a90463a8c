package cache

import (
	"bytes"
	"errors"
	"sync"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

// TestReadOfPunchedRangeNotDamage: bytes read from a blob file's range
// that was punched out under the reader (the chunk moved to a chunk file
// by PromoteChunk, or evicted) read as zeros; the store must not take
// them for damage and drop the chunk where it is now. damagedRead says the
// chunk moved (errMoved, not blob.ErrCorrupt), the chunk stays, reads
// right, and no chunk is counted damaged. Before, the read's mismatch
// dropped the chunk by its hash: its good chunk file went with it.
func TestReadOfPunchedRangeNotDamage(t *testing.T) {
	const cs = 256 << 10
	s := openStore(t, t.TempDir(), 1<<30)
	data := randBytes(4*cs, 77)
	rec, err := putFile(t, s, "moved/a", data, cs)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	h := m.Chunks[1]
	f, loc, size, err := s.openChunkLoc(h)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if loc.bf == nil {
		t.Fatalf("chunk 1 of a put is in a chunk file; want the put's blob file")
	}
	if err := s.PromoteChunk(h); err != nil { // punches its range out of the blob file
		t.Fatal(err)
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, loc.off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, make([]byte, size)) {
		t.Fatalf("the promoted chunk's range still holds bytes: not punched (test premise)")
	}
	err = s.checkRead(loc, buf)
	if !errors.Is(err, errMoved) || errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("checkRead of a punched range: %v, want errMoved and not ErrCorrupt", err)
	}
	got, err := s.ReadChunk(h)
	if err != nil || !bytes.Equal(got, data[cs:2*cs]) {
		t.Fatalf("ReadChunk after: err %v, right bytes %v", err, bytes.Equal(got, data[cs:2*cs]))
	}
	if d := s.Usage().DamagedChunks; d != 0 {
		t.Fatalf("%d chunks counted damaged, want 0", d)
	}
}

// TestConcurrentPromotionsKeepChunks: many GET_FDs of a blob just put
// (each promotes every chunk it hands out, PromoteChunk) and readers at
// once: every call succeeds with the right bytes and no chunk is dropped.
// Before, a PromoteChunk that read a range another had just punched out
// dropped the chunk (and its new chunk file): the examples' parameter
// sweep failed in CI with "content does not match its hash" on a blob its
// own daemon had put a second earlier.
func TestConcurrentPromotionsKeepChunks(t *testing.T) {
	const cs = 64 << 10
	const chunks = 32
	for round := 0; round < 4; round++ {
		s := openStore(t, t.TempDir(), 1<<30)
		data := randBytes(chunks*cs, uint64(round))
		rec, err := putFile(t, s, "moved/b", data, cs)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.Manifest(rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8*chunks)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i, h := range m.Chunks {
					var err error
					if g%2 == 0 {
						err = s.PromoteChunk(h)
					} else {
						var b []byte
						if b, err = s.ReadChunk(h); err == nil && !bytes.Equal(b, data[i*cs:(i+1)*cs]) {
							err = errors.New("wrong bytes")
						}
					}
					if err != nil {
						errs <- err
					}
				}
			}(g)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		if d := s.Usage().DamagedChunks; d != 0 {
			t.Fatalf("round %d: %d chunks counted damaged, want 0", round, d)
		}
		for i, h := range m.Chunks {
			if b, err := s.ReadChunk(h); err != nil || !bytes.Equal(b, data[i*cs:(i+1)*cs]) {
				t.Fatalf("round %d: chunk %d after: %v", round, i, err)
			}
		}
	}
}
