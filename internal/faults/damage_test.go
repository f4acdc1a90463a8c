package faults

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

func tempFile(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDamageFlip(t *testing.T) {
	data := bytes.Repeat([]byte{0x55}, 4096)
	p := tempFile(t, data)
	desc, err := Damage(p, Flip, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if len(got) != len(data) {
		t.Fatalf("flip changed the size: %d", len(got))
	}
	diff := 0
	for i := range got {
		if got[i] != data[i] {
			diff++
			if x := got[i] ^ data[i]; x&(x-1) != 0 {
				t.Fatalf("byte %d: more than one bit flipped (%08b)", i, x)
			}
		}
	}
	if diff < 1 || diff > 4 {
		t.Fatalf("%d bytes changed, want 1..4 (%s)", diff, desc)
	}
	if blob.HashChunk(got) == blob.HashChunk(data) {
		t.Fatal("hash unchanged")
	}
}

func TestDamageTruncateDelete(t *testing.T) {
	data := []byte(strings.Repeat("x", 1000))
	p := tempFile(t, data)
	if _, err := Damage(p, Truncate, rand.New(rand.NewPCG(3, 4))); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if len(got) >= len(data) || !bytes.HasPrefix(data, got) {
		t.Fatalf("truncate left %d bytes", len(got))
	}
	if _, err := Damage(p, Delete, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("delete: %v", err)
	}
	empty := tempFile(t, nil)
	for _, k := range []DamageKind{Flip, Truncate} {
		if _, err := Damage(empty, k, rand.New(rand.NewPCG(5, 6))); err == nil {
			t.Fatalf("%s of an empty file succeeded", k)
		}
	}
}

func TestDamageReplays(t *testing.T) {
	data := bytes.Repeat([]byte{0}, 1<<16)
	a, b := tempFile(t, data), tempFile(t, data)
	Damage(a, Flip, rand.New(rand.NewPCG(7, 8)))
	Damage(b, Flip, rand.New(rand.NewPCG(7, 8)))
	ga, _ := os.ReadFile(a)
	gb, _ := os.ReadFile(b)
	if !bytes.Equal(ga, gb) {
		t.Fatal("the same seed damaged differently")
	}
}

func TestChunkLayout(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	data = append(data, 'z')
	hs := ChunkHashes(data, 1<<20)
	if len(hs) != 2 || hs[1] != blob.HashChunk([]byte("z")) {
		t.Fatalf("chunk hashes %v", hs)
	}
	p := ChunkPath("/h", hs[1])
	x := hs[1].String()
	if p != "/h/cache/chunks/"+x[:2]+"/"+x {
		t.Fatalf("chunk path %s", p)
	}
	if IndexDir("/h") != "/h/cache/index" {
		t.Fatal(IndexDir("/h"))
	}
}

func TestDamageIndex(t *testing.T) {
	home := t.TempDir()
	idx := IndexDir(home)
	os.MkdirAll(idx, 0o755)
	for _, n := range []string{"MANIFEST", "000001.vlog", "000001.sst", "EMPTY"} {
		data := bytes.Repeat([]byte{0xaa}, 512)
		if n == "EMPTY" {
			data = nil
		}
		os.WriteFile(filepath.Join(idx, n), data, 0o644)
	}
	desc, err := DamageIndex(home, false, rand.New(rand.NewPCG(9, 10)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(desc, "EMPTY") {
		t.Fatalf("damaged an empty file: %s", desc)
	}
	if _, err := DamageIndex(home, true, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(idx); !os.IsNotExist(err) {
		t.Fatalf("index still there: %v", err)
	}
}

// TestFindChunkLayouts: FindChunk finds a chunk in its chunk file, in a
// file of the whole blob at its offset, and in blob files of another
// layout (a put's chunks in several files of the store's own: wherever its
// bytes are); a whole-blob file given as known is taken where it still
// holds the chunk, and as where it was once nothing holds it any more.
func TestFindChunkLayouts(t *testing.T) {
	const cs = 64 << 10
	data := make([]byte, 5*cs+100)
	rng := rand.New(rand.NewPCG(26, 1))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	hs := ChunkHashes(data, cs)
	home := t.TempDir()
	blobs := filepath.Join(home, storeDir, blobDir)
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := FindChunk(home, hs, data, cs, 2, ""); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("empty store: %v", err)
	}
	// Several files of a store's own layout: chunks 0-2, then 3-5.
	segs := []string{filepath.Join(blobs, "b.0"), filepath.Join(blobs, "b.1")}
	os.WriteFile(segs[0], data[:3*cs], 0o644)
	os.WriteFile(segs[1], data[3*cs:], 0o644)
	for ci, want := range []struct {
		path string
		off  int64
	}{{segs[0], 0}, {segs[0], cs}, {segs[0], 2 * cs}, {segs[1], 0}, {segs[1], cs}, {segs[1], 2 * cs}} {
		p, off, n, err := FindChunk(home, hs, data, cs, ci, "")
		wantN := int64(min(cs, len(data)-ci*cs))
		if err != nil || p != want.path || off != want.off || n != wantN {
			t.Errorf("chunk %d in segments: %s %d %d %v; want %s %d %d", ci, p, off, n, err, want.path, want.off, wantN)
		}
	}
	// A whole-blob file, and a chunk file for chunk 1.
	os.Remove(segs[0])
	os.Remove(segs[1])
	whole := filepath.Join(blobs, "blob-1")
	os.WriteFile(whole, data, 0o644)
	if p, off, _, err := FindChunk(home, hs, data, cs, 4, ""); err != nil || p != whole || off != 4*cs {
		t.Errorf("whole-blob file: %s %d %v", p, off, err)
	}
	cp := ChunkPath(home, hs[1])
	os.MkdirAll(filepath.Dir(cp), 0o755)
	os.WriteFile(cp, data[cs:2*cs], 0o644)
	if p, off, n, err := FindChunk(home, hs, data, cs, 1, whole); err != nil || p != cp || off != 0 || n != cs {
		t.Errorf("chunk file: %s %d %d %v", p, off, n, err)
	}
	// Chunk 3 damaged in the whole-blob file: found no more by its bytes,
	// it is where known says.
	b := bytes.Clone(data)
	b[3*cs+5] ^= 1
	os.WriteFile(whole, b, 0o644)
	if p, off, _, err := FindChunk(home, hs, data, cs, 3, whole); err != nil || p != whole || off != 3*cs {
		t.Errorf("damaged, known: %s %d %v", p, off, err)
	}
	if _, _, _, err := FindChunk(home, hs, data, cs, 3, ""); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("damaged, nothing known: %v", err)
	}
}
