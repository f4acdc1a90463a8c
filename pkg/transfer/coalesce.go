package transfer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

// ---- coalescing: one upstream fetch per chunk hash ----

// chunkCall is one upstream fetch of a chunk, shared by every requester of
// that hash on this node (except one that asked on behalf of src itself).
type chunkCall struct {
	src     peer.ID       // the peer asked
	done    chan struct{} // closed when data/err are set
	stored  chan struct{} // closed after the chunk was stored (or storing failed)
	data    []byte
	from    Source // the peer that delivered data
	err     error
	waiters int
	cancel  context.CancelFunc
}

// peerError is a failed request blamed on a peer.
type peerError struct {
	peer string // description for messages
	kind FailKind
	err  error
}

func (e *peerError) Error() string { return fmt.Sprintf("%s: %v", e.peer, e.err) }
func (e *peerError) Unwrap() error { return e.err }

// failKind classifies err for the scheduler.
func failKind(err error) FailKind {
	if pe, ok := errors.AsType[*peerError](err); ok {
		return pe.kind
	}
	switch {
	case errors.Is(err, blob.ErrCorrupt):
		return FailCorrupt
	case errors.Is(err, blob.ErrNotFound):
		return FailNotFound
	}
	return FailUnreachable
}

// joinable reports whether a request for a chunk on behalf of asker may
// wait on the fetch c in flight for it: not when c asks asker itself.
func joinable(c *chunkCall, asker peer.ID) bool {
	return c != nil && (asker == "" || c.src != asker)
}

// chunkFrom returns the verified bytes of chunk q: from the store if it is
// there, else from the fetch already in flight for its hash, else from a new
// fetch from src. A fetched chunk is verified, handed to every waiter and
// then stored. ctx bounds this caller's wait only; the shared fetch is
// cancelled when its last waiter leaves. asker, when not empty, is the peer
// this chunk is wanted for: a fetch in flight from asker itself is not
// joined (asker is asking because it lacks the chunk), the chunk is then
// fetched from src on its own. It also returns the peer that delivered
// the bytes (none when they came from the store).
func (e *Engine) chunkFrom(ctx context.Context, q fetchRequest, src Source, asker peer.ID) ([]byte, Source, error) {
	if e.store.HasChunk(q.Hash) {
		// Verified by the store; a damaged copy is dropped there and
		// fetched again below.
		if data, err := e.store.ReadChunk(q.Hash); err == nil {
			return data, Source{}, nil
		}
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, Source{}, errClosed
	}
	c := e.inflight[q.Hash]
	if !joinable(c, asker) {
		cctx, cancel := context.WithCancel(e.ctx)
		c = &chunkCall{src: src.ID, done: make(chan struct{}), stored: make(chan struct{}), cancel: cancel}
		if e.inflight[q.Hash] == nil {
			e.inflight[q.Hash] = c
		}
		e.wg.Add(1)
		go e.runChunkCall(cctx, c, q, src)
	}
	c.waiters++
	e.mu.Unlock()
	select {
	case <-c.done:
		return c.data, c.from, c.err
	case <-ctx.Done():
		e.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			c.cancel()
		}
		e.mu.Unlock()
		return nil, Source{}, ctx.Err()
	}
}

func (e *Engine) runChunkCall(ctx context.Context, c *chunkCall, q fetchRequest, src Source) {
	defer e.wg.Done()
	defer c.cancel()
	data, err := e.fetchVerified(ctx, src, q)
	from := src
	if rde, ok := errors.AsType[*redirectError](err); ok {
		data, from, err = e.fromSibling(ctx, src, rde.to, q)
	}
	c.data, c.from, c.err = data, from, err
	close(c.done) // waiters take the chunk now: cut-through
	if err == nil {
		if perr := e.store.PutVerifiedChunk(q.Hash, data); perr != nil {
			e.log.Warn("store chunk", "hash", q.Hash, "err", perr)
		}
	}
	e.mu.Lock()
	if e.inflight[q.Hash] == c {
		delete(e.inflight, q.Hash)
	}
	e.mu.Unlock()
	close(c.stored)
}

// fetchVerified asks src for chunk q and verifies what it sends. A corrupt
// chunk is counted and reported to src; a failure other than NOT_FOUND (or
// a redirect) counts as src's error. Verified bytes are counted by src's
// kind.
func (e *Engine) fetchVerified(ctx context.Context, src Source, q fetchRequest) ([]byte, error) {
	data, err := e.request(ctx, src.ID, q)
	if err == nil {
		if verr := q.Hash.Verify(data); verr != nil {
			err = &peerError{peer: e.describe(src.ID), kind: FailCorrupt, err: fmt.Errorf("chunk %d of %s: %w", q.Index, q.ID, verr)}
			data = nil
			e.corruptReceived.Add(1)
			e.goTracked(func() { e.reportCorrupt(src.ID, q) })
		}
	}
	if err != nil {
		if _, redirected := errors.AsType[*redirectError](err); !redirected && ctx.Err() == nil && !errors.Is(err, blob.ErrNotFound) {
			// Corrupt bytes, a broken stream or an ERROR reply; NOT_FOUND is an answer.
			e.notePeerError(src.ID, "fetch chunk", err)
		}
		return nil, err
	}
	e.bytesIn[src.Kind].Add(uint64(len(data)))
	return data, nil
}

// fromSibling follows relay's redirect of chunk q to sibling rd. If the
// sibling has not delivered after hedgeDelay (a few times the recent
// sibling chunk time), the chunk is also asked from the relay itself
// (GET_DIRECT naming the sibling, which the relay then avoids), and the
// first verified copy wins: a slow sibling costs a little time, never a
// stall. A sibling that fails (gone, NOT_FOUND, corrupt bytes, past
// SiblingTimeout) is replaced the same way at once.
func (e *Engine) fromSibling(ctx context.Context, relay Source, rd redirect, q fetchRequest) ([]byte, Source, error) {
	e.redirectsTaken.Add(1)
	if len(rd.Addrs) > 0 {
		e.h.Peerstore().AddAddrs(rd.Peer, rd.Addrs, siblingAddrTTL)
	}
	type result struct {
		data    []byte
		err     error
		sibling bool
	}
	sibling := Source{ID: rd.Peer, Kind: KindSibling}
	results := make(chan result, 2)
	sctx, scancel := context.WithTimeout(ctx, e.cfg.SiblingTimeout)
	defer scancel()
	start := time.Now()
	go func() {
		data, err := e.fetchVerified(sctx, sibling, q)
		results <- result{data, err, true}
	}()
	pending, direct := 1, false
	askRelay := func() {
		direct = true
		pending++
		dq := q
		dq.Type, dq.Failed = msgGetDirect, rd.Peer
		go func() {
			data, err := e.fetchVerified(ctx, relay, dq)
			if _, ok := errors.AsType[*redirectError](err); ok {
				err = &peerError{peer: e.describe(relay.ID), kind: FailUnreachable,
					err: fmt.Errorf("chunk %d of %s: %w", q.Index, q.ID, wire.Malformed("REDIRECT in reply to GET_DIRECT"))}
				e.notePeerError(relay.ID, "fetch chunk", err)
			}
			results <- result{data, err, false}
		}()
	}
	hedge := time.NewTimer(e.hedgeDelay())
	defer hedge.Stop()
	var last error
	for pending > 0 {
		select {
		case r := <-results:
			pending--
			if r.err == nil {
				if r.sibling {
					e.noteSiblingTime(time.Since(start))
					return r.data, sibling, nil
				}
				return r.data, relay, nil
			}
			last = r.err
			if r.sibling && ctx.Err() == nil {
				e.siblingFailures.Add(1)
				e.log.Info("sibling could not deliver a chunk: asking the relay itself", "sibling", rd.Peer,
					"relay", e.describe(relay.ID), "blob", q.ID, "chunk", q.Index, "err", r.err)
				if !direct {
					askRelay()
				}
			}
		case <-hedge.C:
			if !direct {
				e.hedges.Add(1)
				askRelay()
			}
		case <-ctx.Done():
			return nil, Source{}, ctx.Err()
		}
	}
	return nil, Source{}, last
}

// Hedging a sibling request: after hedgeFactor times the moving average
// of recent sibling chunk times, within [minHedge, SiblingTimeout]
// (initialHedge before any sibling delivered).
const (
	hedgeFactor  = 4
	minHedge     = 300 * time.Millisecond
	initialHedge = time.Second
)

// hedgeDelay is how long a sibling request runs alone.
func (e *Engine) hedgeDelay() time.Duration {
	avg := time.Duration(e.siblingTime.Load())
	if avg == 0 {
		return min(initialHedge, e.cfg.SiblingTimeout)
	}
	return min(max(hedgeFactor*avg, minHedge), e.cfg.SiblingTimeout)
}

// noteSiblingTime folds a sibling chunk's time into the moving average
// (weight 1/5).
func (e *Engine) noteSiblingTime(d time.Duration) {
	for {
		old := e.siblingTime.Load()
		nv := int64(d)
		if old != 0 {
			nv = old + (int64(d)-old)/5
		}
		if e.siblingTime.CompareAndSwap(old, nv) {
			return
		}
	}
}

// siblingAddrTTL is how long the addresses of a sibling named in a
// redirect are kept.
const siblingAddrTTL = time.Hour

// reportCorrupt tells src that the bytes it sent for chunk q did not match
// the chunk's hash, so that a node serving from a damaged disk learns it
// (it re-reads and re-verifies its copy, and drops it if damaged). Best
// effort: a failure is only logged.
func (e *Engine) reportCorrupt(src peer.ID, q fetchRequest) {
	q.Type = msgReport
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.RequestTimeout)
	defer cancel()
	body, err := e.request(ctx, src, q)
	switch {
	case err != nil:
		e.log.Info("could not report a corrupt chunk to its sender", "peer", e.describe(src), "blob", q.ID, "chunk", q.Index, "err", err)
	case len(body) == 1 && body[0] == reportDamaged:
		e.log.Info("sender found its copy of a chunk damaged and dropped it", "peer", e.describe(src), "blob", q.ID, "chunk", q.Index)
	default:
		e.log.Info("sender found its copy of a chunk intact", "peer", e.describe(src), "blob", q.ID, "chunk", q.Index)
	}
}

// waitStored waits until a fetch of h in flight has stored it (or failed
// to), so that HasChunk then tells whether it is in the store.
func (e *Engine) waitStored(ctx context.Context, h blob.Hash) error {
	e.mu.Lock()
	c := e.inflight[h]
	e.mu.Unlock()
	if c == nil {
		return nil
	}
	select {
	case <-c.stored:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryDelay is the pause before a chunk's retry number attempt.
func retryDelay(attempt int) time.Duration {
	return time.Duration(attempt) * 50 * time.Millisecond
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// obtainChunk gets one chunk from sources with the scheduler's retry rule,
// for asker (see chunkFrom).
func (e *Engine) obtainChunk(ctx context.Context, q fetchRequest, sources []Source, asker peer.ID) ([]byte, error) {
	if len(sources) == 0 {
		return nil, fmt.Errorf("chunk %d of %s: %w (no source to ask)", q.Index, q.ID, blob.ErrNotFound)
	}
	sch := NewSchedule(1, 1, len(sources), nil)
	for {
		reqs := sch.Next()
		if len(reqs) == 0 {
			return nil, errors.New("scheduler returned no request") // unreachable
		}
		r := reqs[0]
		if err := sleepCtx(ctx, retryDelay(r.Attempt)); err != nil {
			return nil, err
		}
		data, _, err := e.chunkFrom(ctx, q, sources[r.Source], asker)
		if err == nil {
			return data, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if a := sch.Failed(0, failKind(err)); a == GiveUp {
			return nil, err
		}
	}
}
