package cache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/omst-project/omst/pkg/blob"
)

// HasChunk reports whether the chunk is stored. It does not count as a use.
func (s *Store) HasChunk(h blob.Hash) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.chunks[h]
	return ok
}

// PutChunk verifies that data hashes to h and stores it. On a mismatch it
// returns an error wrapping blob.ErrCorrupt and stores nothing. Storing a
// chunk that is already present only marks it used. To fit the size cap it
// first evicts least recently used unpinned chunks; if that cannot make room,
// or the disk is full, it returns an error wrapping blob.ErrNoSpace and
// leaves no partial file. data is not retained.
func (s *Store) PutChunk(h blob.Hash, data []byte) error {
	if err := h.Verify(data); err != nil {
		return fmt.Errorf("put chunk: %w", err)
	}
	return s.PutVerifiedChunk(h, data)
}

// PutVerifiedChunk is PutChunk without the hash check, for a caller that has
// just verified data against h itself (the tree verifies every chunk on
// arrival, before forwarding it), so that a chunk is hashed once per hop.
// Passing bytes that do not hash to h poisons the store: it then serves
// them under h until a reader's verification drops them.
func (s *Store) PutVerifiedChunk(h blob.Hash, data []byte) error {
	if _, _, err := s.storeChunk(h, data); err != nil {
		return fmt.Errorf("put chunk %s: %w", h, err)
	}
	return nil
}

// storeChunk stores data, already verified to hash to h. If it wrote a new
// file it returns the new entry and its initial last use (so a caller can
// tell later whether anyone used the chunk since); if the chunk was already
// present it returns nil.
func (s *Store) storeChunk(h blob.Hash, data []byte) (*chunkEntry, int64, error) {
	n := int64(len(data))
	if n == 0 {
		return nil, 0, fmt.Errorf("empty chunk")
	}
	s.mu.Lock()
	if e, ok := s.chunks[h]; ok {
		s.touchLocked(e)
		s.mu.Unlock()
		return nil, 0, nil
	}
	if err := s.evictLocked(n); err != nil {
		s.mu.Unlock()
		return nil, 0, err
	}
	s.reserved += n
	s.mu.Unlock()

	tmp, err := s.writeTemp(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved -= n
	if err != nil {
		return nil, 0, err
	}
	if e, ok := s.chunks[h]; ok { // a concurrent put of the same chunk won
		os.Remove(tmp)
		s.touchLocked(e)
		return nil, 0, nil
	}
	// Rename under s.mu: a chunk file exists exactly when s.chunks has it,
	// so an eviction can never unlink a file that a put just renamed.
	path := s.chunkPath(h)
	err = os.Rename(tmp, path)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
			err = os.Rename(tmp, path)
		}
	}
	if err != nil {
		os.Remove(tmp)
		return nil, 0, noSpace(fmt.Errorf("rename into place: %w", err))
	}
	e := &chunkEntry{hash: h, size: n, lastUse: time.Now().UnixNano()}
	s.chunks[h] = e
	s.used += n
	if s.pinCount[h] > 0 {
		s.pinnedBytes += n
	} else {
		e.elem = s.lru.PushFront(e)
	}
	s.markDirtyLocked(h)
	return e, e.lastUse, nil
}

// writeTemp writes data to a new file in the temp directory and returns its
// path; on failure it removes the file.
func (s *Store) writeTemp(data []byte) (string, error) {
	f, err := os.CreateTemp(s.tmpDir, "chunk-*")
	if err != nil {
		return "", noSpace(fmt.Errorf("create temp file: %w", err))
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(f.Name())
		return "", noSpace(fmt.Errorf("write temp file: %w", werr))
	}
	return f.Name(), nil
}

// ReadChunk returns the chunk's bytes, or an error wrapping blob.ErrNotFound
// if it is absent. It marks the chunk used (in memory; the index learns it at
// the next flush). A chunk whose file has vanished or changed size is dropped
// from the index and reported as not found.
func (s *Store) ReadChunk(h blob.Hash) ([]byte, error) {
	if b, ok := s.small.get(h); ok && s.touch(h) {
		return bytes.Clone(b), nil
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
	s.rememberSmall(h, buf)
	return buf, nil
}

// Small chunks (at most smallChunkMax bytes) that were read are also kept
// in memory, up to smallMemoBytes in all (so a file damaged or deleted
// behind the store's back is noticed at the first read, not after it);
// decoded manifests up to manifestMemoBytes.
const (
	smallChunkMax     = 64 << 10
	smallMemoBytes    = 16 << 20
	manifestMemoBytes = 16 << 20
)

// rememberSmall keeps a copy of a small chunk's bytes in memory.
func (s *Store) rememberSmall(h blob.Hash, data []byte) {
	if len(data) <= smallChunkMax {
		s.small.put(h, bytes.Clone(data), len(data))
	}
}

// touch marks chunk h used and reports whether it is stored.
func (s *Store) touch(h blob.Hash) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.chunks[h]
	if ok {
		s.touchLocked(e)
	}
	return ok
}

// ReadChunkInto reads the chunk into buf and returns its length. It fails with
// an error wrapping io.ErrShortBuffer if buf is shorter than the chunk, and
// otherwise behaves like ReadChunk.
func (s *Store) ReadChunkInto(h blob.Hash, buf []byte) (int, error) {
	if b, ok := s.small.get(h); ok && len(buf) >= len(b) && s.touch(h) {
		return copy(buf, b), nil
	}
	f, size, err := s.OpenChunk(h)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if int64(len(buf)) < size {
		return 0, fmt.Errorf("read chunk %s: %d-byte buffer for %d bytes: %w", h, len(buf), size, io.ErrShortBuffer)
	}
	n, err := io.ReadFull(f, buf[:size])
	if err != nil {
		return 0, s.readFailed(h, err)
	}
	return n, nil
}

// OpenChunk opens the chunk's file for reading (e.g. to serve it with
// sendfile) and returns it with the chunk's length. The caller closes the
// file; it stays readable even if the chunk is evicted meanwhile. Errors and
// use marking are as for ReadChunk.
func (s *Store) OpenChunk(h blob.Hash) (*os.File, int64, error) {
	s.mu.Lock()
	e, ok := s.chunks[h]
	if ok {
		s.touchLocked(e)
	}
	s.mu.Unlock()
	if !ok {
		return nil, 0, fmt.Errorf("chunk %s: %w", h, blob.ErrNotFound)
	}
	f, err := os.Open(s.chunkPath(h))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			s.dropEntry(e, "file missing")
			return nil, 0, fmt.Errorf("chunk %s: file missing: %w", h, blob.ErrNotFound)
		}
		return nil, 0, fmt.Errorf("open chunk %s: %w", h, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("stat chunk %s: %w", h, err)
	}
	if st.Size() != e.size {
		f.Close()
		s.dropEntry(e, fmt.Sprintf("file has %d bytes, index says %d", st.Size(), e.size))
		return nil, 0, fmt.Errorf("chunk %s: file has the wrong size: %w", h, blob.ErrNotFound)
	}
	return f, e.size, nil
}

// readFailed turns a failed read of an opened chunk file into an error.
func (s *Store) readFailed(h blob.Hash, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		s.mu.Lock()
		e := s.chunks[h]
		s.mu.Unlock()
		if e != nil {
			s.dropEntry(e, "file shorter than indexed")
		}
		return fmt.Errorf("chunk %s: file truncated: %w", h, blob.ErrNotFound)
	}
	return fmt.Errorf("read chunk %s: %w", h, err)
}

// DropChunk forgets the chunk h and deletes its file, as when its bytes
// turned out damaged (why is logged); a later fetch stores it again. Pins
// on it stay. Dropping an absent chunk does nothing.
func (s *Store) DropChunk(h blob.Hash, why string) {
	s.mu.Lock()
	e, ok := s.chunks[h]
	s.mu.Unlock()
	if ok {
		s.dropEntry(e, why)
	}
}

// dropEntry forgets a chunk whose file is missing or damaged, if e is still
// its current entry, and removes whatever file is left.
func (s *Store) dropEntry(e *chunkEntry, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.chunks[e.hash] != e {
		return
	}
	s.log.Warn("dropping damaged chunk from the store", "chunk", e.hash.String(), "why", why)
	s.removeLocked(e)
}

// removeLocked deletes a chunk's file and entry and fixes the accounting.
func (s *Store) removeLocked(e *chunkEntry) {
	if err := os.Remove(s.chunkPath(e.hash)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("remove chunk file", "chunk", e.hash.String(), "err", err)
	}
	delete(s.chunks, e.hash)
	s.small.remove(e.hash)
	s.used -= e.size
	if e.elem != nil {
		s.lru.Remove(e.elem)
		e.elem = nil
	} else if s.pinCount[e.hash] > 0 {
		s.pinnedBytes -= e.size
	}
	s.markDirtyLocked(e.hash)
}

// touchLocked marks e as just used.
func (s *Store) touchLocked(e *chunkEntry) {
	e.lastUse = time.Now().UnixNano()
	if e.elem != nil {
		s.lru.MoveToFront(e.elem)
	}
	s.markDirtyLocked(e.hash)
}

// evictLocked evicts least recently used unpinned chunks until need more
// bytes fit under the cap, or returns an error wrapping blob.ErrNoSpace.
func (s *Store) evictLocked(need int64) error {
	if need > s.capBytes {
		return fmt.Errorf("chunk of %d bytes exceeds the cache cap of %d bytes: %w", need, s.capBytes, blob.ErrNoSpace)
	}
	for s.used+s.reserved+need > s.capBytes {
		back := s.lru.Back()
		if back == nil {
			return fmt.Errorf("cache cap of %d bytes full (%d used, %d pinned, %d being written): %w",
				s.capBytes, s.used, s.pinnedBytes, s.reserved, blob.ErrNoSpace)
		}
		s.removeLocked(back.Value.(*chunkEntry))
	}
	return nil
}

// pinChunkLocked adds one pin reference to h (a pinned blob or an ingest's
// hold); a present chunk leaves the LRU list on its first reference.
func (s *Store) pinChunkLocked(h blob.Hash) {
	s.pinCount[h]++
	if s.pinCount[h] != 1 {
		return
	}
	if e, ok := s.chunks[h]; ok {
		s.pinnedBytes += e.size
		if e.elem != nil {
			s.lru.Remove(e.elem)
			e.elem = nil
		}
	}
}

// unpinChunkLocked drops one pin reference to h; a present chunk whose last
// reference goes becomes evictable again, as the most recently used.
func (s *Store) unpinChunkLocked(h blob.Hash) {
	c := s.pinCount[h]
	if c <= 0 {
		return
	}
	if c > 1 {
		s.pinCount[h] = c - 1
		return
	}
	delete(s.pinCount, h)
	if e, ok := s.chunks[h]; ok {
		s.pinnedBytes -= e.size
		e.elem = s.lru.PushFront(e)
	}
}
