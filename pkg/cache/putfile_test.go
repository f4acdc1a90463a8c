package cache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/stablefile"
)

// putFile writes data to a new file and puts it under name through
// stablefile, as the daemon does with a caller's file (the copy path).
func putFile(t *testing.T, s *Store, name string, data []byte, chunkSize int) (blob.Record, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := stablefile.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return s.Ingest(context.Background(), name, r, chunkSize, "me")
}

// diskBlocks is the disk space the files under dir take (st_blocks).
func diskBlocks(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return err
		}
		n += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// holeAt reports whether the file at path has a hole in [off, off+n).
func holeAt(t *testing.T, path string, off, n int64) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return hasHole(f, off, n)
}

// TestPutIntoOneBlobFile: a put of a regular file is copied into one blob
// file of the store's own, DIR/blobs/<cid>.s0, that holds every chunk the
// store did not hold already at its offset; a chunk held already (a chunk
// file) or repeated in the blob is not stored twice: its range in the
// file is a hole. No chunk file is made. A stream of the same bytes stores
// nothing new.
func TestPutIntoOneBlobFile(t *testing.T) {
	const cs = 1 << 20
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	data := randBytes(6*cs+123, 31)
	copy(data[4*cs:5*cs], data[1*cs:2*cs]) // chunk 4 repeats chunk 1
	held := blob.HashChunk(data[2*cs : 3*cs])
	if err := s.PutChunk(held, data[2*cs:3*cs]); err != nil { // chunk 2: a chunk file already
		t.Fatal(err)
	}
	rec, err := putFile(t, s, "f", data, cs)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readBlob(t, s, m), data) {
		t.Fatal("bytes differ")
	}
	path := filepath.Join(dir, "blobs", rec.ID.String()+".s0")
	if c, b := countFiles(t, filepath.Join(dir, "chunks")), countFiles(t, filepath.Join(dir, "blobs")); c != 1 || b != 1 {
		t.Fatalf("%d chunk files and %d blob files, want the one chunk file put before and 1", c, b)
	}
	if n := countFiles(t, filepath.Join(dir, "tmp")); n != 0 {
		t.Fatalf("%d files left in tmp", n)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != int64(len(data)) {
		t.Fatalf("blob file: %v, want %d bytes", err, len(data))
	}
	for i, h := range m.Chunks {
		p, off := chunkAt(t, s, h)
		hole := holeAt(t, path, int64(m.ChunkOffset(i)), int64(m.ChunkLen(i)))
		switch i {
		case 2:
			if p != s.chunkPath(h) || !hole {
				t.Errorf("chunk 2 located in %s, a hole in the blob file %v; want its chunk file and a hole", p, hole)
			}
		case 1, 4: // the same chunk: located at one of the two places (the first hashed), a hole at the other
			other := 5 - i
			if p != path || (off != int64(m.ChunkOffset(i)) && off != int64(m.ChunkOffset(other))) ||
				hole != (off != int64(m.ChunkOffset(i))) ||
				hole == holeAt(t, path, int64(m.ChunkOffset(other)), int64(m.ChunkLen(other))) {
				t.Errorf("chunk %d (also chunk %d) located in %s at %d, a hole %v; want one of the two places, a hole at the other", i, other, p, off, hole)
			}
		default:
			if p != path || off != int64(m.ChunkOffset(i)) || hole {
				t.Errorf("chunk %d located in %s at %d, a hole %v; want the blob file at %d", i, p, off, hole, m.ChunkOffset(i))
			}
		}
	}
	if u := s.Usage(); u.UsedBytes != int64(len(data)-cs) || u.Chunks != 6 || u.OrphanedBytes != 0 {
		t.Fatalf("usage %+v: want the blob's distinct %d bytes in 6 chunks", u, len(data)-cs)
	}
	if d := diskBlocks(t, filepath.Join(dir, "blobs")); d > int64(len(data)-2*cs)+64<<10 {
		t.Fatalf("the blob file takes %d bytes of disk, want about %d (two chunks are holes)", d, len(data)-2*cs)
	}

	// A blob of one chunk, from a file and as a stream: its chunk file.
	for i, put := range []func(data []byte) (blob.Record, error){
		func(data []byte) (blob.Record, error) { return putFile(t, s, "small/file", data, cs) },
		func(data []byte) (blob.Record, error) {
			return s.Ingest(context.Background(), "small/stream", bytes.NewReader(data), cs, "me")
		},
	} {
		small := randBytes(1000+i, uint64(50+i))
		rec, err := put(small)
		if err != nil {
			t.Fatal(err)
		}
		h := blob.HashChunk(small)
		if got, err := os.ReadFile(s.chunkPath(h)); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("one-chunk put %d: its chunk file: %v", i, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "blobs", rec.ID.String()+".s0")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("one-chunk put %d made a blob file: %v", i, err)
		}
		if err := s.RemoveName(rec.Name); err != nil {
			t.Fatal(err)
		}
		s.DropChunk(h, "test")
	}

	// The same bytes as a stream: nothing new.
	if _, err := s.Ingest(context.Background(), "g", bytes.NewReader(data), cs, "me"); err != nil {
		t.Fatal(err)
	}
	if c, b := countFiles(t, filepath.Join(dir, "chunks")), countFiles(t, filepath.Join(dir, "blobs")); c != 1 || b != 1 || s.Usage().UsedBytes != int64(len(data)-cs) {
		t.Fatalf("a second put of the same bytes: %d chunk files, %d blob files, usage %+v", c, b, s.Usage())
	}
}

// TestPutEvictionPunchesHoles: chunks evicted from a put's blob file free
// their disk space (st_blocks drops; the store's files stay within the
// cap), and a restart locates only the chunks left in the file: the
// evicted ones are not re-adopted and nothing counts as damaged.
func TestPutEvictionPunchesHoles(t *testing.T) {
	const cs = 1 << 20
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 10 * cs})
	if err != nil {
		t.Fatal(err)
	}
	a := randBytes(8*cs, 32)
	recA, err := putFile(t, s, "a", a, cs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveName("a"); err != nil { // evictable now
		t.Fatal(err)
	}
	pathA := filepath.Join(dir, "blobs", recA.ID.String()+".s0")
	before := diskBlocks(t, filepath.Join(dir, "blobs"))
	if before < 8*cs {
		t.Fatalf("a's blob file takes %d bytes of disk before any eviction", before)
	}
	b := randBytes(6*cs, 33)
	recB, err := s.Ingest(context.Background(), "b", bytes.NewReader(b), cs, "me") // a stream
	if err != nil {
		t.Fatal(err)
	}
	u := s.Usage()
	if u.Evictions < 4 || u.UsedBytes > 10*cs {
		t.Fatalf("usage %+v: want at least 4 of a's chunks evicted", u)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(pathA, &st); err != nil {
		t.Fatal(err)
	}
	if left := int64(8-u.Evictions) * cs; st.Blocks*512 > left+64<<10 {
		t.Fatalf("a's blob file takes %d bytes of disk after %d evictions, want about %d", st.Blocks*512, u.Evictions, left)
	}
	if d := diskBlocks(t, dir) - diskBlocks(t, filepath.Join(dir, "index")); d > 10*cs+128<<10 {
		t.Fatalf("the store's chunk bytes take %d bytes of disk, over the cap of %d", d, 10*cs)
	}
	mA, _ := s.Manifest(recA.ID)
	var kept []int
	for i, h := range mA.Chunks {
		if s.HasChunk(h) {
			kept = append(kept, i)
			if holeAt(t, pathA, int64(i)*cs, cs) {
				t.Fatalf("kept chunk %d is a hole", i)
			}
		} else if !holeAt(t, pathA, int64(i)*cs, cs) {
			t.Fatalf("evicted chunk %d is not a hole", i)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, dir, 10*cs)
	u2 := s.Usage()
	if u2.DamagedChunks != 0 || u2.UsedBytes != u.UsedBytes || u2.Chunks != u.Chunks {
		t.Fatalf("after a restart: %+v, before %+v", u2, u)
	}
	for i, h := range mA.Chunks {
		if has := s.HasChunk(h); has != (len(kept) > 0 && contains(kept, i)) {
			t.Fatalf("chunk %d of a held %v after a restart", i, has)
		}
		if s.HasChunk(h) {
			if c, err := s.ReadChunk(h); err != nil || !bytes.Equal(c, a[i*cs:(i+1)*cs]) {
				t.Fatalf("chunk %d of a after a restart: %v", i, err)
			}
		}
	}
	mB, _ := s.Manifest(recB.ID)
	if !bytes.Equal(readBlob(t, s, mB), b) {
		t.Fatal("b's bytes differ after a restart")
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestPutFileWithHolesAtOpen: a put's blob file in which a chunk's range
// is a hole (evicted, and the crash came before the index learnt it) is
// adopted at Open without that chunk, which is not counted damaged; an
// all-zero chunk in a hole (a sparse input) is located there and reads
// right; the rest of the blob reads right.
func TestPutFileWithHolesAtOpen(t *testing.T) {
	const cs = 1 << 20
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(5*cs, 34)
	clear(data[3*cs : 4*cs]) // chunk 3: zeros
	rec, err := putFile(t, s, "f", data, cs)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := s.Manifest(rec.ID)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "blobs", rec.ID.String()+".s0")
	for _, i := range []int{1, 3} {
		if err := punchHole(path, int64(i)*cs, cs); err != nil {
			t.Fatal(err)
		}
	}
	s = openStore(t, dir, 1<<30)
	if u := s.Usage(); u.DamagedChunks != 0 || u.Chunks != 4 || u.UsedBytes != 4*cs {
		t.Fatalf("after Open: %+v, want 4 chunks, none damaged", u)
	}
	for i, h := range m.Chunks {
		if s.HasChunk(h) != (i != 1) {
			t.Fatalf("chunk %d held %v", i, s.HasChunk(h))
		}
		if i == 1 {
			continue
		}
		if c, err := s.ReadChunk(h); err != nil || !bytes.Equal(c, data[i*cs:(i+1)*cs]) {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
}

// TestPutFileRewrittenMidPut: the caller's file changed while it is
// copied fails the put with stablefile.ErrChanged (no name, no pin, no
// file left); changed after its copy, with its size and time put back
// (so stablefile cannot tell), the put stores the bytes it copied and
// hashed: the store's copy, not the caller's file.
func TestPutFileRewrittenMidPut(t *testing.T) {
	const cs = 1 << 20
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	data := randBytes(24*cs, 35) // three groups of copyGroupBytes
	path := filepath.Join(t.TempDir(), "in")
	defer func() { copiedHook = nil }()
	for _, tc := range []struct {
		name  string
		after int64 // the change comes once this much is copied
		keep  bool  // size and time put back
		fail  bool
	}{
		{"during", copyGroupBytes, false, true},
		{"shrank", copyGroupBytes, false, true},
		{"after", 24 * cs, true, false},
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		st0, _ := os.Stat(path)
		copiedHook = func(copied int64) {
			if copied != tc.after {
				return
			}
			if tc.name == "shrank" {
				if err := os.Truncate(path, 12*cs); err != nil {
					t.Error(err)
				}
				return
			}
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Error(err)
				return
			}
			f.WriteAt([]byte("changed by its owner"), 20*cs) // not copied yet for "during"
			f.WriteAt([]byte("changed by its owner"), 100)
			f.Close()
			if tc.keep {
				os.Chtimes(path, st0.ModTime(), st0.ModTime())
			}
		}
		r, err := stablefile.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := s.Ingest(context.Background(), tc.name, r, cs, "me")
		r.Close()
		if tc.fail {
			if !errors.Is(err, stablefile.ErrChanged) {
				t.Fatalf("%s: put = %v, want ErrChanged", tc.name, err)
			}
			if _, err := s.Record(tc.name); !errors.Is(err, blob.ErrNotFound) {
				t.Fatalf("%s: name after a failed put: %v", tc.name, err)
			}
			if u := s.Usage(); u.UsedBytes != 0 || u.PinnedBytes != 0 || countFiles(t, filepath.Join(dir, "tmp"))+countFiles(t, filepath.Join(dir, "blobs")) != 0 {
				t.Fatalf("%s: a failed put left %+v or files", tc.name, u)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		m, _ := s.Manifest(rec.ID)
		if !bytes.Equal(readBlob(t, s, m), data) || !rec.ID.Equals(blobIDOf(data, cs)) {
			t.Fatalf("%s: the put did not store the bytes it copied", tc.name)
		}
	}
}

// blobIDOf is the blob ID of data cut at cs.
func blobIDOf(data []byte, cs int) blobID {
	m := &blob.Manifest{ChunkSize: uint32(cs), Size: uint64(len(data))}
	for off := 0; off < len(data); off += cs {
		m.Chunks = append(m.Chunks, blob.HashChunk(data[off:min(off+cs, len(data))]))
	}
	return blob.ManifestCID(m.Encode())
}

// TestPutFileNoSpace: a regular file that does not fit the cap (pinned
// bytes fill it) fails with ErrNoSpace and leaves nothing: no name, no
// file in DIR/tmp or DIR/blobs, the usage as before.
func TestPutFileNoSpace(t *testing.T) {
	const cs = 1 << 20
	dir := t.TempDir()
	s := openStore(t, dir, 6*cs)
	if _, err := putFile(t, s, "a", randBytes(4*cs, 36), cs); err != nil {
		t.Fatal(err)
	}
	base := s.Usage()
	_, err := putFile(t, s, "b", randBytes(3*cs, 37), cs)
	if !errors.Is(err, blob.ErrNoSpace) {
		t.Fatalf("put past the cap: %v, want ErrNoSpace", err)
	}
	if _, err := s.Record("b"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("name after ErrNoSpace: %v", err)
	}
	if u := s.Usage(); u != base || countFiles(t, filepath.Join(dir, "tmp")) != 0 || countFiles(t, filepath.Join(dir, "blobs")) != 1 {
		t.Fatalf("a failed put left usage %+v (before %+v) or files", u, base)
	}
}

// TestPutAbortKeepsSharedChunks: a put that fails after another put found
// some of its chunks stored (in the failing put's blob file) and relied
// on them: the failing put's file goes, those chunks move to chunk files
// and the other put's blob stays whole.
func TestPutAbortKeepsSharedChunks(t *testing.T) {
	const cs = 256 << 10
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	shared := randBytes(4*cs, 38)
	mid := make(chan struct{})
	release := make(chan struct{})
	readErr := errors.New("cut")
	done := make(chan error, 1)
	go func() {
		r := io.MultiReader(bytes.NewReader(shared), &blockReader{mid: mid, release: release, err: readErr})
		_, err := s.Ingest(context.Background(), "failing", r, cs, "me")
		done <- err
	}()
	<-mid
	// The failing put's chunks are entered once hashed: wait for them.
	for deadline := time.Now().Add(10 * time.Second); s.Usage().Chunks < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("the first put's chunks were not stored: %+v", s.Usage())
		}
		time.Sleep(5 * time.Millisecond)
	}
	other := append(bytes.Clone(shared), randBytes(cs, 39)...)
	rec, err := s.Ingest(context.Background(), "other", bytes.NewReader(other), cs, "me")
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-done; !errors.Is(err, readErr) {
		t.Fatalf("the failing put: %v", err)
	}
	m, _ := s.Manifest(rec.ID)
	if !bytes.Equal(readBlob(t, s, m), other) {
		t.Fatal("the other put's blob is not whole")
	}
	if c := countFiles(t, filepath.Join(dir, "chunks")); c != 4 {
		t.Fatalf("%d chunk files, want the 4 shared chunks moved out of the failed put's file", c)
	}
	if n := countFiles(t, filepath.Join(dir, "tmp")); n != 0 {
		t.Fatalf("%d files left in tmp", n)
	}
}

// blockReader says mid at its first read, then waits for release and
// fails with err.
type blockReader struct {
	mid, release chan struct{}
	err          error
}

func (r *blockReader) Read([]byte) (int, error) {
	close(r.mid)
	<-r.release
	return 0, r.err
}

// TestOwnSink: a fetch that is not into a caller's file, given an OwnSink,
// stores the blob's chunks in one blob file of the store's own
// (DIR/blobs/<cid>.s0), not a chunk file each; a chunk held before stays
// where it was (a hole in the file); the store serves the chunks from the
// file. A sink ended with only some chunks written (Abort: a cancelled
// get) keeps them, and a restart locates exactly those, none damaged.
func TestOwnSink(t *testing.T) {
	const cs = 64 << 10
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 64 << 20, VerifiedMemoBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(6*cs+77, 40)
	m, chunks := sinkBlob(t, s, data, cs)
	if err := s.PutChunk(m.Chunks[2], chunks[2]); err != nil { // held before the get
		t.Fatal(err)
	}
	if _, err := s.OwnSink(blobIDOf([]byte("not stored"), cs), m); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("OwnSink of a blob without a stored manifest: %v, want ErrNotFound", err)
	}
	sk, err := s.OwnSink(m.CID(), m)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range chunks {
		if i != 2 {
			if err := s.PutVerifiedChunk(m.Chunks[i], c); err != nil {
				t.Fatalf("chunk %d: %v", i, err)
			}
		}
	}
	if err := sk.Commit(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "blobs", m.CID().String()+".s0")
	if c, b := countFiles(t, filepath.Join(dir, "chunks")), countFiles(t, filepath.Join(dir, "blobs")); c != 1 || b != 1 {
		t.Fatalf("%d chunk files and %d blob files, want the chunk held before and 1", c, b)
	}
	if !holeAt(t, path, 2*cs, cs) || holeAt(t, path, 3*cs, cs) {
		t.Fatal("the chunk held before is not a hole in the blob file, or a fetched one is")
	}
	if p, _ := chunkAt(t, s, m.Chunks[4]); p != path {
		t.Fatalf("chunk 4 served from %s, want the blob file", p)
	}
	if !bytes.Equal(readBlob(t, s, m), data) {
		t.Fatal("bytes differ")
	}

	// A second blob, its get cut after two chunks.
	data2 := randBytes(5*cs, 41)
	m2, chunks2 := sinkBlob(t, s, data2, cs)
	sk2, err := s.OwnSink(m2.CID(), m2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := s.PutVerifiedChunk(m2.Chunks[i], chunks2[i]); err != nil {
			t.Fatal(err)
		}
	}
	sk2.Abort()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, 64<<20)
	if u := s.Usage(); u.DamagedChunks != 0 || u.Chunks != 7+2 {
		t.Fatalf("after a restart: %+v, want the 7 chunks of the first blob and 2 of the second, none damaged", u)
	}
	for i, h := range m2.Chunks {
		if s.HasChunk(h) != (i < 2) {
			t.Fatalf("chunk %d of the cut get held %v after a restart", i, s.HasChunk(h))
		}
	}
	if !bytes.Equal(readBlob(t, s, m), data) {
		t.Fatal("bytes differ after a restart")
	}
}
