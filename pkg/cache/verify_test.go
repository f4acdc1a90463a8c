package cache

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

// flipByte changes one byte of the file at path, in place.
func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// TestReadChunkVerifies damages a chunk file behind the store's back: the
// next read from disk finds it, drops the chunk, counts it, and a later put
// stores it again.
func TestReadChunkVerifies(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	data := randBytes(300<<10, 1)
	h := blob.HashChunk(data)
	if err := s.PutChunk(h, data); err != nil { // PutChunk keeps no verified copy
		t.Fatal(err)
	}
	flipByte(t, s.chunkPath(h), 1234)

	_, err := s.ReadChunk(h)
	if !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("ReadChunk of a damaged file: %v, want ErrCorrupt", err)
	}
	if s.HasChunk(h) {
		t.Fatal("damaged chunk still in the store")
	}
	if _, err := os.Stat(s.chunkPath(h)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("damaged chunk file still on disk: %v", err)
	}
	u := s.Usage()
	if u.DamagedChunks != 1 || u.UsedBytes != 0 || u.Chunks != 0 {
		t.Fatalf("usage after the drop: %+v", u)
	}
	if _, err := s.ReadChunk(h); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("second read: %v, want ErrNotFound", err)
	}
	if err := s.PutChunk(h, data); err != nil {
		t.Fatalf("storing the chunk again: %v", err)
	}
	got, err := s.ReadChunk(h)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after repair: %v", err)
	}
	if u := s.Usage(); u.DamagedChunks != 1 {
		t.Fatalf("damaged count changed by a good read: %+v", u)
	}
}

// TestReadChunkIntoVerifies is TestReadChunkVerifies for ReadChunkInto, and
// for small chunks (which used to be served from memory unverified).
func TestReadChunkIntoVerifies(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	data := randBytes(4<<10, 2)
	h := blob.HashChunk(data)
	if err := s.PutChunk(h, data); err != nil {
		t.Fatal(err)
	}
	flipByte(t, s.chunkPath(h), 0)
	buf := make([]byte, 8<<10)
	if _, err := s.ReadChunkInto(h, buf); !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("ReadChunkInto of a damaged file: %v, want ErrCorrupt", err)
	}
	if s.HasChunk(h) || s.Usage().DamagedChunks != 1 {
		t.Fatalf("damaged chunk not dropped: %+v", s.Usage())
	}
}

// TestVerifiedMemo: bytes verified since they were read are served from
// memory (a file damaged later is not read again), RecheckChunk forgets
// them and finds the damage, and with the memo off every read verifies.
func TestVerifiedMemo(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	data := randBytes(1<<20, 3)
	h := blob.HashChunk(data)
	if err := s.PutChunk(h, data); err != nil {
		t.Fatal(err)
	}
	if got, err := s.ReadChunk(h); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("first read: %v", err)
	}
	flipByte(t, s.chunkPath(h), 99)
	if got, err := s.ReadChunk(h); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read of a verified chunk: %v (want the verified bytes from memory)", err)
	}
	damaged, err := s.RecheckChunk(h)
	if err != nil || !damaged {
		t.Fatalf("RecheckChunk of a damaged file: damaged=%v err=%v", damaged, err)
	}
	if s.HasChunk(h) || s.Usage().DamagedChunks != 1 {
		t.Fatalf("RecheckChunk did not drop the chunk: %+v", s.Usage())
	}
	if damaged, err := s.RecheckChunk(h); err != nil || damaged {
		t.Fatalf("RecheckChunk of an absent chunk: damaged=%v err=%v", damaged, err)
	}
	good := randBytes(1<<20, 4)
	g := blob.HashChunk(good)
	if err := s.PutChunk(g, good); err != nil {
		t.Fatal(err)
	}
	if damaged, err := s.RecheckChunk(g); err != nil || damaged {
		t.Fatalf("RecheckChunk of an intact chunk: damaged=%v err=%v", damaged, err)
	}

	// No memo: the second read goes to the disk and finds the damage.
	dir2 := t.TempDir()
	s2, err := Open(dir2, Options{MaxBytes: 1 << 30, VerifiedMemoBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.PutVerifiedChunk(h, data); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.ReadChunk(h); err != nil {
		t.Fatal(err)
	}
	flipByte(t, s2.chunkPath(h), 99)
	if _, err := s2.ReadChunk(h); !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("read without a memo: %v, want ErrCorrupt", err)
	}
}

// TestTruncatedAndMissingCounted: a chunk file cut short or deleted is
// dropped and counted as damaged too.
func TestTruncatedAndMissingCounted(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	a := putChunk(t, s, 200<<10, 5)
	b := putChunk(t, s, 200<<10, 6)
	if err := os.Truncate(s.chunkPath(a), 100); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(s.chunkPath(b)); err != nil {
		t.Fatal(err)
	}
	for _, h := range []blob.Hash{a, b} {
		if _, err := s.ReadChunk(h); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("read of a cut or deleted chunk file: %v, want ErrNotFound", err)
		}
	}
	if u := s.Usage(); u.DamagedChunks != 2 || u.Chunks != 0 || u.UsedBytes != 0 {
		t.Fatalf("usage: %+v", u)
	}
}

// TestOrphansEvictedFirst: chunk files that no manifest lists (what an
// upload cut by a crash leaves) are reported as orphaned after Open, are
// not pinned, and are evicted before older chunks of a known blob; a
// manifest that lists an orphan adopts it.
func TestOrphansEvictedFirst(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	// A cached blob: manifest and chunks, not pinned, written first (older).
	m := &blob.Manifest{ChunkSize: 256 << 10}
	var cached []blob.Hash
	for i := range 4 {
		d := randBytes(256<<10, uint64(10+i))
		h := blob.HashChunk(d)
		if err := s.PutChunk(h, d); err != nil {
			t.Fatal(err)
		}
		m.Chunks = append(m.Chunks, h)
		m.Size += uint64(len(d))
		cached = append(cached, h)
	}
	if _, err := s.PutManifest(m); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Orphans: chunk files the index never heard of, newer than the blob.
	var orphans []blob.Hash
	for i := range 3 {
		d := randBytes(256<<10, uint64(20+i))
		h := blob.HashChunk(d)
		p := filepath.Join(dir, "chunks", h.String()[:2], h.String())
		if err := os.WriteFile(p, d, 0o644); err != nil {
			t.Fatal(err)
		}
		orphans = append(orphans, h)
	}
	// One more orphan that a later manifest lists.
	late := randBytes(256<<10, 30)
	lh := blob.HashChunk(late)
	if err := os.WriteFile(filepath.Join(dir, "chunks", lh.String()[:2], lh.String()), late, 0o644); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, dir, 8*256<<10) // room for exactly 8 chunks
	u := s.Usage()
	if u.OrphanedBytes != 4*256<<10 || u.PinnedBytes != 0 || u.Chunks != 8 {
		t.Fatalf("after reopen: %+v, want 4 orphaned chunks, nothing pinned", u)
	}
	if _, err := s.PutManifest(&blob.Manifest{ChunkSize: 256 << 10, Size: 256 << 10, Chunks: []blob.Hash{lh}}); err != nil {
		t.Fatal(err)
	}
	if u := s.Usage(); u.OrphanedBytes != 3*256<<10 {
		t.Fatalf("a manifest listing an orphan did not adopt it: %+v", u)
	}
	// Three new chunks need three evictions: the orphans go, not the blob.
	for i := range 3 {
		putChunk(t, s, 256<<10, uint64(40+i))
	}
	for _, h := range orphans {
		if s.HasChunk(h) {
			t.Fatal("an orphan survived while older chunks of a known blob were evicted")
		}
	}
	for _, h := range append(cached, lh) {
		if !s.HasChunk(h) {
			t.Fatal("a chunk of a known blob was evicted before the orphans")
		}
	}
	if u := s.Usage(); u.OrphanedBytes != 0 {
		t.Fatalf("orphaned bytes after evicting every orphan: %+v", u)
	}
}

// TestReadChunkVerifiedBy: the caller's verify is the whole verification
// of a read from disk: bytes it accepts are returned (and kept as
// verified), a damaged file is dropped and counted as by ReadChunk with an
// error wrapping blob.ErrCorrupt and verify's own, memory that fails
// verify is forgotten and the file read instead.
func TestReadChunkVerifiedBy(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	errMine := errors.New("my check failed")
	good, other := randBytes(300<<10, 1), randBytes(200<<10, 2)
	h, h2 := blob.HashChunk(good), blob.HashChunk(other)
	calls := 0
	verify := func(b []byte) error {
		calls++
		if g := blob.HashChunk(b); g != h && g != h2 {
			return errMine
		}
		return nil
	}
	if err := s.PutChunk(h, good); err != nil { // no verified copy in memory
		t.Fatal(err)
	}
	b, err := s.ReadChunkVerifiedBy(h, verify)
	if err != nil || !bytes.Equal(b, good) || calls != 1 {
		t.Fatalf("read of an intact file: %v, %d calls", err, calls)
	}
	if m, ok := s.verified.get(h); !ok || !bytes.Equal(m, good) {
		t.Fatal("bytes verify accepted not kept as verified")
	}

	// Memory that fails verify: forgotten, the file read.
	bad := bytes.Clone(good)
	bad[5] ^= 1
	s.verified.remove(h)
	s.verified.put(h, bad, len(bad))
	calls = 0
	if b, err := s.ReadChunkVerifiedBy(h, verify); err != nil || !bytes.Equal(b, good) || calls != 2 {
		t.Fatalf("read past damaged memory: %v, %d calls", err, calls)
	}

	// A damaged file: dropped, counted, both errors wrapped.
	if err := s.PutChunk(h2, other); err != nil {
		t.Fatal(err)
	}
	flipByte(t, s.chunkPath(h2), 777)
	_, err = s.ReadChunkVerifiedBy(h2, verify)
	if !errors.Is(err, blob.ErrCorrupt) || !errors.Is(err, errMine) {
		t.Fatalf("read of a damaged file: %v, want ErrCorrupt and verify's error", err)
	}
	if s.HasChunk(h2) || s.Usage().DamagedChunks != 1 {
		t.Fatalf("damaged chunk not dropped and counted: present %v, %+v", s.HasChunk(h2), s.Usage())
	}
	if _, err := os.Stat(s.chunkPath(h2)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("damaged chunk file still on disk: %v", err)
	}
	if _, err := s.ReadChunkVerifiedBy(h2, verify); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("read after the drop: %v, want ErrNotFound", err)
	}
	if _, err := s.ReadChunkVerifiedBy(h, nil); err == nil {
		t.Fatal("nil verify accepted")
	}
}
