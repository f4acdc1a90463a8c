package cache

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// storeBlocks is the bytes of disk blocks held by the store's chunk and
// blob files (what du counts).
func storeBlocks(t *testing.T, s *Store) int64 {
	t.Helper()
	var n int64
	for _, dir := range []string{s.chunkDir, s.blobDir} {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			st, err := os.Stat(p)
			if err != nil {
				return err
			}
			n += st.Sys().(*syscall.Stat_t).Blocks * 512
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// getIntoFile stores data as a blob fetched into the caller's new file dst
// (LinkSink, every chunk given while the sink is open, Commit) and returns
// the caller's open descriptor of dst.
func getIntoFile(t *testing.T, s *Store, dst string, data []byte, cs int) *os.File {
	t.Helper()
	m, chunks := sinkBlob(t, s, data, cs)
	f, sk := linkSinkAt(t, s, dst, m)
	for i, c := range chunks {
		if err := s.PutVerifiedChunk(m.Chunks[i], c); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
	}
	if err := sk.Commit(); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return f
}

// TestEvictAbandonedCallerFile: once the caller has removed the file its
// get wrote (the store's link is the last), the first eviction of one of
// its chunks takes the file out of the store whole, so its blocks are
// freed and the store's files hold no more than the cap; a caller still
// holding the file open reads its bytes unchanged. While the caller keeps
// the file, its chunks leave one by one as before. Before, the removed
// file stayed in DIR/blobs with all its blocks until its last chunk was
// evicted (a 1 GiB get's file held 2 GiB on disk under a 1.2 GiB cap in
// scripts/profile-fetch.py --gets).
func TestEvictAbandonedCallerFile(t *testing.T) {
	const cs = 64 << 10
	const capBytes = 8 * cs
	for _, removed := range []bool{true, false} {
		dir := t.TempDir()
		s := openStore(t, filepath.Join(dir, "store"), capBytes)
		dataA := randBytes(6*cs, 21)
		dst := filepath.Join(dir, "a")
		f := getIntoFile(t, s, dst, dataA, cs)
		if removed {
			if err := os.Remove(dst); err != nil {
				t.Fatal(err)
			}
		}
		// A second blob of 3 chunks needs room for one more chunk.
		mB, chunksB := sinkBlob(t, s, randBytes(3*cs, 22), cs)
		for i, c := range chunksB {
			if err := s.PutChunk(mB.Chunks[i], c); err != nil {
				t.Fatalf("chunk %d of B: %v", i, err)
			}
		}
		u := s.Usage()
		blocks := storeBlocks(t, s)
		files := countFiles(t, s.blobDir)
		got := make([]byte, len(dataA))
		if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, dataA) {
			t.Fatalf("removed %v: the caller's open file reads other bytes after the eviction (err %v)", removed, err)
		}
		if removed {
			if files != 0 {
				t.Errorf("the caller removed its file: %d blob files left in the store after an eviction, want 0", files)
			}
			if blocks > capBytes {
				t.Errorf("the caller removed its file: the store's files hold %d bytes of blocks, over the cap of %d", blocks, capBytes)
			}
			if u.UsedBytes != 3*cs {
				t.Errorf("the caller removed its file: %d bytes cached, want %d (B only)", u.UsedBytes, 3*cs)
			}
		} else {
			if files != 1 {
				t.Errorf("the caller kept its file: %d blob files in the store, want 1", files)
			}
			if u.UsedBytes != capBytes {
				t.Errorf("the caller kept its file: %d bytes cached, want %d (one chunk evicted)", u.UsedBytes, capBytes)
			}
		}
	}
}
