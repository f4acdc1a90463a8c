package node

import (
	"context"
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
				f, err := n.verifiedChunk(it.ctx, rec, m, h, i, int64(r.Length))
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
// against h; a damaged chunk is dropped and fetched again once.
func (n *Node) verifiedChunk(ctx context.Context, rec blob.Record, m *blob.Manifest, h blob.Hash, i int, length int64) (*os.File, error) {
	for attempt := 0; ; attempt++ {
		f, err := n.openVerified(h, length)
		if err == nil {
			return f, nil
		}
		if attempt > 0 {
			return nil, fmt.Errorf("get %q: chunk %d (%s): %w", rec.Name, i, h, err)
		}
		n.log.Warn("local chunk damaged: fetching it again", "name", rec.Name, "chunk", i, "err", err)
		n.store.DropChunk(h, err.Error())
		if ferr := n.engine.FetchManifest(ctx, rec, m); ferr != nil {
			return nil, fmt.Errorf("get %q: chunk %d: %w; fetching it again failed: %v", rec.Name, i, err, ferr)
		}
	}
}

// openVerified opens the chunk file and verifies it through a read-only
// mapping (no copy). A chunk held in a blob file (a get's destination
// shared with the store, which its owner may change) is first moved into a
// chunk file of its own: the files GET_FD hands out never change.
func (n *Node) openVerified(h blob.Hash, length int64) (*os.File, error) {
	if err := n.store.PromoteChunk(h); err != nil {
		return nil, err
	}
	f, size, err := n.store.OpenChunk(h)
	if err != nil {
		return nil, err
	}
	if size != length {
		f.Close()
		return nil, fmt.Errorf("chunk file has %d bytes, the manifest says %d: %w", size, length, blob.ErrCorrupt)
	}
	if off, _ := f.Seek(0, io.SeekCurrent); off != 0 {
		f.Close()
		return nil, fmt.Errorf("chunk %s: not in a file of its own after its promotion", h)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("map chunk %s: %w", h, err)
	}
	verr := h.Verify(mem)
	syscall.Munmap(mem)
	if verr != nil {
		f.Close()
		return nil, verr
	}
	return f, nil
}
