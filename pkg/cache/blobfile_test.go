package cache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
)

// sinkBlob makes a manifest of data in chunks of cs bytes (stored in s) and
// returns it with the chunks' bytes.
func sinkBlob(t *testing.T, s *Store, data []byte, cs int) (*blob.Manifest, [][]byte) {
	t.Helper()
	m := &blob.Manifest{Size: uint64(len(data)), ChunkSize: uint32(cs)}
	var chunks [][]byte
	for off := 0; off < len(data); off += cs {
		c := data[off:min(off+cs, len(data))]
		chunks = append(chunks, c)
		m.Chunks = append(m.Chunks, blob.HashChunk(c))
	}
	if _, err := s.PutManifest(m); err != nil {
		t.Fatal(err)
	}
	return m, chunks
}

// linkSinkAt creates the caller's file path (closed with the test) and
// opens a LinkSink of m on it.
func linkSinkAt(t *testing.T, s *Store, path string, m *blob.Manifest) (*os.File, *Sink) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	sk, err := s.LinkSink(f, m.CID(), m)
	if err != nil {
		t.Fatalf("LinkSink: %v", err)
	}
	return f, sk
}

// holdSinkWrite holds the first store write into a sink at the hook point
// (after its write if done, else before it): in is closed when a write
// gets there, and it goes on once the caller closes release. The hook is
// removed with the test (or by setting sinkWriteHook to nil).
func holdSinkWrite(t *testing.T, done bool) (in, release chan struct{}) {
	in, release = make(chan struct{}), make(chan struct{})
	sinkWriteHook = func(_ *Sink, d bool) {
		if d == done {
			close(in)
			<-release
		}
	}
	t.Cleanup(func() { sinkWriteHook = nil })
	return in, release
}

func nlink(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(st.Sys().(*syscall.Stat_t).Nlink)
}

// TestSinkSharesDestination: the chunks a get stores while its sink is open
// go into the destination file, not into chunk files (each byte written
// once); the destination is linked into the store (one inode); a chunk the
// store held already is copied in by Commit; the store serves the chunks
// from the file, after a restart too; eviction of the last of them unlinks
// the store's link and leaves the destination whole.
func TestSinkSharesDestination(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "store"), 64<<20)
	const cs = 64 << 10
	data := randBytes(5*cs+123, 7)
	m, chunks := sinkBlob(t, s, data, cs)
	if err := s.PutChunk(m.Chunks[2], chunks[2]); err != nil { // held before the get
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst")
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sk, err := s.LinkSink(f, m.CID(), m)
	if err != nil {
		t.Fatalf("LinkSink: %v", err)
	}
	if n := nlink(t, dst); n != 2 {
		t.Fatalf("destination has %d links after LinkSink, want 2 (linked into the store)", n)
	}
	before := countFiles(t, s.chunkDir)
	for i, c := range chunks {
		if i != 2 {
			if err := s.PutVerifiedChunk(m.Chunks[i], c); err != nil {
				t.Fatalf("chunk %d: %v", i, err)
			}
		}
	}
	if got := countFiles(t, s.chunkDir); got != before {
		t.Fatalf("%d chunk files after the get's chunks, want %d: the bytes were written twice", got, before)
	}
	if err := sk.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("destination differs from the blob (err %v)", err)
	}
	if n := nlink(t, dst); n != 2 {
		t.Fatalf("destination has %d links after Commit, want 2", n)
	}
	s.verified = newMemo[blob.Hash, []byte](0) // read from the file
	if !bytes.Equal(readBlob(t, s, m), data) {
		t.Fatal("store serves other bytes than the blob's")
	}
	f2, off, size, err := s.OpenChunkAt(m.Chunks[4])
	if err != nil {
		t.Fatal(err)
	}
	f2.Close()
	if off != 4*cs || size != cs {
		t.Fatalf("OpenChunkAt: off %d size %d, want %d %d", off, size, 4*cs, cs)
	}
	// After a restart the store finds the chunks in the blob file again.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, filepath.Join(dir, "store"), 64<<20)
	if !bytes.Equal(readBlob(t, s, m), data) {
		t.Fatal("after a restart the store serves other bytes than the blob's")
	}
	for i, h := range m.Chunks {
		s.mu.Lock()
		e := s.chunks[h]
		s.mu.Unlock()
		if (i == 2) != (e.bf == nil) {
			t.Fatalf("chunk %d after restart: in a blob file %v, want %v", i, e.bf != nil, i != 2)
		}
	}
	// Evicting the chunks unlinks the store's link only.
	for _, h := range m.Chunks {
		s.DropChunk(h, "test")
	}
	if n := nlink(t, dst); n != 1 {
		t.Fatalf("destination has %d links after its chunks left the store, want 1", n)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, data) {
		t.Fatal("destination changed when the store dropped its chunks")
	}
	if n := countFiles(t, s.blobDir); n != 0 {
		t.Fatalf("%d blob files left, want 0", n)
	}
}

// TestSinkAbort: an aborted sink leaves no link and no entry in the store.
func TestSinkAbort(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "store"), 64<<20)
	const cs = 64 << 10
	data := randBytes(3*cs, 8)
	m, chunks := sinkBlob(t, s, data, cs)
	f, sk := linkSinkAt(t, s, filepath.Join(dir, "dst"), m)
	if err := s.PutVerifiedChunk(m.Chunks[0], chunks[0]); err != nil {
		t.Fatal(err)
	}
	if !s.HasChunk(m.Chunks[0]) {
		t.Fatal("a chunk written into the sink is not served")
	}
	sk.Abort()
	if s.HasChunk(m.Chunks[0]) {
		t.Fatal("chunk of an aborted sink still in the store")
	}
	if n := nlink(t, f.Name()); n != 1 {
		t.Fatalf("destination has %d links after Abort, want 1", n)
	}
	if n := countFiles(t, s.tmpDir) + countFiles(t, s.blobDir); n != 0 {
		t.Fatalf("%d files left in tmp and blobs", n)
	}
	// A chunk stored after the abort goes into a chunk file as before.
	if err := s.PutVerifiedChunk(m.Chunks[1], chunks[1]); err != nil {
		t.Fatal(err)
	}
	if countFiles(t, s.chunkDir) != 1 {
		t.Fatal("chunk after the abort not in a chunk file")
	}
}

// TestSinkDamagedDestination: bytes changed in the destination after the
// get are caught when the store reads them, dropped, and never served.
func TestSinkDamagedDestination(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "store"), 64<<20)
	const cs = 64 << 10
	data := randBytes(2*cs, 9)
	m, chunks := sinkBlob(t, s, data, cs)
	dst := filepath.Join(dir, "dst")
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := s.LinkSink(f, m.CID(), m)
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
	if _, err := f.WriteAt([]byte("changed by its owner"), cs+10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s.verified = newMemo[blob.Hash, []byte](0)
	if _, err := s.ReadChunk(m.Chunks[1]); !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("ReadChunk of a changed chunk: %v, want ErrCorrupt", err)
	}
	if s.HasChunk(m.Chunks[1]) {
		t.Fatal("changed chunk still in the store")
	}
	if c, err := s.ReadChunk(m.Chunks[0]); err != nil || !bytes.Equal(c, chunks[0]) {
		t.Fatalf("intact chunk: %v", err)
	}
}

// TestLinkSinkRefuses: a file the store cannot share (a pipe; a file
// another user could write) is refused with ErrNoSink, and the store is
// unchanged.
func TestLinkSinkRefuses(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "store"), 64<<20)
	m, _ := sinkBlob(t, s, randBytes(1000, 3), 1<<16)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if _, err := s.LinkSink(w, m.CID(), m); !errors.Is(err, ErrNoSink) {
		t.Fatalf("LinkSink(pipe): %v, want ErrNoSink", err)
	}
	f, err := os.Create(filepath.Join(dir, "shared"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Chmod(0o664); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LinkSink(f, m.CID(), m); !errors.Is(err, ErrNoSink) {
		t.Fatalf("LinkSink(group-writable file): %v, want ErrNoSink", err)
	}
	if len(s.sinks) != 0 || nlink(t, f.Name()) != 1 {
		t.Fatal("a refused sink claimed chunks or linked the file")
	}
}

// TestCopyChunkTo: a stored chunk is copied verified to an offset of a
// file; a damaged chunk file is dropped and nothing is copied.
func TestCopyChunkTo(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "store"), 64<<20)
	data := randBytes(100000, 4)
	h := blob.HashChunk(data)
	if err := s.PutChunk(h, data); err != nil {
		t.Fatal(err)
	}
	s.verified = newMemo[blob.Hash, []byte](0)
	f, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := s.CopyChunkTo(h, f, 4096+7, int64(len(data))); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 4096+7); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("copied bytes differ (%v)", err)
	}
	if err := os.WriteFile(s.chunkPath(h), append([]byte{data[0] ^ 1}, data[1:]...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.CopyChunkTo(h, f, 0, int64(len(data))); !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("CopyChunkTo of a damaged chunk: %v, want ErrCorrupt", err)
	}
	if s.HasChunk(h) {
		t.Fatal("damaged chunk not dropped")
	}
}

// TestSinkCutByCrash: a store that stops with a sink open (its chunks
// served, the index flushed meanwhile) finds after the next Open no chunk
// of it, no file of it, nothing damaged and nothing orphaned: the crash
// leaves what an aborted get leaves.
func TestSinkCutByCrash(t *testing.T) {
	dir := t.TempDir()
	sdir := filepath.Join(dir, "store")
	s, err := Open(sdir, Options{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	const cs = 64 << 10
	m, chunks := sinkBlob(t, s, randBytes(4*cs, 10), cs)
	f, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := s.LinkSink(f, m.CID(), m); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.PutVerifiedChunk(m.Chunks[i], chunks[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // the sink is neither committed nor aborted
		t.Fatal(err)
	}
	s = openStore(t, sdir, 64<<20)
	u := s.Usage()
	if u.Chunks != 0 || u.DamagedChunks != 0 || u.OrphanedBytes != 0 {
		t.Fatalf("after the cut sink: %d chunks, %d damaged, %d orphaned bytes; want none", u.Chunks, u.DamagedChunks, u.OrphanedBytes)
	}
	if n := countFiles(t, s.tmpDir) + countFiles(t, s.blobDir) + countFiles(t, s.chunkDir); n != 0 {
		t.Fatalf("%d files left in the store", n)
	}
	if n := nlink(t, f.Name()); n != 1 {
		t.Fatalf("destination has %d links, want 1", n)
	}
}

// TestCopyChunksToGoesOn: chunks missing or damaged do not stop the copy
// of the others; the error names the first and counts the rest.
func TestCopyChunksToGoesOn(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, filepath.Join(dir, "store"), 64<<20)
	const cs = 64 << 10
	data := randBytes(6*cs, 12)
	m, chunks := sinkBlob(t, s, data, cs)
	for i, c := range chunks {
		if i != 1 {
			if err := s.PutChunk(m.Chunks[i], c); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.verified = newMemo[blob.Hash, []byte](0)
	if err := os.WriteFile(s.chunkPath(m.Chunks[4]), chunks[3], 0o644); err != nil { // damaged
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var copied []int
	var mu sync.Mutex
	err = s.CopyChunksTo(m, f, nil, func(i int) { mu.Lock(); copied = append(copied, i); mu.Unlock() })
	if !errors.Is(err, blob.ErrNotFound) && !errors.Is(err, blob.ErrCorrupt) || !strings.Contains(err.Error(), "1 more") {
		t.Fatalf("CopyChunksTo: %v, want a missing chunk and 1 more", err)
	}
	if len(copied) != 4 {
		t.Fatalf("copied %v, want the 4 intact chunks", copied)
	}
}

// FuzzParseBlobName: the names Open reads from DIR/blobs parse without a
// panic, and a name that parses is a CID and a number that print back to
// the name's parts.
func FuzzParseBlobName(f *testing.F) {
	for _, s := range []string{
		"bafkr4icrji3kqiljvxxdnakihxstknt5iqjejuhv4pyb4figi7lvl7xwq4.0",
		"bafkr4icrji3kqiljvxxdnakihxstknt5iqjejuhv4pyb4figi7lvl7xwq4.17",
		"bafkr4icrji3kqiljvxxdnakihxstknt5iqjejuhv4pyb4figi7lvl7xwq4",
		"bafkr4icrji3kqiljvxxdnakihxstknt5iqjejuhv4pyb4figi7lvl7xwq4.s3",
		"bafkr4icrji3kqiljvxxdnakihxstknt5iqjejuhv4pyb4figi7lvl7xwq4.s",
		"blob-123", ".0", "x.y", "", "bafy.-1", "bafy.s-1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		id, owned, ok := parseBlobName(name)
		if !ok {
			return
		}
		base, n, _ := strings.Cut(name, ".")
		if owned != strings.HasPrefix(n, "s") {
			t.Fatalf("%q parsed as owned=%v", name, owned)
		}
		if !id.Defined() {
			t.Fatalf("%q parsed to an undefined CID", name)
		}
		if _, err := cid.Decode(base); err != nil {
			t.Fatalf("%q parsed although its CID part does not decode: %v", name, err)
		}
	})
}
