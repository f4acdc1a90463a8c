package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/cache"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// GetToFile serves a get into a regular file f not opened O_APPEND
// (GET_TO_FD, GET_FILE; see rpcbridge.FileBackend): it resolves name
// once, calls started with the blob's info and its progress (the bytes in
// f so far) before the first byte is written, and returns when f holds exactly the blob's verified bytes
// (written from offset 0, cut to the blob's size). Each byte is written
// once where the store can share f (a file of the store's user on its
// filesystem, cache.Store.LinkSink): the chunks fetched are verified on
// arrival and written into f at their offsets, and f is linked into the
// store as their copy; the chunks the store held already are copied in
// with copy_file_range (no pass through user space), verified first.
// Where it cannot, a cache hit is copied the same way, and a fetch writes
// each chunk into f as it reads it, as Open would. On an error f's
// contents are unspecified (the caller discards it) and nothing of it
// stays in the store.
func (n *Node) GetToFile(ctx context.Context, name string, f *os.File, started func(rpcbridge.Info, rpcbridge.ProgressFunc) error) (rpcbridge.Info, error) {
	start := time.Now()
	rec, m, err := n.resolve(ctx, name, true)
	n.debugResolved(name, rec, m, start, err) // getlog.go
	if err != nil {
		n.metrics.getFailed(err)
		return rpcbridge.Info{}, err
	}
	info := n.info(rec, m)
	prog := &fileProgress{m: m}
	if started != nil {
		if err := started(info, prog.done); err != nil {
			return info, err
		}
	}
	var from func() string
	if n.debugOn() {
		from = n.watchSources(rec.ID)
	}
	how, err := n.getToFile(ctx, rec, m, f, prog)
	sources := ""
	if from != nil {
		sources = from()
	}
	if err != nil {
		n.metrics.getFailed(err)
		return info, fmt.Errorf("get %q: %w", name, err)
	}
	took := time.Since(start)
	n.metrics.getDone(took)
	if n.debugOn() {
		n.log.Debug("get: into a file", "name", name, "how", how)
		n.debugGetDone(name, rec.ID, int64(rec.Size), took, sources)
	}
	n.provideWhenHeld(rec.ID, m)
	info.Local = true
	return info, nil
}

// sourceWatch hands the sources of a completed fetch to the gets into
// files waiting for them (the engine forgets a fetch as it completes).
type sourceWatch struct {
	mu      sync.Mutex
	waiting map[cid.Cid][]chan string
}

// fetchComplete is the engine's OnComplete: it notes the fetch's sources
// for the gets watching id, then announces id.
func (n *Node) fetchComplete(id cid.Cid) {
	w := &n.fetchedFrom
	w.mu.Lock()
	chs := w.waiting[id]
	delete(w.waiting, id)
	w.mu.Unlock()
	if len(chs) > 0 {
		from := n.getSources(id)
		for _, ch := range chs {
			ch <- from
		}
	}
	n.provide(id)
}

// watchSources starts watching the fetch of id for the debug log; the
// function returned stops and returns the peers the bytes came from, or
// "this node's store" when no fetch of id completed meanwhile.
func (n *Node) watchSources(id cid.Cid) func() string {
	w := &n.fetchedFrom
	ch := make(chan string, 1)
	w.mu.Lock()
	if w.waiting == nil {
		w.waiting = map[cid.Cid][]chan string{}
	}
	w.waiting[id] = append(w.waiting[id], ch)
	w.mu.Unlock()
	return func() string {
		w.mu.Lock()
		chs := w.waiting[id]
		for k, c := range chs {
			if c == ch {
				chs = append(chs[:k], chs[k+1:]...)
				break
			}
		}
		if len(chs) == 0 {
			delete(w.waiting, id)
		} else {
			w.waiting[id] = chs
		}
		w.mu.Unlock()
		select {
		case from := <-ch:
			return from
		default:
			return "this node's store"
		}
	}
}

// fileProgress tells how many of a blob's bytes a get into a file has put
// in it so far (rpcbridge.ProgressFunc): for a file shared with the store,
// the chunks its sink holds (fetched or copied in); else the bytes the get
// wrote or copied itself. Safe to call from any goroutine.
type fileProgress struct {
	m    *blob.Manifest
	n    atomic.Uint64
	sink atomic.Pointer[cache.Sink]

	mu   sync.Mutex // the sink's count: chunks seen written, their bytes
	seen []bool
	sum  uint64
	next int // the next chunk to look at
}

// progressScan bounds the chunks one call of fileProgress.done looks at
// (the server samples every 100 ms): all of a blob of up to 64 Ki chunks
// (64 GiB in 1 MiB chunks), a round of a larger one's, so that the count
// of a 4 TiB blob costs a millisecond, not a core.
const progressScan = 1 << 16

func (p *fileProgress) done() uint64 {
	sk := p.sink.Load()
	if sk == nil {
		return p.n.Load()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen == nil {
		p.seen = make([]bool, len(p.m.Chunks))
	}
	for range min(progressScan, len(p.seen)) {
		i := p.next
		p.next = (p.next + 1) % len(p.seen)
		if !p.seen[i] && sk.Written(i) { // written chunks stay written
			p.seen[i] = true
			p.sum += uint64(p.m.ChunkLen(i))
		}
	}
	return p.sum
}

// getToFile writes the blob into f and says how (for the debug log); prog
// follows it.
func (n *Node) getToFile(ctx context.Context, rec blob.Record, m *blob.Manifest, f *os.File, prog *fileProgress) (string, error) {
	sk, err := n.store.LinkSink(f, rec.ID, m)
	if err == nil {
		prog.sink.Store(sk)
		err = n.fillSink(ctx, rec, m, sk)
		if !errors.Is(err, errSinkShort) {
			return "shared with the store", err
		}
		// The store could not keep chunks the sink did not take (held
		// when it opened, evicted since): write the blob from a fetch.
		prog.sink.Store(nil)
		n.log.Info("get: the store could not keep chunks the destination lacks: writing it from the fetch", "name", rec.Name, "err", err)
	} else if !errors.Is(err, cache.ErrNoSink) {
		return "", err
	} else {
		n.log.Debug("get: destination not shared with the store", "name", rec.Name, "why", err)
	}
	if n.holds(m) {
		err := n.store.CopyChunksTo(m, f, nil, func(i int) { prog.n.Add(uint64(m.ChunkLen(i))) })
		if err == nil {
			return "copied from the store", truncate(f, m.Size)
		}
		if !errors.Is(err, blob.ErrNotFound) && !errors.Is(err, blob.ErrCorrupt) {
			return "", fmt.Errorf("write to the destination: %w", err)
		}
		// A chunk left meanwhile: fetch what is missing as below (the
		// progress counts again from 0; the server sends none lower).
		prog.n.Store(0)
	}
	rc, err := n.engine.OpenManifest(ctx, rec, m)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	w := &countWriter{w: io.NewOffsetWriter(f, 0), limit: int64(m.Size), prog: &prog.n}
	var rerr error
	if wt, ok := rc.(io.WriterTo); ok {
		_, rerr = wt.WriteTo(w)
	} else {
		_, rerr = io.Copy(w, rc)
	}
	switch {
	case errors.Is(rerr, errTooLong):
		return "", fmt.Errorf("blob yields more than its %d bytes: %w", m.Size, blob.ErrCorrupt)
	case w.err != nil:
		return "", fmt.Errorf("write to the destination: %w", noSpace(w.err))
	case rerr != nil:
		return "", rerr
	case uint64(w.n) != m.Size:
		return "", fmt.Errorf("blob yields %d bytes, not %d: %w", w.n, m.Size, blob.ErrCorrupt)
	}
	return "written from the fetch", truncate(f, m.Size)
}

// ownSink is the engine's BlobSink: a fetch of a whole blob that is not
// into a caller's file (a stream get, GET_FD's fetch, a relay's
// pull-through for its children, a preheat) writes the chunks it stores
// into one blob file of the store's own (cache.Store.OwnSink) instead of a
// file each. Not for a blob of one chunk (it stays a chunk file, as a
// put's does), nor where a get into a file has a sink open for the blob
// (its destination takes the chunks).
func (n *Node) ownSink(id cid.Cid, m *blob.Manifest) func() {
	if len(m.Chunks) < 2 {
		return nil
	}
	sk, err := n.store.OwnSink(id, m)
	if err != nil {
		if !errors.Is(err, cache.ErrNoSink) {
			n.log.Debug("fetch: chunks into chunk files, not one blob file", "blob", id, "err", err)
		}
		return nil
	}
	return func() {
		if err := sk.Commit(); err != nil {
			n.log.Warn("fetch: writing into the blob's file failed (the chunks not written went to chunk files)", "blob", id, "err", err)
		}
	}
}

// errSinkShort is fillSink's error when chunks the sink did not take (the
// store held them when it opened) left the store and, fetched again, could
// not be kept in it (a blob larger than the room in the cache): the caller
// writes the file from a fetch instead.
var errSinkShort = errors.New("chunks the destination lacks could not be kept in the store")

// fillSink fetches the chunks the store lacks into the sink, copies in the
// rest and commits it; a chunk that left the store or turned out damaged
// meanwhile is fetched again, once. A fetch that ends with chunks the store
// could not keep (blob.ErrNoSpace: a blob larger than the room in the
// cache) is no failure here: the sink wrote them into the file all the
// same, unless it lacks some of them (errSinkShort). On an error the sink
// is aborted.
func (n *Node) fillSink(ctx context.Context, rec blob.Record, m *blob.Manifest, sk *cache.Sink) error {
	for attempt := 0; ; attempt++ {
		ferr := n.engine.FetchManifest(ctx, rec, m)
		if serr := sk.Err(); serr != nil { // a write into the destination failed
			sk.Abort()
			return fmt.Errorf("write to the destination: %w", serr)
		}
		if ferr != nil && !errors.Is(ferr, blob.ErrNoSpace) {
			sk.Abort()
			return ferr
		}
		err := sk.Fill()
		if err == nil {
			break
		}
		if attempt > 0 || !(errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrCorrupt)) || sk.Err() != nil {
			sk.Abort()
			if serr := sk.Err(); serr != nil {
				err = serr
			} else if errors.Is(ferr, blob.ErrNoSpace) && errors.Is(err, blob.ErrNotFound) {
				return fmt.Errorf("%w: %w", errSinkShort, err)
			} else if ferr != nil {
				return ferr
			}
			return fmt.Errorf("write to the destination: %w", err)
		}
		n.log.Info("get: chunks missing from the store and the destination, fetching them again", "name", rec.Name, "err", err)
	}
	if err := sk.Commit(); err != nil {
		return fmt.Errorf("write to the destination: %w", err)
	}
	return nil
}

// truncate cuts f to size.
func truncate(f *os.File, size uint64) error {
	if err := f.Truncate(int64(size)); err != nil {
		return fmt.Errorf("cut the destination to %d bytes: %w", size, noSpace(err))
	}
	return nil
}

// noSpace marks a full disk's (or quota's) error with blob.ErrNoSpace.
func noSpace(err error) error {
	if errors.Is(err, blob.ErrNoSpace) || !(errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) {
		return err
	}
	return fmt.Errorf("%w: %w", blob.ErrNoSpace, err)
}

var errTooLong = errors.New("more bytes than the blob's size")

// countWriter counts what is written (in prog too, if not nil), refuses
// more than limit bytes and keeps the write error apart from the reader's.
type countWriter struct {
	w     io.Writer
	n     int64
	limit int64
	err   error
	prog  *atomic.Uint64
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.n+int64(len(p)) > c.limit {
		return 0, errTooLong
	}
	k, err := c.w.Write(p)
	c.n += int64(k)
	if c.prog != nil {
		c.prog.Add(uint64(k))
	}
	if err != nil {
		c.err = err
	}
	return k, err
}

var _ rpcbridge.FileBackend = (*Node)(nil)
