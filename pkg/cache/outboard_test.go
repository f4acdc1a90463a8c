package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/omst-project/omst/pkg/blob"
)

// fakeOutboard stands for pkg/transfer.ChunkOutboard (which this package
// cannot import): the chunk's hash, and an "outboard" that states the
// chunk's length and carries a digest of its bytes.
func fakeOutboard(data []byte) (blob.Hash, []byte) {
	h := blob.HashChunk(data)
	ob := binary.LittleEndian.AppendUint64(nil, uint64(len(data)))
	return h, append(ob, h[:]...)
}

// An ingest with Options.ChunkOutboard keeps every chunk's outboard: it
// is found before the index is flushed, after a restart (read from the
// index), and is gone once the chunk is dropped (RecheckChunk of a
// damaged copy), forgotten (ForgetOutboard), or evicted. PutOutboard
// refuses an outboard of another length and one for a chunk not stored.
// ReadChunkUnverified returns a damaged file's bytes as they are (a
// receiver's verification catches them) but drops a file of the wrong
// size, as ReadChunk does.
func TestOutboardKept(t *testing.T) {
	dir := t.TempDir()
	open := func() *Store {
		s, err := Open(dir, Options{MaxBytes: 1 << 30, ChunkOutboard: fakeOutboard, VerifiedMemoBytes: -1})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	data := randBytes(5<<20+123, 11)
	rec, err := s.Ingest(context.Background(), "x", bytes.NewReader(data), blob.DefaultChunkSize, "me")
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := func(_ *Store, i int) []byte {
		_, ob := fakeOutboard(data[m.ChunkOffset(i) : m.ChunkOffset(i)+uint64(m.ChunkLen(i))])
		return ob
	}
	for i, h := range m.Chunks {
		if ob, ok := s.Outboard(h); !ok || !bytes.Equal(ob, want(s, i)) {
			t.Fatalf("chunk %d: outboard %x %v before the flush", i, ob, ok)
		}
	}
	s.Close()
	s = open()
	defer func() { s.Close() }()
	for i, h := range m.Chunks {
		if ob, ok := s.Outboard(h); !ok || !bytes.Equal(ob, want(s, i)) {
			t.Fatalf("chunk %d: outboard %x %v after a restart", i, ob, ok)
		}
	}
	// Another length, a chunk not stored: not kept.
	s.PutOutboard(m.Chunks[5], want(s, 0))
	if ob, _ := s.Outboard(m.Chunks[5]); !bytes.Equal(ob, want(s, 5)) {
		t.Fatal("an outboard stating another length replaced the chunk's")
	}
	stranger := blob.HashChunk([]byte("not stored"))
	s.PutOutboard(stranger, binary.LittleEndian.AppendUint64(nil, 10))
	if _, ok := s.Outboard(stranger); ok {
		t.Fatal("an outboard kept for a chunk not stored")
	}

	// Damaged on disk, same size: ReadChunkUnverified returns the bytes
	// (no hash), ReadChunk's verification would not; RecheckChunk drops
	// the chunk and its outboard.
	bad := m.Chunks[1]
	path, off := chunkAt(t, s, bad) // in the put's blob file
	flipAt(t, path, off+100)
	b := bytes.Clone(data[m.ChunkOffset(1) : m.ChunkOffset(1)+uint64(m.ChunkLen(1))])
	b[100] ^= 0xff
	if got, err := s.ReadChunkUnverified(bad); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("ReadChunkUnverified of a damaged file: %v", err)
	}
	if damaged, err := s.RecheckChunk(bad); !damaged || err != nil {
		t.Fatalf("RecheckChunk: %v %v", damaged, err)
	}
	if _, ok := s.Outboard(bad); ok {
		t.Fatal("the outboard of a dropped chunk is still kept")
	}
	// Cut short: dropped, not found.
	short := m.Chunks[2]
	if err := s.PromoteChunk(short); err != nil { // into a chunk file, which can be cut alone
		t.Fatal(err)
	}
	if err := os.Truncate(s.chunkPath(short), 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadChunkUnverified(short); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("ReadChunkUnverified of a file cut short: %v, want ErrNotFound", err)
	}
	// An intact chunk rechecked (a peer's report) loses its outboard
	// (the outboard may be what was damaged), not its bytes.
	if damaged, err := s.RecheckChunk(m.Chunks[3]); damaged || err != nil {
		t.Fatalf("RecheckChunk of an intact chunk: %v %v", damaged, err)
	}
	if _, ok := s.Outboard(m.Chunks[3]); ok {
		t.Fatal("an outboard kept after a report")
	}
	if err := s.ForgetOutboard(m.Chunks[4]); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open()
	for i, h := range m.Chunks {
		_, ok := s.Outboard(h)
		if wantKept := i == 0 || i == 5; ok != wantKept {
			t.Fatalf("chunk %d after a restart: outboard kept %v, want %v", i, ok, wantKept)
		}
	}
	// Dropped: the index holds no outboard any more.
	for _, h := range m.Chunks {
		s.DropChunk(h, "test")
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(keyOutboard)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil || n != 0 {
		t.Fatalf("%d outboards left in the index after their chunks were dropped (%v)", n, err)
	}
}
