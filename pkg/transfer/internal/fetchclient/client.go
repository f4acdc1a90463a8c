// Package fetchclient is the client side of omst's fetch protocol
// (/omst/fetch/1.4.0, speaking 1.3.0, 1.2.0 or 1.1.0 to a peer that knows
// only that): a
// Client keeps up to StreamsPerPeer pipelined streams to each peer it asks,
// writes tagged requests as they come and matches the replies, which come
// in the order they are ready, to them by tag. A chunk that comes in one
// OK reply is not verified here: the caller checks it against its hash. A
// chunk that comes in pieces (1.3.0: OUTBOARD, then PIECEs) is verified
// here, the outboard whole and each piece as it arrives, and each piece is
// published at once to the caller's piece.Partial (RequestChunk), so that
// the caller can pass it on before the chunk is complete. With a bulk
// Dialer (Config.Bulk) the streams to a peer are bulk connections (package
// bulk) where the peer grants them, libp2p streams where it does not.
//
// Invariants: a reply is accepted only for a tag outstanding on its stream
// (or one whose caller left, whose reply is read and dropped), and only
// within the limit its request allows (fetchwire.Request.ReplyLimit);
// anything else ends the stream and is blamed on the peer. A corrupt
// outboard or piece is blamed on the peer and ends its request; the stream
// and its other requests go on where its transport authenticates the bytes
// (a libp2p stream, a sealed bulk connection: the frames came as the peer
// sent them), and end on a plain bulk connection (damage on the way may
// have hit a frame's header too). A request
// waits at most RequestTimeout for its reply; a caller that leaves takes
// nothing down with it. Errors name the peer (PeerError) and say what the
// scheduler should make of them (FailKind).
package fetchclient

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/dialerr"
	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/bulk"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
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
	// Stats counts the OK reply bytes received (BytesFetched) and the
	// bulk connections opened and refused.
	Stats *stats.Counters
	// Bulk, when set, opens bulk connections (package bulk): up to
	// BulkConns to a peer, in place of its libp2p fetch streams. A peer
	// that grants none (an older one, or one without a bulk listener), or
	// whose bulk connection cannot be opened, is asked over libp2p
	// streams, and bulk connections to it are tried again later
	// (BulkRetryAfter).
	Bulk      *bulk.Dialer
	BulkConns int
	// BulkIdle is how long a bulk connection may stay unused before the
	// client closes it (default DefaultBulkIdle): each holds a socket at
	// both ends, and a relay's workers would otherwise keep BulkConns
	// each open for good. A connection is opened again, with a new
	// ticket, when it is needed.
	BulkIdle time.Duration
}

// DefaultBulkIdle is Config.BulkIdle's default.
const DefaultBulkIdle = 5 * time.Second

// BulkRetry and MaxBulkRetry bound how long after a failed bulk
// connection to a peer the client uses only libp2p streams to it.
const (
	BulkRetry    = time.Minute
	MaxBulkRetry = time.Hour
)

// BulkRetryAfter is how long the client waits before it tries a bulk
// connection to a peer again after fails failures in a row (fails >= 1):
// BulkRetry, doubled with each further failure, at most MaxBulkRetry; so
// that a peer behind a firewall that drops the bulk port costs a dial
// timeout a few times an hour, not every minute.
func BulkRetryAfter(fails int) time.Duration {
	d := BulkRetry
	for i := 1; i < fails && d < MaxBulkRetry; i++ {
		d *= 2
	}
	return min(d, MaxBulkRetry)
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
	stop   chan struct{} // closed by Close: ends the idle reaper
}

// New returns a Client for cfg (every field set but BulkIdle).
func New(cfg Config) *Client {
	if cfg.BulkIdle <= 0 {
		cfg.BulkIdle = DefaultBulkIdle
	}
	c := &Client{cfg: cfg, self: cfg.Host.ID(), peers: map[peer.ID]*fetchPeer{}, stop: make(chan struct{})}
	if cfg.Bulk != nil {
		go c.reapIdle()
	}
	return c
}

// reapIdle closes, every half BulkIdle until Close, the bulk connections
// unused for BulkIdle (idleSince).
func (c *Client) reapIdle() {
	t := time.NewTicker(c.cfg.BulkIdle / 2)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			c.mu.Lock()
			peers := make([]*fetchPeer, 0, len(c.peers))
			for _, fp := range c.peers {
				peers = append(peers, fp)
			}
			c.mu.Unlock()
			for _, fp := range peers {
				for _, fs := range fp.idleBulk(now, c.cfg.BulkIdle) {
					fs.fail(errIdle)
				}
			}
		}
	}
}

// errIdle ends a bulk connection the reaper closed; no request is
// pending on it.
var errIdle = errors.New("bulk connection idle")

// idleBulk removes from fp and returns its bulk connections that have
// had no request pending nor been handed out by stream for idle. A
// connection handed out is not closed under its caller's request: stream
// marks it used under fp.mu, which idleBulk holds.
func (fp *fetchPeer) idleBulk(now time.Time, idle time.Duration) []*fetchStream {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	var out []*fetchStream
	keep := fp.streams[:0]
	for _, fs := range fp.streams {
		fs.mu.Lock()
		quiet := fs.bulk && fs.err == nil && len(fs.pending) == 0 && len(fs.late) == 0 && now.Sub(fs.used) >= idle
		fs.mu.Unlock()
		if quiet {
			out = append(out, fs)
		} else {
			keep = append(keep, fs)
		}
	}
	clear(fp.streams[len(keep):])
	fp.streams = keep
	return out
}

// Close ends every stream (their requests fail with ErrClosed) and makes
// later requests fail with ErrClosed. Safe to call more than once.
func (c *Client) Close() {
	c.mu.Lock()
	if !c.closed {
		close(c.stop)
	}
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
	// bulkAfter: no bulk connection is tried before this time (one
	// failed).
	bulkAfter time.Time
	bulkFails int // failed bulk connections in a row
}

// fetchStream is one stream of tagged requests: requests are written as
// they come, and replies, which come in the order they are ready, are
// matched to them by tag.
type fetchStream struct {
	fp   *fetchPeer
	s    conn
	bulk bool // s is a bulk connection
	// used: when the stream was last handed out, or a reply came
	// (under mu; the reaper's idle clock).
	used time.Time
	wmu  sync.Mutex
	bw   *bufio.Writer
	buf  []byte
	// v110: the peer speaks only /omst/fetch/1.1.0 (no GET_SIBLING);
	// v130: it speaks 1.3.0 or later (chunk replies may come in pieces);
	// v140: 1.4.0 (a GET_DIRECT may ask to be deflected: Deflect).
	v110, v130, v140 bool
	// plain: a plain bulk connection, whose bytes nothing authenticates
	// on the way: a corrupt piece on it may be damage in transit that can
	// as well have hit a frame's header, so it ends the connection. A
	// libp2p stream (Noise or TLS) and a sealed bulk connection (AES-GCM)
	// deliver the sender's bytes as it wrote them: a corrupt piece there
	// is the sender's own, its frames intact, and ends only its request.
	plain   bool
	scratch []byte // a piece being read and verified (readReplies only)

	mu      sync.Mutex
	pending map[uint32]*pendingReq // nil once the stream failed
	late    map[uint32]*pendingReq // tags whose caller left: their replies are read (pieces still published) and dropped
	nextTag uint32
	err     error
}

// conn is a fetch stream's transport: a libp2p stream or a bulk
// connection.
type conn interface {
	io.Reader
	io.Writer
	SetWriteDeadline(time.Time) error
	Reset() error
}

// pendingReq is a request waiting for its reply.
type pendingReq struct {
	limit int // largest OK body allowed (fetchwire.Request.ReplyLimit)
	hash  blob.Hash
	// deflect: sent as a GET_DIRECT with the deflect flag (1.4.0): a BUSY
	// or REDIRECT may answer it.
	deflect bool
	sink    *piece.Partial // a chunk request's, for a reply in pieces; nil: none allowed
	done    chan struct{}
	status  byte
	body    []byte
	err     error

	// A reply in pieces (readReplies only): the sender's verified
	// outboard, the chunk's length, the next offset expected.
	ob      []byte
	n, next int
	pieces  bool // the reply came in pieces, all verified
	// drop: the reply failed verification; its caller has its error,
	// and its remaining PIECE frames (up to n, the length the sender's
	// outboard states) are read and discarded.
	drop bool
	// own holds the verified pieces when sink was begun for another
	// length (another sender's outboard, which only bytes can prove
	// wrong): sink then cannot hold this reply's chunk.
	own []byte
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
	c := fp.c
	limit := c.cfg.StreamsPerPeer
	useBulk := c.cfg.Bulk != nil && !time.Now().Before(fp.bulkAfter)
	if useBulk {
		limit = max(c.cfg.BulkConns, 1)
	}
	if best != nil && (bestLoad == 0 || len(fp.streams) >= limit) {
		best.touch()
		return best, nil
	}
	if err := c.connect(ctx, fp.id); err != nil {
		return nil, err
	}
	if useBulk {
		bc, err := c.cfg.Bulk.Open(ctx, fp.id)
		if err == nil {
			fp.bulkFails = 0
			c.cfg.Stats.BulkOpened.Add(1)
			// A bulk connection is served as the peer's newest version:
			// 1.4.0 if its libp2p identify lists it.
			fs := &fetchStream{fp: fp, s: bc, bulk: true, plain: bc.Mode != bulk.ModeSealed, bw: bufio.NewWriterSize(bc, 4096), v130: true, v140: c.speaks140(fp.id),
				pending: map[uint32]*pendingReq{}, late: map[uint32]*pendingReq{}, used: time.Now()}
			fp.streams = append(fp.streams, fs)
			go fs.readReplies()
			return fs, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// An older peer, none configured there, or a dial that failed:
		// libp2p streams, as before.
		c.cfg.Stats.BulkFallbacks.Add(1)
		fp.bulkFails++
		fp.bulkAfter = time.Now().Add(BulkRetryAfter(fp.bulkFails))
		if !errors.Is(err, bulk.ErrUnavailable) {
			c.cfg.NotePeerError(fp.id, "bulk connection", err)
		}
		if best != nil && (bestLoad == 0 || len(fp.streams) >= c.cfg.StreamsPerPeer) {
			best.touch()
			return best, nil
		}
	}
	sctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	s, err := c.cfg.Host.NewStream(sctx, fp.id, fetchwire.ProtoFetch, fetchwire.ProtoFetch130, fetchwire.ProtoFetch120, fetchwire.ProtoFetch110)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("open fetch stream: %w: %s", blob.ErrUnreachable, dialerr.Text(err))
	}
	fs := &fetchStream{fp: fp, s: s, bw: bufio.NewWriterSize(s, 4096), v110: s.Protocol() == fetchwire.ProtoFetch110,
		v130: s.Protocol() == fetchwire.ProtoFetch || s.Protocol() == fetchwire.ProtoFetch130, v140: s.Protocol() == fetchwire.ProtoFetch, pending: map[uint32]*pendingReq{}, late: map[uint32]*pendingReq{}}
	fp.streams = append(fp.streams, fs)
	go fs.readReplies()
	return fs, nil
}

// speaks140 reports whether p's libp2p identify lists fetch 1.4.0 (so
// that a bulk connection to it carries the deflect flag).
func (c *Client) speaks140(p peer.ID) bool {
	ps, err := c.cfg.Host.Peerstore().SupportsProtocols(p, fetchwire.ProtoFetch)
	return err == nil && len(ps) > 0
}

// touch restarts fs's idle clock.
func (fs *fetchStream) touch() {
	fs.mu.Lock()
	fs.used = time.Now()
	fs.mu.Unlock()
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

// send registers q under a new tag and writes it; a reply in pieces, if
// sink is not nil, is published to sink.
func (fs *fetchStream) send(q fetchwire.Request, sink *piece.Partial) (*pendingReq, error) {
	pr := &pendingReq{limit: q.ReplyLimit(), hash: q.Hash, done: make(chan struct{})}
	if q.IsGet() {
		pr.sink = sink
	}
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
	if !fs.v140 {
		q.Deflect = false // a 1.3.0 peer or older knows no deflect flag
	}
	pr.deflect = q.Deflectable()
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
			fs.late[tag] = p
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
		if pr.err == nil { // a corrupt reply's own error stays
			pr.err = err
		}
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
		if !ok {
			pr = fs.late[tag]
		}
		fs.mu.Unlock()
		if pr == nil {
			err := wire.Malformed("reply to tag %d, which has no request outstanding", tag)
			c.cfg.NotePeerError(fs.fp.id, "fetch reply", err)
			fs.fail(err)
			return
		}
		if err := fetchwire.CheckReplyLen(status, n, pr.limit); err != nil {
			c.cfg.NotePeerError(fs.fp.id, "fetch reply", err)
			fs.fail(err)
			return
		}
		var body []byte
		var err error
		end := true // the request's last reply frame
		dropped := pr.drop
		switch status {
		case fetchwire.StatusOutboard, fetchwire.StatusPiece:
			end, err = fs.readPieces(br, pr, status, int(n))
		default:
			if status == fetchwire.StatusBusy && !pr.deflect {
				err = wire.Malformed("BUSY in reply to a request that allows none")
			} else if pr.ob != nil && (status == fetchwire.StatusOK || status == fetchwire.StatusRedirect || status == fetchwire.StatusBusy) {
				err = wire.Malformed("reply status %d after an OUTBOARD", status)
			} else {
				body, err = wire.ReadN(br, int(n))
			}
		}
		if err != nil && pr.drop && !dropped {
			// A corrupt outboard or piece, its frame read whole: the
			// request ends, blamed on the peer; the stream and its other
			// requests go on (the frames are intact, only the bytes lie).
			c.cfg.NotePeerError(fs.fp.id, "fetch reply", err)
			fs.dropRequest(tag, pr, end)
			continue
		}
		if err != nil {
			if errors.Is(err, wire.ErrMalformed) || errors.Is(err, blob.ErrCorrupt) {
				c.cfg.NotePeerError(fs.fp.id, "fetch reply", err)
			}
			fs.fail(err)
			return
		}
		if !end {
			continue
		}
		fs.mu.Lock()
		if fs.pending == nil { // failed meanwhile
			fs.mu.Unlock()
			return
		}
		if fs.late[tag] == pr {
			delete(fs.late, tag)
			ok = false
		} else if ok = fs.pending[tag] == pr; ok {
			delete(fs.pending, tag)
		}
		fs.used = time.Now()
		fs.mu.Unlock()
		if status == fetchwire.StatusOK {
			c.cfg.Stats.BytesFetched.Add(uint64(n))
		}
		if ok {
			pr.status, pr.body = status, body
			if pr.pieces {
				pr.status = fetchwire.StatusOK
			}
			close(pr.done)
		}
	}
}

// dropRequest ends request pr (tag) after a corrupt frame, its error set
// (readPieces): its caller, if still waiting, gets the error now; unless
// the frame was its last (end), its later frames are read and discarded
// (it stays in late until then).
func (fs *fetchStream) dropRequest(tag uint32, pr *pendingReq, end bool) {
	fs.mu.Lock()
	if fs.pending == nil { // failed meanwhile: fail told the caller
		fs.mu.Unlock()
		return
	}
	waiting := fs.pending[tag] == pr
	delete(fs.pending, tag)
	if end {
		delete(fs.late, tag)
	} else {
		fs.late[tag] = pr
	}
	fs.used = time.Now()
	fs.mu.Unlock()
	if waiting {
		close(pr.done)
	}
}

// readPieces reads the body of an OUTBOARD or PIECE reply frame (n bytes)
// to request pr, verifies it and publishes each verified piece to the
// request's sink. end reports the request's last frame (the piece that
// reaches the chunk's end). A frame out of place is malformed. Bytes that
// fail verification are an error wrapping blob.ErrCorrupt, and pr gets a
// PeerError of kind FailCorrupt. On a stream whose transport authenticates
// the bytes (not plain), where the chunk's length is known (the outboard
// states one), pr.drop is then set: the request ends there, and its later
// frames are only checked to be in place and discarded (the stream goes
// on: the sender's frames are delimited by their headers, which reached
// this node as it sent them, not by the bytes that lied). On a plain bulk
// connection, or after an outboard that states no length, the stream ends.
func (fs *fetchStream) readPieces(br *bufio.Reader, pr *pendingReq, status byte, n int) (end bool, err error) {
	c := fs.fp.c
	corrupt := func(err error) error {
		c.cfg.Stats.CorruptReceived.Add(1)
		pr.err = &PeerError{Peer: c.cfg.Describe(fs.fp.id), Kind: schedule.FailCorrupt, Err: err}
		return err
	}
	if !fs.v130 || pr.sink == nil {
		return false, wire.Malformed("reply status %d to a request that allows no pieces", status)
	}
	if status == fetchwire.StatusOutboard {
		if pr.ob != nil {
			return false, wire.Malformed("second OUTBOARD for one request")
		}
		ob, err := wire.ReadN(br, n)
		if err != nil {
			return false, err
		}
		k, err := piece.VerifyOutboard(ob, pr.hash, pr.limit)
		if err != nil {
			if k, lerr := piece.ChunkLen(ob, pr.limit); lerr == nil && !fs.plain {
				// The pieces to come are delimited by the length it
				// states: read and dropped.
				pr.ob, pr.n, pr.drop = ob, k, true
			}
			return false, corrupt(err)
		}
		pr.ob, pr.n = ob, k
		pr.sink.Begin(ob, k)
		if pr.sink.State().Len != k {
			pr.own = make([]byte, k)
		}
		return false, nil
	}
	if pr.ob == nil {
		return false, wire.Malformed("PIECE before its OUTBOARD")
	}
	var off [fetchwire.PieceHeaderLen]byte
	if _, err := io.ReadFull(br, off[:]); err != nil {
		return false, wire.Unexpected(err)
	}
	at, k := int(binary.BigEndian.Uint32(off[:])), n-fetchwire.PieceHeaderLen
	if at != pr.next || at+k > pr.n || (k%piece.GroupSize != 0 && at+k != pr.n) {
		return false, wire.Malformed("PIECE of %d bytes at offset %d (expected offset %d, chunk of %d bytes)", k, at, pr.next, pr.n)
	}
	if pr.drop {
		// After a corrupt frame: read and dropped.
		if _, err := br.Discard(k); err != nil {
			return false, wire.Unexpected(err)
		}
		pr.next = at + k
		return pr.next == pr.n, nil
	}
	if fs.scratch == nil {
		fs.scratch = make([]byte, scratchGroups*piece.GroupSize)
	}
	for k > 0 {
		g := fs.scratch[:min(k, len(fs.scratch))]
		if _, err := io.ReadFull(br, g); err != nil {
			return false, wire.Unexpected(err)
		}
		if err := piece.VerifyPiece(g, pr.ob, at, pr.hash); err != nil {
			if fs.plain {
				return false, corrupt(err)
			}
			// The rest of the frame is read and dropped, and so are
			// the request's later frames.
			if _, derr := br.Discard(k - len(g)); derr != nil {
				return false, wire.Unexpected(derr)
			}
			pr.drop, pr.next = true, at+k
			return pr.next == pr.n, corrupt(err)
		}
		pr.sink.Add(at, g)
		if pr.own != nil {
			copy(pr.own[at:], g)
		}
		c.cfg.Stats.BytesFetched.Add(uint64(len(g)))
		at, k = at+len(g), k-len(g)
	}
	pr.next = at
	if at == pr.n {
		pr.pieces = true
		return true, nil
	}
	return false, nil
}

// scratchGroups is how many groups readPieces reads, verifies and
// publishes at a time: a relay passes bytes on in units of at most this
// many groups (64 KiB).
const scratchGroups = 4

// Request sends q to p over a pipelined fetch stream and returns the body
// of an OK reply. The body is not verified here. A REDIRECT (to a GET, or
// to a GET_DIRECT with Deflect on a 1.4.0 stream) is a *RedirectError, a
// BUSY (to such a GET_DIRECT only) a *BusyError; every other failure but ctx's end and ErrClosed is a
// *PeerError, which names the peer (a NOT_FOUND reply's wraps
// blob.ErrNotFound, an unreachable peer's blob.ErrUnreachable).
func (c *Client) Request(ctx context.Context, p peer.ID, q fetchwire.Request) ([]byte, error) {
	data, _, err := c.RequestChunk(ctx, p, q, nil)
	return data, err
}

// RequestChunk is Request for a chunk whose reply may come in pieces
// (1.3.0) when sink is not nil: each verified piece is published to sink
// as it arrives, and the returned bytes are then the whole chunk, all of
// it verified (verified reports it): sink's, or, when sink was begun for
// another length by another sender's outboard, this reply's own. A corrupt outboard or piece is a *PeerError of
// kind schedule.FailCorrupt (and counted as CorruptReceived); what sink
// received before stays published.
func (c *Client) RequestChunk(ctx context.Context, p peer.ID, q fetchwire.Request, sink *piece.Partial) (data []byte, verified bool, err error) {
	who := c.cfg.Describe(p)
	what := fmt.Sprintf("chunk %d of %s", q.Index, q.ID)
	if q.Type == fetchwire.MsgManifest {
		what = fmt.Sprintf("manifest %s", q.ID)
	}
	unreachable := func(err error) error {
		return &PeerError{Peer: who, Kind: schedule.FailUnreachable, Err: fmt.Errorf("%s: %w: %w", what, blob.ErrUnreachable, err)}
	}
	fp, err := c.peerFor(p)
	if err != nil {
		return nil, false, err
	}
	fs, err := fp.stream(ctx)
	if err != nil {
		if errors.Is(err, blob.ErrUnreachable) {
			return nil, false, &PeerError{Peer: who, Kind: schedule.FailUnreachable, Err: fmt.Errorf("%s: %w", what, err)}
		}
		return nil, false, unreachable(err)
	}
	pr, err := fs.send(q, sink)
	if err != nil {
		return nil, false, unreachable(err)
	}
	tm := time.NewTimer(c.cfg.RequestTimeout)
	defer tm.Stop()
	select {
	case <-pr.done:
	case <-ctx.Done():
		fs.forget(pr) // the reply, when it comes, is dropped
		return nil, false, ctx.Err()
	case <-tm.C:
		err := fmt.Errorf("no reply within %v", c.cfg.RequestTimeout)
		fs.fail(err)
		return nil, false, unreachable(err)
	}
	if pr.err != nil {
		if pe, ok := errors.AsType[*PeerError](pr.err); ok {
			return nil, false, pe
		}
		return nil, false, unreachable(pr.err)
	}
	switch pr.status {
	case fetchwire.StatusOK:
		if pr.pieces {
			if pr.own != nil {
				return pr.own, true, nil
			}
			if st := sink.State(); st.Done() && st.Len == pr.n {
				return st.Data, true, nil
			}
			// Never: sink was begun for this reply's length, and holds
			// every byte of it verified.
			return nil, false, &PeerError{Peer: who, Kind: schedule.FailUnreachable, Err: fmt.Errorf("%s: verified in pieces but not held", what)}
		}
		return pr.body, false, nil
	case fetchwire.StatusRedirect:
		rd, err := fetchwire.DecodeRedirect(pr.body)
		if err == nil && (q.Type != fetchwire.MsgGet && !pr.deflect) {
			err = wire.Malformed("REDIRECT in reply to request 0x%02x", q.Type)
		}
		if err == nil && (rd.Peer == c.self || rd.Peer == p || (pr.deflect && rd.Peer == q.Failed)) {
			err = wire.Malformed("REDIRECT to %s", rd.Peer)
		}
		if err != nil {
			return nil, false, &PeerError{Peer: who, Kind: schedule.FailUnreachable, Err: fmt.Errorf("%s: %w", what, err)}
		}
		return nil, false, &RedirectError{From: p, To: rd}
	case fetchwire.StatusBusy:
		d, err := fetchwire.DecodeBusy(pr.body)
		if err != nil {
			c.cfg.NotePeerError(p, "fetch reply", err)
			return nil, false, &PeerError{Peer: who, Kind: schedule.FailUnreachable, Err: fmt.Errorf("%s: %w", what, err)}
		}
		return nil, false, &BusyError{From: p, RetryAfter: d}
	case fetchwire.StatusNotFound:
		return nil, false, &PeerError{Peer: who, Kind: schedule.FailNotFound, Err: fmt.Errorf("%s: %w: %s", what, blob.ErrNotFound, pr.body)}
	default:
		return nil, false, &PeerError{Peer: who, Kind: schedule.FailNotFound, Err: fmt.Errorf("%s: error reply: %s", what, pr.body)}
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

// BusyError is a relay's answer to a GET_DIRECT that allowed it
// (fetchwire.Request.Deflect, 1.4.0): its port is busy, ask again after
// RetryAfter. It blames nobody.
type BusyError struct {
	From       peer.ID // the relay
	RetryAfter time.Duration
}

func (b *BusyError) Error() string {
	return fmt.Sprintf("%s is busy: ask again in %v", b.From, b.RetryAfter)
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
