package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

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
// Any failure (a read error, ctx ending, blob.ErrNoSpace when the cap or the
// disk is full) leaves no new record and no new pin, and removes the chunks
// this call wrote that nobody else has used meanwhile. Chunks written so far
// are protected from eviction while the ingest runs. ctx is checked between
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
	s       *Store
	mu      sync.Mutex
	held    map[blob.Hash]struct{} // chunks this run protects from eviction (under mu until the writers end)
	hashes  []blob.Hash            // the chunks' hashes in blob order (under mu until the writers end)
	written []writtenChunk         // chunks whose files this run created (under mu)
	opts    IngestOptions
	// quotaLeft is what the user's quota leaves for this put (-1: no quota).
	quotaLeft int64
}

// writtenChunk is a chunk an ingest created, with its last use at creation.
type writtenChunk struct {
	e  *chunkEntry
	at int64
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

func (ig *ingestRun) run(ctx context.Context, name string, r io.Reader, chunkSize int, origin string) (blob.Record, error) {
	s := ig.s
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	nbuf := min(max(ingestMemory/chunkSize, minIngestBuffers), maxIngestBuffers)
	free := make(chan []byte, nbuf)
	for range nbuf {
		free <- nil // allocated on first use
	}
	jobs := make(chan ingestJob, nbuf)
	var wg sync.WaitGroup
	for range ingestWriters {
		wg.Go(func() {
			for j := range jobs {
				if ctx.Err() == nil {
					// Hashed here, not by the reader: the writers hash
					// in parallel while the reader reads on.
					h, ob := s.hashChunk(j.buf[:j.n])
					ig.mu.Lock()
					ig.hold(h)
					for len(ig.hashes) <= j.i {
						ig.hashes = append(ig.hashes, blob.Hash{})
					}
					ig.hashes[j.i] = h
					ig.mu.Unlock()
					e, at, err := s.storeChunk(h, j.buf[:j.n], true)
					if err != nil {
						cancel(fmt.Errorf("store chunk %d: %w", j.i, err))
					} else {
						if ob != nil {
							s.PutOutboard(h, ob)
						}
						if e != nil {
							ig.mu.Lock()
							ig.written = append(ig.written, writtenChunk{e, at})
							ig.mu.Unlock()
						}
					}
				}
				free <- j.buf
			}
		})
	}

	m := &blob.Manifest{ChunkSize: uint32(chunkSize)}
	maxChunks := blob.MaxChunksFor(chunkSize)
	chunks := 0 // read and queued; the writers hash them (ig.hashes)
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
		return blob.Record{}, rerr
	}
	if ctx.Err() != nil {
		return blob.Record{}, context.Cause(ctx)
	}
	if len(ig.hashes) != chunks { // never: every chunk queued was hashed
		return blob.Record{}, fmt.Errorf("ingest: %d chunks read, %d hashed", chunks, len(ig.hashes))
	}
	m.Chunks = ig.hashes
	return ig.commit(name, m, origin)
}

// hold protects h from eviction until the run ends; ig.mu is held (or
// the writers have ended).
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

// abort drops the holds and removes the chunk files this run created that
// nothing else pins and nobody has put or read since.
func (ig *ingestRun) abort() {
	s := ig.s
	s.mu.Lock()
	defer s.mu.Unlock()
	ig.releaseLocked()
	for _, w := range ig.written {
		h := w.e.hash
		if s.chunks[h] == w.e && w.e.lastUse == w.at && s.pinCount[h] == 0 {
			s.removeLocked(w.e)
		}
	}
}

// commit stores the manifest, the pin and the record in one transaction.
func (ig *ingestRun) commit(name string, m *blob.Manifest, origin string) (blob.Record, error) {
	s := ig.s
	enc := m.Encode()
	id := blob.ManifestCID(enc)
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
	s.adoptChunksLocked(m.Chunks)
	s.addOwnerMem(id, name, m)
	s.dropOwnerMem(name, id.KeyString(), moved)
	ig.releaseLocked()
	s.mu.Unlock()
	return rec, nil
}
