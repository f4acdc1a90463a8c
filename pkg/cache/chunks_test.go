package cache

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

func TestChunkPutReadHas(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	data := randBytes(100_000, 1)
	h := blob.HashChunk(data)
	if s.HasChunk(h) {
		t.Fatal("HasChunk before put")
	}
	if _, err := s.ReadChunk(h); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("ReadChunk before put: %v, want ErrNotFound", err)
	}
	if err := s.PutChunk(h, data); err != nil {
		t.Fatal(err)
	}
	if !s.HasChunk(h) {
		t.Fatal("HasChunk after put")
	}
	got, err := s.ReadChunk(h)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("ReadChunk: %v, equal=%v", err, bytes.Equal(got, data))
	}
	buf := make([]byte, 200_000)
	n, err := s.ReadChunkInto(h, buf)
	if err != nil || n != len(data) || !bytes.Equal(buf[:n], data) {
		t.Fatalf("ReadChunkInto: n=%d err=%v", n, err)
	}
	if _, err := s.ReadChunkInto(h, buf[:1000]); !errors.Is(err, io.ErrShortBuffer) {
		t.Fatalf("ReadChunkInto short buffer: %v", err)
	}
	f, size, err := s.OpenChunk(h)
	if err != nil || size != int64(len(data)) {
		t.Fatalf("OpenChunk: size %d err %v", size, err)
	}
	all, _ := io.ReadAll(f)
	f.Close()
	if !bytes.Equal(all, data) {
		t.Fatal("OpenChunk content differs")
	}
	if _, err := os.Stat(filepath.Join(dir, "chunks", h.String()[:2], h.String())); err != nil {
		t.Fatalf("chunk file not at its sharded path: %v", err)
	}

	// Idempotent.
	before := s.Usage()
	if err := s.PutChunk(h, data); err != nil {
		t.Fatal(err)
	}
	if u := s.Usage(); u != before || u.Chunks != 1 || u.UsedBytes != int64(len(data)) {
		t.Fatalf("usage after second put %+v, before %+v", u, before)
	}

	// Corrupt data is rejected and leaves nothing.
	bad := randBytes(5000, 2)
	hb := blob.HashChunk(bad)
	bad[17] ^= 0x40
	if err := s.PutChunk(hb, bad); !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("corrupt put: %v, want ErrCorrupt", err)
	}
	if s.HasChunk(hb) || s.Usage().Chunks != 1 {
		t.Fatal("corrupt chunk stored")
	}
	if n := countFiles(t, filepath.Join(dir, "chunks")) + countFiles(t, filepath.Join(dir, "tmp")); n != 1 {
		t.Fatalf("%d files on disk, want 1", n)
	}
}

func TestReadChunkMissingFileDropsEntry(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	h := putChunk(t, s, 10_000, 3)
	if err := os.Remove(s.chunkPath(h)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadChunk(h); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("ReadChunk of a deleted file: %v, want ErrNotFound", err)
	}
	if s.HasChunk(h) || s.Usage().UsedBytes != 0 || s.Usage().Chunks != 0 {
		t.Fatalf("entry kept after its file vanished: %+v", s.Usage())
	}
	// A truncated file is dropped too.
	h2 := putChunk(t, s, 10_000, 4)
	if err := os.Truncate(s.chunkPath(h2), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadChunk(h2); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("ReadChunk of a truncated file: %v, want ErrNotFound", err)
	}
	if s.HasChunk(h2) {
		t.Fatal("truncated chunk kept")
	}
}

const csz = 16 << 10 // chunk size used by the eviction tests

func TestEvictionLRU(t *testing.T) {
	s := openStore(t, t.TempDir(), 4*csz)
	var hs []blob.Hash
	for i := range 4 {
		hs = append(hs, putChunk(t, s, csz, uint64(10+i)))
	}
	if u := s.Usage(); u.UsedBytes != 4*csz || u.Chunks != 4 || u.CapBytes != 4*csz || u.PinnedBytes != 0 {
		t.Fatalf("usage %+v", u)
	}
	if _, err := s.ReadChunk(hs[0]); err != nil { // hs[1] is now the least recently used
		t.Fatal(err)
	}
	h4 := putChunk(t, s, csz, 14)
	if s.HasChunk(hs[1]) {
		t.Fatal("least recently used chunk survived")
	}
	for _, h := range []blob.Hash{hs[0], hs[2], hs[3], h4} {
		if !s.HasChunk(h) {
			t.Fatalf("chunk %s evicted out of LRU order", h)
		}
	}
	h5 := putChunk(t, s, csz, 15) // next out: hs[2]
	if s.HasChunk(hs[2]) || !s.HasChunk(hs[0]) || !s.HasChunk(h5) {
		t.Fatal("second eviction not in LRU order")
	}
	if u := s.Usage(); u.UsedBytes != 4*csz || u.Chunks != 4 {
		t.Fatalf("usage after eviction %+v", u)
	}
	// A chunk larger than the cap can never fit.
	big := randBytes(5*csz, 16)
	if err := s.PutChunk(blob.HashChunk(big), big); !errors.Is(err, blob.ErrNoSpace) {
		t.Fatalf("chunk over the cap: %v, want ErrNoSpace", err)
	}
}

func TestEvictionSkipsPinned(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 4*csz)
	a := putChunk(t, s, csz, 20)
	b := putChunk(t, s, csz, 21)
	id, err := s.PutManifest(&blob.Manifest{Size: 2 * csz, ChunkSize: csz, Chunks: []blob.Hash{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pin(id); err != nil {
		t.Fatal(err)
	}
	if !s.Pinned(id) {
		t.Fatal("Pinned false after Pin")
	}
	for i := range 6 {
		putChunk(t, s, csz, uint64(30+i))
	}
	if !s.HasChunk(a) || !s.HasChunk(b) || !s.HasBlob(id) {
		t.Fatal("pinned chunk evicted")
	}
	if u := s.Usage(); u.PinnedBytes != 2*csz || u.UsedBytes != 4*csz || u.Chunks != 4 {
		t.Fatalf("usage %+v", u)
	}
	// Pin the other two: now nothing can be evicted.
	c := putChunk(t, s, csz, 40)
	d := putChunk(t, s, csz, 41)
	id2, err := s.PutManifest(&blob.Manifest{Size: 2 * csz, ChunkSize: csz, Chunks: []blob.Hash{c, d}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pin(id2); err != nil {
		t.Fatal(err)
	}
	if u := s.Usage(); u.PinnedBytes != 4*csz {
		t.Fatalf("usage %+v, want everything pinned", u)
	}
	e := randBytes(csz, 42)
	he := blob.HashChunk(e)
	if err := s.PutChunk(he, e); !errors.Is(err, blob.ErrNoSpace) {
		t.Fatalf("put with everything pinned: %v, want ErrNoSpace", err)
	}
	if s.HasChunk(he) || countFiles(t, filepath.Join(dir, "tmp")) != 0 || countFiles(t, filepath.Join(dir, "chunks")) != 4 {
		t.Fatal("failed put left a file or an entry")
	}
	// Unpinning makes room again.
	if err := s.Unpin(id); err != nil {
		t.Fatal(err)
	}
	if err := s.PutChunk(he, e); err != nil {
		t.Fatalf("put after unpin: %v", err)
	}
	if err := s.Unpin(id); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("second Unpin: %v, want ErrNotFound", err)
	}
	if err := s.Pin(blob.ManifestCID([]byte("no such manifest"))); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Pin without manifest: %v, want ErrNotFound", err)
	}
}

func TestPinRefcountSharedChunks(t *testing.T) {
	s := openStore(t, t.TempDir(), 4*csz)
	c0 := putChunk(t, s, csz, 50)
	c1 := putChunk(t, s, csz, 51)
	c2 := putChunk(t, s, csz, 52)
	idA, _ := s.PutManifest(&blob.Manifest{Size: 2 * csz, ChunkSize: csz, Chunks: []blob.Hash{c0, c1}})
	// B lists c1 twice: still one reference from B.
	idB, _ := s.PutManifest(&blob.Manifest{Size: 3 * csz, ChunkSize: csz, Chunks: []blob.Hash{c1, c2, c1}})
	for _, id := range []blobID{idA, idB} {
		if err := s.Pin(id); err != nil {
			t.Fatal(err)
		}
	}
	if u := s.Usage(); u.PinnedBytes != 3*csz {
		t.Fatalf("pinned %d, want %d", u.PinnedBytes, 3*csz)
	}
	if err := s.Unpin(idA); err != nil {
		t.Fatal(err)
	}
	if u := s.Usage(); u.PinnedBytes != 2*csz {
		t.Fatalf("after unpinning A: pinned %d, want %d (c1 still held by B)", u.PinnedBytes, 2*csz)
	}
	// Fill the cache: c0 goes, c1 (shared, still pinned by B) and c2 stay.
	for i := range 4 {
		putChunk(t, s, csz, uint64(60+i))
	}
	if s.HasChunk(c0) || !s.HasChunk(c1) || !s.HasChunk(c2) {
		t.Fatalf("after unpinning A: c0 %v c1 %v c2 %v, want false true true", s.HasChunk(c0), s.HasChunk(c1), s.HasChunk(c2))
	}
	if err := s.Unpin(idB); err != nil {
		t.Fatal(err)
	}
	if u := s.Usage(); u.PinnedBytes != 0 {
		t.Fatalf("pinned %d after unpinning both", u.PinnedBytes)
	}
	for i := range 4 {
		putChunk(t, s, csz, uint64(70+i))
	}
	if s.HasChunk(c1) || s.HasChunk(c2) {
		t.Fatal("chunks of unpinned blobs not evicted")
	}
}

func TestPinBeforeChunksArrive(t *testing.T) {
	s := openStore(t, t.TempDir(), 2*csz)
	data := randBytes(csz, 80)
	h := blob.HashChunk(data)
	id, _ := s.PutManifest(&blob.Manifest{Size: csz, ChunkSize: csz, Chunks: []blob.Hash{h}})
	if err := s.Pin(id); err != nil {
		t.Fatal(err)
	}
	if s.HasBlob(id) {
		t.Fatal("HasBlob without its chunk")
	}
	if err := s.PutChunk(h, data); err != nil {
		t.Fatal(err)
	}
	if !s.HasBlob(id) || s.Usage().PinnedBytes != csz {
		t.Fatalf("chunk arriving after Pin not pinned: %+v", s.Usage())
	}
	for i := range 4 {
		putChunk(t, s, csz, uint64(81+i))
	}
	if !s.HasChunk(h) {
		t.Fatal("chunk pinned before arrival was evicted")
	}
}

func TestConcurrentPutRead(t *testing.T) {
	const n = 64
	s := openStore(t, t.TempDir(), 16*4096)
	datas := make([][]byte, n)
	for i := range datas {
		datas[i] = randBytes(4096, uint64(1000+i))
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for k := range 3 * n {
				d := datas[(k*7+w*13)%n]
				h := blob.HashChunk(d)
				if err := s.PutChunk(h, d); err != nil {
					t.Error(err)
					return
				}
				if got, err := s.ReadChunk(h); err == nil && !bytes.Equal(got, d) {
					t.Error("read back wrong bytes")
				} else if err != nil && !errors.Is(err, blob.ErrNotFound) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	u := s.Usage()
	if u.UsedBytes > u.CapBytes || u.UsedBytes != int64(u.Chunks)*4096 {
		t.Fatalf("usage inconsistent: %+v", u)
	}
	present := 0
	for _, d := range datas {
		if s.HasChunk(blob.HashChunk(d)) {
			present++
		}
	}
	if present != u.Chunks || countFiles(t, s.chunkDir) != u.Chunks {
		t.Fatalf("%d chunks present, %d files, usage says %d", present, countFiles(t, s.chunkDir), u.Chunks)
	}
}

func TestLRUSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 4 * csz})
	if err != nil {
		t.Fatal(err)
	}
	var hs []blob.Hash
	for i := range 4 {
		hs = append(hs, putChunk(t, s, csz, uint64(90+i)))
	}
	if _, err := s.ReadChunk(hs[0]); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, 4*csz)
	putChunk(t, s, csz, 94)
	if s.HasChunk(hs[1]) || !s.HasChunk(hs[0]) {
		t.Fatalf("after reopen: evicted c1=%v c0=%v; last use was not persisted", !s.HasChunk(hs[1]), !s.HasChunk(hs[0]))
	}
}
