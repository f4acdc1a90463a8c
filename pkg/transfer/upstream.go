package transfer

import (
	"context"
	"time"

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
	defer u.e.holdRelaySink(q)()
	return u.e.obtainChunk(ctx, q, Want{ID: q.ID, Exclude: asker}, asker)
}

// relaySinkIdle is how long a relay keeps a blob's sink open after the
// last chunk request for it that it pulled through.
const relaySinkIdle = 5 * time.Second

// relaySink is Config.BlobSink's sink of a blob this node pulls through
// chunk by chunk for its children (cut-through: no fetch of the whole
// blob runs here), open while requests for it come.
type relaySink struct {
	release func() // nil: the store opened none
	chunks  []blob.Hash
	busy    int         // requests in flight; under e.mu
	idle    *time.Timer // running while busy is 0; under e.mu
}

// holdRelaySink keeps a sink open (Config.BlobSink) for the blob of q, a
// chunk this node lacks and pulls through for a child, so that the chunks
// it relays are stored in one file of the blob; the function returned
// ends the hold. The sink closes relaySinkIdle after the last hold ends,
// once the chunks being stored are, and at Close.
func (e *Engine) holdRelaySink(q fetchwire.Request) func() {
	if e.cfg.BlobSink == nil || e.store.HasChunk(q.Hash) {
		return func() {}
	}
	e.mu.Lock()
	rs := e.relaying[q.ID]
	if rs == nil && !e.closed {
		m, err := e.store.Manifest(q.ID)
		if err != nil {
			e.mu.Unlock()
			return func() {}
		}
		// Under e.mu: BlobSink only opens a file in the store.
		rs = &relaySink{release: e.cfg.BlobSink(q.ID, m), chunks: m.Chunks}
		e.relaying[q.ID] = rs
	}
	if rs == nil {
		e.mu.Unlock()
		return func() {}
	}
	rs.busy++
	if rs.idle != nil {
		rs.idle.Stop()
		rs.idle = nil
	}
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if rs.busy--; rs.busy > 0 || e.relaying[q.ID] != rs {
			return
		}
		rs.idle = time.AfterFunc(relaySinkIdle, func() {
			e.mu.Lock()
			if rs.busy > 0 || e.relaying[q.ID] != rs {
				e.mu.Unlock()
				return
			}
			delete(e.relaying, q.ID)
			e.mu.Unlock()
			e.endRelaySink(rs)
		})
	}
}

// endRelaySink releases rs's sink once the chunks being stored are.
func (e *Engine) endRelaySink(rs *relaySink) {
	if rs.release == nil {
		return
	}
	for _, h := range rs.chunks {
		e.chunks.WaitStored(e.ctx, h)
	}
	rs.release()
}

// releaseRelaySinks releases every relay sink (at Close).
func (e *Engine) releaseRelaySinks() {
	e.mu.Lock()
	rss := e.relaying
	e.relaying = map[cid.Cid]*relaySink{}
	for _, rs := range rss {
		if rs.idle != nil {
			rs.idle.Stop()
		}
	}
	e.mu.Unlock()
	for _, rs := range rss {
		e.endRelaySink(rs)
	}
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
