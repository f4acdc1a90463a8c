package cache

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestOpenChunkSharedHandsOutBlobFile: GET_FD's open of a chunk held in a
// store-owned blob file (a put's, DIR/blobs/<cid>.s0) hands out that file
// at the chunk's offset, without a copy (no chunk file made; the
// descriptor's inode is the blob file's), and marks it handed out (mode
// 0400). Evicting its chunks then punches nothing: a client's mapping of
// the chunk reads the same bytes and the file keeps its blocks (beyond the
// cap, as doc.go says). The mark survives a restart (eviction after it
// still punches nothing), and the file goes once its last chunk is
// evicted, the client's mapping still intact. Before, OpenChunkShared did
// not exist and GET_FD copied the chunk into a chunk file (PromoteChunk),
// and eviction punched the put's file.
func TestOpenChunkSharedHandsOutBlobFile(t *testing.T) {
	const cs = 1 << 20
	dir := t.TempDir()
	s := openStore(t, dir, 10*cs)
	a := randBytes(8*cs, 61)
	recA, err := putFile(t, s, "a", a, cs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveName("a"); err != nil { // evictable now
		t.Fatal(err)
	}
	mA, err := s.Manifest(recA.ID)
	if err != nil {
		t.Fatal(err)
	}
	pathA := filepath.Join(dir, "blobs", recA.ID.String()+".s0")

	f, off, size, err := s.OpenChunkShared(mA.Chunks[3])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if off != 3*cs || size != cs {
		t.Fatalf("chunk 3 handed out at %d (+%d), want %d (+%d)", off, size, 3*cs, cs)
	}
	var fst, pst syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &fst); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(pathA, &pst); err != nil {
		t.Fatal(err)
	}
	if fst.Ino != pst.Ino {
		t.Fatalf("handed out inode %d, the blob file's is %d: a copy", fst.Ino, pst.Ino)
	}
	if pst.Mode&0o777 != 0o400 {
		t.Fatalf("the handed-out blob file has mode %#o, want 0400 (the mark)", pst.Mode&0o777)
	}
	if n := countFiles(t, s.chunkDir); n != 0 {
		t.Fatalf("%d chunk files after the hand-out, want none", n)
	}
	mem, err := syscall.Mmap(int(f.Fd()), off, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	want := a[3*cs : 4*cs]
	if !bytes.Equal(mem, want) {
		t.Fatal("the mapping differs from the chunk")
	}
	blocks := pst.Blocks

	// Evict most of a: nothing punched, the mapping unchanged.
	if _, err := s.Ingest(context.Background(), "b", bytes.NewReader(randBytes(6*cs, 62)), cs, "me"); err != nil {
		t.Fatal(err)
	}
	evicted := 0
	for i, h := range mA.Chunks {
		if s.HasChunk(h) {
			continue
		}
		evicted++
		if holeAt(t, pathA, int64(i)*cs, cs) {
			t.Fatalf("evicted chunk %d of a handed-out file was punched", i)
		}
	}
	if evicted < 4 {
		t.Fatalf("%d of a's chunks evicted, want at least 4", evicted)
	}
	if err := syscall.Stat(pathA, &pst); err != nil || pst.Blocks < blocks {
		t.Fatalf("the handed-out file's blocks %d -> %d (%v): punched", blocks, pst.Blocks, err)
	}
	if !bytes.Equal(mem, want) {
		t.Fatal("the mapping changed after eviction")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// After a restart the file is still handed out: eviction punches
	// nothing; its last chunk's eviction removes it.
	s = openStore(t, dir, 10*cs)
	defer s.Close()
	if _, err := s.Ingest(context.Background(), "c", bytes.NewReader(randBytes(cs, 63)), cs, "me"); err != nil {
		t.Fatal(err)
	}
	held := 0
	for i, h := range mA.Chunks {
		if s.HasChunk(h) {
			held++
		} else if holeAt(t, pathA, int64(i)*cs, cs) {
			t.Fatalf("after a restart, evicted chunk %d of the handed-out file was punched", i)
		}
	}
	if held == 0 || held == len(mA.Chunks) {
		t.Fatalf("%d of a's chunks held after a restart and c's put, want some", held)
	}
	if _, err := s.Ingest(context.Background(), "d", bytes.NewReader(randBytes(3*cs, 65)), cs, "me"); err != nil {
		t.Fatal(err)
	}
	held = 0
	for _, h := range mA.Chunks {
		if s.HasChunk(h) {
			held++
		}
	}
	if held != 0 {
		t.Fatalf("%d of a's chunks still held with b, c and d pinned (10 of 10 MiB)", held)
	}
	if _, err := os.Stat(pathA); !os.IsNotExist(err) {
		t.Fatalf("the handed-out file after its last chunk left: %v, want it gone", err)
	}
	if !bytes.Equal(mem, want) {
		t.Fatal("the mapping changed after the file went")
	}
}

// TestOpenChunkSharedPromotesDestination: a chunk in a get's destination
// (a caller's file, which its owner may change) is still moved into a
// chunk file before it is handed out; a chunk file is handed out as it is.
func TestOpenChunkSharedPromotesDestination(t *testing.T) {
	const cs = 64 << 10
	dir := t.TempDir()
	sdir := filepath.Join(dir, "store")
	s := openStore(t, sdir, 64*cs)
	defer s.Close()
	data := randBytes(4*cs+7, 64)
	m, chunks := sinkBlob(t, s, data, cs)
	dst, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	sk, err := s.LinkSink(dst, m.CID(), m)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range chunks {
		if err := s.PutVerifiedChunk(m.Chunks[i], c); err != nil {
			t.Fatal(err)
		}
	}
	if err := sk.Commit(); err != nil {
		t.Fatal(err)
	}
	dir = sdir
	f, off, size, err := s.OpenChunkShared(m.Chunks[1])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if off != 0 || size != cs || filepath.Dir(filepath.Dir(f.Name())) != filepath.Join(dir, "chunks") {
		t.Fatalf("chunk 1 of a destination handed out in %s at %d, want its own chunk file", f.Name(), off)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil || !bytes.Equal(b, data[cs:2*cs]) {
		t.Fatalf("chunk file: %v", err)
	}
}
