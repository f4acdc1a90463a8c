package transfer

import (
	"context"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
)

// obtainChunk gets one chunk of w's blob for asker (see coalesce.Chunks.Get)
// from w's sources with the scheduler's retry rule, and when they all fail
// from the sources a forced search finds.
func (e *Engine) obtainChunk(ctx context.Context, q fetchwire.Request, w Want, asker peer.ID) ([]byte, error) {
	sources := e.sourcesFor(ctx, w)
	data, err := e.chunks.Obtain(ctx, q, sources, asker)
	if err == nil || ctx.Err() != nil {
		return data, err
	}
	if more := e.moreSources(ctx, w, sources); len(more) > 0 {
		return e.chunks.Obtain(ctx, q, more, asker)
	}
	return nil, err
}

// upstream is what the server asks of the rest of the engine
// (server.Upstream): pull-through from this node's sources, never from the
// asker.
type upstream struct{ e *Engine }

func (u upstream) Chunk(ctx context.Context, q fetchwire.Request, asker peer.ID) ([]byte, error) {
	return u.e.obtainChunk(ctx, q, Want{ID: q.ID, Exclude: asker}, asker)
}

func (u upstream) Manifest(ctx context.Context, id cid.Cid, asker peer.ID) (*blob.Manifest, error) {
	return u.e.manifestFor(ctx, Want{ID: id, Exclude: asker})
}

func (u upstream) WholeBlob(ctx context.Context, id cid.Cid, asker peer.ID) error {
	return u.e.wholeBlob(ctx, id, asker)
}

// wholeBlobCall is one store-and-forward fetch of a whole blob, shared by
// every request that waits for it.
type wholeBlobCall struct {
	done chan struct{}
	err  error
}

// wholeBlob fetches every chunk of blob id into the store (ModeStoreForward)
// and returns when all are stored. Concurrent callers for the same blob
// share one fetch, which runs until it ends even if they leave; asker (the
// child whose request started it) is never used as a source.
func (e *Engine) wholeBlob(ctx context.Context, id cid.Cid, asker peer.ID) error {
	e.mu.Lock()
	c := e.whole[id]
	if c == nil {
		if e.closed {
			e.mu.Unlock()
			return errClosed
		}
		c = &wholeBlobCall{done: make(chan struct{})}
		e.whole[id] = c
		e.wg.Go(func() {
			r := blob.Record{ID: id, Name: "blob " + id.String()}
			c.err = e.fetchAll(e.ctx, r, Want{ID: id, Exclude: asker})
			e.mu.Lock()
			delete(e.whole, id)
			e.mu.Unlock()
			close(c.done)
		})
	}
	e.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
