package cache

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
)

type blobID = cid.Cid

// randBytes returns n deterministic pseudo-random bytes.
func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 99))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b[:n]
}

func openStore(t testing.TB, dir string, maxBytes int64) *Store {
	t.Helper()
	s, err := Open(dir, Options{MaxBytes: maxBytes})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// putChunk stores random bytes of size n and returns their hash.
func putChunk(t testing.TB, s *Store, n int, seed uint64) blob.Hash {
	t.Helper()
	data := randBytes(n, seed)
	h := blob.HashChunk(data)
	if err := s.PutChunk(h, data); err != nil {
		t.Fatalf("PutChunk(seed %d): %v", seed, err)
	}
	return h
}

// countFiles counts regular files under dir.
func countFiles(t testing.TB, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// readBlob reassembles a blob from the store.
func readBlob(t testing.TB, s *Store, m *blob.Manifest) []byte {
	t.Helper()
	out := make([]byte, 0, m.Size)
	for i, h := range m.Chunks {
		c, err := s.ReadChunk(h)
		if err != nil {
			t.Fatalf("ReadChunk %d: %v", i, err)
		}
		if len(c) != m.ChunkLen(i) {
			t.Fatalf("chunk %d: %d bytes, want %d", i, len(c), m.ChunkLen(i))
		}
		out = append(out, c...)
	}
	return out
}

// chunkAt returns the file that holds chunk h (a chunk file, or a blob
// file: a put's or a get's) and the chunk's offset there.
func chunkAt(t testing.TB, s *Store, h blob.Hash) (string, int64) {
	t.Helper()
	f, off, _, err := s.OpenChunkAt(h)
	if err != nil {
		t.Fatalf("chunk %s: %v", h, err)
	}
	defer f.Close()
	return f.Name(), off
}

// flipAt flips the bits of the byte at off in the file at path.
func flipAt(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// punchHole deallocates n bytes at off in the file at path (as the store
// punches a chunk out of a blob file).
func punchHole(path string, off, n int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return punchHoleFile(f, off, n)
}
