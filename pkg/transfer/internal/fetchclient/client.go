// Package fetchclient is the client side of omst's fetch protocol
// (/omst/fetch/1.2.0, speaking 1.1.0 to a peer that knows only that): a
// Client keeps up to StreamsPerPeer pipelined streams to each peer it asks,
// writes tagged requests as they come and matches the replies, which come
// in the order they are ready, to them by tag. It verifies nothing: the
// caller checks the bytes it gets against their hash.
//
// Invariants: a reply is accepted only for a tag outstanding on its stream
// (or one whose caller left, whose reply is read and dropped), and only
// within the limit its request allows (fetchwire.Request.ReplyLimit);
// anything else ends the stream and is blamed on the peer. A request
// waits at most RequestTimeout for its reply; a caller that leaves takes
// nothing down with it. Errors name the peer (PeerError) and say what the
// scheduler should make of them (FailKind).
package fetchclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/dialerr"
	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/schedule"
	"github.com/omst-project/omst/pkg/transfer/internal/stats"
)

// Config configures New.
type Config struct {
	Host host.Host // this node's libp2p host
	// DialTimeout bounds connecting to a peer and opening a stream;
	// RequestTimeout the wait for a reply, and each write of a request.
	DialTimeout, RequestTimeout time.Duration
	// StreamsPerPeer is the number of fetch streams opened to one peer
	// (at least 1).
	StreamsPerPeer int
	// Describe names a peer for errors and logs.
	Describe func(peer.ID) string
	// NotePeerError is told of a failure blamed on a peer (a malformed
	// reply).
	NotePeerError func(p peer.ID, what string, err error)
	// Stats counts the OK reply bytes received (BytesFetched).
	Stats *stats.Counters
}

// ErrClosed is the error of a request made after Close.
var ErrClosed = errors.New("transfer engine closed")

// Client holds the fetch streams to the peers this node asks. Its methods
// are safe for concurrent use.
type Client struct {
	cfg  Config
	self peer.ID

	mu     sync.Mutex
	peers  map[peer.ID]*fetchPeer
	closed bool
}

// New returns a Client for cfg (every field set).
func New(cfg Config) *Client {
	return &Client{cfg: cfg, self: cfg.Host.ID(), peers: map[peer.ID]*fetchPeer{}}
}

// Close ends every stream (their requests fail with ErrClosed) and makes
// later requests fail with ErrClosed. Safe to call more than once.
func (c *Client) Close() {
	c.mu.Lock()
	c.closed = true
	peers := c.peers
	c.peers = map[peer.ID]*fetchPeer{}
	c.mu.Unlock()
	for _, fp := range peers {
		fp.close(ErrClosed)
	}
}

// fetchPeer holds the pipelined fetch streams to one peer.
type fetchPeer struct {
	c       *Client
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

func (c *Client) peerFor(p peer.ID) (*fetchPeer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	fp := c.peers[p]
	if fp == nil {
		fp = &fetchPeer{c: c, id: p}
		c.peers[p] = fp
	}
	return fp, nil
}

// stream returns the least loaded live stream, opening a new one while
// fewer than StreamsPerPeer are open and all are busy. Its errors do not
// name the peer: Request wraps them in a PeerError that does.
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
	if best != nil && (bestLoad == 0 || len(fp.streams) >= fp.c.cfg.StreamsPerPeer) {
		return best, nil
	}
	c := fp.c
	if err := c.connect(ctx, fp.id); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	s, err := c.cfg.Host.NewStream(sctx, fp.id, fetchwire.ProtoFetch, fetchwire.ProtoFetch110)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("open fetch stream: %w: %s", blob.ErrUnreachable, dialerr.Text(err))
	}
	fs := &fetchStream{fp: fp, s: s, bw: bufio.NewWriterSize(s, 4096), v110: s.Protocol() == fetchwire.ProtoFetch110,
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
	_ = fs.s.SetWriteDeadline(time.Now().Add(fs.fp.c.cfg.RequestTimeout))
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
	c := fs.fp.c
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
			c.cfg.NotePeerError(fs.fp.id, "fetch reply", err)
			fs.fail(err)
			return
		}
		if err := fetchwire.CheckReplyLen(status, n, limit); err != nil {
			c.cfg.NotePeerError(fs.fp.id, "fetch reply", err)
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
			c.cfg.Stats.BytesFetched.Add(uint64(n))
		}
		if ok {
			pr.status, pr.body = status, body
			close(pr.done)
		}
	}
}

// Request sends q to p over a pipelined fetch stream and returns the body
// of an OK reply. The body is not verified here. A REDIRECT (to a GET) is
// a *RedirectError; every other failure but ctx's end and ErrClosed is a
// *PeerError, which names the peer (a NOT_FOUND reply's wraps
// blob.ErrNotFound, an unreachable peer's blob.ErrUnreachable).
func (c *Client) Request(ctx context.Context, p peer.ID, q fetchwire.Request) ([]byte, error) {
	who := c.cfg.Describe(p)
	what := fmt.Sprintf("chunk %d of %s", q.Index, q.ID)
	if q.Type == fetchwire.MsgManifest {
		what = fmt.Sprintf("manifest %s", q.ID)
	}
	unreachable := func(err error) error {
		return &PeerError{Peer: who, Kind: schedule.FailUnreachable, Err: fmt.Errorf("%s: %w: %v", what, blob.ErrUnreachable, err)}
	}
	fp, err := c.peerFor(p)
	if err != nil {
		return nil, err
	}
	fs, err := fp.stream(ctx)
	if err != nil {
		if errors.Is(err, blob.ErrUnreachable) {
			return nil, &PeerError{Peer: who, Kind: schedule.FailUnreachable, Err: fmt.Errorf("%s: %w", what, err)}
		}
		return nil, unreachable(err)
	}
	pr, err := fs.send(q)
	if err != nil {
		return nil, unreachable(err)
	}
	tm := time.NewTimer(c.cfg.RequestTimeout)
	defer tm.Stop()
	select {
	case <-pr.done:
	case <-ctx.Done():
		fs.forget(pr) // the reply, when it comes, is dropped
		return nil, ctx.Err()
	case <-tm.C:
		err := fmt.Errorf("no reply within %v", c.cfg.RequestTimeout)
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
		if err == nil && (rd.Peer == c.self || rd.Peer == p) {
			err = wire.Malformed("REDIRECT to %s", rd.Peer)
		}
		if err != nil {
			return nil, &PeerError{Peer: who, Kind: schedule.FailUnreachable, Err: fmt.Errorf("%s: %w", what, err)}
		}
		return nil, &RedirectError{From: p, To: rd}
	case fetchwire.StatusNotFound:
		return nil, &PeerError{Peer: who, Kind: schedule.FailNotFound, Err: fmt.Errorf("%s: %w: %s", what, blob.ErrNotFound, pr.body)}
	default:
		return nil, &PeerError{Peer: who, Kind: schedule.FailNotFound, Err: fmt.Errorf("%s: error reply: %s", what, pr.body)}
	}
}

// RedirectError is a relay's answer to a GET: ask the sibling To instead.
type RedirectError struct {
	From peer.ID // the relay
	To   fetchwire.Redirect
}

func (r *RedirectError) Error() string {
	return fmt.Sprintf("%s redirected the request to sibling %s", r.From, r.To.Peer)
}

// PeerError is a failed request blamed on a peer: Kind says what the
// scheduler makes of it, Err what failed.
type PeerError struct {
	Peer string // the peer, described for messages
	Kind schedule.FailKind
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("%s: %v", e.Peer, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// FailKind classifies err for the scheduler: a PeerError's Kind, else
// corrupt or not found by what err wraps, else unreachable.
func FailKind(err error) schedule.FailKind {
	if pe, ok := errors.AsType[*PeerError](err); ok {
		return pe.Kind
	}
	switch {
	case errors.Is(err, blob.ErrCorrupt):
		return schedule.FailCorrupt
	case errors.Is(err, blob.ErrNotFound):
		return schedule.FailNotFound
	}
	return schedule.FailUnreachable
}

// connect makes sure there is a connection to p (at the addresses the
// peerstore knows), bounded by DialTimeout; failures wrap
// blob.ErrUnreachable (the caller names the peer).
func (c *Client) connect(ctx context.Context, p peer.ID) error {
	h := c.cfg.Host
	if len(h.Network().ConnsToPeer(p)) > 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	defer cancel()
	if err := h.Connect(dctx, peer.AddrInfo{ID: p}); err != nil {
		return fmt.Errorf("%w: %s", blob.ErrUnreachable, dialerr.Text(err))
	}
	return nil
}
