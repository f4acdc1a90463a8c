package cache

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSinkWriteRacesEnd: a chunk whose write into an OwnSink's file meets
// the sink's end (Commit or Abort closing the file) is stored all the
// same: when the write found the file closed, in a chunk file; when it
// wrote before the end, in the blob file, which the store keeps. Before,
// PutVerifiedChunk failed with the closed file's error in the first case
// and returned nil without storing the chunk in the second. A write that
// fails while the sink is open (a full disk) still fails the put and
// reaches the sink's Err.
func TestSinkWriteRacesEnd(t *testing.T) {
	const cs = 64 << 10
	for _, tc := range []struct {
		name  string
		done  bool // the sink ends after the write, not before it
		abort bool
	}{
		{"commit before the write", false, false},
		{"abort before the write", false, true},
		{"commit after the write", true, false},
		{"abort after the write", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, Options{MaxBytes: 64 << 20, VerifiedMemoBytes: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			data := randBytes(4*cs, 60)
			m, chunks := sinkBlob(t, s, data, cs)
			sk, err := s.OwnSink(m.CID(), m)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.PutVerifiedChunk(m.Chunks[0], chunks[0]); err != nil {
				t.Fatal(err)
			}
			in, release := holdSinkWrite(t, tc.done)
			errc := make(chan error, 1)
			go func() { errc <- s.PutVerifiedChunk(m.Chunks[1], chunks[1]) }()
			<-in
			if tc.abort {
				sk.Abort()
			} else if err := sk.Commit(); err != nil {
				t.Fatal(err)
			}
			close(release)
			if err := <-errc; err != nil {
				t.Fatalf("the put that met the sink's end: %v", err)
			}
			sinkWriteHook = nil
			for i := range 2 {
				got, err := s.ReadChunk(m.Chunks[i])
				if err != nil || !bytes.Equal(got, chunks[i]) {
					t.Fatalf("chunk %d after the sink's end: %v", i, err)
				}
			}
			if err := sk.Err(); err != nil {
				t.Fatalf("the sink's Err: %v, want nil (it ended; nothing failed while open)", err)
			}
			p1, _ := chunkAt(t, s, m.Chunks[1])
			inBlob := filepath.Dir(p1) == filepath.Join(dir, "blobs")
			if inBlob != tc.done {
				t.Fatalf("chunk 1 is in %s: want the blob file %v", p1, tc.done)
			}
			// Both survive a restart, undamaged.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openStore(t, dir, 64<<20)
			for i := range 2 {
				got, err := s.ReadChunk(m.Chunks[i])
				if err != nil || !bytes.Equal(got, chunks[i]) {
					t.Fatalf("chunk %d after a restart: %v", i, err)
				}
			}
			if u := s.Usage(); u.DamagedChunks != 0 || u.Chunks != 2 {
				t.Fatalf("after a restart: %+v, want 2 chunks, none damaged", u)
			}
		})
	}

	// A write failing while the sink is open fails the put and the sink.
	dir := t.TempDir()
	s := openStore(t, dir, 64<<20)
	data := randBytes(2*cs, 61)
	m, chunks := sinkBlob(t, s, data, cs)
	sk, err := s.OwnSink(m.CID(), m)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := os.Open(sk.bf.path)
	if err != nil {
		t.Fatal(err)
	}
	own := sk.f
	sinkWriteHook = func(sk *Sink, done bool) {
		if !done {
			sk.f = ro // a descriptor that cannot write: the write fails, the sink open
		}
	}
	defer func() { sinkWriteHook = nil }()
	err = s.PutVerifiedChunk(m.Chunks[0], chunks[0])
	sinkWriteHook = nil
	sk.f = own
	ro.Close()
	if err == nil || sk.Err() == nil {
		t.Fatalf("a write failing into an open sink: put %v, Err %v; want both failed", err, sk.Err())
	}
	if s.HasChunk(m.Chunks[0]) {
		t.Fatal("the chunk whose write failed is held")
	}
	sk.Abort()
}

// TestSinkSameChunkTwice: two puts of one chunk racing into an OwnSink
// (two sources of the same chunk) both write it at its offset; the first
// to take the store's lock locates it there, and the second, finding it
// held, must not punch it out as a second copy: it is the same range.
// Before, the second punched the first's bytes and the chunk read as
// zeros (dropped as damaged).
func TestSinkSameChunkTwice(t *testing.T) {
	const cs = 64 << 10
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 64 << 20, VerifiedMemoBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	data := randBytes(3*cs, 62)
	m, chunks := sinkBlob(t, s, data, cs)
	sk, err := s.OwnSink(m.CID(), m)
	if err != nil {
		t.Fatal(err)
	}
	defer sk.Abort()
	in, release := make(chan struct{}), make(chan struct{})
	first := true
	sinkWriteHook = func(_ *Sink, done bool) {
		if !done && first { // the first put waits before its write
			first = false
			close(in)
			<-release
		}
	}
	defer func() { sinkWriteHook = nil }()
	errc := make(chan error, 1)
	go func() { errc <- s.PutVerifiedChunk(m.Chunks[1], chunks[1]) }()
	<-in
	if err := s.PutVerifiedChunk(m.Chunks[1], chunks[1]); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	sinkWriteHook = nil
	got, err := s.ReadChunk(m.Chunks[1])
	if err != nil || !bytes.Equal(got, chunks[1]) {
		t.Fatalf("the chunk put twice: %v (damaged: %d)", err, s.Usage().DamagedChunks)
	}
}

// TestAbortWaitsForWrites: Abort of a get's sink (a caller's file) returns
// only once the store's writes under way into the file have returned, so
// that no descriptor of the store's holds the file when the caller removes
// it. Before, Abort closed the store's descriptor under a write still
// running and returned at once; the descriptor closed when that write
// did, and until then the removed file's space stayed taken: a get failing
// on a full disk left the next get on that disk failing with no space too
// (TestGetToFileFullDisk in pkg/node, once in about 30 runs under load).
func TestAbortWaitsForWrites(t *testing.T) {
	const cs = 64 << 10
	dir := t.TempDir()
	s := openStore(t, dir, 64<<20)
	data := randBytes(4*cs, 62)
	m, chunks := sinkBlob(t, s, data, cs)
	_, sk := linkSinkAt(t, s, filepath.Join(dir, "dst"), m)
	in, release := holdSinkWrite(t, false)
	errc := make(chan error, 1)
	go func() { errc <- s.PutVerifiedChunk(m.Chunks[1], chunks[1]) }()
	<-in
	aborted := make(chan struct{})
	go func() { sk.Abort(); close(aborted) }()
	select {
	case <-aborted:
		close(release)
		t.Fatal("Abort returned while a write into the file was under way")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case <-aborted:
	case <-time.After(10 * time.Second):
		t.Fatal("Abort did not return once the write ended")
	}
	if err := <-errc; err != nil {
		t.Fatalf("the put that met the abort: %v", err)
	}
	sinkWriteHook = nil
	if got, err := s.ReadChunk(m.Chunks[1]); err != nil || !bytes.Equal(got, chunks[1]) {
		t.Fatalf("the chunk whose write met the abort: %v", err)
	}
}
