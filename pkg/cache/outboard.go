package cache

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/dgraph-io/badger/v4"

	"github.com/omst-project/omst/pkg/blob"
)

// hashChunk hashes a chunk for Ingest: with Options.ChunkOutboard when
// set (the chunk's outboard comes with its hash), else blob.HashChunk (ob
// nil).
func (s *Store) hashChunk(data []byte) (h blob.Hash, ob []byte) {
	if s.chunkOutboard != nil {
		return s.chunkOutboard(data)
	}
	return blob.HashChunk(data), nil
}

// outboardLenOK reports whether ob states a chunk of n bytes (its first 8
// bytes, little-endian, as a Bao outboard does). The store checks no
// more: the server that sends an outboard checks its length against the
// chunk's, and every receiver verifies it against the chunk hash.
func outboardLenOK(ob []byte, n int64) bool {
	return len(ob) >= 8 && binary.LittleEndian.Uint64(ob) == uint64(n)
}

// PutOutboard keeps ob as the outboard of stored chunk h (its Bao
// outboard, computed from bytes verified against h, or received and
// verified against h), written to the index with the chunk's entry at the
// next flush and deleted with it, so that the chunk is served in verified
// pieces after a restart without hashing it again. An outboard for a
// chunk not stored, or stating another length than the chunk's, is not
// kept. ob is retained: the caller must not modify it.
func (s *Store) PutOutboard(h blob.Hash, ob []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.chunks[h]
	if !ok || !outboardLenOK(ob, e.size) {
		return
	}
	s.obPending[h] = ob
	s.markDirtyLocked(h)
}

// Outboard returns the outboard kept for stored chunk h (PutOutboard),
// and false when the chunk is absent or has none kept. The bytes are as
// they were given or as the index holds them: not verified here (a
// receiver verifies them against h); they state the chunk's length.
func (s *Store) Outboard(h blob.Hash) ([]byte, bool) {
	s.mu.Lock()
	e, ok := s.chunks[h]
	ob := s.obPending[h]
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	if ob != nil {
		return ob, true
	}
	err := s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(outboardKey(h))
		if err != nil {
			return err
		}
		ob, err = it.ValueCopy(nil)
		return err
	})
	if err != nil || !outboardLenOK(ob, e.size) {
		return nil, false
	}
	return ob, true
}

// ForgetOutboard drops the outboard kept for chunk h, as when a peer
// reported bytes from this node that did not verify (the outboard itself
// may be what was damaged); the next sender of h in pieces computes it
// afresh from bytes it verifies.
func (s *Store) ForgetOutboard(h blob.Hash) error {
	s.mu.Lock()
	delete(s.obPending, h)
	s.mu.Unlock()
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(outboardKey(h)) }); err != nil {
		return fmt.Errorf("forget outboard of chunk %s: %w", h, err)
	}
	return nil
}

// ReadChunkUnverified returns the chunk's bytes for a caller that sends
// them with the chunk's kept outboard (Outboard), against which every
// receiver verifies every piece: from the memory of recently verified
// chunks, else read from the chunk's file, NOT hashed. The checks that
// need no hash stand: a chunk dropped as damaged is absent, a file missing
// or not of the indexed size drops the chunk and is reported as not found
// (an error wrapping blob.ErrNotFound), as ReadChunk does. Bytes read from
// the file are not added to the memory of verified chunks. A damaged copy
// is caught by the receiver, whose REPORT makes the sender RecheckChunk
// (which drops it). The bytes are shared: the caller must not modify them.
func (s *Store) ReadChunkUnverified(h blob.Hash) ([]byte, error) {
	if b, ok := s.verified.get(h); ok && s.touch(h) {
		return b, nil
	}
	f, size, err := s.OpenChunk(h)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, size)
	if _, err := io.ReadFull(f, buf); err != nil {
		return nil, s.readFailed(h, err)
	}
	return buf, nil
}
