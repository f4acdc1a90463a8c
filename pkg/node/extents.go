package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// OpenExtents serves GET_FD: it fetches the chunks of the blob named name
// that are missing here, then yields the chunk files in blob order, each
// verified against its hash just before it is handed out (several chunks
// verified in parallel). A chunk file that fails verification is dropped,
// fetched again once, and fails the get with blob.ErrCorrupt if it is still
// wrong.
func (n *Node) OpenExtents(ctx context.Context, name string) (rpcbridge.Info, rpcbridge.ExtentIter, error) {
	start := time.Now()
	rec, m, err := n.resolve(ctx, name, true)
	if err != nil {
		n.metrics.getFailed(err)
		return rpcbridge.Info{}, nil, err
	}
	if err := n.engine.FetchManifest(ctx, rec, m); err != nil {
		n.metrics.getFailed(err)
		return rpcbridge.Info{}, nil, fmt.Errorf("get %q: %w", name, err)
	}
	info := n.info(rec, m)
	return info, n.metrics.timeExtents(start, n.newExtentIter(ctx, rec, m)), nil
}

type extentResult struct {
	x   rpcbridge.Extent
	err error
}

// extentIter verifies chunks ahead of the reader with a few workers and
// yields them in order.
type extentIter struct {
	ctx     context.Context
	cancel  context.CancelFunc
	futures chan chan extentResult // one per chunk, in order
	total   int
	yielded int
}

func (n *Node) newExtentIter(ctx context.Context, rec blob.Record, m *blob.Manifest) *extentIter {
	workers := max(1, runtime.GOMAXPROCS(0))
	it := &extentIter{futures: make(chan chan extentResult, 2*workers), total: len(m.Chunks)}
	it.ctx, it.cancel = context.WithCancel(ctx)
	go func() {
		defer close(it.futures)
		sem := make(chan struct{}, workers)
		for i, h := range m.Chunks {
			fut := make(chan extentResult, 1)
			select {
			case it.futures <- fut:
			case <-it.ctx.Done():
				return
			}
			select {
			case sem <- struct{}{}:
			case <-it.ctx.Done():
				fut <- extentResult{err: it.ctx.Err()}
				return
			}
			r := rpcbridge.ExtentRange{BlobOffset: m.ChunkOffset(i), Length: uint64(m.ChunkLen(i))}
			go func() {
				defer func() { <-sem }()
				f, off, err := n.verifiedChunk(it.ctx, rec, m, h, i, int64(r.Length))
				r.FileOffset = uint64(off)
				fut <- extentResult{x: rpcbridge.Extent{ExtentRange: r, File: f}, err: err}
			}()
		}
	}()
	return it
}

func (it *extentIter) Next() (rpcbridge.Extent, error) {
	fut, ok := <-it.futures
	if !ok {
		if it.yielded < it.total {
			return rpcbridge.Extent{}, fmt.Errorf("stopped after %d of %d chunks: %w", it.yielded, it.total, context.Cause(it.ctx))
		}
		return rpcbridge.Extent{}, io.EOF
	}
	r := <-fut
	if r.err != nil {
		return rpcbridge.Extent{}, r.err
	}
	it.yielded++
	return r.x, nil
}

// Close stops the workers and closes the files they opened that were not
// handed out.
func (it *extentIter) Close() error {
	it.cancel()
	for fut := range it.futures {
		if r := <-fut; r.x.File != nil {
			r.x.File.Close()
		}
	}
	return nil
}

// verifiedChunk opens chunk i (hash h, length bytes) and checks its bytes
// against h; a damaged chunk is dropped and fetched again once. The
// chunk's bytes are at off in the file.
func (n *Node) verifiedChunk(ctx context.Context, rec blob.Record, m *blob.Manifest, h blob.Hash, i int, length int64) (*os.File, int64, error) {
	for attempt := 0; ; attempt++ {
		f, off, err := n.openVerified(h, length)
		if err == nil {
			return f, off, nil
		}
		if attempt > 0 {
			return nil, 0, fmt.Errorf("get %q: chunk %d (%s): %w", rec.Name, i, h, err)
		}
		n.log.Warn("local chunk damaged or gone: fetching it again", "name", rec.Name, "chunk", i, "err", err)
		if !errors.Is(err, blob.ErrNotFound) {
			// Damaged where it is. A chunk not found (evicted, or moved
			// while it was read: the store looks for it again) is not
			// dropped: its entry may be a good copy elsewhere.
			n.store.DropChunk(h, err.Error())
		}
		if ferr := n.engine.FetchManifest(ctx, rec, m); ferr != nil {
			return nil, 0, fmt.Errorf("get %q: chunk %d: %w; fetching it again failed: %v", rec.Name, i, err, ferr)
		}
	}
}

// openVerified opens the file that holds chunk h for a client to map
// (cache.Store.OpenChunkShared: a chunk file, or the store's own blob file,
// handed out without a copy and never punched again; a chunk in a get's
// destination, which its owner may change, is moved into a chunk file
// first) and verifies the chunk's bytes through a read-only mapping (no
// copy). The bytes are at off in the file.
func (n *Node) openVerified(h blob.Hash, length int64) (*os.File, int64, error) {
	f, off, size, err := n.store.OpenChunkShared(h)
	if err != nil {
		return nil, 0, err
	}
	if size != length {
		f.Close()
		return nil, 0, fmt.Errorf("chunk has %d bytes, the manifest says %d: %w", size, length, blob.ErrCorrupt)
	}
	if size == 0 {
		if verr := h.Verify(nil); verr != nil {
			f.Close()
			return nil, 0, verr
		}
		return f, off, nil
	}
	// A file cut short would make the mapping fault (SIGBUS).
	if st, err := f.Stat(); err != nil || st.Size() < off+size {
		f.Close()
		return nil, 0, fmt.Errorf("chunk %s: its file is cut short: %w", h, blob.ErrCorrupt)
	}
	page := int64(os.Getpagesize())
	base := off / page * page // a mapping starts on a page
	mem, err := syscall.Mmap(int(f.Fd()), base, int(off-base+size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("map chunk %s: %w", h, err)
	}
	verr := h.Verify(mem[off-base:])
	syscall.Munmap(mem)
	if verr != nil {
		f.Close()
		return nil, 0, verr
	}
	return f, off, nil
}
