package cache

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// indexFileBytes sums the sizes of the index's files whose names end in
// suffix (".sst": the LSM tree's tables; ".vlog": the value log).
func indexFileBytes(t *testing.T, dir, suffix string) int64 {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "index"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			n += info.Size()
		}
	}
	return n
}

// TestIndexTreeSmallPerChunk: a store that keeps the outboards of 8,192
// chunks of 1 MiB (an 8 GiB cache) keeps them in the value log, so that
// its LSM tree holds under 1 KiB per chunk (it held 4.3 KB, the
// outboard's 4,040 bytes with it) and the flush loop's compactions, which
// rewrite the whole tree, write under 1 KiB per chunk stored (with
// outboards in the tree: a level-0 table per ~1,900 chunks at this
// memtable size, and 6 KB per chunk rewritten).
func TestIndexTreeSmallPerChunk(t *testing.T) {
	old := indexMemTableSize
	indexMemTableSize = 8 << 20
	t.Cleanup(func() { indexMemTableSize = old })
	const n = 8192
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: int64(n+1) << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		addBenchChunk(t, s, i)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ix := s.indexStats()
	tree, vlog := indexFileBytes(t, dir, ".sst"), indexFileBytes(t, dir, ".vlog")
	t.Logf("%d chunks: tables %d B (%d B/chunk), value log %d B; %d compactions wrote %d B (%d B/chunk)",
		n, tree, tree/n, vlog, ix.compactions, ix.compactBytes, ix.compactBytes/n)
	if tree/n > 1024 {
		t.Errorf("the index's tables hold %d B per chunk, want under 1 KiB (outboards in the value log)", tree/n)
	}
	if ix.compactBytes/n > 1024 {
		t.Errorf("the index's compactions wrote %d B per chunk stored, want under 1 KiB", ix.compactBytes/n)
	}
	if vlog < n*benchOutboardLen {
		t.Errorf("the value log has %d B, want at least the %d B of the outboards", vlog, n*benchOutboardLen)
	}
	s = openStore(t, dir, int64(n+1)<<20)
	for _, i := range []int{0, n / 2, n - 1} {
		if ob, ok := s.Outboard(benchChunkHash(i)); !ok || !bytes.Equal(ob, benchOutboard(i)) {
			t.Fatalf("chunk %d: outboard %v after a reopen, want it as kept", i, ok)
		}
	}
}

// TestOutboardsInTreeStillRead: a store written in the earlier layout
// (outboards in the LSM tree: Badger's default value threshold) opens
// with the store's and reads those outboards; outboards kept afterwards go
// to the value log; after the flush loop's compaction and another reopen
// both kinds read back, and a dropped chunk's outboard is gone from
// either place.
func TestOutboardsInTreeStillRead(t *testing.T) {
	dir := t.TempDir()
	oldT := indexValueThreshold
	indexValueThreshold = 1 << 20
	s, err := Open(dir, Options{MaxBytes: 1 << 30})
	if err != nil {
		indexValueThreshold = oldT
		t.Fatal(err)
	}
	const n = 200
	for i := 0; i < n; i++ {
		addBenchChunk(t, s, i)
	}
	err = s.Close()
	indexValueThreshold = oldT
	if err != nil {
		t.Fatal(err)
	}
	if v := indexFileBytes(t, dir, ".vlog"); v >= benchOutboardLen {
		t.Fatalf("the earlier layout wrote %d B to the value log, want the outboards in the tree", v)
	}
	s, err = Open(dir, Options{MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	check := func(s *Store, upto int, when string) {
		t.Helper()
		for i := 0; i < upto; i++ {
			if ob, ok := s.Outboard(benchChunkHash(i)); !ok || !bytes.Equal(ob, benchOutboard(i)) {
				t.Fatalf("chunk %d: outboard %v %s, want it as kept", i, ok, when)
			}
		}
	}
	check(s, n, "in the earlier layout, reopened")
	for i := n; i < 2*n; i++ {
		addBenchChunk(t, s, i)
	}
	if err := s.Close(); err != nil { // the value log's files are cut to their size at Close
		t.Fatal(err)
	}
	if v := indexFileBytes(t, dir, ".vlog"); v < n*benchOutboardLen {
		t.Fatalf("the value log has %d B after %d new outboards, want them there", v, n)
	}
	if s, err = Open(dir, Options{MaxBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	check(s, 2*n, "of both layouts, reopened")
	s.DropChunk(benchChunkHash(0), "test")
	s.DropChunk(benchChunkHash(n), "test")
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Flatten(1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, 1<<30)
	for _, i := range []int{0, n} {
		if _, ok := s.Outboard(benchChunkHash(i)); ok {
			t.Errorf("chunk %d dropped, its outboard still read", i)
		}
	}
	for i := 1; i < 2*n; i++ {
		if i == n {
			continue
		}
		if ob, ok := s.Outboard(benchChunkHash(i)); !ok || !bytes.Equal(ob, benchOutboard(i)) {
			t.Fatalf("chunk %d: outboard %v after a compaction and a reopen, want it as kept", i, ok)
		}
	}
}

// TestValueLogReclaimedWhileChurning: a cache that keeps evicting (6,000
// chunks of 1 MiB through a cap of 256) leaves the outboards of the
// evicted chunks as garbage in the value log; the flush loop collects it
// after each compaction, so the log stays under a third of every outboard
// ever written (24 MiB; 1 MiB live; measured 5 MiB), where a collection
// every valueLogGCInterval only kept all of it. Value log files of 1 MiB
// and memtables of 256 KiB so that it happens within the test.
func TestValueLogReclaimedWhileChurning(t *testing.T) {
	oldM, oldV := indexMemTableSize, indexValueLogFileSize
	indexMemTableSize, indexValueLogFileSize = 256<<10, 1<<20
	t.Cleanup(func() { indexMemTableSize, indexValueLogFileSize = oldM, oldV })
	const n, live = 6000, 256
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: live << 20})
	if err != nil {
		t.Fatal(err)
	}
	gc := gcState{last: time.Now()}
	for i := 0; i < n; i++ {
		s.mu.Lock()
		err := s.evictLocked(1 << 20) // as storeChunk does
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		addBenchChunk(t, s, i)
		if i%64 == 63 {
			// A round of the flush loop (compaction if due, flush,
			// collection after a compaction), as every 5 s at 13 chunks
			// a second: the outboards reach the value log before their
			// chunks are evicted.
			indexRound(t, s, &gc)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ix := s.indexStats()
	vlog := indexFileBytes(t, dir, ".vlog")
	t.Logf("%d chunks through a cap of %d: %d compactions, %d value log files rewritten, value log %d B", n, live, ix.compactions, ix.gcRewrites, vlog)
	if all := int64(n * benchOutboardLen); vlog > all/3 {
		t.Errorf("value log %d B after the churn, want under a third of the %d B of all outboards written (the evicted ones' reclaimed)", vlog, all)
	}
	s = openStore(t, dir, live<<20)
	for i := n - live; i < n; i++ {
		if ob, ok := s.Outboard(benchChunkHash(i)); !ok || !bytes.Equal(ob, benchOutboard(i)) {
			t.Fatalf("chunk %d (live): outboard %v after the value log's collection, want it as kept", i, ok)
		}
	}
}

// TestCompactDue: the flush loop compacts at 2 level-0 tables while they
// hold a quarter of the levels below, at 8 whatever their size.
func TestCompactDue(t *testing.T) {
	for _, c := range []struct {
		tables    int
		l0, below int64
		want      bool
	}{
		{0, 0, 0, false},
		{1, 100 << 20, 0, false},
		{2, 1, 0, true},
		{2, 10 << 20, 40 << 20, true},
		{2, 10 << 20, 41 << 20, false},
		{7, 10 << 20, 1 << 30, false},
		{8, 10 << 20, 1 << 30, true},
		{14, 1, 1 << 40, true},
	} {
		if got := compactDue(c.tables, c.l0, c.below); got != c.want {
			t.Errorf("compactDue(%d tables, %d B, %d B below) = %v, want %v", c.tables, c.l0, c.below, got, c.want)
		}
	}
}

// TestCompactionsLinearInIndex: an index growing to many level-0 tables'
// worth (16,384 chunks through memtables of 64 KiB) is rewritten by the
// flush loop's compactions a bounded number of times: they write under 6
// times the tree's final size (measured 3.7), where compacting at every 2 tables (each
// compaction rewriting the whole tree) wrote 9.7 times it here, and ever
// more as the tree grows.
func TestCompactionsLinearInIndex(t *testing.T) {
	old := indexMemTableSize
	indexMemTableSize = 64 << 10
	t.Cleanup(func() { indexMemTableSize = old })
	const n = 16384
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: int64(n+1) << 20})
	if err != nil {
		t.Fatal(err)
	}
	gc := gcState{last: time.Now()}
	for i := 0; i < n; i++ {
		addBenchChunk(t, s, i)
		if i%64 == 63 {
			indexRound(t, s, &gc)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ix := s.indexStats()
	tree := indexFileBytes(t, dir, ".sst")
	t.Logf("%d chunks: tree %d B; %d compactions wrote %d B (%.1f times the tree), longest %v",
		n, tree, ix.compactions, ix.compactBytes, float64(ix.compactBytes)/float64(tree), ix.maxCompact)
	if ix.compactBytes > 6*tree {
		t.Errorf("compactions wrote %d B, want under 6 times the tree's %d B", ix.compactBytes, tree)
	}
}

// indexRound is a round of the store's upkeep, as its loops do it: a
// compaction if due, a flush, a value log collection after a compaction.
func indexRound(t *testing.T, s *Store, gc *gcState) {
	t.Helper()
	if _, err := s.compactIndex(); err != nil {
		t.Fatal(err)
	}
	s.flushRound(context.Background(), gc)
}

// TestFlushOfManyTablesCompletes: a flush that writes more than Badger's
// write stall of 15 level-0 tables (16,384 chunk entries with outboards,
// a backlog, through memtables of 64 KiB) completes: the index is compacted by a
// loop that does not wait for that write. With the compaction in the
// flush loop itself, the flush waited for it forever (as
// BenchmarkIndexFill did at 256 Ki chunks with outboards in the tree).
func TestFlushOfManyTablesCompletes(t *testing.T) {
	old := indexMemTableSize
	indexMemTableSize = 64 << 10
	t.Cleanup(func() { indexMemTableSize = old })
	const n = 16384
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: int64(n+1) << 20})
	if err != nil {
		t.Fatal(err)
	}
	// The backlog of a flush loop that was busy (in a long compaction,
	// before): no flush while the entries come.
	s.flushMu.Lock()
	for i := 0; i < n; i++ {
		addBenchChunk(t, s, i)
	}
	s.flushMu.Unlock()
	done := make(chan error, 1)
	go func() { done <- s.Close() }() // Close flushes what is dirty
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Close (the flush of 16,384 entries) still waits after 60 s: the index's writes are stalled with no compaction to come")
	}
	ix := s.indexStats()
	t.Logf("%d compactions while the flush wrote", ix.compactions)
	s = openStore(t, dir, int64(n+1)<<20)
	for _, i := range []int{0, n / 2, n - 1} {
		if ob, ok := s.Outboard(benchChunkHash(i)); !ok || !bytes.Equal(ob, benchOutboard(i)) {
			t.Fatalf("chunk %d: outboard %v after the reopen, want it as kept", i, ok)
		}
	}
}
