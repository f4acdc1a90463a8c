// Package server is the server side of omst's fetch protocol
// (/omst/fetch/1.4.0, 1.3.0, 1.2.0 and 1.1.0; 1.4.0's BUSY and deflected
// GET_DIRECTs come from exchange.ServeState): it resolves a stream's tagged
// requests concurrently and writes each reply as soon as it is ready. On a
// 1.3.0 stream a chunk goes out in verified pieces (its outboard, then its
// bytes): one that this node is itself still fetching is passed on piece
// by piece as each arrives and verifies (cut-through below the chunk). A chunk or
// manifest comes from the store, else from the rest of the engine
// (Upstream: a pull-through from this node's sources, never from the
// asker); with sibling exchange, a relay's decisions for its children's
// requests (serve, redirect to a sibling, decline a hedge, refuse a stream)
// come from exchange.ServeState, which it feeds what happens. A bulk
// connection (package bulk) is served as a 1.3.0 stream of its ticket's
// peer (Serve).
//
// Invariants: the decision state is stepped under one mutex, with no
// other lock, clock read or Grouper call under it; a redirect names only a
// peer the Grouper lists as a connected child when the reply is made. A
// node serves only bytes its Store verified; a REPORT makes it re-read and
// re-verify its copy. What one peer makes this node hold is bounded (see
// "What a peer can make this node hold" below); uploads obey
// MaxUploadRate; a malformed request gets an ERROR reply after the replies
// to the requests before it, and its stream is closed.
package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"

	"github.com/omst-project/omst/internal/faultinject"
	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/exchange"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/peerrate"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
	"github.com/omst-project/omst/pkg/transfer/internal/source"
	"github.com/omst-project/omst/pkg/transfer/internal/stats"
)

// Store is what the server needs of the local store (pkg/transfer's Store
// states the contracts).
type Store interface {
	ReadChunk(h blob.Hash) ([]byte, error)
	RecheckChunk(h blob.Hash) (damaged bool, err error)
	Manifest(id cid.Cid) (*blob.Manifest, error)
}

// Peers says what a peer is to this node (pkg/transfer's Provider does).
type Peers interface {
	Relation(p peer.ID) source.Kind
}

// Grouper lists this node's connected children and their groups (sites),
// as pkg/transfer's Grouper does.
type Grouper interface {
	Group(p peer.ID) (group string, addrs []ma.Multiaddr, ok bool)
}

// Upstream is what the server asks of the rest of the engine for what its
// store lacks. Each method fetches on behalf of asker, which it never asks
// (pull-through never loops back), and is safe for concurrent use.
type Upstream interface {
	// Chunk returns chunk q of blob q.ID, verified, from this node's
	// sources for the blob (coalesced with other fetches of it).
	Chunk(ctx context.Context, q fetchwire.Request, asker peer.ID) ([]byte, error)
	// Manifest returns blob id's manifest from this node's sources,
	// verified and stored.
	Manifest(ctx context.Context, id cid.Cid, asker peer.ID) (*blob.Manifest, error)
	// WholeBlob fetches every chunk of blob id into the store and returns
	// once all are stored (store-and-forward).
	WholeBlob(ctx context.Context, id cid.Cid, asker peer.ID) error
}

// Config configures New. Every field without a stated default is needed.
type Config struct {
	Store    Store
	Peers    Peers
	Upstream Upstream
	// Grouper, with SiblingExchange, tells which askers are connected
	// children (redirected among their group) and where their siblings
	// are.
	Grouper Grouper
	// SiblingExchange, Distribution and MaxUploadStreams configure the
	// decisions (exchange.ServeConfig).
	SiblingExchange  bool
	Distribution     exchange.DistributorConfig
	MaxUploadStreams int
	// OthersFromStore, when set and true, serves peers of KindOther only
	// from the store (pkg/transfer's Config.OthersFromStore).
	OthersFromStore func() bool
	// StoreForward serves no chunk of a blob before all of it is stored.
	StoreForward bool
	// MaxUploadRate bounds the bytes per second sent (0: no bound).
	MaxUploadRate int64
	// NoSendfile sends a stored chunk on a plain bulk connection from
	// memory (read, then written) instead of from its file with
	// sendfile(2): Stats.ServedSendfile stays 0.
	NoSendfile bool
	// PeerReplyBytes bounds the reply bytes held for one peer (> 0);
	// WriteStall, at most RequestTimeout, ends a stream whose peer takes
	// no reply bytes for that long.
	PeerReplyBytes             int64
	WriteStall, RequestTimeout time.Duration
	Self                       peer.ID // this node, named in error replies
	// Ctx lives as long as the engine: every stream ends with it.
	Ctx context.Context
	// Describe names a peer for logs; NotePeerError counts and logs a
	// failure blamed on a peer (a malformed request).
	Describe      func(peer.ID) string
	NotePeerError func(p peer.ID, what string, err error)
	Stats         *stats.Counters
	Log           *slog.Logger
}

// Server serves the fetch protocol's streams (HandleStream). Its methods
// are safe for concurrent use.
type Server struct {
	cfg     Config
	grouper Grouper       // nil without sibling exchange
	upLimit *rate.Limiter // nil without MaxUploadRate

	stateMu sync.Mutex
	state   *exchange.ServeState // the decisions: served streams, redirects, hedges declined

	budgetMu sync.Mutex
	budgets  map[peer.ID]*peerBudget // reply bytes each peer's fetch streams may hold

	outboards *outboardCache // of chunks recently sent in pieces

	drainMu sync.Mutex
	drains  *peerrate.Table // how fast each child takes this node's chunk replies: the site's pace

	// backlog is the chunk bytes its reply writers have taken up for
	// connected children and not yet handed to their streams (waiting
	// for the upload limit, or in a write the stream has not taken): what
	// the port has to write to the site (exchange.Backlog).
	backlog atomic.Int64
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	srv := &Server{cfg: cfg, budgets: map[peer.ID]*peerBudget{}, outboards: newOutboardCache(outboardCacheEntries), drains: peerrate.New(),
		state: exchange.NewServeState(exchange.ServeConfig{SiblingExchange: cfg.SiblingExchange, Distribution: cfg.Distribution, MaxUploadStreams: cfg.MaxUploadStreams})}
	if cfg.SiblingExchange {
		srv.grouper = cfg.Grouper
	}
	if cfg.MaxUploadRate > 0 {
		srv.upLimit = rate.NewLimiter(rate.Limit(cfg.MaxUploadRate), int(max(cfg.MaxUploadRate/10, 256<<10)))
	}
	return srv
}

// WaitUpload blocks until MaxUploadRate, if set, lets n more bytes out;
// it fails only when ctx ends first.
func (srv *Server) WaitUpload(ctx context.Context, n int) error {
	if srv.upLimit == nil {
		return nil
	}
	return srv.waitUpload(ctx, n)
}

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
// fetch keeps its window of chunks in flight (transfer.Config.Window: 16
// chunks, 16 MiB in 1 MiB chunks), well within its budget.
//
// writePiece is the most a reply write sends under one deadline.
const writePiece = 256 << 10

// fetchSlot is one reply frame to write: a whole reply, or one frame of a
// reply in pieces (OUTBOARD, PIECE; only the last frame is final).
type fetchSlot struct {
	tag    uint32
	chunk  bool        // a reply to GET or GET_DIRECT
	asker  source.Kind // what the asker is to this node, for Status.BytesOut
	status byte
	off    int // a PIECE's offset
	body   []byte
	// notFinal: more frames of this reply follow; the request's token and
	// budget share (weight) are released with its final frame.
	notFinal bool
	weight   int64 // of the peer's budget, held until the reply is written
	// written, if set, is called once the reply's final frame was
	// handed whole to the stream (a chunk to a connected child: it holds
	// it complete, exchange.ServeDelivered).
	written func()
	// file: the body is fileLen bytes of file from fileOff instead
	// (a PIECE sent with sendfile: pieceSender.fromFile); the writer
	// closes it.
	file    *os.File
	fileOff int64
	fileLen int
}

// bodyLen is the length of sl's body (in memory or in its file).
func (sl *fetchSlot) bodyLen() int {
	if sl.file != nil {
		return sl.fileLen
	}
	return len(sl.body)
}

// fileSender is a Stream that sends file bytes with sendfile(2) (a plain
// bulk connection: bulk.Conn).
type fileSender interface {
	CanSendFile() bool
	SendFile(f *os.File, off, n int64) (int64, error)
}

// peerBudget is the reply bytes one peer's fetch streams may hold.
type peerBudget struct {
	sem     *semaphore.Weighted
	streams int // fetch streams of the peer being served (under Server.budgetMu)
}

// budgetFor returns p's budget, counting one more stream of p; the caller
// calls dropBudget when the stream ends.
func (srv *Server) budgetFor(p peer.ID) *peerBudget {
	srv.budgetMu.Lock()
	defer srv.budgetMu.Unlock()
	b := srv.budgets[p]
	if b == nil {
		b = &peerBudget{sem: semaphore.NewWeighted(srv.cfg.PeerReplyBytes)}
		srv.budgets[p] = b
	}
	b.streams++
	return b
}

// dropBudget forgets p's budget when its last stream has ended.
func (srv *Server) dropBudget(p peer.ID, b *peerBudget) {
	srv.budgetMu.Lock()
	defer srv.budgetMu.Unlock()
	if b.streams--; b.streams == 0 && srv.budgets[p] == b {
		delete(srv.budgets, p)
	}
}

// replyWeight is the share of its peer's budget request q holds: its
// reply's size (replySize) clipped to half the budget, at least 1.
func (srv *Server) replyWeight(q fetchwire.Request) int64 {
	return min(max(replySize(q.Type, q.Index, q.Hash, srv.manifestHeld(q.ID), srv.cfg.PeerReplyBytes/2), 1), srv.cfg.PeerReplyBytes/2)
}

// manifestHeld returns the manifest of id from the store, or nil.
func (srv *Server) manifestHeld(id cid.Cid) *blob.Manifest {
	m, err := srv.cfg.Store.Manifest(id)
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

// Stream is what the server needs of a connection carrying the fetch
// protocol: a libp2p stream, or a bulk connection (package bulk).
type Stream interface {
	io.Reader
	io.Writer
	SetWriteDeadline(time.Time) error
	// Close ends the stream once what was written is sent; Reset ends it
	// at once.
	Close() error
	Reset() error
}

// HandleStream serves one libp2p stream of the fetch protocol (Serve).
func (srv *Server) HandleStream(s network.Stream) {
	srv.Serve(s, s.Conn().RemotePeer(), s.Protocol() == fetchwire.ProtoFetch || s.Protocol() == fetchwire.ProtoFetch130)
}

// Serve serves one stream of tagged requests from p: requests are
// resolved concurrently (a relay starts its upstream fetches for all of
// them at once, at most maxQueuedPerStream at a time) and each is answered
// as soon as it is ready, whatever the order of the requests. pieces says
// the stream speaks 1.3.0 (chunks go out in verified pieces); a bulk
// connection does.
func (srv *Server) Serve(s Stream, p peer.ID, pieces bool) {
	rel := srv.cfg.Peers.Relation(p)
	if srv.serveStep(exchange.ServeEvent{Kind: exchange.ServeStreamOpened, Peer: p, Rel: rel}).Action == exchange.ActRefuse {
		srv.cfg.Stats.UploadsRefused.Add(1)
		srv.cfg.Log.Debug("fetch stream refused: upload stream limit", "peer", p, "limit", srv.cfg.MaxUploadStreams)
		s.Reset()
		return
	}
	defer srv.serveStep(exchange.ServeEvent{Kind: exchange.ServeStreamClosed, Peer: p, Rel: rel})
	budget := srv.budgetFor(p)
	defer srv.dropBudget(p, budget)
	ctx, cancel := context.WithCancel(srv.cfg.Ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	room := make(chan struct{}, maxQueuedPerStream) // a token per request being resolved or written
	ready := make(chan *fetchSlot, maxQueuedPerStream+1)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		srv.writeReplies(ctx, cancel, s, p, ready, room, budget)
	}()
	// Chunks from the store go out with sendfile where the stream can
	// (a plain bulk connection) and nothing needs their bytes in memory
	// (no upload limit paces them in parts; no fault injection), unless
	// the operator turned it off (Config.NoSendfile).
	sendfile := false
	if fs, ok := s.(fileSender); ok && fs.CanSendFile() && srv.upLimit == nil && !faultinject.Enabled && !srv.cfg.NoSendfile {
		sendfile = true
	}
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
		w := srv.replyWeight(q)
		if err = budget.sem.Acquire(ctx, w); err != nil {
			break
		}
		srv.cfg.Stats.ReplyHeld.Add(w)
		sl := &fetchSlot{tag: q.Tag, asker: askerKind(rel, q), weight: w}
		serving.Go(func() {
			switch q.Type {
			case fetchwire.MsgReport:
				srv.serveReport(p, q, sl)
			case fetchwire.MsgManifest:
				srv.serveManifest(ctx, p, q.ID, sl)
			default:
				sl.chunk = true
				if faultinject.Enabled && srv.refuseSibling(ctx, p, q, sl) { // a constant: compiled out of every other build
					break
				}
				var pc *pieceSender
				if pieces {
					pc = &pieceSender{srv: srv, ctx: ctx, sl: sl, ready: ready, sendfile: sendfile}
				}
				srv.serveChunk(ctx, p, q, sl, pc)
			}
			ready <- sl
		})
	}
	serving.Wait()
	if errors.Is(err, wire.ErrMalformed) {
		// After the replies to every request before it.
		srv.cfg.NotePeerError(p, "fetch request", err)
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
func askerKind(rel source.Kind, q fetchwire.Request) source.Kind {
	if rel == source.KindOther && q.Sibling {
		return source.KindSibling
	}
	return rel
}

// writeReplies writes the replies of one stream as they become ready,
// freeing a request token (room) and the reply's share of its peer's
// budget for each.
func (srv *Server) writeReplies(ctx context.Context, cancel context.CancelFunc, s Stream, p peer.ID, ready chan *fetchSlot, room chan struct{}, budget *peerBudget) {
	bw := bufio.NewWriterSize(s, 64<<10)
	var hdr []byte
	failed := false
	for sl := range ready {
		drain := srv.drainStart(p, sl)
		data := sl.status == fetchwire.StatusOK || sl.status == fetchwire.StatusPiece
		// Under an upload limit a PIECE goes out in parts of at most the
		// limiter's burst, each once the limit allows it, so that the
		// bytes leave (and a relay downstream passes them on) at the
		// limit's pace rather than a chunk at a time.
		held := int64(0) // this slot's bytes counted in srv.backlog
		if data && sl.asker == source.KindChild {
			held = int64(sl.bodyLen())
			srv.backlog.Add(held)
		}
		if sl.file != nil {
			if !failed && ctx.Err() == nil {
				hdr = fetchwire.AppendPieceHeader(hdr[:0], sl.tag, sl.off, sl.fileLen)
				if err := srv.writeFileReply(s.(fileSender), s, bw, hdr, sl.file, sl.fileOff, sl.fileLen); err != nil {
					failed = true
					cancel()
				} else {
					srv.cfg.Stats.BytesServed.Add(uint64(sl.fileLen))
					srv.cfg.Stats.BytesOut[sl.asker].Add(uint64(sl.fileLen))
				}
			}
			sl.file.Close()
		}
		for part := range srv.parts(sl) {
			if sl.file != nil {
				break
			}
			if failed || ctx.Err() != nil {
				break
			}
			if data && srv.upLimit != nil {
				// Flush what is buffered first: the wait must not hold it back.
				_ = s.SetWriteDeadline(time.Now().Add(srv.writeStall()))
				if bw.Flush() != nil || srv.waitUpload(ctx, len(part.body)) != nil {
					failed = true
					cancel()
					break
				}
			}
			if faultinject.Enabled && data { // a constant: compiled out of every other build
				part.body = srv.corruptForSibling(p, sl, part)
			}
			if sl.status == fetchwire.StatusPiece {
				hdr = fetchwire.AppendPieceHeader(hdr[:0], sl.tag, part.off, len(part.body))
			} else {
				hdr = fetchwire.AppendReplyHeader(hdr[:0], sl.tag, sl.status, len(part.body))
			}
			err := srv.writeReply(s, bw, hdr, part.body, len(ready) == 0)
			if held > 0 {
				n := min(held, int64(len(part.body)))
				srv.backlog.Add(-n)
				held -= n
			}
			if err != nil {
				failed = true
				cancel()
			} else if data {
				srv.cfg.Stats.BytesServed.Add(uint64(len(part.body)))
				if sl.chunk {
					srv.cfg.Stats.BytesOut[sl.asker].Add(uint64(len(part.body)))
				}
			}
		}
		srv.backlog.Add(-held) // parts not written
		srv.drainEnd(drain, sl.bodyLen(), !failed && ctx.Err() == nil)
		if sl.notFinal {
			continue
		}
		if sl.written != nil && data && !failed && ctx.Err() == nil {
			sl.written()
		}
		if sl.weight > 0 {
			budget.sem.Release(sl.weight)
			srv.cfg.Stats.ReplyHeld.Add(-sl.weight)
		}
		sl.body = nil
		select {
		case <-room:
		default: // the error reply after a malformed request holds no token
		}
	}
	if !failed {
		_ = s.SetWriteDeadline(time.Now().Add(srv.writeStall()))
		_ = bw.Flush()
	}
}

// framePart is a frame's body, or a part of a PIECE's, with its offset.
type framePart struct {
	off  int
	body []byte
}

// parts yields sl's body whole, or, for a PIECE under an upload limit,
// in parts of whole groups of at most the limiter's burst.
func (srv *Server) parts(sl *fetchSlot) func(yield func(framePart) bool) {
	return func(yield func(framePart) bool) {
		unit := len(sl.body)
		if sl.status == fetchwire.StatusPiece && srv.upLimit != nil {
			unit = max(piece.GroupSize, srv.upLimit.Burst()/piece.GroupSize*piece.GroupSize)
		}
		off, body := sl.off, sl.body
		for {
			n := min(len(body), unit)
			if !yield(framePart{off, body[:n]}) || n == len(body) {
				return
			}
			off, body = off+n, body[n:]
		}
	}
}

// writeStall is how long a reply write may make no progress:
// Config.WriteStall, at most RequestTimeout.
func (srv *Server) writeStall() time.Duration { return min(srv.cfg.WriteStall, srv.cfg.RequestTimeout) }

// writeReply writes a reply's header and body through bw, each piece of
// at most writePiece bytes within writeStall of the last (a peer that
// stops reading ends the stream then), and flushes bw if flush.
func (srv *Server) writeReply(s Stream, bw *bufio.Writer, hdr, body []byte, flush bool) error {
	stall := srv.writeStall()
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

// writeFileReply writes a reply's header through bw, flushes it, and
// sends its body, n bytes of f from off, with sendfile on s, each piece of
// at most writePiece bytes within writeStall (as writeReply).
func (srv *Server) writeFileReply(fs fileSender, s Stream, bw *bufio.Writer, hdr []byte, f *os.File, off int64, n int) error {
	stall := srv.writeStall()
	_ = s.SetWriteDeadline(time.Now().Add(stall))
	if _, err := bw.Write(hdr); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	for left := int64(n); left > 0; {
		k := min(left, writePiece)
		_ = s.SetWriteDeadline(time.Now().Add(stall))
		w, err := fs.SendFile(f, off, k)
		if err != nil {
			return err
		}
		if w == 0 {
			return fmt.Errorf("sendfile: %d bytes of the chunk's file missing: %w", left, io.ErrUnexpectedEOF)
		}
		off, left = off+w, left-w
	}
	return nil
}

// waitUpload waits until MaxUploadRate allows n more bytes out.
func (srv *Server) waitUpload(ctx context.Context, n int) error {
	for n > 0 {
		k := min(n, srv.upLimit.Burst())
		if err := srv.upLimit.WaitN(ctx, k); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// reply fills sl from the outcome of a request: data, or NOT_FOUND, or
// ERROR, the message naming this node.
func (srv *Server) reply(sl *fetchSlot, data []byte, err error) {
	switch {
	case err == nil:
		sl.status, sl.body = fetchwire.StatusOK, data
	case errors.Is(err, blob.ErrNotFound):
		sl.status, sl.body = fetchwire.StatusNotFound, fetchwire.ErrorBody(fmt.Sprintf("%s: %v", srv.cfg.Self, err))
	default:
		sl.status, sl.body = fetchwire.StatusError, fetchwire.ErrorBody(fmt.Sprintf("%s: %v", srv.cfg.Self, err))
	}
}

// serveChunk resolves one request: from the store (verified there; a
// damaged copy is dropped), else pull-through from this node's sources for
// the blob (never back to the asker). With pc (a 1.3.0 stream), the chunk
// goes out in pieces, passed on as they arrive when it is being fetched
// here; sl is then the reply's final frame.
func (srv *Server) serveChunk(ctx context.Context, p peer.ID, q fetchwire.Request, sl *fetchSlot, pc *pieceSender) {
	if faultinject.Enabled && srv.lieToChild(p, q, sl) { // a constant: compiled out of every other build
		return
	}
	a := srv.askOf(p, q)
	ev := exchange.ServeEvent{Kind: exchange.ServeAsk, Ask: a}
	if a.Hedge || a.Slow != "" {
		ev.Pace = srv.pace(q)
	}
	if (a.Hedge || a.Grouped) && srv.grouper != nil {
		ev.Backlog = exchange.Backlog{Bytes: srv.backlog.Load(), Sent: int64(srv.cfg.Stats.BytesOut[source.KindChild].Load()), Known: true}
	}
	d := srv.serveStep(ev)
	if d.Action == exchange.ActBusy {
		// fetch 1.4.0: ask again once the port has drained.
		srv.cfg.Stats.DirectsBusy.Add(1)
		sl.status, sl.body = fetchwire.StatusBusy, fetchwire.AppendBusy(nil, d.Wait)
		return
	}
	if d.Action == exchange.ActDecline {
		srv.cfg.Stats.HedgesDeclined.Add(1)
		if d.Budget {
			srv.cfg.Stats.HedgesBusy.Add(1)
			srv.reply(sl, nil, fmt.Errorf("chunk %d of %s: a hedge, and this relay's budget of second copies into its site is spent: %w",
				q.Index, q.ID, blob.ErrNotFound))
			return
		}
		if d.Busy {
			srv.cfg.Stats.HedgesBusy.Add(1)
			srv.reply(sl, nil, fmt.Errorf("chunk %d of %s: a hedge, and this relay has %d bytes to write to its site: %w",
				q.Index, q.ID, srv.backlog.Load(), blob.ErrNotFound))
			return
		}
		srv.reply(sl, nil, fmt.Errorf("chunk %d of %s: sent into the site, the sibling has it or gets it soon (hedges declined for %v more): %w",
			q.Index, q.ID, d.Wait.Round(time.Millisecond), blob.ErrNotFound))
		return
	}
	rd, redirected := srv.redirectTo(a, d)
	if a.Grouped && !a.Hedge {
		if _, _, ok := srv.grouper.Group(p); !ok {
			// p left while it asked (after askOf, perhaps after
			// ChildLeft): it is no holder.
			srv.ChildLeft(p)
		}
	}
	if redirected {
		if a.Direct {
			srv.cfg.Stats.DirectsRedirected.Add(1) // fetch 1.4.0: to a complete holder
		}
		srv.cfg.Stats.RedirectsSent.Add(1)
		sl.status, sl.body = fetchwire.StatusRedirect, fetchwire.AppendRedirect(nil, rd)
		return
	}
	if a.Grouped {
		sl.written = func() { srv.serveStep(exchange.ServeEvent{Kind: exchange.ServeDelivered, Ask: a}) }
	}
	if pc != nil && pc.sendfile && pc.fromFile(q.Hash) {
		srv.noteSent(q, srv.countSecond(a))
		return
	}
	if data, ok := srv.readStore(q.Hash, pc); ok {
		second := srv.countSecond(a)
		if pc != nil {
			pc.finish(q.Hash, data, nil)
		} else {
			sl.status, sl.body = fetchwire.StatusOK, data
		}
		srv.noteSent(q, second)
		return
	}
	if q.IfPresent {
		srv.reply(sl, nil, fmt.Errorf("chunk %d of %s: not here yet: %w", q.Index, q.ID, blob.ErrNotFound))
		return
	}
	if srv.storeOnlyFor(p) {
		srv.reply(sl, nil, fmt.Errorf("chunk %d of %s: not held here (served to other sites from the store only): %w", q.Index, q.ID, blob.ErrNotFound))
		return
	}
	var data []byte
	var err error
	switch {
	case srv.cfg.StoreForward:
		// Store and forward: serve nothing of a blob until all of it is here.
		if err = srv.cfg.Upstream.WholeBlob(ctx, q.ID, p); err == nil {
			data, err = srv.cfg.Store.ReadChunk(q.Hash)
		}
	case pc != nil:
		data, err = pc.passOn(q, p)
	default:
		data, err = srv.cfg.Upstream.Chunk(ctx, q, p)
	}
	if err == nil {
		srv.noteSent(q, srv.countSecond(a))
	}
	if pc != nil {
		pc.finish(q.Hash, data, err)
		return
	}
	srv.reply(sl, data, err)
}

// countSecond counts a served hedge or plain GET_DIRECT of a connected
// child, a copy beyond the one the distribution sends into the site, and
// reports whether a was one.
func (srv *Server) countSecond(a exchange.Ask) bool {
	switch {
	case !a.Grouped:
		return false
	case a.Hedge:
		srv.cfg.Stats.HedgesServed.Add(1)
	case a.Direct:
		srv.cfg.Stats.DirectsServed.Add(1)
	default:
		return false
	}
	return true
}

// storeOnlyFor reports whether p is served from the store only
// (Config.OthersFromStore).
func (srv *Server) storeOnlyFor(p peer.ID) bool {
	return srv.cfg.OthersFromStore != nil && srv.cfg.OthersFromStore() && srv.cfg.Peers.Relation(p) == source.KindOther
}

// serveStep applies ev to the server's decision state (exchange.ServeState) at the
// time now and returns its decision.
func (srv *Server) serveStep(ev exchange.ServeEvent) exchange.ServeDecision {
	srv.stateMu.Lock()
	defer srv.stateMu.Unlock()
	return srv.state.Step(time.Now(), ev)
}

// noteSent tells the decision state that chunk q is on its way to its
// asker; second: as a second copy into the site (a child's hedge or plain
// GET_DIRECT), which spends the copy budget.
func (srv *Server) noteSent(q fetchwire.Request, second bool) {
	srv.serveStep(exchange.ServeEvent{Kind: exchange.ServeSent, Ask: exchange.Ask{Blob: q.ID, Index: q.Index}, Second: second})
}

// askOf is request q from p as the decision state sees it: with p's group
// if p is a connected child and this node does sibling exchange (the
// Grouper says; asked before the state's lock is taken).
func (srv *Server) askOf(p peer.ID, q fetchwire.Request) exchange.Ask {
	a := exchange.Ask{Blob: q.ID, Index: q.Index, Child: p, Direct: q.Type == fetchwire.MsgGetDirect, Hedge: q.IfPresent, Deflect: q.Deflectable()}
	if q.Slow {
		a.Slow = q.Failed
	} else {
		a.Failed = q.Failed
	}
	if srv.grouper != nil {
		a.Group, _, a.Grouped = srv.grouper.Group(p)
	}
	return a
}

// redirectTo turns decision d on request a into the redirect to send, if
// any, with its target's addresses. A target that is no connected child
// any more (it left before its ChildLeft reached the state) is reported
// gone, and the state decides again without it.
func (srv *Server) redirectTo(a exchange.Ask, d exchange.ServeDecision) (fetchwire.Redirect, bool) {
	for d.Action == exchange.ActRedirect {
		if _, addrs, ok := srv.grouper.Group(d.Target); ok {
			return fetchwire.Redirect{Peer: d.Target, Addrs: addrs}, true
		}
		d = srv.serveStep(exchange.ServeEvent{Kind: exchange.ServeTargetGone, Peer: d.Target, Ask: a})
	}
	return fetchwire.Redirect{}, false
}

// ChildLeft tells the server that p is no longer a connected child (its
// tree session ended): as a relay, it forgets p as a holder of chunks, so
// that no child is sent to p for what it held, even once p is back (a
// worker that comes back may have lost its store). Safe to call for any
// peer, at any time.
func (srv *Server) ChildLeft(p peer.ID) {
	srv.serveStep(exchange.ServeEvent{Kind: exchange.ServePeerLeft, Peer: p})
}

// serveReport handles a peer's report that the bytes this node sent for
// chunk q did not match its hash: the local copy is read again from disk
// and verified, and dropped if damaged, so that the peer's next request is
// served from a fresh copy (pulled from this node's own sources).
func (srv *Server) serveReport(p peer.ID, q fetchwire.Request, sl *fetchSlot) {
	srv.cfg.Stats.ReportsReceived.Add(1)
	// The outboard sent may be what was damaged (a kept one is sent
	// unhashed): forgotten here, and by the store's RecheckChunk.
	srv.outboards.remove(q.Hash)
	damaged, err := srv.cfg.Store.RecheckChunk(q.Hash)
	srv.cfg.Log.Warn("peer reports that a chunk it received from us does not match its hash",
		"peer", srv.cfg.Describe(p), "blob", q.ID, "chunk", q.Index, "hash", q.Hash, "our_copy_damaged", damaged, "err", err)
	sl.status, sl.body = fetchwire.StatusOK, []byte{fetchwire.ReportIntact}
	if damaged {
		sl.body[0] = fetchwire.ReportDamaged
	}
}

// serveManifest answers with blob id's manifest: from the store, else
// fetched from this node's sources for the blob (never the asker),
// verified and stored.
func (srv *Server) serveManifest(ctx context.Context, p peer.ID, id cid.Cid, sl *fetchSlot) {
	m, err := srv.cfg.Store.Manifest(id)
	if errors.Is(err, blob.ErrNotFound) && !srv.storeOnlyFor(p) {
		m, err = srv.cfg.Upstream.Manifest(ctx, id, p)
	}
	var b []byte
	if err == nil {
		b = m.Encode()
	}
	srv.reply(sl, b, err)
}
