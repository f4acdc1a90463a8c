package transfer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/dialerr"
	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/schedule"
)

// ---- the client side of the fetch protocol ----

// fetchPeer holds the pipelined fetch streams to one peer.
type fetchPeer struct {
	e       *Engine
	id      peer.ID
	mu      sync.Mutex
	streams []*fetchStream
	err     error // set when closed
}

// fetchStream is one stream of tagged requests: requests are written as
// they come, and replies, which come in the order they are ready, are
// matched to them by tag.
type fetchStream struct {
	fp  *fetchPeer
	s   network.Stream
	wmu sync.Mutex
	bw  *bufio.Writer
	buf []byte
	// v110: the peer speaks only /omst/fetch/1.1.0 (no GET_SIBLING).
	v110 bool

	mu      sync.Mutex
	pending map[uint32]*pendingReq // nil once the stream failed
	late    map[uint32]int         // tags whose caller left (their reply limit); their replies are discarded
	nextTag uint32
	err     error
}

// pendingReq is a request waiting for its reply.
type pendingReq struct {
	limit  int // largest OK body allowed (fetchwire.Request.ReplyLimit)
	done   chan struct{}
	status byte
	body   []byte
	err    error
}

func (e *Engine) peerFor(p peer.ID) (*fetchPeer, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errClosed
	}
	fp := e.peers[p]
	if fp == nil {
		fp = &fetchPeer{e: e, id: p}
		e.peers[p] = fp
	}
	return fp, nil
}

// stream returns the least loaded live stream, opening a new one while
// fewer than StreamsPerPeer are open and all are busy. Its errors do not
// name the peer: request wraps them in a peerError that does.
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
	if best != nil && (bestLoad == 0 || len(fp.streams) >= fp.e.cfg.StreamsPerPeer) {
		return best, nil
	}
	e := fp.e
	if err := e.connect(ctx, fp.id); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, e.cfg.DialTimeout)
	s, err := e.h.NewStream(sctx, fp.id, ProtoFetch, ProtoFetch110)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("open fetch stream: %w: %s", blob.ErrUnreachable, dialerr.Text(err))
	}
	fs := &fetchStream{fp: fp, s: s, bw: bufio.NewWriterSize(s, 4096), v110: s.Protocol() == ProtoFetch110,
		pending: map[uint32]*pendingReq{}, late: map[uint32]int{}}
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

// send registers q under a new tag and writes it.
func (fs *fetchStream) send(q fetchwire.Request) (*pendingReq, error) {
	pr := &pendingReq{limit: q.ReplyLimit(), done: make(chan struct{})}
	fs.wmu.Lock()
	defer fs.wmu.Unlock()
	fs.mu.Lock()
	if fs.err != nil {
		err := fs.err
		fs.mu.Unlock()
		return nil, err
	}
	for {
		fs.nextTag++
		_, used := fs.pending[fs.nextTag]
		_, late := fs.late[fs.nextTag]
		if !used && !late {
			break
		}
	}
	q.Tag = fs.nextTag
	fs.pending[q.Tag] = pr
	fs.mu.Unlock()
	if fs.v110 {
		q.Sibling = false // a 1.1.0 peer knows no GET_SIBLING
	}
	fs.buf = fetchwire.AppendRequest(fs.buf[:0], q)
	_ = fs.s.SetWriteDeadline(time.Now().Add(fs.fp.e.cfg.RequestTimeout))
	if _, err := fs.bw.Write(fs.buf); err != nil {
		fs.fail(err)
		return pr, nil // pr carries the error
	}
	if err := fs.bw.Flush(); err != nil {
		fs.fail(err)
	}
	return pr, nil
}

// forget drops a request whose caller stopped waiting; a reply that comes
// later for its tag is read and discarded.
func (fs *fetchStream) forget(pr *pendingReq) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for tag, p := range fs.pending {
		if p == pr {
			delete(fs.pending, tag)
			fs.late[tag] = p.limit
			return
		}
	}
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
	for _, pr := range pending {
		pr.err = err
		close(pr.done)
	}
}

// readReplies delivers replies to the pending requests, by tag.
func (fs *fetchStream) readReplies() {
	e := fs.fp.e
	br := bufio.NewReaderSize(fs.s, 64<<10)
	var hdr [fetchwire.ReplyHeaderLen]byte
	for {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			fs.fail(err)
			return
		}
		tag, status, n := fetchwire.ParseReplyHeader(hdr)
		fs.mu.Lock()
		pr, ok := fs.pending[tag]
		lateLimit, late := fs.late[tag]
		fs.mu.Unlock()
		limit := lateLimit
		if ok {
			limit = pr.limit
		} else if !late {
			err := wire.Malformed("reply to tag %d, which has no request outstanding", tag)
			e.notePeerError(fs.fp.id, "fetch reply", err)
			fs.fail(err)
			return
		}
		if err := fetchwire.CheckReplyLen(status, n, limit); err != nil {
			e.notePeerError(fs.fp.id, "fetch reply", err)
			fs.fail(err)
			return
		}
		body, err := wire.ReadN(br, int(n))
		if err != nil {
			fs.fail(err)
			return
		}
		fs.mu.Lock()
		if fs.pending == nil { // failed meanwhile
			fs.mu.Unlock()
			return
		}
		delete(fs.late, tag)
		if ok {
			if fs.pending[tag] != pr {
				ok = false
			} else {
				delete(fs.pending, tag)
			}
		}
		fs.mu.Unlock()
		if status == fetchwire.StatusOK {
			e.bytesFetched.Add(uint64(n))
		}
		if ok {
			pr.status, pr.body = status, body
			close(pr.done)
		}
	}
}

// request sends q to p over a pipelined fetch stream and returns the body
// of an OK reply. The body is not verified here. A NOT_FOUND reply is an
// error wrapping blob.ErrNotFound; errors name the peer.
func (e *Engine) request(ctx context.Context, p peer.ID, q fetchwire.Request) ([]byte, error) {
	who := e.describe(p)
	what := fmt.Sprintf("chunk %d of %s", q.Index, q.ID)
	if q.Type == fetchwire.MsgManifest {
		what = fmt.Sprintf("manifest %s", q.ID)
	}
	unreachable := func(err error) error {
		return &peerError{peer: who, kind: schedule.FailUnreachable, err: fmt.Errorf("%s: %w: %v", what, blob.ErrUnreachable, err)}
	}
	fp, err := e.peerFor(p)
	if err != nil {
		return nil, err
	}
	fs, err := fp.stream(ctx)
	if err != nil {
		if errors.Is(err, blob.ErrUnreachable) {
			return nil, &peerError{peer: who, kind: schedule.FailUnreachable, err: fmt.Errorf("%s: %w", what, err)}
		}
		return nil, unreachable(err)
	}
	pr, err := fs.send(q)
	if err != nil {
		return nil, unreachable(err)
	}
	tm := time.NewTimer(e.cfg.RequestTimeout)
	defer tm.Stop()
	select {
	case <-pr.done:
	case <-ctx.Done():
		fs.forget(pr) // the reply, when it comes, is dropped
		return nil, ctx.Err()
	case <-tm.C:
		err := fmt.Errorf("no reply within %v", e.cfg.RequestTimeout)
		fs.fail(err)
		return nil, unreachable(err)
	}
	if pr.err != nil {
		return nil, unreachable(pr.err)
	}
	switch pr.status {
	case fetchwire.StatusOK:
		return pr.body, nil
	case fetchwire.StatusRedirect:
		rd, err := fetchwire.DecodeRedirect(pr.body)
		if err == nil && !q.IsGet() {
			err = wire.Malformed("REDIRECT in reply to request 0x%02x", q.Type)
		}
		if err == nil && (rd.Peer == e.self || rd.Peer == p) {
			err = wire.Malformed("REDIRECT to %s", rd.Peer)
		}
		if err != nil {
			return nil, &peerError{peer: who, kind: schedule.FailUnreachable, err: fmt.Errorf("%s: %w", what, err)}
		}
		return nil, &redirectError{from: p, to: rd}
	case fetchwire.StatusNotFound:
		return nil, &peerError{peer: who, kind: schedule.FailNotFound, err: fmt.Errorf("%s: %w: %s", what, blob.ErrNotFound, pr.body)}
	default:
		return nil, &peerError{peer: who, kind: schedule.FailNotFound, err: fmt.Errorf("%s: error reply: %s", what, pr.body)}
	}
}

// redirectError is a relay's answer to a GET: ask the sibling rd instead.
type redirectError struct {
	from peer.ID
	to   fetchwire.Redirect
}

func (r *redirectError) Error() string {
	return fmt.Sprintf("%s redirected the request to sibling %s", r.from, r.to.Peer)
}
