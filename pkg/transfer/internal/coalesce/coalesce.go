// Package coalesce holds the chunk fetches a node has in flight, one per
// chunk hash: every local reader and every downstream request that wants a
// chunk waits on the same upstream fetch (Chunks.Get), which verifies what
// it receives, hands it to its waiters the moment it arrives (cut-through)
// and then stores it. It follows a relay's redirect to a sibling, carrying
// out the hedging policy (exchange.Hedger), and reports corrupt chunks to
// their senders.
//
// Invariants:
//
//   - At most one upstream fetch per chunk hash is in flight, except that
//     a request made for a peer never waits on a fetch from that same peer
//     (it asks because it lacks the chunk): it gets a fetch of its own.
//   - A fetch is cancelled only when its last waiter leaves; a waiter's
//     ctx bounds its own wait only.
//   - Each fetch fills a piece.Partial: a reply in pieces (fetch 1.3.0)
//     publishes each verified piece as it arrives, a whole reply the whole
//     chunk once verified. A server passing the chunk on follows it
//     (piece.WithWatch) and sends each piece the moment it is published.
//   - Bytes are verified against their hash before any waiter sees them or
//     they are stored; a corrupt chunk is counted, blamed on its sender and
//     reported to it (REPORT), and the fetch fails (the caller asks again).
//   - A call leaves the in-flight set once its chunk is stored (or failed):
//     WaitStored then tells whether the store holds it.
//   - At most Config.StoreSlots verified chunks are being written to the
//     store at once, and at most Config.HeldChunks are handed on and not
//     yet stored: a verified chunk goes to its waiters at once
//     (cut-through) while fewer than HeldChunks are, and otherwise once
//     one of them is stored (its pieces go to the Partial's watchers at
//     once all the same). So a relay whose disk is slow goes on feeding
//     its children for HeldChunks chunks, and a fetch whose chunks come
//     faster than the store writes them holds at most its window and
//     HeldChunks chunks, not every chunk not yet written.
package coalesce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/exchange"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchclient"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/peerrate"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
	"github.com/omst-project/omst/pkg/transfer/internal/schedule"
	"github.com/omst-project/omst/pkg/transfer/internal/source"
	"github.com/omst-project/omst/pkg/transfer/internal/stats"
)

// Store is what the fetches need of the local store (pkg/transfer's Store
// states the contracts).
type Store interface {
	HasChunk(h blob.Hash) bool
	ReadChunk(h blob.Hash) ([]byte, error)
	PutVerifiedChunk(h blob.Hash, data []byte) error
}

// Config configures New; every field is needed.
type Config struct {
	Client *fetchclient.Client
	Store  Store
	// Addrs keeps the addresses a redirect gives for its sibling.
	Addrs peerstore.AddrBook
	// Ctx lives as long as the engine: fetches run under it, and end
	// with it.
	Ctx context.Context
	// Go runs f in a goroutine the engine waits for when it closes; it
	// returns false (and runs nothing) once the engine is closing.
	Go func(f func()) bool
	// SiblingTimeout bounds a request to a sibling a relay redirected
	// this node to (exchange.NewHedger); RequestTimeout a corruption
	// report.
	SiblingTimeout, RequestTimeout time.Duration
	// Describe names a peer for messages; NotePeerError counts and logs a
	// failure blamed on a peer.
	Describe      func(peer.ID) string
	NotePeerError func(p peer.ID, what string, err error)
	Stats         *stats.Counters
	Log           *slog.Logger
	// StoreSlots bounds the verified chunks being written to the store at
	// once (Complete; default DefaultStoreSlots).
	StoreSlots int
	// HeldChunks bounds the verified chunks handed on to their waiters
	// and not yet stored (Complete; default DefaultHeldChunks); at least
	// StoreSlots.
	HeldChunks int
}

// DefaultStoreSlots is Config.StoreSlots' default. The writes of one
// blob's chunks go into one file (cache.Store's sinks), whose writes the
// kernel serializes; more at once only park threads and chunk buffers.
// Measured (docs/benchmarks.md, "The receiver's buffers"): on a loaded
// 2-core host a 1 GiB fetch otherwise held up to 490 chunks of 1 MiB
// waiting for their write, its heap grew to 800 MB and every page of it
// was faulted in fresh.
const DefaultStoreSlots = 4

// DefaultHeldChunks is Config.HeldChunks' default: a window's worth
// (transfer.DefaultWindow). Waiters that waited for a store slot (92c571e)
// were held to the store's pace: a reader, a sibling asking for the chunk,
// a relay's children; a head whose disk stalled stalled its site (the
// fault case slow-disk-relay), and 2 x 32 workers on the emulated WAN
// took 3-6 % longer in 5 of 5 pairs.
const DefaultHeldChunks = 16

// Chunks is the set of chunk fetches in flight on a node. Its methods are
// safe for concurrent use.
type Chunks struct {
	cfg Config

	mu       sync.Mutex
	inflight map[blob.Hash]*Call
	closed   bool

	// storing holds a token per chunk being written to the store, held
	// one per chunk handed on and not yet stored (Complete): capacity
	// StoreSlots and HeldChunks.
	storing, held chan struct{}

	// reporting holds the REPORTs of corrupt chunks under way, each
	// closed when its answer came (or its RequestTimeout passed): a new
	// request of the same chunk to the same peer waits for it first
	// (fetchVerified), so that the peer has re-checked its copy before it
	// is asked again, and does not send the damaged bytes a second time.
	reportMu  sync.Mutex
	reporting map[reportKey]chan struct{}

	hedgeMu sync.Mutex
	hedge   *exchange.Hedger // the hedging policy: what the redirects followed taught
	rates   *peerrate.Table  // how long each peer's replies take: the hedging policy's timers
}

// New returns an empty set of fetches.
func New(cfg Config) *Chunks {
	rates := peerrate.New()
	if cfg.StoreSlots <= 0 {
		cfg.StoreSlots = DefaultStoreSlots
	}
	if cfg.HeldChunks <= 0 {
		cfg.HeldChunks = DefaultHeldChunks
	}
	cfg.HeldChunks = max(cfg.HeldChunks, cfg.StoreSlots)
	return &Chunks{cfg: cfg, inflight: map[blob.Hash]*Call{}, rates: rates, hedge: exchange.NewHedger(cfg.SiblingTimeout, rates),
		storing: make(chan struct{}, cfg.StoreSlots), held: make(chan struct{}, cfg.HeldChunks), reporting: map[reportKey]chan struct{}{}}
}

// Close makes Get fail with fetchclient.ErrClosed from now on (the engine
// is closing); the fetches in flight end with Ctx.
func (c *Chunks) Close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}

// Call is one upstream fetch of a chunk, shared by every requester of
// that hash on this node (except one that asked on behalf of src itself).
type Call struct {
	src     peer.ID        // the peer asked
	partial *piece.Partial // the chunk as it arrives
	done    chan struct{}  // closed when data/err are set
	stored  chan struct{}  // closed after the chunk was stored (or storing failed)
	data    []byte
	from    source.Source // the peer that delivered data
	err     error
	waiters int
	cancel  context.CancelFunc
	ob      []byte // the chunk's outboard, computed by whoever delivers it whole (KeepOutboard)
}

// KeepOutboard gives the outboard of the chunk call will be completed
// with, computed by the caller from those bytes (a push, verified whole
// with piece.HashOutboard), so that the store keeps it with the chunk as
// for a chunk that arrived in pieces. Call it before Complete.
func (call *Call) KeepOutboard(ob []byte) { call.ob = ob }

func newCall(h blob.Hash, src peer.ID, cancel context.CancelFunc) *Call {
	return &Call{src: src, partial: piece.NewPartial(h), done: make(chan struct{}), stored: make(chan struct{}), cancel: cancel}
}

// joinable reports whether a request for a chunk on behalf of asker may
// wait on the fetch c in flight for it: not when c asks asker itself.
func joinable(c *Call, asker peer.ID) bool {
	return c != nil && (asker == "" || c.src != asker)
}

// Get returns the verified bytes of chunk q: from the store if it is
// there, else from the fetch already in flight for its hash, else from a
// new fetch from src. A fetched chunk is verified, handed to every waiter
// and then stored. ctx bounds this caller's wait only; the shared fetch is
// cancelled when its last waiter leaves. asker, when not empty, is the
// peer this chunk is wanted for: a fetch in flight from asker itself is
// not joined (asker is asking because it lacks the chunk), the chunk is
// then fetched from src on its own. It also returns the peer that
// delivered the bytes (none when they came from the store).
func (c *Chunks) Get(ctx context.Context, q fetchwire.Request, src source.Source, asker peer.ID) ([]byte, source.Source, error) {
	if c.cfg.Store.HasChunk(q.Hash) {
		// Verified by the store; a damaged copy is dropped there and
		// fetched again below.
		if data, err := c.cfg.Store.ReadChunk(q.Hash); err == nil {
			return data, source.Source{}, nil
		}
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, source.Source{}, fetchclient.ErrClosed
	}
	call := c.inflight[q.Hash]
	if !joinable(call, asker) {
		cctx, cancel := context.WithCancel(c.cfg.Ctx)
		call = newCall(q.Hash, src.ID, cancel)
		if !c.cfg.Go(func() { c.run(cctx, call, q, src) }) {
			c.mu.Unlock()
			cancel()
			return nil, source.Source{}, fetchclient.ErrClosed
		}
		if c.inflight[q.Hash] == nil {
			c.inflight[q.Hash] = call
		}
	}
	call.waiters++
	c.mu.Unlock()
	if w := piece.WatchFrom(ctx); w != nil {
		w(call.partial)
	}
	select {
	case <-call.done:
		return call.data, call.from, call.err
	case <-ctx.Done():
		c.mu.Lock()
		call.waiters--
		if call.waiters == 0 {
			call.cancel()
		}
		c.mu.Unlock()
		return nil, source.Source{}, ctx.Err()
	}
}

func (c *Chunks) run(ctx context.Context, call *Call, q fetchwire.Request, src source.Source) {
	defer call.cancel()
	data, err := c.fetchVerified(ctx, src, q, call.partial)
	from := src
	if rde, ok := errors.AsType[*fetchclient.RedirectError](err); ok {
		data, from, err = c.fromSibling(ctx, src, rde.To, q, call.partial)
	}
	c.Complete(call, q.Hash, data, from, err)
}

// Expect registers a fetch of chunk h from src that arrives by other
// means than a request (a parent's push), unless h is stored or in flight
// already (nil). Requests for h wait on it until Complete ends it.
func (c *Chunks) Expect(h blob.Hash, src peer.ID) *Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight[h] != nil || c.cfg.Store.HasChunk(h) {
		return nil
	}
	call := newCall(h, src, func() {})
	c.inflight[h] = call
	return call
}

// Complete ends call, the fetch of chunk h: its waiters get data (which
// the caller verified) or err (cut-through: err at once, data once fewer
// than HeldChunks other chunks are handed on and not yet stored; the
// Partial's watchers get data at once), then the chunk is stored, once
// fewer than StoreSlots other chunks are being written, and the call
// leaves the in-flight set. It may wait for both; each token is only ever
// held over a store's write or the waits for one, so the waits end.
func (c *Chunks) Complete(call *Call, h blob.Hash, data []byte, from source.Source, err error) {
	call.data, call.from, call.err = data, from, err
	if err == nil {
		call.partial.Complete(data)
		c.held <- struct{}{} // released once stored, below
	} else {
		call.partial.Fail(err)
	}
	close(call.done) // waiters take the chunk now: cut-through
	if err == nil {
		c.storing <- struct{}{} // released once stored, below
		if perr := c.cfg.Store.PutVerifiedChunk(h, data); perr != nil {
			c.cfg.Log.Warn("store chunk", "hash", h, "err", perr)
		} else if os, ok := c.cfg.Store.(outboardKeeper); ok {
			// Arrived in pieces: its outboard, verified against h and of
			// the chunk's length, is kept with it (served later without
			// hashing the chunk again).
			if st := call.partial.State(); st.Outboard != nil && st.Len == len(data) {
				os.PutOutboard(h, st.Outboard)
			} else if call.ob != nil {
				os.PutOutboard(h, call.ob)
			}
		}
		<-c.storing
		<-c.held
	}
	c.mu.Lock()
	if c.inflight[h] == call {
		delete(c.inflight, h)
	}
	c.mu.Unlock()
	close(call.stored)
}

// outboardKeeper is a Store that keeps chunks' outboards (pkg/cache.Store
// does: PutOutboard states the contract).
type outboardKeeper interface {
	PutOutboard(h blob.Hash, ob []byte)
}

// Fetching reports whether a fetch (or an expected push) of chunk h is in
// flight.
func (c *Chunks) Fetching(h blob.Hash) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight[h] != nil
}

// InFlight returns the number of chunk fetches in flight.
func (c *Chunks) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.inflight)
}

// fetchVerified asks src for chunk q and verifies what it sends; a reply
// in pieces is published to sink as it arrives (verified piece by piece).
// A corrupt chunk is counted and reported to src; a failure other than
// NOT_FOUND (or a redirect) counts as src's error. Verified bytes are
// counted by src's kind.
func (c *Chunks) fetchVerified(ctx context.Context, src source.Source, q fetchwire.Request, sink *piece.Partial) ([]byte, error) {
	q.Sibling = q.Type == fetchwire.MsgGet && src.Kind == source.KindSibling
	if err := c.awaitReport(ctx, src.ID, q.Hash); err != nil {
		return nil, err
	}
	pend := c.sent(src.ID)
	data, verified, err := c.cfg.Client.RequestChunk(ctx, src.ID, q, sink)
	if fetchclient.FailKind(err) == schedule.FailCorrupt && q.Type != fetchwire.MsgReport {
		// A piece or outboard failed verification (counted by the client).
		c.reportCorrupt(src.ID, q)
	}
	if err == nil && !verified {
		if verr := q.Hash.Verify(data); verr != nil {
			err = &fetchclient.PeerError{Peer: c.cfg.Describe(src.ID), Kind: schedule.FailCorrupt, Err: fmt.Errorf("chunk %d of %s: %w", q.Index, q.ID, verr)}
			data = nil
			c.cfg.Stats.CorruptReceived.Add(1)
			c.reportCorrupt(src.ID, q)
		}
	}
	c.measured(pend, q, len(data), err)
	if err != nil {
		_, redirected := errors.AsType[*fetchclient.RedirectError](err)
		_, busy := errors.AsType[*fetchclient.BusyError](err)
		if !redirected && !busy && ctx.Err() == nil && !errors.Is(err, blob.ErrNotFound) {
			// Corrupt bytes, a broken stream or an ERROR reply; NOT_FOUND,
			// REDIRECT and BUSY are answers.
			c.cfg.NotePeerError(src.ID, "fetch chunk", err)
		}
		return nil, err
	}
	c.cfg.Stats.BytesIn[src.Kind].Add(uint64(len(data)))
	return data, nil
}

// sent tells the rates that a request to p is being sent now.
func (c *Chunks) sent(p peer.ID) peerrate.Pending {
	c.hedgeMu.Lock()
	defer c.hedgeMu.Unlock()
	return c.rates.Sent(time.Now(), p)
}

// measured ends request pend in the rates, now: a verified chunk of n
// bytes measures its peer's pace; a REDIRECT or a declined hedge (a
// NOT_FOUND to an if-present GET_DIRECT), both made at once, a round trip;
// anything else (a failure, a cancelled request, a NOT_FOUND after a fetch
// upstream) nothing.
func (c *Chunks) measured(pend peerrate.Pending, q fetchwire.Request, n int, err error) {
	now := time.Now()
	_, redirected := errors.AsType[*fetchclient.RedirectError](err)
	c.hedgeMu.Lock()
	defer c.hedgeMu.Unlock()
	switch {
	case err == nil:
		c.rates.Replied(now, pend, n)
	case redirected, q.IfPresent && errors.Is(err, blob.ErrNotFound):
		c.rates.Answered(now, pend)
	default:
		c.rates.Lost(pend)
	}
}

// fromSibling follows relay's redirect of chunk q to sibling rd: it asks
// the sibling and carries out what the hedging policy (exchange.Hedger)
// decides on each answer and tick.
//
// If the sibling has not delivered after the hedge delay (its expected
// time for the chunk at the rates this node measured, with patience:
// exchange.Hedger.Timers), the chunk is also asked from the relay
// itself, but only if the relay holds it already (a hedge:
// GET_DIRECT "if present"); when it does not, the sibling is merely waiting
// for the chunk too (a site fed over a WAN) and the wait goes on, with a
// new hedge later. The first verified copy wins: a slow sibling costs a
// little time, never a stall, and a site fed over a WAN pays no extra
// copies for it. Hedges, and give-ups for lateness short of
// SiblingTimeout, are paced by the Hedger's budget (exchange.Budget: one
// per HedgeShare chunks delivered), so that under a saturated CPU, every
// sibling late, this node's second copies stay a share of its first. A
// sibling that fails (gone, NOT_FOUND, corrupt bytes, past its give-up
// time, at most SiblingTimeout) is replaced by a plain GET_DIRECT at once,
// which names it (the relay avoids it for the blob);
// so is, without being asked, one that answered none of the last few
// requests (the Hedger's silentLimit). A hedge names the sibling as slow
// when most requests to it needed one (the relay avoids it for a while).
func (c *Chunks) fromSibling(ctx context.Context, relay source.Source, rd fetchwire.Redirect, q fetchwire.Request, sink *piece.Partial) ([]byte, source.Source, error) {
	c.cfg.Stats.RedirectsTaken.Add(1)
	if len(rd.Addrs) > 0 {
		c.cfg.Addrs.AddAddrs(rd.Peer, rd.Addrs, siblingAddrTTL)
	}
	type result struct {
		req  exchange.HedgeReq
		sib  peer.ID // ReqSibling: the sibling asked
		gen  int     // ReqSibling: which request to a sibling (askSibling)
		data []byte
		err  error
	}
	sibling := source.Source{ID: rd.Peer, Kind: source.KindSibling}
	from := [exchange.NumHedgeReqs]source.Source{exchange.ReqSibling: sibling, exchange.ReqHedge: relay, exchange.ReqDirect: relay}
	// The policy keeps at most one request of each kind open, and asks at
	// most fetchwire.MaxDeflections more siblings, and one late sibling
	// again (each earlier request cancelled, its answer dropped): no send
	// blocks, even after this function has returned.
	results := make(chan result, exchange.NumHedgeReqs+fetchwire.MaxDeflections+2)
	sctx, scancel := context.WithCancel(ctx)
	defer func() { scancel() }()
	gen := 0 // of the request to a sibling now open
	askSibling := func(p peer.ID) {
		sctx, scancel = context.WithCancel(ctx)
		sibling = source.Source{ID: p, Kind: source.KindSibling}
		from[exchange.ReqSibling] = sibling
		gen++
		go func(sctx context.Context, sib source.Source, g int) {
			data, err := c.fetchVerified(sctx, sib, q, sink)
			results <- result{exchange.ReqSibling, sib.ID, g, data, err}
		}(sctx, sibling, gen)
	}
	c.hedgeMu.Lock()
	followed := time.Now()
	f, act := c.hedge.Follow(followed, rd.Peer, relay.ID, 0) // the chunk's size: as measured lately
	c.hedgeMu.Unlock()
	if !act.GiveUp { // else the sibling left its last requests unanswered: it is not asked
		scancel()
		askSibling(rd.Peer)
	}
	askRelay := func(req exchange.HedgeReq, dq fetchwire.Request) {
		dq.Type = fetchwire.MsgGetDirect
		// A plain request takes a REDIRECT or BUSY (fetch 1.4.0; the
		// client sends the flag to a 1.4.0 relay only).
		dq.Deflect = req == exchange.ReqDirect && !dq.IfPresent
		go func() {
			data, err := c.fetchVerified(ctx, relay, dq, sink)
			if _, ok := errors.AsType[*fetchclient.RedirectError](err); ok && !dq.Deflect {
				err = &fetchclient.PeerError{Peer: c.cfg.Describe(relay.ID), Kind: schedule.FailUnreachable,
					Err: fmt.Errorf("chunk %d of %s: %w", q.Index, q.ID, wire.Malformed("REDIRECT in reply to GET_DIRECT"))}
				c.cfg.NotePeerError(relay.ID, "fetch chunk", err)
			}
			results <- result{req, "", 0, data, err}
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
				cause = fmt.Errorf("no chunk within %v", time.Since(followed).Round(time.Millisecond))
			}
			if act.Silent {
				cause = errors.New("it answered none of the last requests sent to it: not asked")
			}
			c.cfg.Stats.SiblingFailures.Add(1)
			c.cfg.Log.Info("sibling could not deliver a chunk: asking the relay itself", "sibling", sibling.ID,
				"relay", c.cfg.Describe(relay.ID), "blob", q.ID, "chunk", q.Index, "err", cause)
		}
		if act.Deferred || act.DirectDeferred {
			c.cfg.Stats.HedgesDeferred.Add(1) // held back for the hedge budget
		}
		if act.Hedge {
			c.cfg.Stats.Hedges.Add(1)
			dq := q
			dq.IfPresent = true
			if act.Slow {
				dq.Failed, dq.Slow = sibling.ID, true
			}
			askRelay(exchange.ReqHedge, dq)
		}
		if act.Direct {
			c.cfg.Stats.Directs.Add(1)
			dq := q
			dq.Failed = act.Failed
			askRelay(exchange.ReqDirect, dq)
		}
		if act.Follow != "" {
			// fetch 1.4.0: the relay's REDIRECT to a complete holder, or
			// after its BUSY the sibling given up on for lateness again.
			if act.Follow != sibling.ID {
				c.cfg.Stats.RedirectsTaken.Add(1)
			}
			scancel()
			askSibling(act.Follow)
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
				return nil, source.Source{}, ctx.Err() // not the requests' failure: nothing more to ask
			}
			if r.req == exchange.ReqSibling && r.gen != gen && r.err != nil {
				continue // a request to a sibling given up on before the one open now
			}
			rde, redirected := errors.AsType[*fetchclient.RedirectError](r.err)
			busy, isBusy := errors.AsType[*fetchclient.BusyError](r.err)
			c.hedgeMu.Lock()
			switch {
			case r.err == nil:
				act = c.hedge.Arrived(f, time.Now(), r.req)
			case r.req == exchange.ReqDirect && redirected:
				act = c.hedge.Redirected(f, time.Now(), rde.To.Peer)
			case r.req == exchange.ReqDirect && isBusy:
				act = c.hedge.Busy(f, time.Now(), busy.RetryAfter)
			default:
				act = c.hedge.Failed(f, time.Now(), r.req)
			}
			c.hedgeMu.Unlock()
			if redirected && r.req == exchange.ReqDirect && len(rde.To.Addrs) > 0 {
				c.cfg.Addrs.AddAddrs(rde.To.Peer, rde.To.Addrs, siblingAddrTTL)
			}
			if r.req == exchange.ReqHedge && r.err != nil && !errors.Is(r.err, blob.ErrNotFound) {
				c.cfg.Log.Debug("hedge failed", "relay", c.cfg.Describe(relay.ID), "blob", q.ID, "chunk", q.Index, "err", r.err)
			}
			switch {
			case act.Deliver:
				if r.req == exchange.ReqSibling {
					return r.data, source.Source{ID: r.sib, Kind: source.KindSibling}, nil
				}
				return r.data, from[r.req], nil
			case act.Fail:
				if redirected || isBusy {
					// The relay deflected the plain request past the
					// protocol's bound: its other sources are asked.
					return nil, source.Source{}, &fetchclient.PeerError{Peer: c.cfg.Describe(relay.ID), Kind: schedule.FailUnreachable,
						Err: fmt.Errorf("chunk %d of %s: deflected more than %d times: %w", q.Index, q.ID, fetchwire.MaxDeflections, r.err)}
				}
				return nil, source.Source{}, r.err
			}
			carryOut(act, r.err)
		case <-timer.C:
			if ctx.Err() != nil {
				return nil, source.Source{}, ctx.Err()
			}
			c.hedgeMu.Lock()
			act = c.hedge.Tick(f, time.Now())
			c.hedgeMu.Unlock()
			carryOut(act, nil)
		case <-ctx.Done():
			return nil, source.Source{}, ctx.Err()
		}
	}
}

// siblingAddrTTL is how long the addresses of a sibling named in a
// redirect are kept.
const siblingAddrTTL = time.Hour

// reportKey names a REPORT under way: the peer and the chunk reported.
type reportKey struct {
	peer peer.ID
	hash blob.Hash
}

// reportCorrupt sends ReportCorrupt(src, q) on a goroutine of its own,
// recorded in c.reporting until it has its answer: the caller goes on at
// once (another source may serve the chunk), but a request of the same
// chunk to src waits for the REPORT (awaitReport). One REPORT per peer
// and chunk at a time: one already under way is not sent again.
func (c *Chunks) reportCorrupt(src peer.ID, q fetchwire.Request) {
	k := reportKey{src, q.Hash}
	done := make(chan struct{})
	c.reportMu.Lock()
	if _, busy := c.reporting[k]; busy {
		c.reportMu.Unlock()
		return
	}
	c.reporting[k] = done
	c.reportMu.Unlock()
	end := func() {
		c.reportMu.Lock()
		delete(c.reporting, k)
		c.reportMu.Unlock()
		close(done)
	}
	if !c.cfg.Go(func() { defer end(); c.ReportCorrupt(src, q) }) {
		end() // the engine is closing: no report, nothing to wait for
	}
}

// awaitReport waits until no REPORT of chunk h to p is under way (at most
// the REPORT's RequestTimeout, or until ctx ends: ctx's error).
func (c *Chunks) awaitReport(ctx context.Context, p peer.ID, h blob.Hash) error {
	c.reportMu.Lock()
	done := c.reporting[reportKey{p, h}]
	c.reportMu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ReportCorrupt tells src that the bytes it sent for chunk q did not match
// the chunk's hash, so that a node serving from a damaged disk learns it
// (it re-reads and re-verifies its copy, and drops it if damaged). Best
// effort: a failure is only logged. It waits for the answer, at most
// RequestTimeout.
func (c *Chunks) ReportCorrupt(src peer.ID, q fetchwire.Request) {
	q.Type = fetchwire.MsgReport
	ctx, cancel := context.WithTimeout(c.cfg.Ctx, c.cfg.RequestTimeout)
	defer cancel()
	body, err := c.cfg.Client.Request(ctx, src, q)
	switch {
	case err != nil:
		c.cfg.Log.Info("could not report a corrupt chunk to its sender", "peer", c.cfg.Describe(src), "blob", q.ID, "chunk", q.Index, "err", err)
	case len(body) == 1 && body[0] == fetchwire.ReportDamaged:
		c.cfg.Log.Info("sender found its copy of a chunk damaged and dropped it", "peer", c.cfg.Describe(src), "blob", q.ID, "chunk", q.Index)
	default:
		c.cfg.Log.Info("sender found its copy of a chunk intact", "peer", c.cfg.Describe(src), "blob", q.ID, "chunk", q.Index)
	}
}

// WaitStored waits until a fetch of h in flight has stored it (or failed
// to), so that HasChunk then tells whether it is in the store.
func (c *Chunks) WaitStored(ctx context.Context, h blob.Hash) error {
	c.mu.Lock()
	call := c.inflight[h]
	c.mu.Unlock()
	if call == nil {
		return nil
	}
	select {
	case <-call.stored:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pause waits schedule.RetryDelay(attempt) before request number attempt
// for a chunk (none before the first); it returns ctx's error if ctx ends
// first.
func Pause(ctx context.Context, attempt int) error {
	d := schedule.RetryDelay(attempt)
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

// Obtain gets chunk q for asker (see Get) from sources, best first, with
// the scheduler's retry rule (schedule.Decide): a corrupt chunk is asked
// once more of the same source, other failures move to the next source,
// at most schedule.DefaultMaxTries requests in all.
func (c *Chunks) Obtain(ctx context.Context, q fetchwire.Request, sources []source.Source, asker peer.ID) ([]byte, error) {
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
		if err := Pause(ctx, r.Attempt); err != nil {
			return nil, err
		}
		data, _, err := c.Get(ctx, q, sources[r.Source], asker)
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
