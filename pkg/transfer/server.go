package transfer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/sync/semaphore"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/exchange"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
)

// ---- the server side of the fetch protocol ----

// maxQueuedPerStream bounds the requests a server resolves at once per stream.
const maxQueuedPerStream = 64

// What a peer can make this node hold. Every request a server resolves
// holds, from before its reply is made until the reply is written, the
// reply's size in bytes (a chunk's length from its blob's manifest, a
// manifest's length; Config.PeerReplyBytes/2 when it cannot tell) of its
// peer's budget: Config.PeerReplyBytes over all the peer's fetch streams
// (at least one request proceeds, however big). A request that finds the
// budget spent waits before anything is read for it, and so does the
// reading of its stream. A reply write that makes no progress for
// Config.WriteStall (each piece of at most writePiece bytes gets that
// long) ends the stream and frees what it held. So a peer that asks and
// never reads holds at most PeerReplyBytes (two chunks when chunks are
// bigger than half of it) for at most WriteStall after its last byte went
// out, however many streams it opens (it used to be 64 chunks per stream
// for 30 s, the request timeout). A peer that reads is not slowed: a blob
// fetch keeps Config.Window chunks in flight (16 MiB in 1 MiB chunks),
// well within its budget.
const (
	// DefaultPeerReplyBytes is Config.PeerReplyBytes's default.
	DefaultPeerReplyBytes = 64 << 20
	// DefaultWriteStall is Config.WriteStall's default.
	DefaultWriteStall = 10 * time.Second
	// writePiece is the most a reply write sends under one deadline.
	writePiece = 256 << 10
)

type fetchSlot struct {
	tag    uint32
	chunk  bool       // a reply to GET or GET_DIRECT
	asker  SourceKind // what the asker is to this node, for Status.BytesOut
	status byte
	body   []byte
	weight int64 // of the peer's budget, held until the reply is written
}

// peerBudget is the reply bytes one peer's fetch streams may hold.
type peerBudget struct {
	sem     *semaphore.Weighted
	streams int // fetch streams of the peer being served (under Engine.budgetMu)
}

// budgetFor returns p's budget, counting one more stream of p; the caller
// calls dropBudget when the stream ends.
func (e *Engine) budgetFor(p peer.ID) *peerBudget {
	e.budgetMu.Lock()
	defer e.budgetMu.Unlock()
	b := e.budgets[p]
	if b == nil {
		b = &peerBudget{sem: semaphore.NewWeighted(e.cfg.PeerReplyBytes)}
		e.budgets[p] = b
	}
	b.streams++
	return b
}

// dropBudget forgets p's budget when its last stream has ended.
func (e *Engine) dropBudget(p peer.ID, b *peerBudget) {
	e.budgetMu.Lock()
	defer e.budgetMu.Unlock()
	if b.streams--; b.streams == 0 && e.budgets[p] == b {
		delete(e.budgets, p)
	}
}

// replyWeight is the share of its peer's budget request q holds: its
// reply's size (replySize) clipped to half the budget, at least 1.
func (e *Engine) replyWeight(q fetchwire.Request) int64 {
	return min(max(replySize(q.Type, q.Index, q.Hash, e.manifestHeld(q.ID), e.cfg.PeerReplyBytes/2), 1), e.cfg.PeerReplyBytes/2)
}

// manifestHeld returns the manifest of id from the store, or nil.
func (e *Engine) manifestHeld(id cid.Cid) *blob.Manifest {
	m, err := e.store.Manifest(id)
	if err != nil {
		return nil
	}
	return m
}

// replySize estimates the size of the reply to a request of type typ
// (for chunk index with hash h, when typ asks for a chunk) given the
// manifest of its blob as this node holds it (nil: not held): a chunk's
// length if m lists h at index, a manifest's encoded length, 1 byte for a
// REPORT's; unknown otherwise.
func replySize(typ byte, index uint32, h blob.Hash, m *blob.Manifest, unknown int64) int64 {
	switch typ {
	case fetchwire.MsgReport:
		return 1
	case fetchwire.MsgManifest:
		if m != nil {
			return int64(blob.EncodedManifestLen(len(m.Chunks)))
		}
		return unknown
	}
	if m != nil && int(index) < len(m.Chunks) && m.Chunks[index] == h {
		return int64(m.ChunkLen(int(index)))
	}
	return unknown
}

// handleFetch serves one stream of tagged requests: requests are resolved
// concurrently (a relay starts its upstream fetches for all of them at
// once, at most maxQueuedPerStream at a time) and each is answered as soon
// as it is ready, whatever the order of the requests.
func (e *Engine) handleFetch(s network.Stream) {
	p := s.Conn().RemotePeer()
	rel := e.sources.Relation(p)
	if e.serveStep(exchange.ServeEvent{Kind: exchange.ServeStreamOpened, Peer: p, Rel: rel}).Action == exchange.ActRefuse {
		e.stats.UploadsRefused.Add(1)
		e.log.Debug("fetch stream refused: upload stream limit", "peer", p, "limit", e.cfg.MaxUploadStreams)
		s.Reset()
		return
	}
	defer e.serveStep(exchange.ServeEvent{Kind: exchange.ServeStreamClosed, Peer: p, Rel: rel})
	budget := e.budgetFor(p)
	defer e.dropBudget(p, budget)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	room := make(chan struct{}, maxQueuedPerStream) // a token per request being resolved or written
	ready := make(chan *fetchSlot, maxQueuedPerStream+1)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		e.writeReplies(ctx, cancel, s, ready, room, budget)
	}()
	var serving sync.WaitGroup
	br := bufio.NewReaderSize(s, 16<<10)
	var err error
	for {
		var q fetchwire.Request
		q, err = fetchwire.ReadRequest(br)
		if err != nil {
			break
		}
		select {
		case room <- struct{}{}:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			break
		}
		w := e.replyWeight(q)
		if err = budget.sem.Acquire(ctx, w); err != nil {
			break
		}
		e.stats.ReplyHeld.Add(w)
		sl := &fetchSlot{tag: q.Tag, asker: askerKind(rel, q), weight: w}
		serving.Go(func() {
			switch q.Type {
			case fetchwire.MsgReport:
				e.serveReport(p, q, sl)
			case fetchwire.MsgManifest:
				e.serveManifest(ctx, p, q.ID, sl)
			default:
				sl.chunk = true
				e.serveChunk(ctx, p, q, sl)
			}
			ready <- sl
		})
	}
	serving.Wait()
	if errors.Is(err, wire.ErrMalformed) {
		// After the replies to every request before it.
		e.notePeerError(p, "fetch request", err)
		ready <- &fetchSlot{status: fetchwire.StatusError, body: fetchwire.ErrorBody(err.Error())}
	}
	close(ready)
	<-writerDone
	// Close, not Reset: a reset would discard the replies still in flight,
	// including the error reply. Anything the peer sends after a malformed
	// request is refused (CloseRead).
	s.Close()
}

// askerKind is what the asker of q is to this node, for Status.BytesOut:
// its relation in the tree (rel), or KindSibling for another peer whose
// request says it is of this node's site (GET_SIBLING).
func askerKind(rel SourceKind, q fetchwire.Request) SourceKind {
	if rel == KindOther && q.Sibling {
		return KindSibling
	}
	return rel
}

// writeReplies writes the replies of one stream as they become ready,
// freeing a request token (room) and the reply's share of its peer's
// budget for each.
func (e *Engine) writeReplies(ctx context.Context, cancel context.CancelFunc, s network.Stream, ready chan *fetchSlot, room chan struct{}, budget *peerBudget) {
	bw := bufio.NewWriterSize(s, 64<<10)
	var hdr []byte
	failed := false
	for sl := range ready {
		if !failed && ctx.Err() == nil && sl.status == fetchwire.StatusOK && e.upLimit != nil {
			// Flush what is buffered first: the wait must not hold it back.
			_ = s.SetWriteDeadline(time.Now().Add(e.writeStall()))
			if bw.Flush() != nil || e.waitUpload(ctx, len(sl.body)) != nil {
				failed = true
				cancel()
			}
		}
		if !failed && ctx.Err() == nil {
			hdr = fetchwire.AppendReplyHeader(hdr[:0], sl.tag, sl.status, len(sl.body))
			err := e.writeReply(s, bw, hdr, sl.body, len(ready) == 0)
			if err != nil {
				failed = true
				cancel()
			} else if sl.status == fetchwire.StatusOK {
				e.stats.BytesServed.Add(uint64(len(sl.body)))
				if sl.chunk {
					e.stats.BytesOut[sl.asker].Add(uint64(len(sl.body)))
				}
			}
		}
		if sl.weight > 0 {
			budget.sem.Release(sl.weight)
			e.stats.ReplyHeld.Add(-sl.weight)
		}
		sl.body = nil
		select {
		case <-room:
		default: // the error reply after a malformed request holds no token
		}
	}
	if !failed {
		_ = s.SetWriteDeadline(time.Now().Add(e.writeStall()))
		_ = bw.Flush()
	}
}

// writeStall is how long a reply write may make no progress:
// Config.WriteStall, at most RequestTimeout.
func (e *Engine) writeStall() time.Duration { return min(e.cfg.WriteStall, e.cfg.RequestTimeout) }

// writeReply writes a reply's header and body through bw, each piece of
// at most writePiece bytes within writeStall of the last (a peer that
// stops reading ends the stream then), and flushes bw if flush.
func (e *Engine) writeReply(s network.Stream, bw *bufio.Writer, hdr, body []byte, flush bool) error {
	stall := e.writeStall()
	_ = s.SetWriteDeadline(time.Now().Add(stall))
	if _, err := bw.Write(hdr); err != nil {
		return err
	}
	for len(body) > 0 {
		n := min(len(body), writePiece)
		if _, err := bw.Write(body[:n]); err != nil {
			return err
		}
		if body = body[n:]; len(body) > 0 || flush {
			_ = s.SetWriteDeadline(time.Now().Add(stall))
		}
	}
	if flush {
		return bw.Flush()
	}
	return nil
}

// waitUpload waits until MaxUploadRate allows n more bytes out.
func (e *Engine) waitUpload(ctx context.Context, n int) error {
	for n > 0 {
		k := min(n, e.upLimit.Burst())
		if err := e.upLimit.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// reply fills sl from the outcome of a request: data, or NOT_FOUND, or
// ERROR, the message naming this node.
func (e *Engine) reply(sl *fetchSlot, data []byte, err error) {
	switch {
	case err == nil:
		sl.status, sl.body = fetchwire.StatusOK, data
	case errors.Is(err, blob.ErrNotFound):
		sl.status, sl.body = fetchwire.StatusNotFound, fetchwire.ErrorBody(fmt.Sprintf("%s: %v", e.self, err))
	default:
		sl.status, sl.body = fetchwire.StatusError, fetchwire.ErrorBody(fmt.Sprintf("%s: %v", e.self, err))
	}
}

// serveChunk resolves one request: from the store (verified there; a
// damaged copy is dropped), else pull-through from this node's sources for
// the blob (never back to the asker).
func (e *Engine) serveChunk(ctx context.Context, p peer.ID, q fetchwire.Request, sl *fetchSlot) {
	a := e.askOf(p, q)
	d := e.serveStep(exchange.ServeEvent{Kind: exchange.ServeAsk, Ask: a})
	if d.Action == exchange.ActDecline {
		e.stats.HedgesDeclined.Add(1)
		e.reply(sl, nil, fmt.Errorf("chunk %d of %s: sent into the site %v ago, the sibling has it or gets it soon: %w",
			q.Index, q.ID, (HedgeGrace-d.Wait).Round(time.Millisecond), blob.ErrNotFound))
		return
	}
	rd, redirected := e.redirectTo(a, d)
	if a.Grouped && !a.Hedge {
		if _, _, ok := e.grouper.Group(p); !ok {
			// p left while it asked (after askOf, perhaps after
			// ChildLeft): it is no holder.
			e.ChildLeft(p)
		}
	}
	if redirected {
		e.stats.RedirectsSent.Add(1)
		sl.status, sl.body = fetchwire.StatusRedirect, fetchwire.AppendRedirect(nil, rd)
		return
	}
	if data, err := e.store.ReadChunk(q.Hash); err == nil {
		sl.status, sl.body = fetchwire.StatusOK, data
		e.noteSent(q)
		return
	}
	if q.IfPresent {
		e.reply(sl, nil, fmt.Errorf("chunk %d of %s: not here yet: %w", q.Index, q.ID, blob.ErrNotFound))
		return
	}
	if e.storeOnlyFor(p) {
		e.reply(sl, nil, fmt.Errorf("chunk %d of %s: not held here (served to other sites from the store only): %w", q.Index, q.ID, blob.ErrNotFound))
		return
	}
	var data []byte
	var err error
	if e.cfg.Mode == ModeStoreForward {
		// Store and forward: serve nothing of a blob until all of it is here.
		if err = e.wholeBlob(ctx, q.ID, p); err == nil {
			data, err = e.store.ReadChunk(q.Hash)
		}
	} else {
		data, err = e.obtainChunk(ctx, q, Want{ID: q.ID, Exclude: p}, p)
	}
	if err == nil {
		e.noteSent(q)
	}
	e.reply(sl, data, err)
}

// storeOnlyFor reports whether p is served from the store only
// (Config.OthersFromStore).
func (e *Engine) storeOnlyFor(p peer.ID) bool {
	return e.cfg.OthersFromStore != nil && e.cfg.OthersFromStore() && e.sources.Relation(p) == KindOther
}

// serveStep applies ev to the server's decision state (exchange.ServeState) at the
// time now and returns its decision.
func (e *Engine) serveStep(ev exchange.ServeEvent) exchange.ServeDecision {
	e.stateMu.Lock()
	defer e.stateMu.Unlock()
	return e.state.Step(time.Now(), ev)
}

// noteSent tells the decision state that chunk q is on its way to its
// asker.
func (e *Engine) noteSent(q fetchwire.Request) {
	e.serveStep(exchange.ServeEvent{Kind: exchange.ServeSent, Ask: exchange.Ask{Blob: q.ID, Index: q.Index}})
}

// askOf is request q from p as the decision state sees it: with p's group
// if p is a connected child and this node does sibling exchange (the
// Grouper says; asked before the state's lock is taken).
func (e *Engine) askOf(p peer.ID, q fetchwire.Request) exchange.Ask {
	a := exchange.Ask{Blob: q.ID, Index: q.Index, Child: p, Direct: q.Type == fetchwire.MsgGetDirect, Hedge: q.IfPresent}
	if q.Slow {
		a.Slow = q.Failed
	} else {
		a.Failed = q.Failed
	}
	if e.grouper != nil {
		a.Group, _, a.Grouped = e.grouper.Group(p)
	}
	return a
}

// redirectTo turns decision d on request a into the redirect to send, if
// any, with its target's addresses. A target that is no connected child
// any more (it left before its ChildLeft reached the state) is reported
// gone, and the state decides again without it.
func (e *Engine) redirectTo(a exchange.Ask, d exchange.ServeDecision) (fetchwire.Redirect, bool) {
	for d.Action == exchange.ActRedirect {
		if _, addrs, ok := e.grouper.Group(d.Target); ok {
			return fetchwire.Redirect{Peer: d.Target, Addrs: addrs}, true
		}
		d = e.serveStep(exchange.ServeEvent{Kind: exchange.ServeTargetGone, Peer: d.Target, Ask: a})
	}
	return fetchwire.Redirect{}, false
}

// ChildLeft tells the engine that p is no longer a connected child (its
// tree session ended): as a relay, it forgets p as a holder of chunks, so
// that no child is sent to p for what it held, even once p is back (a
// worker that comes back may have lost its store). The tree calls it
// (tree.Config.OnChildLeft). Safe to call for any peer, at any time.
func (e *Engine) ChildLeft(p peer.ID) {
	e.serveStep(exchange.ServeEvent{Kind: exchange.ServePeerLeft, Peer: p})
}

// serveReport handles a peer's report that the bytes this node sent for
// chunk q did not match its hash: the local copy is read again from disk
// and verified, and dropped if damaged, so that the peer's next request is
// served from a fresh copy (pulled from this node's own sources).
func (e *Engine) serveReport(p peer.ID, q fetchwire.Request, sl *fetchSlot) {
	e.stats.ReportsReceived.Add(1)
	damaged, err := e.store.RecheckChunk(q.Hash)
	e.log.Warn("peer reports that a chunk it received from us does not match its hash",
		"peer", e.describe(p), "blob", q.ID, "chunk", q.Index, "hash", q.Hash, "our_copy_damaged", damaged, "err", err)
	sl.status, sl.body = fetchwire.StatusOK, []byte{fetchwire.ReportIntact}
	if damaged {
		sl.body[0] = fetchwire.ReportDamaged
	}
}

// serveManifest answers with blob id's manifest: from the store, else
// fetched from this node's sources for the blob (never the asker),
// verified and stored.
func (e *Engine) serveManifest(ctx context.Context, p peer.ID, id cid.Cid, sl *fetchSlot) {
	m, err := e.store.Manifest(id)
	if errors.Is(err, blob.ErrNotFound) && !e.storeOnlyFor(p) {
		m, err = e.manifestFor(ctx, Want{ID: id, Exclude: p})
	}
	var b []byte
	if err == nil {
		b = m.Encode()
	}
	e.reply(sl, b, err)
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
