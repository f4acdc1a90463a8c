package transfer

import (
	"context"
	"errors"
	"fmt"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/coalesce"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchclient"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
	"github.com/omst-project/omst/pkg/transfer/internal/schedule"
)

// The engine's side of the tree's chunk push (pkg/tree/push.go): a parent
// sends a blob's first chunks with its answer to a child's LOOKUP_GET, and
// the child takes them as chunk fetches in flight from that parent. These
// methods make the Engine a tree.Pusher.

// PushChunks returns the verified bytes of the first chunks of r's blob
// held here, in order from chunk 0, at most max bytes in all, and with
// MaxUploadRate at most one second of it: a push is a head start on the
// asker's requests, and under a limit more would only queue behind it.
func (e *Engine) PushChunks(r blob.Record, max int) [][]byte {
	if e.cfg.MaxUploadRate > 0 {
		max = int(min(int64(max), e.cfg.MaxUploadRate))
	}
	m, err := e.store.Manifest(r.ID)
	if err != nil {
		return nil
	}
	var out [][]byte
	n := 0
	for i, h := range m.Chunks {
		if n+m.ChunkLen(i) > max || !e.store.HasChunk(h) {
			break
		}
		data, err := e.store.ReadChunk(h) // verified
		if err != nil {
			break
		}
		out = append(out, data)
		n += len(data)
	}
	return out
}

// HoldsStart reports whether the first chunk of blob id is stored here
// or on its way (a fetch or a push of it in flight): a push of it would
// only bring a second copy.
func (e *Engine) HoldsStart(id cid.Cid) bool {
	m, err := e.store.Manifest(id)
	return err == nil && len(m.Chunks) > 0 && (e.store.HasChunk(m.Chunks[0]) || e.chunks.Fetching(m.Chunks[0]))
}

// WaitUpload blocks until MaxUploadRate, if set, lets n more bytes out
// (the limit fetch replies obey); it fails only when ctx ends first.
func (e *Engine) WaitUpload(ctx context.Context, n int) error {
	return e.server.WaitUpload(ctx, n)
}

// Pushed counts n chunk bytes pushed to asker as served.
func (e *Engine) Pushed(asker peer.ID, n int) {
	e.stats.PushSent.Add(uint64(n))
	e.stats.BytesServed.Add(uint64(n))
	e.stats.BytesOut[e.sources.Relation(asker)].Add(uint64(n))
}

// ExpectPush registers chunks first .. first+count-1 of r's blob, which
// parent is pushing, as fetches in flight from parent (those not stored
// or in flight already), so that requests for them wait for the push. It
// returns deliver, which verifies a pushed chunk against the manifest and
// completes its fetch (a corrupt one fails it, is counted, reported to
// parent and blamed on it), and end, which fails the fetches the push did
// not complete (their waiters then ask again). It declines (nil, nil)
// without the manifest, or for chunks outside it.
func (e *Engine) ExpectPush(r blob.Record, parent peer.ID, first, count int) (func(int, []byte), func(error)) {
	m, err := e.store.Manifest(r.ID)
	if err != nil || first < 0 || count <= 0 || first+count > len(m.Chunks) {
		return nil, nil
	}
	src := Source{ID: parent, Kind: e.sources.Relation(parent)}
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, nil
	}
	calls := make([]*coalesce.Call, count)
	for k := range calls {
		calls[k] = e.chunks.Expect(m.Chunks[first+k], parent) // nil: stored or in flight already
	}
	deliver := func(i int, data []byte) {
		k := i - first
		if k < 0 || k >= count || calls[k] == nil {
			return
		}
		c := calls[k]
		calls[k] = nil
		h := m.Chunks[i]
		// Verified whole, and its outboard kept with it (one pass, as
		// h.Verify: piece.HashOutboard), so that this node serves it in
		// pieces later without hashing it again.
		var err error
		got, ob := blob.Hash{}, []byte(nil)
		if len(data) > 0 {
			got, ob = piece.HashOutboard(data)
		}
		if got != h {
			err = fmt.Errorf("%w: %d bytes do not hash to %s", blob.ErrCorrupt, len(data), h)
		}
		if err != nil {
			e.stats.CorruptReceived.Add(1)
			q := fetchwire.Request{Type: fetchwire.MsgGet, ID: r.ID, Index: uint32(i), Hash: h}
			e.goTracked(func() { e.chunks.ReportCorrupt(parent, q) })
			perr := &fetchclient.PeerError{Peer: e.describe(parent), Kind: schedule.FailCorrupt, Err: fmt.Errorf("pushed chunk %d of %s: %w", i, r.ID, err)}
			e.notePeerError(parent, "pushed chunk", perr)
			e.chunks.Complete(c, h, nil, Source{}, perr)
			return
		}
		c.KeepOutboard(ob)
		e.stats.PushReceived.Add(uint64(len(data)))
		e.stats.BytesFetched.Add(uint64(len(data)))
		e.stats.BytesIn[src.Kind].Add(uint64(len(data)))
		e.chunks.Complete(c, h, data, src, nil)
	}
	end := func(err error) {
		if err == nil {
			err = errors.New("push ended early")
		}
		for k, c := range calls {
			if c != nil {
				calls[k] = nil
				e.chunks.Complete(c, m.Chunks[first+k], nil, Source{}, &fetchclient.PeerError{Peer: e.describe(parent), Kind: schedule.FailUnreachable,
					Err: fmt.Errorf("pushed chunk %d of %s: %w: %v", first+k, r.ID, blob.ErrUnreachable, err)})
			}
		}
	}
	return deliver, end
}
