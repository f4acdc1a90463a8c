package tree

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

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
	var pe *peerError
	if errors.As(err, &pe) {
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

// chunkFrom returns the verified bytes of chunk q: from the store if it is
// there, else from the fetch already in flight for its hash, else from a new
// fetch from src. A fetched chunk is verified, handed to every waiter and
// then stored. ctx bounds this caller's wait only; the shared fetch is
// cancelled when its last waiter leaves. asker, when not empty, is the peer
// this chunk is wanted for: a fetch in flight from asker itself is not
// joined (asker is asking because it lacks the chunk), the chunk is then
// fetched from src on its own.
func (t *Tree) chunkFrom(ctx context.Context, q fetchRequest, src, asker peer.ID) ([]byte, error) {
	if t.store.HasChunk(q.Hash) {
		// Verified by the store; a damaged copy is dropped there and
		// fetched again below.
		if data, err := t.store.ReadChunk(q.Hash); err == nil {
			return data, nil
		}
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errClosed
	}
	c := t.inflight[q.Hash]
	if !joinable(c, asker) {
		cctx, cancel := context.WithCancel(t.ctx)
		c = &chunkCall{src: src, done: make(chan struct{}), stored: make(chan struct{}), cancel: cancel}
		if t.inflight[q.Hash] == nil {
			t.inflight[q.Hash] = c
		}
		t.wg.Add(1)
		go t.runChunkCall(cctx, c, q, src)
	}
	c.waiters++
	t.mu.Unlock()
	select {
	case <-c.done:
		return c.data, c.err
	case <-ctx.Done():
		t.mu.Lock()
		c.waiters--
		if c.waiters == 0 {
			c.cancel()
		}
		t.mu.Unlock()
		return nil, ctx.Err()
	}
}

// joinable reports whether a request for a chunk on behalf of asker may
// wait on the fetch c in flight for it: not when c asks asker itself.
func joinable(c *chunkCall, asker peer.ID) bool {
	return c != nil && (asker == "" || c.src != asker)
}

func (t *Tree) runChunkCall(ctx context.Context, c *chunkCall, q fetchRequest, src peer.ID) {
	defer t.wg.Done()
	defer c.cancel()
	data, err := t.requestChunk(ctx, src, q)
	if err == nil {
		if verr := q.Hash.Verify(data); verr != nil {
			err = &peerError{peer: t.describe(src), kind: FailCorrupt, err: fmt.Errorf("chunk %d of %s: %w", q.Index, q.ID, verr)}
			data = nil
			t.corruptReceived.Add(1)
			t.goTracked(func() { t.reportCorrupt(src, q) })
		}
	}
	if err != nil && ctx.Err() == nil && !errors.Is(err, blob.ErrNotFound) {
		// Corrupt bytes, a broken stream or an ERROR reply; NOT_FOUND is an answer.
		t.notePeerError(src, "fetch chunk", err)
	}
	c.data, c.err = data, err
	close(c.done) // waiters take the chunk now: cut-through
	if err == nil {
		if perr := t.store.PutVerifiedChunk(q.Hash, data); perr != nil {
			t.log.Warn("store chunk", "hash", q.Hash, "err", perr)
		}
	}
	t.mu.Lock()
	if t.inflight[q.Hash] == c {
		delete(t.inflight, q.Hash)
	}
	t.mu.Unlock()
	close(c.stored)
}

// waitStored waits until a fetch of h in flight has stored it (or failed
// to), so that HasChunk then tells whether it is in the store.
func (t *Tree) waitStored(ctx context.Context, h blob.Hash) error {
	t.mu.Lock()
	c := t.inflight[h]
	t.mu.Unlock()
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
func (t *Tree) obtainChunk(ctx context.Context, q fetchRequest, sources []peer.ID, asker peer.ID) ([]byte, error) {
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
		data, err := t.chunkFrom(ctx, q, sources[r.Source], asker)
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

// reportCorrupt tells src that the bytes it sent for chunk q did not match
// the chunk's hash, so that a node serving from a damaged disk learns it
// (it re-reads and re-verifies its copy, and drops it if damaged). Best
// effort: a failure is only logged.
func (t *Tree) reportCorrupt(src peer.ID, q fetchRequest) {
	q.Report = true
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.RequestTimeout)
	defer cancel()
	body, err := t.requestChunk(ctx, src, q)
	switch {
	case err != nil:
		t.log.Info("could not report a corrupt chunk to its sender", "peer", t.describe(src), "blob", q.ID, "chunk", q.Index, "err", err)
	case len(body) == 1 && body[0] == reportDamaged:
		t.log.Info("sender found its copy of a chunk damaged and dropped it", "peer", t.describe(src), "blob", q.ID, "chunk", q.Index)
	default:
		t.log.Info("sender found its copy of a chunk intact", "peer", t.describe(src), "blob", q.ID, "chunk", q.Index)
	}
}

// ---- the client side of /omst/fetch/1.0.0 ----

// fetchPeer holds the pipelined fetch streams to one peer.
type fetchPeer struct {
	t       *Tree
	id      peer.ID
	mu      sync.Mutex
	streams []*fetchStream
	err     error // set when closed
}

// fetchStream is one pipelined stream: requests are written in order and
// replies come back in the same order.
type fetchStream struct {
	fp  *fetchPeer
	s   network.Stream
	wmu sync.Mutex
	bw  *bufio.Writer
	buf []byte

	mu      sync.Mutex
	pending []*pendingGet
	err     error
}

type pendingGet struct {
	done   chan struct{}
	status byte
	body   []byte
	err    error
}

func (t *Tree) peerFor(p peer.ID) (*fetchPeer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errClosed
	}
	fp := t.peers[p]
	if fp == nil {
		fp = &fetchPeer{t: t, id: p}
		t.peers[p] = fp
	}
	return fp, nil
}

// stream returns the least loaded live stream, opening a new one while
// fewer than StreamsPerPeer are open and all are busy.
func (fp *fetchPeer) stream(ctx context.Context) (*fetchStream, error) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if fp.err != nil {
		return nil, fp.err
	}
	var best *fetchStream
	bestLoad := 0
	for _, fs := range fp.streams {
		fs.mu.Lock()
		load := len(fs.pending)
		fs.mu.Unlock()
		if best == nil || load < bestLoad {
			best, bestLoad = fs, load
		}
	}
	if best != nil && (bestLoad == 0 || len(fp.streams) >= fp.t.cfg.StreamsPerPeer) {
		return best, nil
	}
	t := fp.t
	if err := t.connect(ctx, fp.id); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	s, err := t.h.NewStream(sctx, fp.id, ProtoFetch)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("%s: open fetch stream: %w: %v", t.describe(fp.id), blob.ErrUnreachable, err)
	}
	fs := &fetchStream{fp: fp, s: s, bw: bufio.NewWriterSize(s, 4096)}
	fp.streams = append(fp.streams, fs)
	go fs.readReplies()
	return fs, nil
}

func (fp *fetchPeer) remove(fs *fetchStream) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for i, x := range fp.streams {
		if x == fs {
			fp.streams = append(fp.streams[:i], fp.streams[i+1:]...)
			return
		}
	}
}

func (fp *fetchPeer) close(err error) {
	fp.mu.Lock()
	fp.err = err
	streams := fp.streams
	fp.streams = nil
	fp.mu.Unlock()
	for _, fs := range streams {
		fs.fail(err)
	}
}

// send queues q on the stream and writes it.
func (fs *fetchStream) send(q fetchRequest) (*pendingGet, error) {
	pg := &pendingGet{done: make(chan struct{})}
	fs.wmu.Lock()
	defer fs.wmu.Unlock()
	fs.mu.Lock()
	if fs.err != nil {
		err := fs.err
		fs.mu.Unlock()
		return nil, err
	}
	fs.pending = append(fs.pending, pg)
	fs.mu.Unlock()
	fs.buf = appendFetchRequest(fs.buf[:0], q)
	_ = fs.s.SetWriteDeadline(time.Now().Add(fs.fp.t.cfg.RequestTimeout))
	if _, err := fs.bw.Write(fs.buf); err != nil {
		fs.fail(err)
		return pg, nil // pg carries the error
	}
	if err := fs.bw.Flush(); err != nil {
		fs.fail(err)
	}
	return pg, nil
}

// fail ends the stream: every pending request gets err.
func (fs *fetchStream) fail(err error) {
	fs.mu.Lock()
	if fs.err != nil {
		fs.mu.Unlock()
		return
	}
	fs.err = err
	pending := fs.pending
	fs.pending = nil
	fs.mu.Unlock()
	fs.s.Reset()
	fs.fp.remove(fs)
	for _, pg := range pending {
		pg.err = err
		close(pg.done)
	}
}

// readReplies delivers replies, in order, to the pending requests.
func (fs *fetchStream) readReplies() {
	t := fs.fp.t
	br := bufio.NewReaderSize(fs.s, 64<<10)
	var hdr [frameHeaderLen]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			fs.fail(err)
			return
		}
		status, n, err := checkFetchReplyHeader(hdr)
		if err != nil {
			t.notePeerError(fs.fp.id, "fetch reply", err)
			fs.fail(err)
			return
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(br, body); err != nil {
			fs.fail(unexpected(err))
			return
		}
		fs.mu.Lock()
		if len(fs.pending) == 0 {
			fs.mu.Unlock()
			err := malformed("reply with no request outstanding")
			t.notePeerError(fs.fp.id, "fetch reply", err)
			fs.fail(err)
			return
		}
		pg := fs.pending[0]
		fs.pending[0] = nil
		fs.pending = fs.pending[1:]
		fs.mu.Unlock()
		if status == statusOK {
			t.bytesFetched.Add(uint64(n))
		}
		pg.status, pg.body = status, body
		close(pg.done)
	}
}

// requestChunk asks p for chunk q over a pipelined fetch stream. The reply
// is not verified here.
func (t *Tree) requestChunk(ctx context.Context, p peer.ID, q fetchRequest) ([]byte, error) {
	who := t.describe(p)
	unreachable := func(err error) error {
		return &peerError{peer: who, kind: FailUnreachable, err: fmt.Errorf("chunk %d of %s: %w: %v", q.Index, q.ID, blob.ErrUnreachable, err)}
	}
	fp, err := t.peerFor(p)
	if err != nil {
		return nil, err
	}
	fs, err := fp.stream(ctx)
	if err != nil {
		if errors.Is(err, blob.ErrUnreachable) {
			return nil, &peerError{peer: who, kind: FailUnreachable, err: err}
		}
		return nil, unreachable(err)
	}
	pg, err := fs.send(q)
	if err != nil {
		return nil, unreachable(err)
	}
	tm := time.NewTimer(t.cfg.RequestTimeout)
	defer tm.Stop()
	select {
	case <-pg.done:
	case <-ctx.Done():
		return nil, ctx.Err() // the reply, when it comes, is dropped
	case <-tm.C:
		err := fmt.Errorf("no reply within %v", t.cfg.RequestTimeout)
		fs.fail(err)
		return nil, unreachable(err)
	}
	if pg.err != nil {
		return nil, unreachable(pg.err)
	}
	switch pg.status {
	case statusOK:
		return pg.body, nil
	case statusNotFound:
		return nil, &peerError{peer: who, kind: FailNotFound, err: fmt.Errorf("chunk %d of %s: %w: %s", q.Index, q.ID, blob.ErrNotFound, pg.body)}
	default:
		return nil, &peerError{peer: who, kind: FailNotFound, err: fmt.Errorf("chunk %d of %s: error reply: %s", q.Index, q.ID, pg.body)}
	}
}

// ---- the server side of /omst/fetch/1.0.0 ----

// maxQueuedPerStream bounds the requests a server resolves at once per stream.
const maxQueuedPerStream = 64

type fetchSlot struct {
	done   chan struct{}
	status byte
	body   []byte
}

// handleFetch serves one pipelined fetch stream: requests are resolved
// concurrently (a relay starts its upstream fetches for all of them at
// once) and answered in request order, each as soon as it and all before it
// are ready.
func (t *Tree) handleFetch(s network.Stream) {
	p := s.Conn().RemotePeer()
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	slots := make(chan *fetchSlot, maxQueuedPerStream)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		t.writeReplies(ctx, cancel, s, slots)
	}()
	br := bufio.NewReaderSize(s, 16<<10)
	var err error
	for {
		var q fetchRequest
		q, err = readFetchRequest(br)
		if err != nil {
			break
		}
		sl := &fetchSlot{done: make(chan struct{})}
		select {
		case slots <- sl:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			break
		}
		if q.Report {
			go t.serveReport(p, q, sl)
		} else {
			go t.serveChunk(ctx, p, q, sl)
		}
	}
	if errors.Is(err, errMalformed) {
		t.notePeerError(p, "fetch request", err)
		sl := &fetchSlot{done: make(chan struct{}), status: statusError, body: truncMsg(err.Error())}
		close(sl.done)
		select {
		case slots <- sl:
		case <-ctx.Done():
		}
	}
	close(slots)
	<-writerDone
	// Close, not Reset: a reset would discard the replies still in flight,
	// including the error reply. Anything the peer sends after a malformed
	// request is refused (CloseRead).
	s.Close()
}

func truncMsg(s string) []byte { return []byte(truncUTF8(s, maxErrorMsg)) }

func (t *Tree) writeReplies(ctx context.Context, cancel context.CancelFunc, s network.Stream, slots chan *fetchSlot) {
	bw := bufio.NewWriterSize(s, 64<<10)
	var hdr []byte
	failed := false
	for sl := range slots {
		select {
		case <-sl.done:
		case <-ctx.Done():
			failed = true
		}
		if failed {
			continue // drain
		}
		hdr = appendFetchReplyHeader(hdr[:0], sl.status, len(sl.body))
		_ = s.SetWriteDeadline(time.Now().Add(t.cfg.RequestTimeout))
		_, err := bw.Write(hdr)
		if err == nil {
			_, err = bw.Write(sl.body)
		}
		if err == nil && len(slots) == 0 {
			err = bw.Flush()
		}
		if err != nil {
			failed = true
			cancel()
			continue
		}
		if sl.status == statusOK {
			t.bytesServed.Add(uint64(len(sl.body)))
		}
	}
	if !failed {
		_ = bw.Flush()
	}
}

// serveChunk resolves one request: from the store, else pull-through from
// this node's sources for the blob (never back to the asker).
func (t *Tree) serveChunk(ctx context.Context, p peer.ID, q fetchRequest, sl *fetchSlot) {
	defer close(sl.done)
	if data, err := t.store.ReadChunk(q.Hash); err == nil {
		sl.status, sl.body = statusOK, data
		return
	}
	var data []byte
	var err error
	if t.cfg.Mode == ModeStoreForward {
		// Store and forward: serve nothing of a blob until all of it is here.
		if err = t.wholeBlob(ctx, q.ID, p); err == nil {
			data, err = t.store.ReadChunk(q.Hash)
		}
	} else {
		data, err = t.obtainChunk(ctx, q, t.sourcesForID(q.ID, p), p)
	}
	switch {
	case err == nil:
		sl.status, sl.body = statusOK, data
	case errors.Is(err, blob.ErrNotFound):
		sl.status, sl.body = statusNotFound, truncMsg(fmt.Sprintf("%s: %v", t.self, err))
	default:
		sl.status, sl.body = statusError, truncMsg(fmt.Sprintf("%s: %v", t.self, err))
	}
}

// Bodies of the OK reply to a REPORT.
const (
	reportIntact  byte = 0 // the reported chunk was absent or verified intact
	reportDamaged byte = 1 // it was damaged and has been dropped
)

// serveReport handles a peer's report that the bytes this node sent for
// chunk q did not match its hash: the local copy is read again from disk
// and verified, and dropped if damaged, so that the peer's next request is
// served from a fresh copy (pulled from this node's own sources).
func (t *Tree) serveReport(p peer.ID, q fetchRequest, sl *fetchSlot) {
	defer close(sl.done)
	t.reportsReceived.Add(1)
	damaged, err := t.store.RecheckChunk(q.Hash)
	t.log.Warn("peer reports that a chunk it received from us does not match its hash",
		"peer", t.describe(p), "blob", q.ID, "chunk", q.Index, "hash", q.Hash, "our_copy_damaged", damaged, "err", err)
	sl.status, sl.body = statusOK, []byte{reportIntact}
	if damaged {
		sl.body[0] = reportDamaged
	}
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
func (t *Tree) wholeBlob(ctx context.Context, id cid.Cid, asker peer.ID) error {
	t.mu.Lock()
	c := t.whole[id]
	if c == nil {
		if t.closed {
			t.mu.Unlock()
			return errClosed
		}
		c = &wholeBlobCall{done: make(chan struct{})}
		t.whole[id] = c
		t.wg.Go(func() {
			r := blob.Record{ID: id, Name: "blob " + id.String()}
			c.err = t.fetchAll(t.ctx, r, t.sourcesForID(id, asker))
			t.mu.Lock()
			delete(t.whole, id)
			t.mu.Unlock()
			close(c.done)
		})
	}
	t.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
