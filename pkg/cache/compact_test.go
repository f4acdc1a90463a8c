package cache

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// badgerCompactors counts the goroutines running Badger's compactor loop,
// which wakes every 50 ms whether there is work or not.
func badgerCompactors() int {
	buf := make([]byte, 1<<22)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "levelsController).runCompactor")
}

// TestIndexCompactedByFlushLoop: the store's index runs no Badger
// compactor (an idle daemon's CPU went to their ticks), and compactIndex
// merges the level-0 tables the writes leave once there are
// indexL0Tables of them; the store's records stay readable, also after a
// reopen.
func TestIndexCompactedByFlushLoop(t *testing.T) {
	before := badgerCompactors()
	old := indexMemTableSize
	indexMemTableSize = 1 << 20 // a level-0 table per MiB of writes
	t.Cleanup(func() { indexMemTableSize = old })
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if n := badgerCompactors() - before; n != 0 {
		t.Errorf("%d Badger compactor goroutines run for the store, want none", n)
	}
	h := putChunk(t, s, 4096, 1)
	// Filler records under a prefix the store does not read, their
	// values small enough for the LSM tree (indexValueThreshold): 4 MiB
	// of writes, several memtables.
	val := randBytes(512, 2)
	for i := 0; i < 8000; i += 100 {
		if err := s.db.Update(func(txn *badger.Txn) error {
			for j := i; j < i+100; j++ {
				if err := txn.Set([]byte(fmt.Sprintf("t/%04d", j)), val); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.db.Levels()[0].NumTables < indexL0Tables {
		if time.Now().After(deadline) {
			t.Fatalf("level 0 still has %d tables after the writes, want at least %d", s.db.Levels()[0].NumTables, indexL0Tables)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := s.compactIndex(); err != nil {
		t.Fatalf("compactIndex: %v", err)
	}
	if n := s.db.Levels()[0].NumTables; n >= indexL0Tables {
		t.Fatalf("level 0 has %d tables after compactIndex, want fewer than %d", n, indexL0Tables)
	}
	if _, err := s.compactIndex(); err != nil { // nothing to do
		t.Fatalf("compactIndex again: %v", err)
	}
	if err := s.db.View(func(txn *badger.Txn) error {
		for _, i := range []int{0, 3997, 7999} {
			if _, err := txn.Get([]byte(fmt.Sprintf("t/%04d", i))); err != nil {
				return fmt.Errorf("record %d: %w", i, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("after compactIndex: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, 1<<30)
	if !s.HasChunk(h) {
		t.Fatal("the chunk put before the compaction is gone after a reopen")
	}
}
