package server

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
)

// pieceSender writes one chunk reply in pieces (fetch 1.3.0): the
// chunk's outboard first, then its bytes in order, each frame as soon as
// it is verified here. Every frame but the last goes to ready on its own;
// the last is sl, which the caller sends.
type pieceSender struct {
	srv   *Server
	ctx   context.Context
	sl    *fetchSlot
	ready chan<- *fetchSlot

	// sendfile: the stream sends file bytes with sendfile (fromFile).
	sendfile bool

	obSent bool
	ob     []byte // the outboard sent
	obLen  int    // the length it states
	sent   int    // bytes sent so far
}

// frame queues a frame of the reply that is not its last.
func (pc *pieceSender) frame(status byte, off int, body []byte) bool {
	f := &fetchSlot{tag: pc.sl.tag, chunk: true, asker: pc.sl.asker, status: status, off: off, body: body, notFinal: true}
	select {
	case pc.ready <- f:
		return true
	case <-pc.ctx.Done():
		return false
	}
}

// sendFrom sends what st holds beyond what was sent: the outboard once
// known, then the verified bytes, until the chunk is complete (the rest
// then goes in the final frame: finish). It reports false when the stream
// is gone.
func (pc *pieceSender) sendFrom(h blob.Hash, st piece.State) bool {
	if !pc.obSent {
		if st.Outboard == nil {
			return true
		}
		if !pc.frame(fetchwire.StatusOutboard, 0, st.Outboard) {
			return false
		}
		pc.obSent, pc.ob, pc.obLen = true, st.Outboard, st.Len
	}
	if st.Len != pc.obLen {
		// The outboard passed on stated a length the chunk turned out not
		// to have (piece.Partial.Complete): nothing more verifies against
		// it; finish ends the reply.
		return true
	}
	if st.Done() {
		return true // the whole chunk goes in the final frame (finish)
	}
	end := len(st.Data) - len(st.Data)%piece.GroupSize
	if end <= pc.sent {
		return true
	}
	if !pc.frame(fetchwire.StatusPiece, pc.sent, st.Data[pc.sent:end]) {
		return false
	}
	pc.srv.cfg.Stats.BytesPassedOn.Add(uint64(end - pc.sent))
	pc.sent = end
	return true
}

// passOn fetches chunk q from this node's sources for asker p (as
// Upstream.Chunk) and, while the fetch is in flight, sends each verified
// piece of it as it arrives. It returns the whole chunk (or the fetch's
// error); finish sends the rest.
func (pc *pieceSender) passOn(q fetchwire.Request, p peer.ID) ([]byte, error) {
	var mu sync.Mutex
	var cur *piece.Partial
	moved := make(chan struct{}, 1)
	watch := func(pt *piece.Partial) {
		mu.Lock()
		cur = pt
		mu.Unlock()
		select {
		case moved <- struct{}{}:
		default:
		}
	}
	type result struct {
		data []byte
		err  error
	}
	res := make(chan result, 1)
	go func() {
		data, err := pc.srv.cfg.Upstream.Chunk(piece.WithWatch(pc.ctx, watch), q, p)
		res <- result{data, err}
	}()
	var changed <-chan struct{}
	for {
		select {
		case r := <-res:
			return r.data, r.err
		case <-moved:
		case <-changed:
		case <-pc.ctx.Done():
			r := <-res // Upstream.Chunk ends with ctx
			return r.data, r.err
		}
		mu.Lock()
		pt := cur
		mu.Unlock()
		changed = nil
		if pt == nil || pt.Hash() != q.Hash {
			continue
		}
		st := pt.State()
		if st.Err == nil && !st.Done() {
			changed = st.Changed
		}
		if !pc.sendFrom(q.Hash, st) {
			r := <-res
			return r.data, r.err
		}
	}
}

// verifyingStore is a Store that lets its caller verify the bytes it reads
// from disk (pkg/cache.Store does): the server then computes a chunk's
// outboard in place of the store's own hash of it, one pass over the
// chunk instead of two.
type verifyingStore interface {
	// ReadChunkVerifiedBy is ReadChunk with verify as the verification of
	// bytes read from disk (pkg/cache.Store.ReadChunkVerifiedBy states the
	// contract): a copy that fails it is dropped from the store.
	ReadChunkVerifiedBy(h blob.Hash, verify func(data []byte) error) ([]byte, error)
}

// fileStore is a Store that hands out a stored chunk's file (pkg/cache's
// OpenChunkAt states the contract: its size checked, not its bytes).
type fileStore interface {
	OpenChunkAt(h blob.Hash) (f *os.File, off, size int64, err error)
}

// fromFile makes the reply chunk h from its file in the store, sent with
// sendfile (the stream can: pc.sendfile), when the server or the store
// keeps its outboard: the OUTBOARD frame, then the whole chunk in the
// final PIECE (the slot's file), not read into memory nor hashed here
// (every receiver verifies every piece; a damaged copy comes back as a
// REPORT, as for readStore's unhashed reads). It reports false, having
// sent nothing, when the chunk or its outboard is not here or the store
// cannot hand out files: the caller then serves it as before.
func (pc *pieceSender) fromFile(h blob.Hash) bool {
	srv := pc.srv
	fst, okf := srv.cfg.Store.(fileStore)
	obs, oko := srv.cfg.Store.(outboardStore)
	if !okf || !oko {
		return false
	}
	ob := srv.outboards.any(h)
	if ob == nil {
		if ob, _ = obs.Outboard(h); ob == nil {
			return false
		}
	}
	f, off, size, err := fst.OpenChunkAt(h)
	if err != nil {
		return false
	}
	if n, err := piece.ChunkLen(ob, blob.MaxChunkSize); err != nil || int64(n) != size {
		f.Close()
		srv.outboards.remove(h)
		return false
	}
	srv.outboards.put(h, ob)
	if !pc.frame(fetchwire.StatusOutboard, 0, ob) {
		f.Close()
		srv.reply(pc.sl, nil, pc.ctx.Err()) // the stream is gone: the reply is its error
		return true
	}
	srv.cfg.Stats.ServedUnhashed.Add(1)
	srv.cfg.Stats.ServedSendfile.Add(1)
	pc.obSent, pc.ob, pc.obLen = true, ob, int(size)
	pc.sl.status, pc.sl.off = fetchwire.StatusPiece, 0
	pc.sl.file, pc.sl.fileOff, pc.sl.fileLen = f, off, int(size)
	return true
}

// outboardStore is a Store that keeps chunks' outboards (pkg/cache.Store
// does: PutOutboard, Outboard, ReadChunkUnverified state the contracts),
// so that a chunk sent in pieces is read from disk and sent without being
// hashed here: every receiver verifies every piece against the outboard,
// and the outboard against the chunk hash.
type outboardStore interface {
	Outboard(h blob.Hash) ([]byte, bool)
	PutOutboard(h blob.Hash, ob []byte)
	ReadChunkUnverified(h blob.Hash) ([]byte, error)
}

// readStore reads chunk h from the store for a reply; ok false when it is
// not here (absent, or damaged and dropped: it is then fetched afresh as
// if it never was). For a reply in pieces (pc) whose outboard this server
// or the store keeps (outboardStore), the bytes are read without a hash
// (the checks that need none stand: the store's size check and damage
// marks; each receiver verifies every piece, and a damaged copy comes back
// as a REPORT: serveReport). Otherwise the bytes are verified: for a reply
// in pieces by computing the outboard as the verification of what the
// store reads (verifyingStore), or else after the store's verification
// (fromStore); the outboard computed is kept, by the store too.
func (srv *Server) readStore(h blob.Hash, pc *pieceSender) (data []byte, ok bool) {
	obs, keeps := srv.cfg.Store.(outboardStore)
	if keeps && pc != nil {
		ob := srv.outboards.any(h)
		if ob == nil {
			ob, _ = obs.Outboard(h)
		}
		if ob != nil {
			data, err := obs.ReadChunkUnverified(h)
			if err != nil {
				return nil, false
			}
			if n, err := piece.ChunkLen(ob, blob.MaxChunkSize); err == nil && n == len(data) {
				srv.outboards.put(h, ob)
				srv.cfg.Stats.ServedUnhashed.Add(1)
				return data, true
			}
			// An outboard of another length: not this chunk's. Verified
			// below, and the outboard computed afresh.
			srv.outboards.remove(h)
		}
	}
	if vs, can := srv.cfg.Store.(verifyingStore); can && pc != nil && !srv.outboards.has(h) {
		var ob []byte
		data, err := vs.ReadChunkVerifiedBy(h, func(b []byte) (err error) {
			ob, err = piece.Outboard(b, h)
			return err
		})
		if err != nil {
			if errors.Is(err, blob.ErrCorrupt) {
				srv.cfg.Log.Warn("a chunk read from the store does not match its hash: dropped, not sent", "hash", h, "err", err)
			}
			return nil, false
		}
		srv.outboards.put(h, ob)
		if keeps {
			obs.PutOutboard(h, ob)
		}
		return data, true
	}
	data, err := srv.cfg.Store.ReadChunk(h)
	if err != nil || (pc != nil && !pc.fromStore(h, data)) {
		return nil, false
	}
	return data, true
}

// fromStore prepares to send data, read from the store, in pieces: it
// computes (or finds) its outboard, which checks data against h. A copy
// that does not hash to h (a store that failed to verify it) is re-checked
// by the store, which drops it if damaged, and reported false: the chunk
// is then fetched afresh as if it were not here.
func (pc *pieceSender) fromStore(h blob.Hash, data []byte) bool {
	if pc.srv.outboards.get(h, len(data)) != nil {
		return true
	}
	ob, err := piece.Outboard(data, h)
	if err != nil {
		damaged, rerr := pc.srv.cfg.Store.RecheckChunk(h)
		pc.srv.cfg.Log.Warn("a chunk read from the store does not match its hash: not sent", "hash", h, "dropped", damaged, "err", rerr)
		return false
	}
	pc.srv.outboards.put(h, ob)
	return true
}

// finish makes sl the reply's final frame: the rest of data (verified)
// after the outboard if not sent yet; or, on err, NOT_FOUND or ERROR
// (which, after an OUTBOARD, ends the reply in pieces as a failure).
func (pc *pieceSender) finish(h blob.Hash, data []byte, err error) {
	var ob []byte
	if err == nil && !pc.obSent {
		if ob = pc.srv.outboards.get(h, len(data)); ob == nil {
			if ob, err = piece.Outboard(data, h); err != nil {
				err = fmt.Errorf("chunk %s: %w", h, err) // never: data was verified
			}
		}
	}
	if err == nil && pc.obSent && pc.obLen != len(data) {
		// An outboard with a false length was passed on (it came first
		// from another sender): the reply ends as NOT_FOUND, which the
		// asker does not count against this node; asked again, it is
		// served from the store.
		err = fmt.Errorf("chunk %s: the outboard passed on stated %d bytes, the chunk has %d: %w", h, pc.obLen, len(data), blob.ErrNotFound)
	}
	if err != nil {
		pc.srv.reply(pc.sl, nil, err)
		return
	}
	if pc.obSent {
		// Of the chunk's length and verified against h, the outboard
		// passed on is the chunk's: kept for the next asker. (Not before:
		// of another length it would pass the cache's check of an
		// outboard's length if it has as many groups.)
		pc.srv.outboards.put(h, pc.ob)
	}
	if ob != nil {
		pc.srv.outboards.put(h, ob)
		if !pc.frame(fetchwire.StatusOutboard, 0, ob) {
			pc.srv.reply(pc.sl, nil, pc.ctx.Err())
			return
		}
		pc.obSent, pc.ob, pc.obLen = true, ob, len(data)
	}
	pc.sl.status, pc.sl.off, pc.sl.body = fetchwire.StatusPiece, pc.sent, data[pc.sent:]
}

// outboardCacheEntries bounds the outboards a server keeps (about 4 KiB
// each for 1 MiB chunks: 16 MiB).
const outboardCacheEntries = 4096

// outboardCache keeps the outboards of the chunks most recently sent in
// pieces, so that a chunk sent to many children is hashed for its
// outboard once. Safe for concurrent use.
type outboardCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // of blob.Hash, most recent first
	m     map[blob.Hash]*list.Element
	obs   map[blob.Hash][]byte
}

func newOutboardCache(max int) *outboardCache {
	return &outboardCache{max: max, order: list.New(), m: map[blob.Hash]*list.Element{}, obs: map[blob.Hash][]byte{}}
}

// get returns h's outboard if kept and it is for a chunk of n bytes.
func (c *outboardCache) get(h blob.Hash, n int) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[h]
	if e == nil || len(c.obs[h]) != piece.OutboardLen(n) {
		return nil
	}
	c.order.MoveToFront(e)
	return c.obs[h]
}

// any returns h's outboard if kept, whatever chunk length it states.
func (c *outboardCache) any(h blob.Hash) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[h]; e != nil {
		c.order.MoveToFront(e)
		return c.obs[h]
	}
	return nil
}

// remove forgets h's outboard.
func (c *outboardCache) remove(h blob.Hash) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[h]; e != nil {
		c.order.Remove(e)
		delete(c.m, h)
		delete(c.obs, h)
	}
}

// has reports whether h's outboard is kept.
func (c *outboardCache) has(h blob.Hash) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[h] != nil
}

func (c *outboardCache) put(h blob.Hash, ob []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[h]; e != nil {
		c.order.MoveToFront(e)
		return
	}
	c.m[h] = c.order.PushFront(h)
	c.obs[h] = ob
	for c.order.Len() > c.max {
		old := c.order.Remove(c.order.Back()).(blob.Hash)
		delete(c.m, old)
		delete(c.obs, old)
	}
}
