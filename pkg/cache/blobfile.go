package cache

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/ipfs/go-cid"
	"golang.org/x/sys/unix"

	"github.com/omst-project/omst/pkg/blob"
)

// blobFile is a file that holds a whole blob's bytes at their offsets: the
// destination of a get into a file, linked into DIR/blobs (see Sink). Chunk
// entries located in it point at it; it is unlinked from the store when
// the last of them goes.
type blobFile struct {
	path string // DIR/tmp/blob-* while its sink is open, DIR/blobs/<cid>.<n> after
	refs int    // chunk entries located in it, plus one while its sink is open
	// committed: in DIR/blobs. Entries in a file not committed stay out
	// of the index (a crash removes the file: they must not be found
	// missing at the next Open).
	committed bool
	// owned: the store's own file (a put's, DIR/blobs/<cid>.s<n>), not a
	// user's destination: the bytes of a chunk that leaves it (evicted,
	// dropped, promoted) are punched out (releaseRangeLocked), so that
	// the cache cap bounds the disk. A user's file is never punched.
	owned bool
	// dying: the file is being removed with all its entries (an aborted
	// put): no hole is punched for them.
	dying bool
	// handed: an owned file handed out to clients (GET_FD, OpenChunkShared),
	// which map it: it is never punched again (a mapping would read
	// zeros), so its evicted chunks' bytes stay on disk until its last
	// entry goes and it is unlinked. Kept on disk as the file's mode
	// (0400: no write permission; a file not handed out is 0600) and read
	// at Open.
	handed bool
	// wf: a write descriptor of the file for punching holes (punchLocked),
	// opened at the first punch and kept open for the next ones (an
	// eviction pass punches chunk after chunk under s.mu), closed when
	// the file is unlinked or handed out, when more than maxPunchFiles
	// files have one, at each flush round (at rest none is open) and at
	// Close; under s.mu. The descriptor is of the file's inode, not its
	// path: a punch never reaches a new file given the same name.
	wf *os.File
}

// maxPunchFiles bounds the blob files the store keeps a punching
// descriptor of (blobFile.wf) at once.
const maxPunchFiles = 8

// ErrNoSink is returned by Store.LinkSink for a file the store cannot share
// (another filesystem, another owner, not a regular file): the caller
// writes the file itself and the store keeps its own copy.
var ErrNoSink = errors.New("the store cannot share this file")

// Sink is a get into a file shared with the store: the file is linked into
// the store (a hardlink: one inode, no second copy of the bytes), the
// chunks of the blob that the store is given while the sink is open
// (PutVerifiedChunk, PutChunk) are written into it at their offsets instead
// of into chunk files, and the store serves them from there. Chunks the
// store already held are copied in by Fill. Commit keeps the file in the
// store; Abort (or a crash: DIR/tmp is cleared at Open) removes the link
// and every entry located in it.
type Sink struct {
	s     *Store
	id    cid.Cid
	m     *blob.Manifest
	bf    *blobFile
	f     *os.File            // the store's own read-write descriptor of the file
	where map[blob.Hash][]int // chunk indexes of each hash the sink is open for
	mu    sync.Mutex          // guards wrote, err
	wrote []bool              // chunk i's bytes are in the file
	err   error               // the first failed write into the file
	ended bool                // under s.mu: committed or aborted
	owned bool                // OwnSink: the store's own file, kept whatever happens
	// writers counts the writes into f under way (storeInSinkLocked;
	// added to under s.mu while the sink is open): Abort waits for them.
	writers sync.WaitGroup
}

// OwnSink opens a Sink on a new blob file of the store's own for the
// blob id (manifest m, which must be stored: Open removes a blob file
// whose blob has none), for a fetch that is not into a caller's file (a
// stream, /dev/null): the chunks of the blob the store is given while it
// is open (PutVerifiedChunk, PutChunk) go into that one file at their
// offsets instead of into a file each, and the store serves them from
// there. The file is in DIR/blobs from the start (<cid>.s<n>, sized to
// the blob, holes where no chunk was written) and keeps what it holds
// however the sink ends: Commit and Abort both close it, neither fills it
// (a chunk the store held already stays where it was). A crash leaves the
// chunks written whole, located at the next Open (a range still a hole,
// such as a chunk cut by the crash, is not). Chunks leave the file as
// they leave a put's: evicted, dropped or promoted, punched out (unless
// the file was handed out: OpenChunkShared). It fails with an error
// wrapping ErrNoSink, creating no file, when it would take no chunk (every
// chunk of m held, or claimed by another open sink).
func (s *Store) OwnSink(id cid.Cid, m *blob.Manifest) (*Sink, error) {
	if _, err := s.Manifest(id); err != nil {
		return nil, fmt.Errorf("own sink of %s: %w", id, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	claim := false
	for _, h := range m.Chunks {
		if _, held := s.chunks[h]; !held && s.sinks[h] == nil {
			claim = true
			break
		}
	}
	if !claim {
		return nil, fmt.Errorf("own sink of %s: %w: every chunk is held or claimed by another sink", id, ErrNoSink)
	}
	path, err := s.newBlobPath(id, true)
	if err != nil {
		return nil, fmt.Errorf("own sink: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, noSpace(fmt.Errorf("own sink: %w", err))
	}
	if err := f.Truncate(int64(m.Size)); err != nil {
		f.Close()
		os.Remove(path)
		return nil, noSpace(fmt.Errorf("own sink: size %s: %w", path, err))
	}
	sk := &Sink{s: s, id: id, m: m, bf: &blobFile{path: path, refs: 1, committed: true, owned: true}, f: f,
		where: map[blob.Hash][]int{}, wrote: make([]bool, len(m.Chunks)), owned: true}
	s.claimLocked(sk)
	return sk, nil
}

// LinkSink links f, a regular file open for writing that is to receive the
// blob id (manifest m), into the store and opens a Sink on it. It fails
// with an error wrapping ErrNoSink when f cannot be shared: not a regular
// file, owned by another user than the store's, writable by group or
// others, or on another filesystem (link(2) refuses across filesystems). Only one sink at a time receives a
// given chunk; a chunk already stored, or claimed by another open sink, is
// left to Fill.
func (s *Store) LinkSink(f *os.File, id cid.Cid, m *blob.Manifest) (*Sink, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("link sink: stat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%w: not a regular file", ErrNoSink)
	}
	if int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%w: owned by uid %d, the store by uid %d", ErrNoSink, st.Uid, os.Geteuid())
	}
	if st.Mode&0o022 != 0 {
		// Another user could change the bytes between their verification
		// and a copy from the file to another get.
		return nil, fmt.Errorf("%w: writable by group or others (mode %#o)", ErrNoSink, st.Mode&0o7777)
	}
	var dirSt unix.Stat_t
	if err := unix.Stat(s.tmpDir, &dirSt); err != nil {
		return nil, fmt.Errorf("link sink: stat %s: %w", s.tmpDir, err)
	}
	if dirSt.Dev != st.Dev {
		return nil, fmt.Errorf("%w: on another filesystem than the store", ErrNoSink)
	}
	tmp, err := os.CreateTemp(s.tmpDir, "blob-*")
	if err != nil {
		return nil, noSpace(fmt.Errorf("link sink: %w", err))
	}
	path := tmp.Name()
	tmp.Close()
	os.Remove(path)
	// linkat through /proc: AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH.
	if err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW); err != nil {
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("%w: link: %w", ErrNoSink, err)
		}
		return nil, noSpace(fmt.Errorf("link sink: %w", err))
	}
	wf, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("link sink: open %s: %w", path, err)
	}
	sk := &Sink{s: s, id: id, m: m, bf: &blobFile{path: path, refs: 1}, f: wf,
		where: map[blob.Hash][]int{}, wrote: make([]bool, len(m.Chunks))}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claimLocked(sk)
	return sk, nil
}

// claimLocked makes sk the sink of every chunk of its blob that the store
// does not hold and no other open sink claims; s.mu is held.
func (s *Store) claimLocked(sk *Sink) {
	if s.sinks == nil {
		s.sinks = map[blob.Hash]*Sink{}
	}
	for i, h := range sk.m.Chunks {
		if _, held := s.chunks[h]; held {
			continue
		}
		if other := s.sinks[h]; other != nil && other != sk {
			continue
		}
		s.sinks[h] = sk
		sk.where[h] = append(sk.where[h], i)
	}
}

// File returns the store's read-write descriptor of the sink's file.
func (sk *Sink) File() *os.File { return sk.f }

// Written reports whether chunk i's bytes are in the file.
func (sk *Sink) Written(i int) bool {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	return sk.wrote[i]
}

// Err returns the first failed write into the file (wrapping
// blob.ErrNoSpace for a full disk), or nil.
func (sk *Sink) Err() error {
	sk.mu.Lock()
	defer sk.mu.Unlock()
	return sk.err
}

// sinkWriteHook, if set (tests), is called by Sink.write before each
// write into the file (done false) and after the last (done true).
var sinkWriteHook func(sk *Sink, done bool)

// write puts chunk h's verified bytes at every offset of the blob that
// holds it (the sink claims h) and returns the first offset. It does not
// keep a failed write (storeInSinkLocked does, for a sink not ended: Err).
//
// It runs without s.mu, so the sink may end meanwhile (Commit or Abort
// closes sk.f). That never writes into another file: *os.File counts the
// operations in flight on its descriptor, and Close releases the number
// (close(2)) only once the last has returned, so a write either runs on
// the sink's own descriptor to its end or, begun after Close, fails with
// os.ErrClosed without touching any descriptor.
func (sk *Sink) write(h blob.Hash, data []byte) (int64, error) {
	idx := sk.where[h] // fixed at LinkSink
	if sk.owned {
		idx = idx[:1] // the store's own file holds each chunk once
	}
	for _, i := range idx {
		if sinkWriteHook != nil {
			sinkWriteHook(sk, false)
		}
		if _, err := sk.f.WriteAt(data, int64(sk.m.ChunkOffset(i))); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) { // the path is the store's link, not the caller's name
				err = pe.Err
			}
			return 0, noSpace(fmt.Errorf("write chunk %d: %w", i, err))
		}
	}
	if sinkWriteHook != nil {
		sinkWriteHook(sk, true)
	}
	sk.mu.Lock()
	for _, i := range idx {
		sk.wrote[i] = true
	}
	sk.mu.Unlock()
	return int64(sk.m.ChunkOffset(idx[0])), nil
}

// failed keeps err as the sink's first failed write (Err).
func (sk *Sink) failed(err error) {
	sk.mu.Lock()
	if sk.err == nil {
		sk.err = err
	}
	sk.mu.Unlock()
}

// storeInSinkLocked stores chunk h (verified data) in the open sink that
// claims it, if any, and returns its new entry; s.mu is held on entry and
// on return (released during the write). ok is false when no sink claims h.
func (s *Store) storeInSinkLocked(h blob.Hash, data []byte) (e *chunkEntry, ok bool, err error) {
	sk := s.sinks[h]
	if sk == nil {
		return nil, false, nil
	}
	n := int64(len(data))
	s.reserved += n
	sk.writers.Add(1) // under s.mu, sk open: before any Abort's Wait
	s.mu.Unlock()
	off, werr := sk.write(h, data)
	sk.writers.Done()
	s.mu.Lock()
	s.reserved -= n
	if werr != nil {
		if !sk.ended {
			sk.failed(werr) // a full disk: the sink's get fails (Err)
			return nil, true, werr
		}
		// The sink ended during the write (its file closed under it):
		// the chunk goes to a chunk file as if no sink had claimed it.
		return nil, false, nil
	}
	cur, held := s.chunks[h]
	// A sink that ended after the write keeps the chunk in its file if
	// the store still keeps the file (a committed get's, an OwnSink's
	// with entries left); otherwise the bytes are in no file of the
	// store's and the chunk goes to a chunk file.
	linked := sk.bf.refs > 0 && sk.bf.committed && !sk.bf.dying
	if held || (sk.ended && !linked) {
		// Bytes no entry accounts for, unless a concurrent put of the same
		// chunk located it right there (its write won the race to s.mu).
		mine := held && cur.bf == sk.bf && cur.off == off
		if sk.owned && !sk.bf.handed && sk.bf.refs > 0 && !mine {
			s.punchLocked(sk.bf, off, n, "free a chunk stored twice in a blob file")
		}
		if !held {
			return nil, false, nil
		}
		s.touchLocked(cur)
		s.adoptLocked(cur)
		return nil, true, nil
	}
	sk.bf.refs++
	return &chunkEntry{hash: h, size: n, bf: sk.bf, off: off}, true, nil
}

// Fill copies into the file every chunk of the blob it does not hold yet
// from the store (a chunk file, or another blob's file), verified first,
// with copy_file_range, so that the bytes are not written from user space
// (CopyChunksTo). A chunk the store lacks
// fails Fill with an error wrapping blob.ErrNotFound and naming it; a
// damaged one is dropped and fails it with blob.ErrCorrupt (fetch it and
// call Fill again).
func (sk *Sink) Fill() error {
	if err := sk.Err(); err != nil {
		return err
	}
	return sk.s.CopyChunksTo(sk.m, sk.f, func(i int) bool {
		sk.mu.Lock()
		defer sk.mu.Unlock()
		return sk.wrote[i]
	}, func(i int) {
		sk.mu.Lock()
		sk.wrote[i] = true
		sk.mu.Unlock()
	})
}

// CopyChunksTo copies the chunks of m into dst at their offsets with
// CopyChunkTo, in order, skipping those skip reports (nil: none) and
// calling done (if not nil) with each copied. (One at a time: on 2 CPUs,
// copies in parallel cost more CPU per byte and were no faster,
// BenchmarkGetToFile.) A chunk the store lacks or finds damaged (dropped)
// does not stop it: it copies every other chunk and then returns the first
// such error (naming its chunk and how many failed so), so that one fetch
// can bring them all. Any other failure (a full disk) ends it at once.
func (s *Store) CopyChunksTo(m *blob.Manifest, dst *os.File, skip func(i int) bool, done func(i int)) error {
	var missing error
	nMissing := 0
	for i, h := range m.Chunks {
		if skip != nil && skip(i) {
			continue
		}
		err := s.CopyChunkTo(h, dst, int64(m.ChunkOffset(i)), int64(m.ChunkLen(i)))
		switch {
		case err == nil:
			if done != nil {
				done(i)
			}
		case errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrCorrupt):
			nMissing++
			if missing == nil {
				missing = fmt.Errorf("chunk %d: %w", i, err)
			}
		default:
			return fmt.Errorf("chunk %d: %w", i, err)
		}
	}
	if nMissing > 1 {
		return fmt.Errorf("%w (and %d more chunks missing or damaged)", missing, nMissing-1)
	}
	return missing
}

// Commit ends the sink with the whole blob in the file: it is cut to the
// blob's size, moved to DIR/blobs (where Open finds it again after a
// restart), and stays there while any chunk entry is located in it.
func (sk *Sink) Commit() error {
	if sk.owned {
		sk.closeOwned()
		return sk.Err()
	}
	if err := sk.Fill(); err != nil {
		sk.Abort()
		return err
	}
	if err := sk.f.Truncate(int64(sk.m.Size)); err != nil {
		sk.Abort()
		return noSpace(fmt.Errorf("cut the destination to %d bytes: %w", sk.m.Size, err))
	}
	s := sk.s
	if s.sync {
		if err := sk.f.Sync(); err != nil {
			sk.Abort()
			return noSpace(fmt.Errorf("sync the destination: %w", err))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sk.ended {
		return fmt.Errorf("sink of %s: already ended", sk.id)
	}
	sk.endLocked()
	final, err := s.newBlobPath(sk.id, false)
	if err == nil {
		err = os.Rename(sk.bf.path, final)
	}
	if err != nil {
		s.dropSinkEntriesLocked(sk)
		return fmt.Errorf("keep the destination in the store: %w", err)
	}
	sk.bf.path, sk.bf.committed = final, true
	s.unrefBlobLocked(sk.bf)
	return nil
}

// Abort ends the sink without keeping the file: the link in the store and
// every chunk entry located in the file go (the file itself is the
// caller's). It returns once no write of the store's into the file is
// under way. Aborting an ended sink does nothing.
func (sk *Sink) Abort() {
	if sk.owned {
		sk.closeOwned()
		return
	}
	s := sk.s
	s.mu.Lock()
	if sk.ended {
		s.mu.Unlock()
		return
	}
	sk.endLocked()
	s.dropSinkEntriesLocked(sk)
	s.mu.Unlock()
	// The file has left the store, but the descriptor endLocked closed
	// stays open until the writes under way into it return (an os.File
	// closes its descriptor when its last operation ends): wait for
	// them, so that when Abort returns the store holds the caller's file
	// no more and its space is free once the caller removes it. (A get
	// failing on a full disk, and the next get on that disk failing too
	// while a chunk's write held the removed file, was seen under load.)
	sk.writers.Wait()
}

// closeOwned ends an OwnSink: the file keeps the chunks written (and
// goes once none is left in it).
func (sk *Sink) closeOwned() {
	s := sk.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if sk.ended {
		return
	}
	sk.endLocked()
	s.unrefBlobLocked(sk.bf)
}

// endLocked closes the sink for new chunks; s.mu is held.
func (sk *Sink) endLocked() {
	sk.ended = true
	for h := range sk.where {
		if sk.s.sinks[h] == sk {
			delete(sk.s.sinks, h)
		}
	}
	sk.f.Close()
}

// dropSinkEntriesLocked removes the entries located in sk's file and the
// sink's own reference (which unlinks it); s.mu is held.
func (s *Store) dropSinkEntriesLocked(sk *Sink) {
	for h := range sk.where {
		if e := s.chunks[h]; e != nil && e.bf == sk.bf {
			s.removeLocked(e)
		}
	}
	s.unrefBlobLocked(sk.bf)
}

// abandonedLocked reports whether bf is a caller's file (a get's
// destination, not the store's own) that the caller has removed: its
// link in the store is its last. Its evicted chunks' ranges are not
// punched (the caller's bytes are never changed), so only unlinking it
// frees its blocks; a caller still holding it open keeps reading it.
// s.mu is held.
func (s *Store) abandonedLocked(bf *blobFile) bool {
	if bf.owned || !bf.committed || bf.dying {
		return false
	}
	var st unix.Stat_t
	return unix.Stat(bf.path, &st) == nil && st.Nlink == 1
}

// releaseRangeLocked frees the disk space of chunk entry e, which leaves
// its blob file (evicted, dropped or promoted), when the file is the
// store's own and stays linked: a hole is punched over its bytes
// (fallocate PUNCH_HOLE|KEEP_SIZE: the file keeps its size, the range
// reads as zeros and holds no blocks). A user's file is left alone. s.mu
// is held.
func (s *Store) releaseRangeLocked(e *chunkEntry) {
	bf := e.bf
	if bf == nil || !bf.owned || bf.handed || bf.dying || bf.refs <= 1 {
		return // the last reference unlinks the file
	}
	s.punchLocked(bf, e.off, e.size, "free a chunk's bytes in a blob file")
}

// punchLocked punches a hole of n bytes at off in bf, a linked file of the
// store's own, through its punching descriptor (bf.wf, opened here if it
// is not open), logging a failure as why; s.mu is held.
func (s *Store) punchLocked(bf *blobFile, off, n int64, why string) {
	if bf.wf == nil {
		f, err := os.OpenFile(bf.path, os.O_WRONLY, 0)
		if err != nil {
			s.log.Warn(why, "path", bf.path, "err", err)
			return
		}
		if len(s.punchFiles) >= maxPunchFiles {
			s.closePunchLocked(s.punchFiles[0])
		}
		bf.wf = f
		s.punchFiles = append(s.punchFiles, bf)
	}
	if err := punchHoleFile(bf.wf, off, n); err != nil {
		s.log.Warn(why, "path", bf.path, "err", err)
	}
}

// closePunchLocked closes bf's punching descriptor, if open; s.mu is held.
func (s *Store) closePunchLocked(bf *blobFile) {
	if bf.wf == nil {
		return
	}
	bf.wf.Close()
	bf.wf = nil
	for i, o := range s.punchFiles {
		if o == bf {
			s.punchFiles = append(s.punchFiles[:i], s.punchFiles[i+1:]...)
			break
		}
	}
}

// closePunchFiles closes every punching descriptor (the flush loop's
// rounds and Close: at rest the store holds no blob file open).
func (s *Store) closePunchFiles() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.punchFiles) > 0 {
		s.closePunchLocked(s.punchFiles[0])
	}
}

// punchHoleFile deallocates n bytes at off in f.
func punchHoleFile(f *os.File, off, n int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("punch a hole of %d bytes at %d: %w", n, off, err)
		}
		return nil
	}
}

// hasHole reports whether the n bytes at off in f hold a hole (a range
// punched out, or never written): SEEK_HOLE finds one before off+n. A
// filesystem without SEEK_HOLE reports none (the file's end is its only
// hole).
func hasHole(f *os.File, off, n int64) bool {
	h, err := unix.Seek(int(f.Fd()), off, unix.SEEK_HOLE)
	return err == nil && h < off+n
}

// unrefBlobLocked drops a reference to bf and unlinks it from the store
// with the last; s.mu is held.
func (s *Store) unrefBlobLocked(bf *blobFile) {
	bf.refs--
	if bf.refs > 0 {
		return
	}
	s.closePunchLocked(bf)
	if err := os.Remove(bf.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("remove blob file", "path", bf.path, "err", err)
	}
}

// newBlobPath returns an unused path DIR/blobs/<cid>.<n>, or for a file
// of the store's own (owned) DIR/blobs/<cid>.s<n>.
func (s *Store) newBlobPath(id cid.Cid, owned bool) (string, error) {
	tag := "."
	if owned {
		tag = ".s"
	}
	for n := 0; n < 1000; n++ {
		p := filepath.Join(s.blobDir, id.String()+tag+strconv.Itoa(n))
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			return p, nil
		}
	}
	return "", fmt.Errorf("blob files of %s: too many", id)
}

// parseBlobName parses a DIR/blobs file name: <cid>.<n> (a get's
// destination) or <cid>.s<n> (owned: a file of the store's own, a put's).
func parseBlobName(name string) (id cid.Cid, owned, ok bool) {
	base, n, ok := strings.Cut(name, ".")
	if !ok {
		return cid.Undef, false, false
	}
	if rest, isOwned := strings.CutPrefix(n, "s"); isOwned {
		n, owned = rest, true
	}
	if _, err := strconv.Atoi(n); err != nil {
		return cid.Undef, false, false
	}
	id, err := cid.Decode(base)
	return id, owned, err == nil
}

// loadBlobFiles locates chunk entries in the blob files of DIR/blobs (a
// chunk with a chunk file stays there): each file is a committed get's
// destination or put's file and holds its blob whole as of the commit
// (verification on read catches any later change). In a file of the
// store's own (<cid>.s<n>), a chunk whose range holds a hole was punched
// out (evicted, dropped, promoted, or stored elsewhere at the put) and is
// not located there, unless its bytes are all zeros (a hole reads as
// them: a sparse input copied by reflink); the bytes of a chunk located
// elsewhere that such a file still holds (a crash between a chunk's move
// and its punch) are punched now, so the cap bounds the disk. seen gains
// the hashes located, punched the entries of chunks found punched out
// (evicted: no damage). Files that locate nothing, whose blob has no
// stored manifest, or whose size is not the blob's (changed since) are
// removed (the store's link only).
func (s *Store) loadBlobFiles(seen map[blob.Hash]bool) (adopted int, punched map[blob.Hash]bool, err error) {
	ents, err := os.ReadDir(s.blobDir)
	if err != nil {
		return 0, nil, fmt.Errorf("read %s: %w", s.blobDir, err)
	}
	punched = map[blob.Hash]bool{}
	zero := map[int]blob.Hash{} // the hash of n zero bytes, by n
	for _, d := range ents {
		path := filepath.Join(s.blobDir, d.Name())
		id, owned, ok := parseBlobName(d.Name())
		var m *blob.Manifest
		var info fs.FileInfo
		if ok {
			m, err = s.Manifest(id)
			if err == nil {
				info, err = os.Stat(path)
			}
			ok = err == nil && info.Mode().IsRegular() && info.Size() == int64(m.Size)
		}
		handed := owned && ok && info.Mode().Perm()&0o200 == 0
		bf := &blobFile{path: path, committed: true, owned: owned, handed: handed}
		var f *os.File // an owned file, open for its holes
		if ok && owned {
			mode := os.O_RDWR
			if handed {
				mode = os.O_RDONLY // never punched
			}
			if f, err = os.OpenFile(path, mode, 0); err != nil {
				ok = false
			}
		}
		if ok {
			for i, h := range m.Chunks {
				size := int64(m.ChunkLen(i))
				off := int64(m.ChunkOffset(i))
				if f != nil {
					hole := hasHole(f, off, size)
					if seen[h] {
						if !hole && !handed {
							if e := s.chunks[h]; e == nil || e.bf != bf || e.off != off {
								if err := punchHoleFile(f, off, size); err != nil {
									s.log.Warn("free a chunk's second copy in a blob file", "path", path, "err", err)
								}
							}
						}
						continue
					}
					if hole {
						z, ok := zero[int(size)]
						if !ok {
							z = blob.HashChunk(make([]byte, size))
							zero[int(size)] = z
						}
						if h != z {
							punched[h] = true
							continue
						}
					}
				} else if seen[h] {
					continue
				}
				seen[h] = true
				e := s.chunks[h]
				if e == nil || e.size != size {
					e = &chunkEntry{hash: h, size: size, lastUse: info.ModTime().UnixNano()}
					s.chunks[h] = e
					s.dirty[h] = struct{}{}
					adopted++
				}
				e.bf, e.off = bf, off
				bf.refs++
			}
		}
		if f != nil {
			f.Close()
		}
		if bf.refs == 0 {
			s.log.Warn("removing blob file that holds no chunk of the store", "path", path)
			if err := os.Remove(path); err != nil {
				return adopted, punched, err
			}
		}
	}
	return adopted, punched, nil
}

// CopyChunkTo copies the stored chunk h (length bytes) into dst at off,
// verified first: from the memory of verified chunks with a write, else
// read and hashed (into a pooled buffer; a mapping cost more CPU, page
// tables and their shootdowns) and copied from its file with
// copy_file_range (in the kernel; on a filesystem with shared extents
// without a copy). It fails like ReadChunk (a chunk whose bytes do not
// match is dropped, blob.ErrCorrupt; an absent one blob.ErrNotFound).
func (s *Store) CopyChunkTo(h blob.Hash, dst *os.File, off, length int64) error {
	if b, ok := s.verified.get(h); ok && int64(len(b)) == length && s.touch(h) {
		if _, err := dst.WriteAt(b, off); err != nil {
			return noSpace(fmt.Errorf("write chunk %s: %w", h, err))
		}
		return nil
	}
	f, loc, size, err := s.openChunkLoc(h)
	if err != nil {
		return err
	}
	foff := loc.off
	defer f.Close()
	if size != length {
		return fmt.Errorf("chunk %s has %d bytes, the manifest says %d: %w", h, size, length, blob.ErrCorrupt)
	}
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	if int64(cap(*bp)) < size {
		*bp = make([]byte, size)
	}
	buf := (*bp)[:size]
	if _, err := f.ReadAt(buf, foff); err != nil {
		return s.readFailed(h, err)
	}
	if err := s.checkRead(loc, buf); err != nil {
		if !errors.Is(err, errMoved) {
			return err
		}
		data, err := s.ReadChunk(h) // where it is now
		if err != nil {
			return err
		}
		if _, err := dst.WriteAt(data, off); err != nil {
			return noSpace(fmt.Errorf("write chunk %s: %w", h, err))
		}
		return nil
	}
	if _, err = copyRange(f, foff, dst, off, size); err != nil {
		return err
	}
	s.mu.Lock()
	moved := s.movedLocked(loc)
	s.mu.Unlock()
	if moved {
		// Punched out (or moved) since it was verified: the kernel may
		// have copied zeros. Write the verified bytes instead.
		if _, err := dst.WriteAt(buf, off); err != nil {
			return noSpace(fmt.Errorf("write chunk %s: %w", h, err))
		}
	}
	return nil
}

var readBufs = sync.Pool{New: func() any { b := make([]byte, 0, blob.DefaultChunkSize); return &b }}

// errSourceEnded is copyRange's error for a source that ends early.
var errSourceEnded = errors.New("source ended early")

// copyRange copies n bytes of src at soff to dst at doff with
// copy_file_range, falling back to a read and a write where the kernel
// refuses it for these files, and returns how many it copied.
func copyRange(src *os.File, soff int64, dst *os.File, doff, n int64) (int64, error) {
	var done int64
	for n > 0 {
		so, do := soff, doff
		k, err := unix.CopyFileRange(int(src.Fd()), &so, int(dst.Fd()), &do, int(min(n, 1<<30)), 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
				k, err := io.Copy(io.NewOffsetWriter(dst, doff), io.NewSectionReader(src, soff, n))
				done += k
				if err != nil {
					return done, noSpace(fmt.Errorf("copy: %w", err))
				}
				if k < n {
					return done, fmt.Errorf("copy: %d bytes missing: %w: %w", n-k, errSourceEnded, blob.ErrNotFound)
				}
				return done, nil
			}
			return done, noSpace(fmt.Errorf("copy_file_range: %w", err))
		}
		if k == 0 {
			return done, fmt.Errorf("copy_file_range: %d bytes missing: %w: %w", n, errSourceEnded, blob.ErrNotFound)
		}
		soff += int64(k)
		doff += int64(k)
		n -= int64(k)
		done += int64(k)
	}
	return done, nil
}

// PromoteChunk moves chunk h out of a blob file into a chunk file of its
// own, from its verified bytes, so that its file never changes while it
// exists (GET_FD hands the files to clients to map, and a get's
// destination is its owner's to change: OpenChunkShared). A chunk already
// in a chunk file is left as it is. Errors are as for ReadChunk.
func (s *Store) PromoteChunk(h blob.Hash) error {
	s.mu.Lock()
	e := s.chunks[h]
	inFile := e != nil && e.bf != nil // e.bf changes under s.mu
	s.mu.Unlock()
	if e == nil {
		return fmt.Errorf("chunk %s: %w", h, blob.ErrNotFound)
	}
	if !inFile {
		return nil
	}
	data, err := s.ReadChunk(h)
	if err != nil {
		return err
	}
	tmp, err := s.writeTemp(data)
	if err != nil {
		return fmt.Errorf("promote chunk %s: %w", h, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.chunks[h] != e || e.bf == nil { // dropped or promoted meanwhile
		os.Remove(tmp)
		return nil
	}
	path := s.chunkPath(h)
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return noSpace(fmt.Errorf("promote chunk %s: %w", h, err))
	}
	s.releaseRangeLocked(e)
	s.unrefBlobLocked(e.bf)
	e.bf, e.off = nil, 0
	return nil
}

// OpenChunkShared opens chunk h for a client to map (GET_FD): the chunk's
// bytes are size bytes at off in f, opened read-only, and they never
// change while f is open. A chunk file is opened as it is (off 0). A chunk
// in a committed blob file of the store's own (a put's or a fetch's,
// DIR/blobs/<cid>.s<n>) is handed out in that file, without a copy: the
// file is marked handed out first (mode 0400, which Open reads back after
// a restart) and is never punched again, so a client's mapping of it
// never reads zeros; the chunks that leave it keep their bytes on disk
// (beyond the cap) until its last entry goes and it is unlinked. A chunk
// in a get's destination (its owner may change it) or in a put's file not
// yet committed is moved into a chunk file first (PromoteChunk). The
// caller verifies the bytes (they were not read here). Errors are as for
// OpenChunkAt.
func (s *Store) OpenChunkShared(h blob.Hash) (f *os.File, off, size int64, err error) {
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		e := s.chunks[h]
		if e == nil {
			s.mu.Unlock()
			return nil, 0, 0, fmt.Errorf("chunk %s: %w", h, blob.ErrNotFound)
		}
		bf := e.bf
		if bf == nil {
			s.mu.Unlock()
			return s.OpenChunkAt(h)
		}
		if !bf.owned || !bf.committed || bf.dying {
			s.mu.Unlock()
			if attempt > 0 {
				return nil, 0, 0, fmt.Errorf("chunk %s: still in a blob file that cannot be handed out after its promotion", h)
			}
			if err := s.PromoteChunk(h); err != nil {
				return nil, 0, 0, err
			}
			continue
		}
		f, err := s.handOutLocked(bf)
		if err != nil {
			s.mu.Unlock()
			return nil, 0, 0, fmt.Errorf("hand out chunk %s: %w", h, err)
		}
		s.touchLocked(e)
		off, size := e.off, e.size
		s.mu.Unlock()
		return f, off, size, nil
	}
}

// handOutLocked marks bf handed out (persistently: mode 0400) and opens it
// read-only; under s.mu, so that the file is neither punched nor unlinked
// between the two.
func (s *Store) handOutLocked(bf *blobFile) (*os.File, error) {
	f, err := os.Open(bf.path)
	if err != nil {
		return nil, err
	}
	if !bf.handed {
		if err := f.Chmod(0o400); err != nil {
			f.Close()
			return nil, fmt.Errorf("mark %s handed out: %w", bf.path, err)
		}
		if s.sync {
			if err := f.Sync(); err != nil {
				f.Close()
				return nil, fmt.Errorf("mark %s handed out: %w", bf.path, err)
			}
		}
		bf.handed = true
		s.closePunchLocked(bf) // never punched again
	}
	return f, nil
}
