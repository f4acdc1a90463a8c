package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/stablefile"
)

func TestIngestRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	data := randBytes(5<<20+123, 7)
	before := time.Now().UnixNano()
	rec, err := s.Ingest(ctx, "shared/in.dat", bytes.NewReader(data), blob.DefaultChunkSize, "peerMe")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Name != "shared/in.dat" || rec.Size != uint64(len(data)) || rec.Origin != "peerMe" || rec.Time < before {
		t.Fatalf("record %+v", rec)
	}
	if got, err := s.Record("shared/in.dat"); err != nil || !got.Equal(rec) {
		t.Fatalf("Record: %+v %v, want %+v", got, err, rec)
	}
	m, err := s.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Chunks) != 6 || m.Size != uint64(len(data)) || !m.CID().Equals(rec.ID) {
		t.Fatalf("manifest: %d chunks, size %d", len(m.Chunks), m.Size)
	}
	if !bytes.Equal(readBlob(t, s, m), data) {
		t.Fatal("blob bytes differ")
	}
	if !s.HasBlob(rec.ID) || !s.Pinned(rec.ID) {
		t.Fatal("ingested blob not complete and pinned")
	}
	if u := s.Usage(); u.PinnedBytes != int64(len(data)) || u.UsedBytes != int64(len(data)) || u.Chunks != 6 {
		t.Fatalf("usage %+v", u)
	}

	// One blob file of the store's own, DIR/blobs/<cid>.s0, holds the
	// blob's bytes: no chunk file.
	if n, b := countFiles(t, filepath.Join(dir, "chunks")), countFiles(t, filepath.Join(dir, "blobs")); n != 0 || b != 1 {
		t.Fatalf("a put made %d chunk files and %d blob files, want 0 and 1", n, b)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "blobs", rec.ID.String()+".s0")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the put's blob file: %v (or its bytes differ)", err)
	}

	// The same bytes under another name: nothing stored twice (its blob
	// file, whose chunks are all stored already, is gone).
	if _, err := s.Ingest(ctx, "copy", bytes.NewReader(data), blob.DefaultChunkSize, "peerMe"); err != nil {
		t.Fatal(err)
	}
	if u := s.Usage(); u.Chunks != 6 || u.UsedBytes != int64(len(data)) || countFiles(t, filepath.Join(dir, "blobs")) != 1 ||
		countFiles(t, filepath.Join(dir, "chunks")) != 0 || countFiles(t, filepath.Join(dir, "tmp")) != 0 {
		t.Fatalf("re-ingest of the same bytes stored new chunks: %+v", u)
	}

	// New content under the same name: the name's pin moves to it.
	data2 := randBytes(100_000, 8)
	rec2, err := s.Ingest(ctx, "shared/in.dat", bytes.NewReader(data2), blob.MinChunkSize, "peerMe")
	if err != nil {
		t.Fatal(err)
	}
	if !rec2.Newer(rec) || !s.Pinned(rec2.ID) {
		t.Fatal("second version not current and pinned")
	}
	if !s.Pinned(rec.ID) { // still pinned by "copy"
		t.Fatal("blob pinned by another name lost its pin")
	}
	if err := s.RemoveName("copy"); err != nil {
		t.Fatal(err)
	}
	if s.Pinned(rec.ID) {
		t.Fatal("first version still pinned after its names moved on")
	}
	if h, err := s.History("shared/in.dat"); err != nil || len(h) != 2 || !h[0].ID.Equals(rec2.ID) {
		t.Fatalf("history %v %v", h, err)
	}

	// Empty blob.
	rec0, err := s.Ingest(ctx, "empty", bytes.NewReader(nil), blob.DefaultChunkSize, "peerMe")
	if err != nil || rec0.Size != 0 || !s.HasBlob(rec0.ID) {
		t.Fatalf("empty blob: %+v %v", rec0, err)
	}
	if _, err := s.Ingest(ctx, "badcs", bytes.NewReader(data), 100, "peerMe"); err == nil {
		t.Fatal("chunk size 100 accepted")
	}
}

// openInput opens the file of ingestPath (a variable so that tests can
// step in between the reads).
var openInput = func(ctx context.Context, path string) (io.ReadCloser, error) {
	return stablefile.Open(ctx, path)
}

// ingestPath is what the daemon does with a file a caller passes (rpcbridge
// PUT_FD, PUT_FILE): Ingest reading it through stablefile.
func ingestPath(s *Store, ctx context.Context, name, path string, chunkSize int, origin string) (blob.Record, error) {
	r, err := openInput(ctx, path)
	if err != nil {
		return blob.Record{}, fmt.Errorf("ingest %q: %w", name, err)
	}
	defer r.Close()
	return s.Ingest(ctx, name, r, chunkSize, origin)
}

func TestIngestFile(t *testing.T) {
	s := openStore(t, t.TempDir(), 1<<30)
	data := randBytes(300_000, 9)
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := ingestPath(s, context.Background(), "f", path, 64<<10, "me")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := s.Manifest(rec.ID)
	if !bytes.Equal(readBlob(t, s, m), data) {
		t.Fatal("bytes differ")
	}
	if _, err := ingestPath(s, context.Background(), "g", path+".missing", 64<<10, "me"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := s.Record("g"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatal("failed ingest left a name")
	}
}

// hookReader yields n pseudo-random bytes, calling hook once after at bytes
// and failing with err (if set) at that point.
type hookReader struct {
	n, at, pos int
	hook       func()
	err        error
	src        []byte
}

func (r *hookReader) Read(p []byte) (int, error) {
	if r.pos >= r.n {
		return 0, io.EOF
	}
	if r.pos >= r.at && r.hook != nil {
		r.hook()
		r.hook = nil
		if r.err != nil {
			return 0, r.err
		}
	}
	k := min(len(p), r.n-r.pos, len(r.src))
	copy(p, r.src[:k])
	r.src = append(r.src[k:], r.src[:k]...) // rotate so chunks differ
	r.pos += k
	return k, nil
}

func TestIngestFailureLeavesNoName(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	keep, err := s.Ingest(ctx, "keep", bytes.NewReader(randBytes(200_000, 10)), blob.MinChunkSize, "me")
	if err != nil {
		t.Fatal(err)
	}
	base := s.Usage()

	readErr := errors.New("disk controller on fire")
	var sawDuring error
	r := &hookReader{n: 8 << 20, at: 3 << 20, src: randBytes(1<<20+37, 11), err: readErr, hook: func() {
		_, sawDuring = s.Record("half")
	}}
	if _, err := s.Ingest(ctx, "half", r, 256<<10, "me"); !errors.Is(err, readErr) {
		t.Fatalf("Ingest with failing reader: %v, want the reader's error", err)
	}
	if !errors.Is(sawDuring, blob.ErrNotFound) {
		t.Fatalf("name visible while ingesting: %v", sawDuring)
	}
	if _, err := s.Record("half"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Record after failed ingest: %v", err)
	}
	if u := s.Usage(); u != base {
		t.Fatalf("failed ingest changed usage (pins or chunks left): %+v, before %+v", u, base)
	}

	// Cancelled context.
	cctx, cancel := context.WithCancel(ctx)
	r = &hookReader{n: 8 << 20, at: 2 << 20, src: randBytes(1<<20+41, 12), hook: cancel}
	if _, err := s.Ingest(cctx, "cancelled", r, 256<<10, "me"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Ingest with cancelled ctx: %v, want context.Canceled", err)
	}
	if _, err := s.Record("cancelled"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Record after cancelled ingest: %v", err)
	}
	if u := s.Usage(); u != base {
		t.Fatalf("cancelled ingest changed usage: %+v, before %+v", u, base)
	}
	if recs, _ := s.List(""); len(recs) != 1 || !recs[0].Equal(keep) {
		t.Fatalf("names after failures: %v", recs)
	}
	if n := countFiles(t, filepath.Join(dir, "tmp")); n != 0 {
		t.Fatalf("%d temp files left", n)
	}
}

func TestIngestNoSpaceWhenCapPinned(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), 4<<20)
	a := randBytes(4<<20, 13)
	recA, err := s.Ingest(ctx, "a", bytes.NewReader(a), blob.DefaultChunkSize, "me")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Ingest(ctx, "b", bytes.NewReader(randBytes(2<<20, 14)), blob.DefaultChunkSize, "me")
	if !errors.Is(err, blob.ErrNoSpace) {
		t.Fatalf("ingest into a cap full of pinned data: %v, want ErrNoSpace", err)
	}
	if _, err := s.Record("b"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("name visible after ErrNoSpace: %v", err)
	}
	m, _ := s.Manifest(recA.ID)
	if !bytes.Equal(readBlob(t, s, m), a) {
		t.Fatal("pinned blob damaged")
	}
	if u := s.Usage(); u.PinnedBytes != 4<<20 || u.UsedBytes != 4<<20 {
		t.Fatalf("usage %+v", u)
	}
	// A blob larger than the whole cap fails too, even with nothing pinned.
	if err := s.RemoveName("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ingest(ctx, "huge", bytes.NewReader(randBytes(5<<20, 15)), blob.DefaultChunkSize, "me"); !errors.Is(err, blob.ErrNoSpace) {
		t.Fatalf("blob over the cap: %v, want ErrNoSpace", err)
	}
}

func TestReopenKeepsState(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(3<<20+5, 16)
	rec, err := s.Ingest(ctx, "n/one", bytes.NewReader(data), blob.DefaultChunkSize, "me")
	if err != nil {
		t.Fatal(err)
	}
	old := blob.Record{Name: "n/one", ID: testID(9), Time: 1, Origin: "x"}
	if _, err := s.PutRecord(old); err != nil {
		t.Fatal(err)
	}
	free := putChunk(t, s, 10_000, 17)
	freeID, _ := s.PutManifest(&blob.Manifest{Size: 10_000, ChunkSize: blob.MinChunkSize * 4, Chunks: []blob.Hash{free}})
	if _, err := Open(dir, Options{MaxBytes: 64 << 20}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open of a store in use: %v, want ErrLocked", err)
	}
	before := s.Usage()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	s = openStore(t, dir, 64<<20)
	if u := s.Usage(); u != before {
		t.Fatalf("usage after reopen %+v, before %+v", u, before)
	}
	if got, err := s.Record("n/one"); err != nil || !got.Equal(rec) {
		t.Fatalf("record after reopen: %+v %v", got, err)
	}
	if h, _ := s.History("n/one"); len(h) != 2 {
		t.Fatalf("history after reopen: %v", h)
	}
	if !s.Pinned(rec.ID) || s.Pinned(freeID) || !s.HasBlob(freeID) {
		t.Fatal("pins changed across reopen")
	}
	m, _ := s.Manifest(rec.ID)
	if !bytes.Equal(readBlob(t, s, m), data) {
		t.Fatal("bytes changed across reopen")
	}
}

func TestOpenReconcilesFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	gone := putChunk(t, s, 20_000, 18)
	stay := putChunk(t, s, 20_000, 19)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Crash debris: a file without an index entry (at the older two-level
	// shard path, which Open migrates), an entry without a file, temp
	// files, and a stray file.
	orphan := randBytes(30_000, 20)
	oh := blob.HashChunk(orphan)
	op := filepath.Join(dir, "chunks", oh.String()[:2], oh.String()[2:4], oh.String())
	os.MkdirAll(filepath.Dir(op), 0o755)
	if err := os.WriteFile(op, orphan, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "chunks", gone.String()[:2], gone.String())); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "tmp", "chunk-123"), []byte("partial"), 0o644)
	os.WriteFile(filepath.Join(dir, "chunks", "junk"), []byte("?"), 0o644)

	s = openStore(t, dir, 64<<20)
	if s.HasChunk(gone) || !s.HasChunk(stay) || !s.HasChunk(oh) {
		t.Fatalf("after reconcile: gone %v stay %v orphan %v", s.HasChunk(gone), s.HasChunk(stay), s.HasChunk(oh))
	}
	if u := s.Usage(); u.UsedBytes != 50_000 || u.Chunks != 2 {
		t.Fatalf("usage %+v", u)
	}
	if got, err := s.ReadChunk(oh); err != nil || !bytes.Equal(got, orphan) {
		t.Fatalf("adopted chunk: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "chunks", oh.String()[:2], oh.String())); err != nil {
		t.Fatalf("adopted chunk not moved to the current layout: %v", err)
	}
	if countFiles(t, filepath.Join(dir, "tmp")) != 0 || countFiles(t, filepath.Join(dir, "chunks")) != 2 {
		t.Fatal("debris left after Open")
	}
}

// TestIngestSync: with Options.Sync, Ingest syncs the file system once all
// its chunk files exist and before its record does; a failing sync fails
// the ingest and leaves no name; without Sync there is no sync.
func TestIngestSync(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 1 << 30, Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := randBytes(3<<20+5, 21)
	chunks := blob.NumChunks(uint64(len(data)), 1<<20)
	var calls int
	var syncErr error
	wantFiles, wantAbsent := 1, "synced" // the put's blob file, in DIR/blobs before the sync
	_ = chunks
	old := syncFS
	defer func() { syncFS = old }()
	syncFS = func(d string) error {
		calls++
		if d != dir {
			t.Errorf("synced %s, want the store's directory %s", d, dir)
		}
		if n := countFiles(t, filepath.Join(dir, "blobs")) + countFiles(t, filepath.Join(dir, "chunks")); n != wantFiles {
			t.Errorf("sync with %d blob and chunk files in place, want %d", n, wantFiles)
		}
		if _, err := s.Record(wantAbsent); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("record visible before the sync: %v", err)
		}
		if syncErr != nil {
			return syncErr
		}
		return old(d)
	}
	if _, err := s.Ingest(ctx, "synced", bytes.NewReader(data), 1<<20, "me"); err != nil {
		t.Fatal(err)
	}
	if calls != 1 {
		t.Fatalf("%d syncs for one ingest, want 1", calls)
	}
	syncErr = errors.New("I/O error")
	wantFiles, wantAbsent = 2, "unsynced" // and the second's, of one chunk: its chunk file
	if _, err := s.Ingest(ctx, "unsynced", bytes.NewReader(randBytes(1000, 22)), 1<<20, "me"); !errors.Is(err, syncErr) {
		t.Fatalf("ingest with a failing sync: %v, want the sync's error", err)
	}
	if _, err := s.Record("unsynced"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("name after a failed sync: %v", err)
	}

	// Without Sync: no call.
	plain := openStore(t, t.TempDir(), 1<<30)
	calls = 0
	syncFS = func(string) error { calls++; return nil }
	if _, err := plain.Ingest(ctx, "x", bytes.NewReader(data), 1<<20, "me"); err != nil || calls != 0 {
		t.Fatalf("ingest without Sync: err %v, %d syncs", err, calls)
	}
}

// TestIngestReaderErrorIsNotEnd: a reader that yields some bytes and then
// an error (io.ErrUnexpectedEOF wrapped as a cut connection reports it,
// bare, or any other error) fails the ingest: no record, no pin, no chunk
// left; with and without Options.Sync. Only io.EOF itself ends the input.
func TestIngestReaderErrorIsNotEnd(t *testing.T) {
	for _, durable := range []bool{false, true} {
		ctx := context.Background()
		dir := t.TempDir()
		s, err := Open(dir, Options{MaxBytes: 1 << 30, Sync: durable})
		if err != nil {
			t.Fatal(err)
		}
		keep, err := s.Ingest(ctx, "keep", bytes.NewReader(randBytes(200_000, 40)), blob.MinChunkSize, "me")
		if err != nil {
			t.Fatal(err)
		}
		base := s.Usage()
		for i, readErr := range []error{
			fmt.Errorf("put stream: %w", io.ErrUnexpectedEOF),
			io.ErrUnexpectedEOF,
			fmt.Errorf("put stream: %w", io.EOF),
			errors.New("client went away"),
		} {
			name := fmt.Sprintf("cut/%d", i)
			// 3 MiB + 5: a cut in the middle of a chunk, after whole ones.
			r := &hookReader{n: 8 << 20, at: 3<<20 + 5, src: randBytes(1<<20+37, uint64(41+i)), err: readErr, hook: func() {}}
			rec, err := s.Ingest(ctx, name, r, 1<<20, "me")
			if !errors.Is(err, readErr) {
				t.Errorf("sync %v: Ingest cut by %q = %+v, %v; want the reader's error", durable, readErr, rec, err)
			}
			if _, err := s.Record(name); !errors.Is(err, blob.ErrNotFound) {
				t.Errorf("sync %v: record after a reader error %q: %v", durable, readErr, err)
			}
			if u := s.Usage(); u != base {
				t.Errorf("sync %v: reader error %q changed usage (pins or chunks left): %+v, before %+v", durable, readErr, u, base)
			}
		}
		if recs, _ := s.List(""); len(recs) != 1 || !recs[0].Equal(keep) {
			t.Errorf("sync %v: names after cut ingests: %v", durable, recs)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// stepReader calls hook once, after more than at bytes were read through it.
type stepReader struct {
	io.ReadCloser
	at, pos int64
	hook    func()
}

func (r *stepReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.pos += int64(n)
	if r.hook != nil && r.pos > r.at {
		r.hook()
		r.hook = nil
	}
	return n, err
}

// TestIngestFileChanged: a file that shrinks, grows or is rewritten while
// IngestFile reads it (changed right after the first chunk was read) fails
// the ingest with stablefile.ErrChanged naming the file: no record, no pin,
// no chunk left; with and without Options.Sync. An unchanged file and a
// FIFO (a stream, to its end of file) are stored.
func TestIngestFileChanged(t *testing.T) {
	const size = 8 << 20
	old := openInput
	defer func() { openInput = old }()
	for _, durable := range []bool{false, true} {
		ctx := context.Background()
		s, err := Open(t.TempDir(), Options{MaxBytes: 1 << 30, Sync: durable})
		if err != nil {
			t.Fatal(err)
		}
		base := s.Usage()
		for _, tc := range []struct {
			name   string
			change func(path string) error
			want   string // "" = the ingest succeeds
		}{
			{"unchanged", nil, ""},
			{"shrank", func(path string) error { return os.Truncate(path, 3<<20+100) },
				fmt.Sprintf("it shrank from %d to %d bytes", size, 3<<20+100)},
			{"grew", func(path string) error {
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					return err
				}
				_, err = f.Write([]byte("appended"))
				return errors.Join(err, f.Close())
			}, fmt.Sprintf("it grew beyond its %d bytes", size)},
			{"rewritten", func(path string) error {
				f, err := os.OpenFile(path, os.O_WRONLY, 0)
				if err != nil {
					return err
				}
				_, err = f.WriteAt([]byte("changed"), 6<<20)
				if err = errors.Join(err, f.Close()); err != nil {
					return err
				}
				when := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
				return os.Chtimes(path, when, when)
			}, "modified"},
		} {
			path := filepath.Join(t.TempDir(), tc.name+".bin")
			data := randBytes(size, 50)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			openInput = func(ctx context.Context, p string) (io.ReadCloser, error) {
				r, err := old(ctx, p)
				if err != nil || tc.change == nil {
					return r, err
				}
				return &stepReader{ReadCloser: r, at: 1 << 20, hook: func() {
					if err := tc.change(p); err != nil {
						t.Errorf("%s: %v", tc.name, err)
					}
				}}, nil
			}
			rec, err := ingestPath(s, ctx, "f/"+tc.name, path, 1<<20, "me")
			if tc.want == "" {
				if err != nil || rec.Size != size {
					t.Fatalf("sync %v: %s: %+v %v", durable, tc.name, rec, err)
				}
				if err := s.RemoveName("f/" + tc.name); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if !errors.Is(err, stablefile.ErrChanged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("sync %v: %s: ingest = %+v, %v; want ErrChanged naming %s and %q", durable, tc.name, rec, err, path, tc.want)
			}
			if _, err := s.Record("f/" + tc.name); !errors.Is(err, blob.ErrNotFound) {
				t.Errorf("sync %v: %s: record after a changed file: %v", durable, tc.name, err)
			}
			if u := s.Usage(); u.PinnedBytes != base.PinnedBytes {
				t.Errorf("sync %v: %s: pinned bytes %d after a failed ingest, want %d", durable, tc.name, u.PinnedBytes, base.PinnedBytes)
			}
		}
		openInput = old

		// A FIFO is a stream: read to its end of file.
		fifo := filepath.Join(t.TempDir(), "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		data := randBytes(3<<20+7, 51)
		go func() {
			if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				w.Write(data)
				w.Close()
			}
		}()
		rec, err := ingestPath(s, ctx, "fifo", fifo, 1<<20, "me")
		if err != nil || rec.Size != uint64(len(data)) {
			t.Fatalf("sync %v: FIFO: %+v %v", durable, rec, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// zeroReader reads as an endless stream of zero bytes.
type zeroReader struct{ read int64 }

func (z *zeroReader) Read(p []byte) (int, error) {
	clear(p)
	z.read += int64(len(p))
	return len(p), nil
}

// A put beyond the chunk bounds (blob.CheckSize) fails at the putter's own
// store with blob.ErrTooBig (issue 24: a worker's 64 GiB of zeros in 4 KiB
// chunks made its head replicate a manifest of 16 million chunks): a
// regular file before a byte is read, a stream once it passes the bound;
// neither leaves a name or a pin.
func TestIngestTooManyChunks(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), 1<<30)
	path := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 30); err != nil { // sparse: no disk used
		t.Skipf("no sparse file here: %v", err)
	}
	f.Close()
	start := time.Now()
	_, err = ingestPath(s, ctx, "zeros/file", path, blob.MinChunkSize, "me")
	if !errors.Is(err, blob.ErrTooBig) || !strings.Contains(err.Error(), "use a chunk size of 1 MiB or more") || !strings.Contains(err.Error(), `"zeros/file"`) {
		t.Fatalf("64 GiB file in 4 KiB chunks: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("the refusal took %v: the file was read", el)
	}
	// The same file in 1 MiB chunks is within the bounds: not refused up
	// front (the ingest is cut short here by a cancelled context).
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := ingestPath(s, cctx, "zeros/file", path, blob.DefaultChunkSize, "me"); errors.Is(err, blob.ErrTooBig) {
		t.Fatalf("64 GiB in 1 MiB chunks refused: %v", err)
	}

	z := &zeroReader{}
	_, err = s.Ingest(ctx, "zeros/stream", io.LimitReader(z, 64<<30), blob.MinChunkSize, "me")
	if !errors.Is(err, blob.ErrTooBig) || !strings.Contains(err.Error(), "65536 chunks") {
		t.Fatalf("a 64 GiB stream in 4 KiB chunks: %v", err)
	}
	if z.read > 257<<20 {
		t.Fatalf("read %d bytes of the stream before refusing it", z.read)
	}
	for _, name := range []string{"zeros/file", "zeros/stream"} {
		if _, err := s.Record(name); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("%s: a refused put left a record: %v", name, err)
		}
	}
	// (The zero chunk, which the stream's run wrote and then met again,
	// may stay as an orphan: evicted first.)
	if u := s.Usage(); u.PinnedBytes != 0 || u.UsedBytes != u.OrphanedBytes || u.UsedBytes > blob.MinChunkSize {
		t.Fatalf("a refused put left chunks: %+v", u)
	}
}
