package transfer

import (
	"context"

	"github.com/libp2p/go-libp2p/core/peer"

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
