package cache

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

// openIn counts this process's descriptors open on files under dir.
func openIn(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		if p, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(p, dir+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

// TestPunchDescriptorKept: the chunks evicted from a put's blob file are
// punched out through one write descriptor of the file, opened at the
// first punch and kept for the next (before, each punch opened and closed
// the file under the store's lock); the descriptors are bounded
// (maxPunchFiles), closed when the file is handed out or unlinked and at
// each flush round, so none is open at rest.
func TestPunchDescriptorKept(t *testing.T) {
	const cs = 16 << 10
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	blobs := filepath.Join(dir, "blobs")
	var ms []*blob.Manifest
	for i := range maxPunchFiles + 2 {
		rec, err := s.Ingest(ctx, fmt.Sprintf("b/%d", i), bytes.NewReader(randBytes(8*cs, uint64(70+i))), cs, "me")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.RemoveName(rec.Name); err != nil {
			t.Fatal(err)
		}
		m, err := s.Manifest(rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	evict := func(h blob.Hash) *os.File {
		s.mu.Lock()
		defer s.mu.Unlock()
		e := s.chunks[h]
		bf := e.bf
		s.removeLocked(e)
		return bf.wf
	}
	// Three chunks of the first file: one descriptor, the same each time.
	first := evict(ms[0].Chunks[0])
	for _, h := range ms[0].Chunks[1:3] {
		if wf := evict(h); wf == nil || wf != first {
			t.Fatalf("punch descriptor %p after a second punch, want the first's %p", wf, first)
		}
	}
	if n := openIn(t, blobs); n != 1 {
		t.Fatalf("%d descriptors open on blob files after 3 punches of one, want 1", n)
	}
	path0 := filepath.Join(blobs, ms[0].CID().String()+".s0")
	for i := range 3 {
		if !holeAt(t, path0, int64(i)*cs, cs) {
			t.Fatalf("chunk %d not punched out", i)
		}
	}
	// One punch in each of the others: never more than maxPunchFiles open.
	for _, m := range ms[1:] {
		evict(m.Chunks[0])
		if n := openIn(t, blobs); n > maxPunchFiles {
			t.Fatalf("%d descriptors open on blob files, want at most %d", n, maxPunchFiles)
		}
	}
	// Handing a file out closes its descriptor.
	last := ms[len(ms)-1]
	f, _, _, err := s.OpenChunkShared(last.Chunks[1])
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	s.mu.Lock()
	if e := s.chunks[last.Chunks[1]]; e.bf.wf != nil {
		t.Fatal("a handed-out file keeps its punch descriptor")
	}
	s.mu.Unlock()
	// The last chunk of a file unlinks it and closes the descriptor.
	m := ms[len(ms)-2]
	for _, h := range m.Chunks[1:] {
		evict(h)
	}
	if _, err := os.Stat(filepath.Join(blobs, m.CID().String()+".s0")); !os.IsNotExist(err) {
		t.Fatalf("the emptied blob file: %v, want it gone", err)
	}
	before := openIn(t, blobs)
	s.flushRound(ctx, &gcState{})
	if n := openIn(t, blobs); n != 0 || before == 0 {
		t.Fatalf("%d descriptors open on blob files after a flush round (%d before), want 0", n, before)
	}
	// The file's remaining chunks still read back whole.
	data := readBlob(t, s, &blob.Manifest{Size: 5 * cs, ChunkSize: cs, Chunks: ms[0].Chunks[3:]})
	if len(data) != 5*cs {
		t.Fatalf("read %d bytes", len(data))
	}
}
