package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/ipfs/go-cid"
	"golang.org/x/sys/unix"

	"github.com/omst-project/omst/pkg/blob"
)

// syncFS makes the chunk files under a store's directory durable (a
// variable so that tests can observe the calls).
var syncFS = syncFileSystem

// Ingest pipeline sizing: chunk buffers in flight are bounded by
// ingestMemory (at least minIngestBuffers), hashed and written by
// ingestWriters goroutines while the calling goroutine reads.
const (
	ingestMemory     = 32 << 20
	minIngestBuffers = 3
	maxIngestBuffers = 16
	ingestWriters    = 2
)

// Ingest stores the bytes of r as a blob named name, put on this node by
// origin (a peer ID string). It validates name and chunkSize first, then
// reads r to its end cutting it into chunkSize chunks, writes chunks not yet
// present (reading and hashing overlap with writing), stores the manifest,
// pins the blob for name and makes the record {name, ID, Size, Time: now,
// Origin: origin} current: the pin and the record are committed in one index
// transaction at the very end, so until then the name is not visible. Time is
// bumped past the current record's if the clock is behind it, so a local put
// always wins locally. The pin that name held on an earlier ingested blob
// moves to the new one.
//
// The end of the input is io.EOF itself returned by r, and nothing else
// (blob.FillChunk): r must return io.EOF only when the input is complete,
// and any other error when it is not (a cut connection, an aborted upload,
// a file that changed). Every error from r, io.ErrUnexpectedEOF and errors
// wrapping io.EOF included, fails the ingest and is returned wrapped.
//
// The chunks go into one blob file of the store's own (see the package
// documentation): a regular file read through pkg/stablefile (r has its
// Regular and Skip) is copied into it in the kernel and hashed from the
// store's copy, so that the bytes stored are the bytes hashed; any other
// r is read as a stream. Chunks are hashed by GOMAXPROCS goroutines.
//
// Any failure (a read error, ctx ending, blob.ErrNoSpace when the cap or the
// disk is full) leaves no new record, no new pin and no file: the blob
// file goes with the chunks located in it (one another put relies on
// meanwhile is moved to a chunk file first). Chunks stored so far are
// protected from eviction while the ingest runs. ctx is checked between
// chunks; a blocked r.Read is not interrupted.
//
// A blob may not exceed the chunk count its chunk size allows
// (blob.CheckSize): an input that knows its size (a regular file's
// stablefile.Reader) is checked before anything is read, a stream as soon
// as it passes the bound; either fails with an error wrapping
// blob.ErrTooBig that names the chunk size that would do.
func (s *Store) Ingest(ctx context.Context, name string, r io.Reader, chunkSize int, origin string) (blob.Record, error) {
	return s.IngestWith(ctx, name, r, chunkSize, origin, IngestOptions{})
}

// IngestWith is Ingest with options: the local user that puts the name,
// and a check of whom the put may replace (see IngestOptions).
func (s *Store) IngestWith(ctx context.Context, name string, r io.Reader, chunkSize int, origin string, opts IngestOptions) (blob.Record, error) {
	if err := blob.ValidateName(name); err != nil {
		return blob.Record{}, fmt.Errorf("ingest: %w", err)
	}
	if err := blob.ValidateChunkSize(chunkSize); err != nil {
		return blob.Record{}, fmt.Errorf("ingest %q: %w", name, err)
	}
	if sr, ok := r.(interface{ Size() (int64, bool) }); ok {
		if n, known := sr.Size(); known && n >= 0 {
			if err := blob.CheckSize(uint64(n), chunkSize); err != nil {
				return blob.Record{}, fmt.Errorf("ingest %q: %w", name, err)
			}
		}
	}
	ig := &ingestRun{s: s, held: make(map[blob.Hash]struct{}), opts: opts, quotaLeft: -1}
	if opts.Quota > 0 && opts.HasUser {
		// What the user holds now, but the name this put replaces: an
		// early bound, checked again at the commit.
		var used uint64
		if err := s.db.View(func(txn *badger.Txn) (err error) { used, err = userBytes(txn, opts.User, name); return err }); err != nil {
			return blob.Record{}, fmt.Errorf("ingest %q: %w", name, err)
		}
		if used >= opts.Quota {
			return blob.Record{}, fmt.Errorf("ingest %q: %w", name, quotaErr(opts.User, used, 0, opts.Quota))
		}
		ig.quotaLeft = int64(opts.Quota - used)
	}
	rec, err := ig.run(ctx, name, r, chunkSize, origin)
	if err != nil {
		ig.abort()
		return blob.Record{}, fmt.Errorf("ingest %q: %w", name, err)
	}
	return rec, nil
}

// ingestRun is the state of one Ingest call.
type ingestRun struct {
	s      *Store
	mu     sync.Mutex
	held   map[blob.Hash]struct{} // chunks this run protects from eviction (under mu until the workers end)
	hashes []blob.Hash            // the chunks' hashes in blob order (under mu until the workers end)
	opts   IngestOptions
	// quotaLeft is what the user's quota leaves for this put (-1: no quota).
	quotaLeft int64
	// bf is the put's blob file (DIR/tmp/put-*, then DIR/blobs/<cid>.s<n>),
	// wf the store's read-write descriptor of it; placed are the chunk
	// entries located in it (under mu), pending the bytes reserved for
	// chunks copied into it and not placed yet (under s.mu).
	bf      *blobFile
	wf      *os.File
	placed  []*chunkEntry
	pending int64
}

// regularInput is an input a put copies in the kernel: a regular file
// read through pkg/stablefile (its Reader).
type regularInput interface {
	io.Reader
	Regular() (f *os.File, off, n int64, ok bool)
	Skip(n int64) error
}

type ingestJob struct {
	i   int
	buf []byte // the whole pooled buffer
	n   int
}

// bufPool recycles chunk buffers across ingests.
var bufPool sync.Pool

func getBuf(size int) []byte {
	if p, ok := bufPool.Get().(*[]byte); ok && cap(*p) >= size {
		return (*p)[:size]
	}
	return make([]byte, size)
}

func putBuf(b []byte) { bufPool.Put(&b) }

// copiedHook, if set (tests), is called by copyFile after each copy of
// a group with the bytes copied so far.
var copiedHook func(copied int64)

// copyGroupBytes is about how many bytes of a regular input one
// copy_file_range call copies before the hashers are given them.
const copyGroupBytes = 8 << 20

func (ig *ingestRun) run(ctx context.Context, name string, r io.Reader, chunkSize int, origin string) (blob.Record, error) {
	s := ig.s
	f, err := os.CreateTemp(s.tmpDir, "put-*")
	if err != nil {
		return blob.Record{}, noSpace(fmt.Errorf("create the blob file: %w", err))
	}
	ig.bf, ig.wf = &blobFile{path: f.Name(), refs: 1, owned: true}, f
	var m *blob.Manifest
	if ri, ok := r.(regularInput); ok {
		if src, _, n, regular := ri.Regular(); regular {
			m, err = ig.copyFile(ctx, ri, src, n, chunkSize)
		} else {
			m, err = ig.readStream(ctx, r, chunkSize)
		}
	} else {
		m, err = ig.readStream(ctx, r, chunkSize)
	}
	if err != nil {
		return blob.Record{}, err
	}
	return ig.commit(name, m, origin)
}

// workers is how many goroutines hash a put's chunks.
func workers() int { return max(runtime.GOMAXPROCS(0), 1) }

// readStream reads r to its end into chunk buffers (bounded memory) and
// has them hashed and written into the blob file at their offsets by
// workers() goroutines, while it reads on.
func (ig *ingestRun) readStream(ctx context.Context, r io.Reader, chunkSize int) (*blob.Manifest, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	nw := workers()
	nbuf := min(max(ingestMemory/chunkSize, minIngestBuffers, nw+1), max(maxIngestBuffers, nw+1))
	free := make(chan []byte, nbuf)
	for range nbuf {
		free <- nil // allocated on first use
	}
	jobs := make(chan ingestJob, nbuf)
	var wg sync.WaitGroup
	for range nw {
		wg.Go(func() {
			for j := range jobs {
				if ctx.Err() == nil {
					data := j.buf[:j.n]
					h, ob := ig.s.hashChunk(data)
					ig.record(j.i, h)
					if err := ig.place(int64(j.i)*int64(chunkSize), h, ob, int64(j.n), data); err != nil {
						cancel(fmt.Errorf("store chunk %d: %w", j.i, err))
					}
				}
				free <- j.buf
			}
		})
	}

	m := &blob.Manifest{ChunkSize: uint32(chunkSize)}
	maxChunks := blob.MaxChunksFor(chunkSize)
	chunks := 0 // read and queued; the workers hash them (ig.hashes)
	var rerr error
	for i := 0; ; i++ {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			if buf != nil {
				putBuf(buf)
			}
			break
		}
		if buf == nil {
			buf = getBuf(chunkSize)
		}
		n, err := blob.FillChunk(r, buf)
		if err != nil && err != io.EOF {
			// Not the end of the input: r was cut or failed.
			free <- buf
			rerr = fmt.Errorf("read chunk %d: %w", i, err)
			break
		}
		if n > 0 {
			if chunks >= maxChunks {
				free <- buf
				rerr = blob.TooBig(0, chunkSize)
				break
			}
			if ig.quotaLeft >= 0 && m.Size+uint64(n) > uint64(ig.quotaLeft) {
				free <- buf
				rerr = quotaErr(ig.opts.User, ig.opts.Quota-uint64(ig.quotaLeft), m.Size+uint64(n), ig.opts.Quota)
				break
			}
			chunks++
			m.Size += uint64(n)
			jobs <- ingestJob{i: i, buf: buf, n: n} // never blocks: at most nbuf buffers exist
		} else {
			free <- buf
		}
		if err == io.EOF {
			break
		}
	}
	close(jobs)
	wg.Wait()
	close(free)
	for b := range free {
		if b != nil {
			putBuf(b)
		}
	}
	if rerr != nil {
		return nil, rerr
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if len(ig.hashes) != chunks { // never: every chunk queued was hashed
		return nil, fmt.Errorf("ingest: %d chunks read, %d hashed", chunks, len(ig.hashes))
	}
	m.Chunks = ig.hashes
	return m, nil
}

// copyFile copies the next n bytes of the regular input src, from its
// file offset (moved past them as reads would move it), into the
// blob file in the kernel (copy_file_range: shared extents where the
// filesystem can, a copy in the kernel where it cannot), a group of
// chunks at a time, each chunk's room reserved under the cap first; and
// workers() goroutines read each chunk back from the blob file, the
// store's own, and hash it, so that the bytes stored are the bytes
// hashed whatever the caller does to its file. The input's end is then
// checked as a Read would (stablefile: unchanged since its open).
func (ig *ingestRun) copyFile(ctx context.Context, in regularInput, src *os.File, n int64, chunkSize int) (*blob.Manifest, error) {
	s := ig.s
	if err := blob.CheckSize(uint64(n), chunkSize); err != nil {
		return nil, err
	}
	if ig.quotaLeft >= 0 && n > ig.quotaLeft {
		return nil, quotaErr(ig.opts.User, ig.opts.Quota-uint64(ig.quotaLeft), uint64(n), ig.opts.Quota)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m := &blob.Manifest{ChunkSize: uint32(chunkSize), Size: uint64(n)}
	nch := int((n + int64(chunkSize) - 1) / int64(chunkSize))
	hashes := make([]blob.Hash, nch)
	m.Chunks = hashes // its length gives ChunkLen; each worker fills its own chunks' hashes
	nw := workers()
	jobs := make(chan int, 2*nw)
	var wg sync.WaitGroup
	for range nw {
		wg.Go(func() {
			var buf []byte
			for i := range jobs {
				if ctx.Err() != nil {
					continue
				}
				if buf == nil {
					buf = getBuf(chunkSize)
				}
				l, coff := int64(m.ChunkLen(i)), int64(m.ChunkOffset(i))
				if _, err := ig.wf.ReadAt(buf[:l], coff); err != nil {
					cancel(fmt.Errorf("read chunk %d back from the blob file: %w", i, err))
					continue
				}
				h, ob := s.hashChunk(buf[:l])
				hashes[i] = h
				ig.mu.Lock()
				ig.hold(h)
				ig.mu.Unlock()
				if err := ig.place(coff, h, ob, l, nil); err != nil {
					cancel(fmt.Errorf("store chunk %d: %w", i, err))
				}
			}
			if buf != nil {
				putBuf(buf)
			}
		})
	}
	group := max(copyGroupBytes/chunkSize, 1)
	var copied int64
	var cerr error
	for i := 0; i < nch && ctx.Err() == nil && cerr == nil; i += group {
		j := min(i+group, nch)
		from, to := int64(m.ChunkOffset(i)), n
		if j < nch {
			to = int64(m.ChunkOffset(j))
		}
		if cerr = ig.reserve(m, i, j); cerr != nil {
			break
		}
		k, err := copyFromOffset(src, ig.wf, from, to-from)
		copied += k
		if err != nil {
			if errors.Is(err, errSourceEnded) {
				// The file shrank: stablefile says how.
				if serr := in.Skip(copied); serr != nil {
					cerr = serr
				} else if _, rerr := in.Read(make([]byte, 1)); rerr != nil && rerr != io.EOF {
					cerr = fmt.Errorf("read the input: %w", rerr)
				}
			}
			if cerr == nil {
				cerr = fmt.Errorf("copy the input into the blob file: %w", err)
			}
			break
		}
		if copiedHook != nil {
			copiedHook(copied)
		}
		for k := i; k < j; k++ {
			select {
			case jobs <- k:
			case <-ctx.Done():
			}
		}
	}
	close(jobs)
	wg.Wait()
	if cerr != nil {
		return nil, cerr
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	// The end: stablefile checks the file is as it was at its open.
	if err := in.Skip(n); err != nil {
		return nil, fmt.Errorf("read the input: %w", err)
	}
	if k, err := in.Read(make([]byte, 1)); err != io.EOF {
		if err == nil {
			err = fmt.Errorf("%d more bytes after its end", k)
		}
		return nil, fmt.Errorf("read the input: %w", err)
	}
	ig.hashes = hashes
	return m, nil
}

// copyFromOffset copies n bytes of src from its file offset (which it
// moves past them, as reads would: a caller sharing the descriptor sees
// the put's progress) to dst at doff, with copy_file_range, falling back
// to a read and a write where the kernel refuses it for these files; it
// returns how many it copied, and an error wrapping errSourceEnded if src
// ended first.
func copyFromOffset(src, dst *os.File, doff, n int64) (int64, error) {
	var done int64
	for n > 0 {
		do := doff
		k, err := unix.CopyFileRange(int(src.Fd()), nil, int(dst.Fd()), &do, int(min(n, 1<<30)), 0)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
				k, err := io.Copy(io.NewOffsetWriter(dst, doff), io.LimitReader(src, n))
				done += k
				if err != nil {
					return done, noSpace(fmt.Errorf("copy: %w", err))
				}
				if k < n {
					return done, fmt.Errorf("copy: %d bytes missing: %w", n-k, errSourceEnded)
				}
				return done, nil
			}
			return done, noSpace(fmt.Errorf("copy_file_range: %w", err))
		}
		if k == 0 {
			return done, fmt.Errorf("copy_file_range: %d bytes missing: %w", n, errSourceEnded)
		}
		doff += int64(k)
		n -= int64(k)
		done += int64(k)
	}
	return done, nil
}

// reserve makes room under the cap for chunks i..j-1 of m, about to be
// copied into the blob file (evicting as a put does), and counts them
// pending until placed.
func (ig *ingestRun) reserve(m *blob.Manifest, i, j int) error {
	s := ig.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := i; k < j; k++ {
		l := int64(m.ChunkLen(k))
		if err := s.evictLocked(l); err != nil {
			return err
		}
		s.reserved += l
		ig.pending += l
	}
	return nil
}

// record notes chunk i's hash and holds it.
func (ig *ingestRun) record(i int, h blob.Hash) {
	ig.mu.Lock()
	defer ig.mu.Unlock()
	ig.hold(h)
	for len(ig.hashes) <= i {
		ig.hashes = append(ig.hashes, blob.Hash{})
	}
	ig.hashes[i] = h
}

// place enters chunk h (n bytes at off of the blob, held by the run) as
// located in the blob file: data, if not nil, is written there first
// (within the cap); else the bytes are there already (copyFile reserved
// their room). A chunk the store holds already, elsewhere, is not
// entered again: its bytes in the blob file, if any, are punched out.
func (ig *ingestRun) place(off int64, h blob.Hash, ob []byte, n int64, data []byte) error {
	s := ig.s
	s.mu.Lock()
	if data == nil {
		s.reserved -= n
		ig.pending -= n
	}
	if e, ok := s.chunks[h]; ok {
		s.touchLocked(e)
		s.mu.Unlock()
		if data == nil {
			ig.punch(off, n)
		}
		return nil
	}
	if data != nil {
		if err := s.evictLocked(n); err != nil {
			s.mu.Unlock()
			return err
		}
		s.reserved += n
		s.mu.Unlock()
		_, werr := ig.wf.WriteAt(data, off)
		s.mu.Lock()
		s.reserved -= n
		if werr != nil {
			s.mu.Unlock()
			return noSpace(fmt.Errorf("write into the blob file: %w", werr))
		}
		if e, ok := s.chunks[h]; ok { // stored meanwhile (by another put, or at another offset of this one)
			s.touchLocked(e)
			s.mu.Unlock()
			ig.punch(off, n)
			return nil
		}
	}
	e := &chunkEntry{hash: h, size: n, bf: ig.bf, off: off, lastUse: time.Now().UnixNano()}
	ig.bf.refs++
	s.addEntryLocked(e, true)
	s.mu.Unlock()
	ig.mu.Lock()
	ig.placed = append(ig.placed, e)
	ig.mu.Unlock()
	if ob != nil {
		s.PutOutboard(h, ob)
	}
	return nil
}

// punch frees n bytes at off of the blob file (a chunk stored elsewhere).
func (ig *ingestRun) punch(off, n int64) {
	if err := punchHoleFile(ig.wf, off, n); err != nil {
		ig.s.log.Warn("free a chunk stored twice in a put's blob file", "path", ig.wf.Name(), "err", err)
	}
}

// hold protects h from eviction until the run ends; ig.mu is held (or
// the workers have ended).
func (ig *ingestRun) hold(h blob.Hash) {
	if _, ok := ig.held[h]; ok {
		return
	}
	ig.held[h] = struct{}{}
	ig.s.mu.Lock()
	ig.s.pinChunkLocked(h)
	ig.s.mu.Unlock()
}

// releaseLocked drops the run's holds.
func (ig *ingestRun) releaseLocked() {
	for h := range ig.held {
		ig.s.unpinChunkLocked(h)
	}
	clear(ig.held)
}

// abort drops the holds and the reservations, and removes the blob file
// with the entries located in it; a chunk located there that something
// else pins meanwhile (another put found it stored) is moved to a chunk
// file of its own first (PromoteChunk), so that it stays.
func (ig *ingestRun) abort() {
	s := ig.s
	s.mu.Lock()
	ig.releaseLocked()
	s.reserved -= ig.pending
	ig.pending = 0
	bf := ig.bf
	if bf == nil {
		s.mu.Unlock()
		return
	}
	ig.bf = nil
	bf.dying = true
	var keep []blob.Hash
	for _, e := range ig.placed {
		if s.chunks[e.hash] != e || e.bf != bf {
			continue
		}
		if s.pinCount[e.hash] > 0 {
			keep = append(keep, e.hash)
		} else {
			s.removeLocked(e)
		}
	}
	s.mu.Unlock()
	for _, h := range keep {
		if err := s.PromoteChunk(h); err != nil {
			s.log.Warn("keep a chunk of a failed put that another put uses", "chunk", h.String(), "err", err)
		}
	}
	s.mu.Lock()
	for _, e := range ig.placed {
		if s.chunks[e.hash] == e && e.bf == bf {
			s.removeLocked(e)
		}
	}
	s.unrefBlobLocked(bf)
	s.mu.Unlock()
	ig.wf.Close()
}

// commit stores the manifest, the pin and the record in one transaction.
func (ig *ingestRun) commit(name string, m *blob.Manifest, origin string) (blob.Record, error) {
	s := ig.s
	enc := m.Encode()
	id := blob.ManifestCID(enc)
	if err := ig.keepFile(id, m); err != nil {
		return blob.Record{}, err
	}
	if s.sync {
		// The chunks before the record that names them.
		if err := syncFS(s.dir); err != nil {
			return blob.Record{}, fmt.Errorf("sync chunk files: %w", noSpace(err))
		}
	}
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	var rec blob.Record
	var moved []string
	err := s.db.Update(func(txn *badger.Txn) error {
		if err := setManifest(txn, id, enc); err != nil {
			return err
		}
		now := time.Now().UnixNano()
		if cur, err := getRecord(txn, name); err == nil && cur.Time >= now {
			now = cur.Time + 1
		} else if err != nil && !errors.Is(err, blob.ErrNotFound) {
			return err
		}
		if at, ok := s.removalCovering(name); ok && at >= now {
			now = at + 1 // a put after a removal lives, whatever the clocks
		}
		rec = blob.Record{Name: name, ID: id, Size: m.Size, Time: now, Origin: origin}
		if err := checkReplace(txn, name, ig.opts); err != nil {
			return err
		}
		if err := checkQuota(txn, name, m.Size, ig.opts); err != nil {
			return err
		}
		if s.seal != nil {
			var err error
			if rec, err = s.seal(rec); err != nil {
				return err
			}
		}
		if _, err := s.addOwnerTxn(txn, id, name); err != nil {
			return err
		}
		var err error
		if moved, err = s.dropOwnerTxn(txn, name, id.KeyString()); err != nil {
			return err
		}
		if _, err = putRecord(txn, rec, ""); err != nil {
			return err
		}
		return setUser(txn, name, ig.opts)
	})
	if err == nil && s.sync {
		err = s.db.Sync()
	}
	if err != nil {
		return blob.Record{}, fmt.Errorf("commit %s: %w", id, noSpace(err))
	}
	s.mu.Lock()
	bf := ig.bf
	ig.bf = nil
	bf.committed = true // its entries reach the index at the next flush
	s.adoptChunksLocked(m.Chunks)
	s.addOwnerMem(id, name, m)
	s.dropOwnerMem(name, id.KeyString(), moved)
	ig.releaseLocked()
	s.unrefBlobLocked(bf) // the run's own reference: gone with no entry
	s.mu.Unlock()
	ig.wf.Close()
	return rec, nil
}

// keepFile cuts the blob file to the blob's size and moves it to
// DIR/blobs/<cid>.s<n>, before the index commit that names its blob (a
// crash between the two leaves a file whose blob has no manifest, which
// Open removes); a file that holds no entry (every chunk was stored
// already) stays in DIR/tmp until it is unlinked. The file of a blob of
// one chunk becomes that chunk's file in DIR/chunks instead (a crash
// before the commit leaves it an orphan, evicted first).
func (ig *ingestRun) keepFile(id cid.Cid, m *blob.Manifest) error {
	s := ig.s
	if err := ig.wf.Truncate(int64(m.Size)); err != nil {
		return noSpace(fmt.Errorf("cut the blob file to %d bytes: %w", m.Size, err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ig.bf.refs <= 1 {
		return nil
	}
	if e := ig.placed[0]; len(m.Chunks) == 1 && ig.bf.refs == 2 && e.bf == ig.bf {
		// A blob of one chunk: its file is that chunk's file (DIR/chunks
		// stays the home of small objects, not one directory of blobs).
		path := s.chunkPath(e.hash)
		err := os.Rename(ig.bf.path, path)
		if errors.Is(err, fs.ErrNotExist) {
			if err = os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
				err = os.Rename(ig.bf.path, path)
			}
		}
		if err != nil {
			return noSpace(fmt.Errorf("keep the chunk file: %w", err))
		}
		e.bf, e.off = nil, 0
		ig.bf.refs--
		return nil
	}
	final, err := s.newBlobPath(id, true)
	if err == nil {
		err = os.Rename(ig.bf.path, final)
	}
	if err != nil {
		return noSpace(fmt.Errorf("keep the blob file: %w", err))
	}
	ig.bf.path = final
	return nil
}
