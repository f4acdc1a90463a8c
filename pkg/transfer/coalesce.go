package transfer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/exchange"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchclient"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/schedule"
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
func (e *Engine) chunkFrom(ctx context.Context, q fetchwire.Request, src Source, asker peer.ID) ([]byte, Source, error) {
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

func (e *Engine) runChunkCall(ctx context.Context, c *chunkCall, q fetchwire.Request, src Source) {
	defer e.wg.Done()
	defer c.cancel()
	data, err := e.fetchVerified(ctx, src, q)
	from := src
	if rde, ok := errors.AsType[*fetchclient.RedirectError](err); ok {
		data, from, err = e.fromSibling(ctx, src, rde.To, q)
	}
	e.complete(c, q.Hash, data, from, err)
}

// complete ends c, the call for chunk h: its waiters get data (verified)
// or err at once (cut-through), then the chunk is stored and the call
// leaves the in-flight set.
func (e *Engine) complete(c *chunkCall, h blob.Hash, data []byte, from Source, err error) {
	c.data, c.from, c.err = data, from, err
	close(c.done) // waiters take the chunk now: cut-through
	if err == nil {
		if perr := e.store.PutVerifiedChunk(h, data); perr != nil {
			e.log.Warn("store chunk", "hash", h, "err", perr)
		}
	}
	e.mu.Lock()
	if e.inflight[h] == c {
		delete(e.inflight, h)
	}
	e.mu.Unlock()
	close(c.stored)
}

// fetchVerified asks src for chunk q and verifies what it sends. A corrupt
// chunk is counted and reported to src; a failure other than NOT_FOUND (or
// a redirect) counts as src's error. Verified bytes are counted by src's
// kind.
func (e *Engine) fetchVerified(ctx context.Context, src Source, q fetchwire.Request) ([]byte, error) {
	q.Sibling = q.Type == fetchwire.MsgGet && src.Kind == KindSibling
	data, err := e.client.Request(ctx, src.ID, q)
	if err == nil {
		if verr := q.Hash.Verify(data); verr != nil {
			err = &fetchclient.PeerError{Peer: e.describe(src.ID), Kind: schedule.FailCorrupt, Err: fmt.Errorf("chunk %d of %s: %w", q.Index, q.ID, verr)}
			data = nil
			e.stats.CorruptReceived.Add(1)
			e.goTracked(func() { e.reportCorrupt(src.ID, q) })
		}
	}
	if err != nil {
		if _, redirected := errors.AsType[*fetchclient.RedirectError](err); !redirected && ctx.Err() == nil && !errors.Is(err, blob.ErrNotFound) {
			// Corrupt bytes, a broken stream or an ERROR reply; NOT_FOUND is an answer.
			e.notePeerError(src.ID, "fetch chunk", err)
		}
		return nil, err
	}
	e.stats.BytesIn[src.Kind].Add(uint64(len(data)))
	return data, nil
}

// fromSibling follows relay's redirect of chunk q to sibling rd: it asks
// the sibling and carries out what the hedging policy (hedge.go) decides
// on each answer and tick.
//
// If the sibling has not delivered after the hedge delay (a few times the
// recent sibling chunk time, 2 to 4 s), the chunk is also asked from the
// relay itself, but only if the relay holds it already (a hedge:
// GET_DIRECT "if present"); when it does not, the sibling is merely waiting
// for the chunk too (a site fed over a WAN) and the wait goes on, with a
// new hedge later. The first verified copy wins: a slow sibling costs a
// little time, never a stall, and a site fed over a WAN pays no extra
// copies for it. A sibling that fails (gone, NOT_FOUND, corrupt bytes, past
// SiblingTimeout) is replaced by a plain GET_DIRECT at once, which names it
// (the relay avoids it for the blob). A hedge names the sibling as slow
// when most requests to it needed one (the relay avoids it for a while).
func (e *Engine) fromSibling(ctx context.Context, relay Source, rd fetchwire.Redirect, q fetchwire.Request) ([]byte, Source, error) {
	e.stats.RedirectsTaken.Add(1)
	if len(rd.Addrs) > 0 {
		e.h.Peerstore().AddAddrs(rd.Peer, rd.Addrs, siblingAddrTTL)
	}
	type result struct {
		req  exchange.HedgeReq
		data []byte
		err  error
	}
	sibling := Source{ID: rd.Peer, Kind: KindSibling}
	from := [exchange.NumHedgeReqs]Source{exchange.ReqSibling: sibling, exchange.ReqHedge: relay, exchange.ReqDirect: relay}
	// The policy keeps at most one request of each kind open: no send
	// blocks, even after this function has returned.
	results := make(chan result, exchange.NumHedgeReqs)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	e.statMu.Lock()
	f, act := e.hedge.Follow(time.Now(), rd.Peer)
	e.statMu.Unlock()
	go func() {
		data, err := e.fetchVerified(sctx, sibling, q)
		results <- result{exchange.ReqSibling, data, err}
	}()
	askRelay := func(req exchange.HedgeReq, dq fetchwire.Request) {
		dq.Type = fetchwire.MsgGetDirect
		go func() {
			data, err := e.fetchVerified(ctx, relay, dq)
			if _, ok := errors.AsType[*fetchclient.RedirectError](err); ok {
				err = &fetchclient.PeerError{Peer: e.describe(relay.ID), Kind: schedule.FailUnreachable,
					Err: fmt.Errorf("chunk %d of %s: %w", q.Index, q.ID, wire.Malformed("REDIRECT in reply to GET_DIRECT"))}
				e.notePeerError(relay.ID, "fetch chunk", err)
			}
			results <- result{req, data, err}
		}()
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// carryOut does what act says and arms the timer for its next tick;
	// cause is the sibling's error when it is given up on for one.
	carryOut := func(act exchange.HedgeAction, cause error) {
		if act.GiveUp {
			scancel()
			if act.TimedOut {
				cause = fmt.Errorf("no chunk within %v", e.cfg.SiblingTimeout)
			}
			e.stats.SiblingFailures.Add(1)
			e.log.Info("sibling could not deliver a chunk: asking the relay itself", "sibling", rd.Peer,
				"relay", e.describe(relay.ID), "blob", q.ID, "chunk", q.Index, "err", cause)
		}
		if act.Hedge {
			e.stats.Hedges.Add(1)
			dq := q
			dq.IfPresent = true
			if act.Slow {
				dq.Failed, dq.Slow = rd.Peer, true
			}
			askRelay(exchange.ReqHedge, dq)
		}
		if act.Direct {
			dq := q
			dq.Failed = rd.Peer
			askRelay(exchange.ReqDirect, dq)
		}
		timer.Stop()
		if !act.Wake.IsZero() {
			timer.Reset(time.Until(act.Wake))
		}
	}
	carryOut(act, nil)
	for {
		select {
		case r := <-results:
			if r.err != nil && ctx.Err() != nil {
				return nil, Source{}, ctx.Err() // not the requests' failure: nothing more to ask
			}
			e.statMu.Lock()
			if r.err == nil {
				act = e.hedge.Arrived(f, time.Now(), r.req)
			} else {
				act = e.hedge.Failed(f, time.Now(), r.req)
			}
			e.statMu.Unlock()
			if r.req == exchange.ReqHedge && r.err != nil && !errors.Is(r.err, blob.ErrNotFound) {
				e.log.Debug("hedge failed", "relay", e.describe(relay.ID), "blob", q.ID, "chunk", q.Index, "err", r.err)
			}
			switch {
			case act.Deliver:
				return r.data, from[r.req], nil
			case act.Fail:
				return nil, Source{}, r.err
			}
			carryOut(act, r.err)
		case <-timer.C:
			if ctx.Err() != nil {
				return nil, Source{}, ctx.Err()
			}
			e.statMu.Lock()
			act = e.hedge.Tick(f, time.Now())
			e.statMu.Unlock()
			carryOut(act, nil)
		case <-ctx.Done():
			return nil, Source{}, ctx.Err()
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
func (e *Engine) reportCorrupt(src peer.ID, q fetchwire.Request) {
	q.Type = fetchwire.MsgReport
	ctx, cancel := context.WithTimeout(e.ctx, e.cfg.RequestTimeout)
	defer cancel()
	body, err := e.client.Request(ctx, src, q)
	switch {
	case err != nil:
		e.log.Info("could not report a corrupt chunk to its sender", "peer", e.describe(src), "blob", q.ID, "chunk", q.Index, "err", err)
	case len(body) == 1 && body[0] == fetchwire.ReportDamaged:
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

// obtainChunk gets one chunk of w's blob for asker (see chunkFrom) from w's
// sources with the scheduler's retry rule, and when they all fail from the
// sources a forced search finds.
func (e *Engine) obtainChunk(ctx context.Context, q fetchwire.Request, w Want, asker peer.ID) ([]byte, error) {
	sources := e.sourcesFor(ctx, w)
	data, err := e.obtainChunkFrom(ctx, q, sources, asker)
	if err == nil || ctx.Err() != nil {
		return data, err
	}
	if more := e.moreSources(ctx, w, sources); len(more) > 0 {
		return e.obtainChunkFrom(ctx, q, more, asker)
	}
	return nil, err
}

// obtainChunkFrom is obtainChunk from the given sources only.
func (e *Engine) obtainChunkFrom(ctx context.Context, q fetchwire.Request, sources []Source, asker peer.ID) ([]byte, error) {
	if len(sources) == 0 {
		return nil, fmt.Errorf("chunk %d of %s: %w (no source to ask)", q.Index, q.ID, blob.ErrNotFound)
	}
	sch := schedule.New(1, 1, len(sources), nil)
	for {
		reqs := sch.Next()
		if len(reqs) == 0 {
			return nil, errors.New("scheduler returned no request") // unreachable
		}
		r := reqs[0]
		if err := sleepCtx(ctx, schedule.RetryDelay(r.Attempt)); err != nil {
			return nil, err
		}
		data, _, err := e.chunkFrom(ctx, q, sources[r.Source], asker)
		if err == nil {
			return data, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if a := sch.Failed(0, fetchclient.FailKind(err)); a == schedule.GiveUp {
			return nil, err
		}
	}
}
