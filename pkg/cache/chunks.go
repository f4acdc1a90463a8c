package cache

import (
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
	if _, _, err := s.storeChunk(h, data, false); err != nil {
		return fmt.Errorf("put chunk %s: %w", h, err)
	}
	return nil
}

// PutVerifiedChunk is PutChunk without the hash check, for a caller that has
// just verified data against h itself (the tree verifies every chunk on
// arrival, before forwarding it), so that a chunk is hashed once per hop.
// data is retained as the chunk's verified bytes (ReadChunk may return it
// without reading the file): the caller must never modify it afterwards.
// Passing bytes that do not hash to h poisons the store: it then serves
// them under h until the verification of a later read from disk drops them.
func (s *Store) PutVerifiedChunk(h blob.Hash, data []byte) error {
	if _, _, err := s.storeChunk(h, data, false); err != nil {
		return fmt.Errorf("put chunk %s: %w", h, err)
	}
	s.verified.put(h, data, len(data))
	return nil
}

// storeChunk stores data, already verified to hash to h. If it wrote a new
// file it returns the new entry and its initial last use (so a caller can
// tell later whether anyone used the chunk since); if the chunk was already
// present it returns nil. orphan marks a new chunk as referenced by no
// stored manifest yet (an ingest's, until its commit); storing a present
// chunk with orphan false clears the mark.
func (s *Store) storeChunk(h blob.Hash, data []byte, orphan bool) (*chunkEntry, int64, error) {
	n := int64(len(data))
	if n == 0 {
		return nil, 0, fmt.Errorf("empty chunk")
	}
	s.mu.Lock()
	if e, ok := s.chunks[h]; ok {
		s.touchLocked(e)
		if !orphan {
			s.adoptLocked(e)
		}
		s.mu.Unlock()
		return nil, 0, nil
	}
	if err := s.evictLocked(n); err != nil {
		s.mu.Unlock()
		return nil, 0, err
	}
	if !orphan {
		if e, ok, err := s.storeInSinkLocked(h, data); ok {
			defer s.mu.Unlock()
			if err != nil || e == nil {
				return nil, 0, err
			}
			e.lastUse = time.Now().UnixNano()
			s.addEntryLocked(e, false)
			return e, e.lastUse, nil
		}
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
		if !orphan {
			s.adoptLocked(e)
		}
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
	s.addEntryLocked(e, orphan)
	return e, e.lastUse, nil
}

// addEntryLocked enters a new chunk whose bytes are in place; s.mu is held.
func (s *Store) addEntryLocked(e *chunkEntry, orphan bool) {
	s.chunks[e.hash] = e
	s.used += e.size
	if orphan {
		e.orphan = true
		s.orphanBytes += e.size
	}
	if s.pinCount[e.hash] > 0 {
		s.pinnedBytes += e.size
	} else {
		e.elem = s.lru.PushFront(e)
	}
	s.markDirtyLocked(e.hash)
}

// adoptLocked clears e's orphan mark (a stored manifest lists it) and
// moves it out of the orphans at the back of the LRU list.
func (s *Store) adoptLocked(e *chunkEntry) {
	if e.orphan {
		e.orphan = false
		s.orphanBytes -= e.size
		if e.elem != nil {
			s.lru.MoveToFront(e.elem)
		}
	}
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

// ReadChunk returns the chunk's bytes, verified against h since they were
// last read from the disk: from the memory of recently verified chunks, or
// read from the chunk's file and verified. The bytes are shared with that
// memory: the caller must not modify them. It returns an error wrapping
// blob.ErrNotFound if the chunk is absent, and one wrapping blob.ErrCorrupt
// if the file's bytes do not match h: the chunk is then dropped from the
// store (counted in Usage.DamagedChunks and logged), so a later fetch stores
// it again. A chunk whose file has vanished or changed size is dropped the
// same way and reported as not found. A read marks the chunk used (in
// memory; the index learns it at the next flush).
func (s *Store) ReadChunk(h blob.Hash) ([]byte, error) {
	return s.readChunk(h, nil)
}

// ReadChunkVerifiedBy is ReadChunk for a caller that hashes the chunk's
// bytes anyway, e.g. for the chunk's Bao outboard, whose root is h:
// verify must return nil if and only if the bytes it is given hash to h.
// Bytes read from the chunk's file are verified by verify alone, not
// hashed here as well, so that a chunk read costs one pass over it; a
// mismatch (verify's error) drops the chunk exactly as ReadChunk does, and
// the error returned wraps blob.ErrCorrupt and verify's error. Bytes from
// the memory of verified chunks are given to verify too; bytes there that
// fail it are forgotten and the file is read as above. verify is called
// at most twice and never after ReadChunkVerifiedBy returns.
func (s *Store) ReadChunkVerifiedBy(h blob.Hash, verify func(data []byte) error) ([]byte, error) {
	if verify == nil {
		return nil, fmt.Errorf("read chunk %s: no verify function", h)
	}
	return s.readChunk(h, verify)
}

// readChunk is ReadChunk (verify nil: the store hashes what it reads) or
// ReadChunkVerifiedBy. Bytes that fail verification because the chunk left
// the place they were read from meanwhile (evicted and punched out of a
// blob file, moved to a chunk file by PromoteChunk) are read once more
// where the chunk is now, not taken for damage.
func (s *Store) readChunk(h blob.Hash, verify func([]byte) error) ([]byte, error) {
	if b, ok := s.verified.get(h); ok && s.touch(h) {
		if verify == nil || verify(b) == nil {
			return b, nil
		}
		s.verified.remove(h) // not what was verified: never from memory again
	}
	for attempt := 0; ; attempt++ {
		f, loc, size, err := s.openChunkLoc(h)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size)
		_, err = f.ReadAt(buf, loc.off)
		f.Close()
		if err != nil {
			return nil, s.readFailed(h, err)
		}
		if verify == nil {
			err = h.Verify(buf)
		} else {
			err = verify(buf)
		}
		if err == nil {
			s.verified.put(h, buf, len(buf))
			return buf, nil
		}
		if err = s.damagedRead(loc, err); !errors.Is(err, errMoved) || attempt > 0 {
			return nil, err
		}
	}
}

// DefaultVerifiedMemoBytes is the default bound of the memory of recently
// verified chunk bytes (Options.VerifiedMemoBytes): room for the chunks that
// the children of a relay ask for at about the same time, so that a chunk
// read from disk is verified once, not once per child.
const DefaultVerifiedMemoBytes = 64 << 20

// manifestMemoBytes bounds the memory of decoded manifests.
const manifestMemoBytes = 16 << 20

// chunkLoc is where a reader found a chunk's bytes: its entry, and the
// blob file (nil: the chunk's own file) and offset the entry named then.
type chunkLoc struct {
	e   *chunkEntry
	bf  *blobFile
	off int64
}

// errMoved is damagedRead's error for bytes read from a place the chunk
// has left since (a range punched out of a blob file reads as zeros): the
// store's copy is not damaged; read it again where it is. It wraps
// blob.ErrNotFound, the error of a chunk evicted under a reader.
var errMoved = fmt.Errorf("chunk moved or evicted while it was read: %w", blob.ErrNotFound)

// movedLocked reports whether the chunk read at loc has left it: its
// entry is gone, replaced, or located elsewhere. A range of a blob file is
// punched out only together with such a change (under s.mu), so bytes
// read from loc while movedLocked stayed false are the chunk's as stored.
// s.mu is held.
func (s *Store) movedLocked(loc chunkLoc) bool {
	e := loc.e
	return s.chunks[e.hash] != e || e.bf != loc.bf || e.off != loc.off
}

// checkRead verifies bytes just read from loc; on a mismatch it drops the
// chunk and returns an error wrapping blob.ErrCorrupt (or errMoved, see
// damagedRead).
func (s *Store) checkRead(loc chunkLoc, data []byte) error {
	if err := loc.e.hash.Verify(data); err != nil {
		return s.damagedRead(loc, err)
	}
	return nil
}

// damagedRead drops the chunk whose bytes just read from loc failed
// verification with err, and returns the read's error: it wraps err and
// blob.ErrCorrupt. If the chunk has left loc since it was opened, it is
// not dropped and the error is errMoved.
func (s *Store) damagedRead(loc chunkLoc, err error) error {
	h := loc.e.hash
	s.mu.Lock()
	moved := s.movedLocked(loc)
	if !moved {
		s.dropEntryLocked(loc.e, "content does not match its hash")
	}
	s.mu.Unlock()
	if moved {
		return fmt.Errorf("chunk %s: %w", h, errMoved)
	}
	if !errors.Is(err, blob.ErrCorrupt) {
		err = fmt.Errorf("%w: %w", blob.ErrCorrupt, err)
	}
	return fmt.Errorf("chunk %s read from disk: %w (dropped from the store)", h, err)
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

// ReadChunkInto reads the chunk's verified bytes into buf and returns their
// length. It fails with an error wrapping io.ErrShortBuffer if buf is
// shorter than the chunk, and otherwise behaves like ReadChunk (buf is not
// retained).
func (s *Store) ReadChunkInto(h blob.Hash, buf []byte) (int, error) {
	if b, ok := s.verified.get(h); ok && len(buf) >= len(b) && s.touch(h) {
		return copy(buf, b), nil
	}
	for attempt := 0; ; attempt++ {
		f, loc, size, err := s.openChunkLoc(h)
		if err != nil {
			return 0, err
		}
		if int64(len(buf)) < size {
			f.Close()
			return 0, fmt.Errorf("read chunk %s: %d-byte buffer for %d bytes: %w", h, len(buf), size, io.ErrShortBuffer)
		}
		n, err := f.ReadAt(buf[:size], loc.off)
		f.Close()
		if err != nil {
			return 0, s.readFailed(h, err)
		}
		err = s.checkRead(loc, buf[:n])
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, errMoved) || attempt > 0 {
			return 0, err
		}
	}
}

// RecheckChunk forgets any verified copy of chunk h held in memory and
// its kept outboard (PutOutboard), reads
// its file again and verifies it, as when a peer reports that the bytes it
// received from this node did not match h. A damaged chunk is dropped (as
// by ReadChunk) and RecheckChunk reports true; an intact or absent chunk
// reports false. Errors other than damage (e.g. EIO) are returned.
func (s *Store) RecheckChunk(h blob.Hash) (damaged bool, err error) {
	s.verified.remove(h)
	if err := s.ForgetOutboard(h); err != nil {
		s.log.Warn("recheck chunk", "chunk", h.String(), "err", err)
	}
	present := s.HasChunk(h)
	f, loc, size, err := s.openChunkLoc(h)
	switch {
	case errors.Is(err, blob.ErrNotFound):
		// Absent, or just dropped by OpenChunk for a missing or resized file.
		return present, nil
	case err != nil:
		return false, err
	}
	defer f.Close()
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, loc.off); err != nil {
		err = s.readFailed(h, err)
		if errors.Is(err, blob.ErrNotFound) {
			return true, nil
		}
		return false, err
	}
	if err := s.checkRead(loc, buf); err != nil {
		// Moved or evicted while read: what was sent may have been read
		// from the range it left; the store's copy is not found damaged.
		return !errors.Is(err, errMoved), nil
	}
	s.verified.put(h, buf, len(buf))
	return false, nil
}

// OpenChunk opens the chunk's file for reading, positioned at the chunk's
// first byte, and returns it with the chunk's length. The caller closes the
// file. A chunk file stays readable if the chunk is evicted meanwhile; a
// chunk in a blob file of the store's own (a put's, a fetch's) is punched
// out of it when it leaves, and then reads as zeros: a reader verifies
// what it read (ReadChunk does, telling such a chunk from a damaged one),
// or relies on its receiver's verification. Errors and use marking are as
// for ReadChunk.
func (s *Store) OpenChunk(h blob.Hash) (*os.File, int64, error) {
	f, off, size, err := s.OpenChunkAt(h)
	if err != nil {
		return nil, 0, err
	}
	if off != 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("open chunk %s: %w", h, err)
		}
	}
	return f, size, nil
}

// OpenChunkAt is OpenChunk for a caller that reads at offsets (sendfile,
// a mapping, a descriptor passed on): the chunk's bytes are size bytes at
// off in the file, which is a chunk file (off 0) or a blob file (the
// destination of a get shared with the store, holding the whole blob).
func (s *Store) OpenChunkAt(h blob.Hash) (f *os.File, off, size int64, err error) {
	f, loc, size, err := s.openChunkLoc(h)
	return f, loc.off, size, err
}

// openChunkLoc is OpenChunkAt, also returning where the chunk was found.
// A file found missing or of the wrong size drops the chunk only if the
// chunk is still where it was looked up: one that moved meanwhile (a blob
// file renamed into DIR/blobs, a chunk promoted out of a blob file that
// then went) is looked up again.
func (s *Store) openChunkLoc(h blob.Hash) (f *os.File, loc chunkLoc, size int64, err error) {
	for attempt := 0; ; attempt++ {
		f, loc, size, err = s.tryOpenChunk(h)
		if !errors.Is(err, errMoved) || attempt >= 2 {
			return f, loc, size, err
		}
	}
}

// tryOpenChunk is one try of openChunkLoc: errMoved if the chunk left the
// place it was looked up at before its file could be checked.
func (s *Store) tryOpenChunk(h blob.Hash) (*os.File, chunkLoc, int64, error) {
	s.mu.Lock()
	e, ok := s.chunks[h]
	var loc chunkLoc
	path := s.chunkPath(h)
	if ok {
		s.touchLocked(e)
		loc = chunkLoc{e: e, bf: e.bf, off: e.off}
		if e.bf != nil {
			path = e.bf.path
		} else {
			loc.off = 0
		}
	}
	s.mu.Unlock()
	if !ok {
		return nil, chunkLoc{}, 0, fmt.Errorf("chunk %s: %w", h, blob.ErrNotFound)
	}
	// drop drops the chunk for why unless it moved since it was looked
	// up, and returns the error for either case.
	drop := func(why string, err error) error {
		s.mu.Lock()
		moved := s.movedLocked(loc) || (loc.bf != nil && loc.bf.path != path)
		if !moved {
			s.dropEntryLocked(e, why)
		}
		s.mu.Unlock()
		if moved {
			return fmt.Errorf("chunk %s: %w", h, errMoved)
		}
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, chunkLoc{}, 0, drop("file missing", fmt.Errorf("chunk %s: file missing: %w", h, blob.ErrNotFound))
		}
		return nil, chunkLoc{}, 0, fmt.Errorf("open chunk %s: %w", h, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, chunkLoc{}, 0, fmt.Errorf("stat chunk %s: %w", h, err)
	}
	if (loc.bf == nil && st.Size() != e.size) || st.Size() < loc.off+e.size {
		f.Close()
		why := fmt.Sprintf("file has %d bytes, index says %d at %d", st.Size(), e.size, loc.off)
		return nil, chunkLoc{}, 0, drop(why, fmt.Errorf("chunk %s: file has the wrong size: %w", h, blob.ErrNotFound))
	}
	return f, loc, e.size, nil
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
// its current entry, and removes whatever file is left. It counts the chunk
// in Usage.DamagedChunks and logs it (once: the entry is gone afterwards).
func (s *Store) dropEntry(e *chunkEntry, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropEntryLocked(e, why)
}

// dropEntryLocked is dropEntry with s.mu held.
func (s *Store) dropEntryLocked(e *chunkEntry, why string) {
	if s.chunks[e.hash] != e {
		return
	}
	s.damaged++
	s.log.Warn("dropping damaged chunk from the store", "chunk", e.hash.String(), "why", why)
	s.removeLocked(e)
}

// removeLocked deletes a chunk's file and entry and fixes the accounting.
func (s *Store) removeLocked(e *chunkEntry) {
	if e.bf != nil {
		s.releaseRangeLocked(e)
		s.unrefBlobLocked(e.bf)
	} else if err := os.Remove(s.chunkPath(e.hash)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("remove chunk file", "chunk", e.hash.String(), "err", err)
	}
	delete(s.chunks, e.hash)
	s.verified.remove(e.hash)
	s.used -= e.size
	if e.orphan {
		s.orphanBytes -= e.size
	}
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
// A chunk evicted from a caller's file whose caller has removed it (the
// store's link is its last: see abandonedLocked) takes the file's other
// unpinned chunks with it, so that the file leaves the store and its
// blocks are freed at once: a caller's file is never punched, so evicting
// its chunks one by one would free nothing until the last one went.
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
		e := back.Value.(*chunkEntry)
		bf := e.bf
		s.evictLocked1(e)
		if bf != nil && bf.refs > 0 && s.abandonedLocked(bf) {
			for el := s.lru.Back(); el != nil; {
				prev := el.Prev()
				if o := el.Value.(*chunkEntry); o.bf == bf {
					s.evictLocked1(o)
				}
				el = prev
			}
		}
	}
	return nil
}

// evictLocked1 evicts the unpinned chunk e.
func (s *Store) evictLocked1(e *chunkEntry) {
	s.evictions++
	s.evictedBytes += uint64(e.size)
	s.removeLocked(e)
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
// reference goes becomes evictable again, as the most recently used (an
// orphan as the least recently used).
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
		if e.orphan {
			e.elem = s.lru.PushBack(e) // evicted first
		} else {
			e.elem = s.lru.PushFront(e)
		}
	}
}
