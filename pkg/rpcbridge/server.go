package rpcbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/omst-project/omst/pkg/blob"
)

// Server defaults.
const (
	DefaultIdleTimeout = 10 * time.Minute
	DefaultIOTimeout   = 2 * time.Minute
	// closeGrace bounds how long Close waits for handlers to finish after
	// cancelling them, before it closes their connections (and as long
	// again after that).
	closeGrace = 2 * time.Second
	// listingChunk is the size at which the server starts a new LISTING frame.
	listingChunk = 1 << 20
)

// ServerOptions configure a Server.
type ServerOptions struct {
	Logger *slog.Logger
	// IdleTimeout bounds the wait for the next request on a connection
	// (0 = DefaultIdleTimeout).
	IdleTimeout time.Duration
	// IOTimeout bounds every read of a frame inside a request (the HELLO,
	// a request body, each DATA frame of a PUT) and every write of a reply
	// frame (0 = DefaultIOTimeout).
	IOTimeout time.Duration
}

// Server serves the local API on unix sockets, for a Backend.
type Server struct {
	b    Backend
	log  *slog.Logger
	idle time.Duration
	iot  time.Duration

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	lns    map[net.Listener]struct{}
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewServer returns a server for b; start it with Listen and Serve.
func NewServer(b Backend, opts ServerOptions) *Server {
	s := &Server{b: b, log: opts.Logger, idle: opts.IdleTimeout, iot: opts.IOTimeout,
		lns: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.idle <= 0 {
		s.idle = DefaultIdleTimeout
	}
	if s.iot <= 0 {
		s.iot = DefaultIOTimeout
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s
}

var errServerClosed = errors.New("rpcbridge: server closed")

// Serve accepts connections on l and serves each in its own goroutine,
// until Close; it then returns nil. Other accept errors are returned.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		l.Close()
		return errServerClosed
	}
	s.lns[l] = struct{}{}
	s.mu.Unlock()
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.log.Warn("local API: accept", "err", err)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// Close stops accepting, cancels the contexts of in-flight requests, and
// waits (a few seconds at most) for the connection handlers to return.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var errs []error
	for l := range s.lns {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	s.cancel()
	// Wake handlers blocked reading; they see the cancelled context (the
	// context is cancelled before the deadline is set, and handlers check
	// it after setting theirs).
	for c := range s.conns {
		c.SetReadDeadline(time.Unix(1, 0))
	}
	s.mu.Unlock()

	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return errors.Join(errs...)
	case <-time.After(closeGrace):
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	select {
	case <-done:
	case <-time.After(closeGrace):
		errs = append(errs, errors.New("rpcbridge: connection handlers did not stop"))
	}
	return errors.Join(errs...)
}

// conn is the server side of one connection.
type conn struct {
	s       *Server
	fc      *frameConn
	version uint32 // negotiated in HELLO
	caller  Caller
	rights  *rightsReader // nil if the connection cannot carry descriptors
	fd      int           // the descriptor sent with the current request, or -1
}

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	sc := &conn{s: s, fc: newFrameConn(c, s.iot), caller: callerOf(c, daemonUID), fd: -1}
	if uc, ok := c.(*net.UnixConn); ok {
		sc.rights = newRightsReader(uc)
		sc.fc.br.Reset(sc.rights)
		defer sc.rights.close()
	}
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("local API: panic in handler", "panic", r, "stack", string(debug.Stack()))
			sc.fc.wbuf = sc.fc.wbuf[:0]
			sc.sendError(&Error{Code: CodeInternal, Message: fmt.Sprintf("internal error: %v", r)})
		}
	}()
	if !sc.hello() {
		return
	}
	for sc.next() {
	}
}

// setReadDeadline sets the read deadline, and reports false if the server
// is closing (checked after setting it: see Close).
func (sc *conn) setReadDeadline(d time.Duration) bool {
	sc.fc.c.SetReadDeadline(time.Now().Add(d))
	return sc.s.ctx.Err() == nil
}

// sendError sends an ERROR frame; it reports whether the write worked.
func (sc *conn) sendError(e *Error) bool {
	off := sc.fc.begin(FrameError)
	sc.fc.wbuf = appendError(sc.fc.wbuf, e.Code, e.Message)
	sc.fc.end(off)
	return sc.fc.flush() == nil
}

// badRequest answers a malformed frame: BAD_REQUEST, and the caller closes
// the connection.
func (sc *conn) badRequest(err error) bool {
	sc.s.log.Debug("local API: bad request", "err", err)
	sc.sendError(&Error{Code: CodeBadRequest, Message: err.Error()})
	return false
}

// readErr handles a failed read of a header or body: a malformed header
// is answered, anything else (EOF, timeout) just ends the connection.
func (sc *conn) readErr(err error) bool {
	if errors.Is(err, errMalformed) {
		return sc.badRequest(err)
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		sc.s.log.Debug("local API: read", "err", err)
	}
	return false
}

func (sc *conn) hello() bool {
	if !sc.setReadDeadline(sc.s.iot) {
		return false
	}
	h, err := sc.fc.readHeader()
	if err != nil {
		return sc.readErr(err)
	}
	if h.Type != FrameHello {
		return sc.badRequest(malformed("expected HELLO, got %v", h.Type))
	}
	if h.Len != 8 {
		return sc.badRequest(malformed("HELLO body of %d bytes, want 8", h.Len))
	}
	body, err := sc.fc.readBody(h.Len)
	if err != nil {
		return false
	}
	v, err := decodeHello(body)
	if err != nil {
		return sc.badRequest(err)
	}
	if v < MinProtocolVersion {
		sc.sendError(&Error{Code: CodeUnsupportedVersion,
			Message: fmt.Sprintf("unsupported protocol version %d; this daemon speaks versions %d to %d", v, MinProtocolVersion, ProtocolVersion)})
		return false
	}
	sc.version = min(v, ProtocolVersion)
	sc.fc.frame(FrameHello, appendHello(nil, sc.version))
	return sc.fc.flush() == nil
}

// next serves one request; it reports whether the connection stays open.
func (sc *conn) next() bool {
	if !sc.setReadDeadline(sc.s.idle) {
		return false
	}
	h, err := sc.fc.readHeader()
	if err != nil {
		return sc.readErr(err)
	}
	if !sc.setReadDeadline(sc.s.iot) {
		return false
	}
	switch h.Type {
	case FramePut, FramePutFile, FrameGet, FrameGetFile, FrameStat, FrameList, FrameRemove, FrameStatus:
	case FrameGetFD:
		if sc.version < 2 {
			return sc.badRequest(malformed("GET_FD needs protocol version 2; this connection speaks %d", sc.version))
		}
	case FramePreheat:
		if sc.version < 3 {
			return sc.badRequest(malformed("PREHEAT needs protocol version 3; this connection speaks %d", sc.version))
		}
	case FrameProviders:
		if sc.version < 4 {
			return sc.badRequest(malformed("PROVIDERS needs protocol version 4; this connection speaks %d", sc.version))
		}
	case FramePutFD, FrameGetToFD:
		if sc.version < 5 {
			return sc.badRequest(malformed("%v needs protocol version 5; this connection speaks %d", h.Type, sc.version))
		}
	case FrameRemovePrefix, FrameSetTTL, FrameDu:
		if sc.version < NamespaceVersion {
			return sc.badRequest(malformed("%v needs protocol version %d; this connection speaks %d", h.Type, NamespaceVersion, sc.version))
		}
	case FrameGetMany, FramePutMany:
		if sc.version < ManyVersion {
			return sc.badRequest(malformed("%v needs protocol version %d; this connection speaks %d", h.Type, ManyVersion, sc.version))
		}
	default:
		return sc.badRequest(malformed("unexpected %v frame where a request was expected", h.Type))
	}
	if h.Type == FrameGetMany && h.Len > MaxManyBody {
		return sc.badRequest(malformed("%v request body of %d bytes exceeds the %d byte limit", h.Type, h.Len, MaxManyBody))
	}
	if h.Len > MaxRequestBody && h.Type != FrameGetMany {
		return sc.badRequest(malformed("%v request body of %d bytes exceeds the %d byte limit", h.Type, h.Len, MaxRequestBody))
	}
	body, err := sc.fc.readBody(h.Len)
	if err != nil {
		return false
	}
	if err := sc.takeFD(h.Type); err != nil {
		return sc.badRequest(err)
	}
	defer sc.closeFD()
	ctx, cancel := context.WithCancel(WithCaller(sc.s.ctx, sc.caller))
	defer cancel()
	switch h.Type {
	case FramePut:
		return sc.put(ctx, body)
	case FramePutMany:
		return sc.putMany(ctx, body)
	}
	// No frames may arrive until the reply is complete: a read that ends
	// meanwhile means the client went away, and cancels the request.
	stop := sc.watch(cancel)
	defer stop()
	switch h.Type {
	case FramePutFile:
		return sc.putFile(ctx, body)
	case FrameGet:
		return sc.get(ctx, body)
	case FrameGetFD:
		return sc.getFD(ctx, body)
	case FrameGetFile:
		return sc.getFile(ctx, body)
	case FramePutFD:
		return sc.putFD(ctx, body)
	case FrameGetToFD:
		return sc.getToFD(ctx, body)
	case FrameStat:
		return sc.stat(ctx, body)
	case FrameList:
		return sc.list(ctx, body)
	case FramePreheat:
		return sc.preheat(ctx, body)
	case FrameProviders:
		return sc.providers(ctx, body)
	case FrameRemove:
		return sc.remove(ctx, body)
	case FrameRemovePrefix, FrameSetTTL, FrameDu:
		return sc.namespaceOp(ctx, h.Type, body)
	case FrameGetMany:
		return sc.getMany(ctx, cancel, body)
	default:
		return sc.status(ctx, body)
	}
}

// watch cancels the request if the client hangs up before the reply is
// complete. The returned stop ends the watch.
func (sc *conn) watch(cancel context.CancelFunc) (stop func()) {
	sc.fc.c.SetReadDeadline(time.Time{})
	if sc.s.ctx.Err() != nil {
		cancel()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := sc.fc.br.Peek(1); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			cancel()
		}
	}()
	return func() {
		sc.fc.c.SetReadDeadline(time.Unix(1, 0))
		<-done
	}
}

// replyInfo sends INFO, or ERROR if err is not nil.
func (sc *conn) replyInfo(in Info, err error) bool {
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	off := sc.fc.begin(FrameInfo)
	sc.fc.wbuf = appendInfo(sc.fc.wbuf, &in)
	sc.fc.end(off)
	return sc.fc.flush() == nil
}

func checkName(name string) error {
	if err := blob.ValidateName(name); err != nil {
		return &Error{Code: CodeInvalidName, Message: err.Error()}
	}
	return nil
}

func checkChunkSize(cs uint32) error {
	if cs == 0 {
		return nil
	}
	if err := blob.ValidateChunkSize(int(cs)); err != nil {
		return &Error{Code: CodeBadRequest, Message: err.Error()}
	}
	return nil
}

func checkPath(p string) error {
	switch {
	case len(p) > MaxPathLen:
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("path of %d bytes, more than %d", len(p), MaxPathLen)}
	case strings.IndexByte(p, 0) >= 0:
		return &Error{Code: CodeBadRequest, Message: "path contains a NUL byte"}
	case !filepath.IsAbs(p):
		return &Error{Code: CodeBadRequest, Message: fmt.Sprintf("path %q is not absolute", p)}
	}
	return nil
}

func (sc *conn) put(ctx context.Context, body []byte) bool {
	name, cs, err := decodePutReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	pr := &putReader{sc: sc}
	var info Info
	err = checkName(name)
	if err == nil {
		err = checkChunkSize(cs)
	}
	if err == nil {
		info, err = sc.s.b.Put(ctx, name, pr, PutOptions{ChunkSize: int(cs)})
	}
	if !pr.done && pr.err == nil {
		// The backend failed (or stopped reading) early: skip the rest
		// of the upload to find the next frame, unless it goes on for
		// long (an endless input): then say why and close.
		n, derr := pr.drain(maxDrain)
		if errors.Is(derr, errDrainLimit) {
			if err == nil {
				err = &Error{Code: CodeInternal, Message: "daemon did not read the whole upload"}
			}
			sc.s.log.Info("local API: put failed; closing the connection instead of reading the rest of the upload",
				"name", name, "skipped", n, "err", err)
			sc.sendError(errorFor(err))
			return false
		}
		if derr == nil && err == nil && n > 0 {
			sc.s.log.Error("local API: backend returned from Put before the end of the upload", "name", name)
			err = &Error{Code: CodeInternal, Message: "daemon did not read the whole upload"}
		}
	}
	switch {
	case pr.broken:
		// The stream is unusable (connection lost or a bad frame).
		switch {
		case errors.Is(pr.err, errMalformed):
			sc.badRequest(pr.err)
		case errors.Is(pr.err, ErrUploadIncomplete):
			sc.s.log.Warn("local API: upload ended without its closing empty DATA frame; nothing stored",
				"name", name, "bytes", pr.n, "err", pr.err)
			if errors.Is(pr.err, os.ErrDeadlineExceeded) {
				// The client may still be there, only too slow: say why
				// before closing.
				sc.sendError(&Error{Code: CodeTimeout, Message: fmt.Sprintf("put %q: %v", name, pr.err)})
			}
		case sc.s.ctx.Err() != nil:
			sc.sendError(&Error{Code: CodeAborted, Message: fmt.Sprintf("put %q: daemon shutting down; upload discarded", name)})
		}
		return false
	case pr.aborted:
		return sc.sendError(&Error{Code: CodeAborted, Message: fmt.Sprintf("put %q: aborted by the client", name)})
	}
	return sc.replyInfo(info, err)
}

// putReader hands the DATA frames of a PUT to the backend. It returns io.EOF
// only after the empty DATA frame that ends the upload; ErrAborted after an
// ABORT; an error wrapping ErrUploadIncomplete if the connection ends or
// stalls first; a malformed-frame error for any other frame.
type putReader struct {
	sc       *conn
	n        int64  // data bytes received
	frameLen uint32 // length of the current DATA frame
	rem      uint32 // unread bytes of the current DATA frame
	done     bool   // the empty DATA frame was read
	aborted  bool   // ABORT was read
	broken   bool   // the connection is unusable
	err      error  // sticky
}

// lost records that reading the upload failed with err (where: the place
// in the stream) and returns the sticky error that replaces it: one
// wrapping ErrUploadIncomplete for a connection closed, reset or silent
// past the IO timeout (never io.EOF or io.ErrUnexpectedEOF, which a reader
// of the upload could mistake for its end).
func (pr *putReader) lost(err error, where string) error {
	pr.broken = true
	switch {
	case errors.Is(err, errMalformed):
		pr.err = fmt.Errorf("put stream: %w", err)
	case pr.sc.s.ctx.Err() != nil:
		pr.err = fmt.Errorf("put stream: daemon shutting down after %d bytes of the upload: %w", pr.n, context.Canceled)
	case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
		pr.err = fmt.Errorf("put stream: %w: connection closed %s, after %d bytes", ErrUploadIncomplete, where, pr.n)
	case errors.Is(err, os.ErrDeadlineExceeded):
		pr.err = fmt.Errorf("put stream: %w: no data for %v %s, after %d bytes: %w",
			ErrUploadIncomplete, pr.sc.s.iot, where, pr.n, err)
	default:
		pr.err = fmt.Errorf("put stream: %w: connection failed %s, after %d bytes: %w", ErrUploadIncomplete, where, pr.n, err)
	}
	return pr.err
}

// nextFrame reads the next frame header of the upload.
func (pr *putReader) nextFrame() error {
	if !pr.sc.setReadDeadline(pr.sc.s.iot) {
		return pr.lost(context.Canceled, "between frames")
	}
	h, err := pr.sc.fc.readHeader()
	if err != nil {
		where := "in the middle of a frame header"
		switch {
		case err == io.EOF:
			where = "between frames"
		case !errors.Is(err, io.ErrUnexpectedEOF):
			where = "waiting for a frame header"
		}
		return pr.lost(err, where)
	}
	switch h.Type {
	case FrameData:
		if h.Len == 0 {
			pr.done = true
			return io.EOF
		}
		pr.rem, pr.frameLen = h.Len, h.Len
		return nil
	case FrameAbort:
		pr.aborted = true
		if h.Len != 0 {
			return pr.lost(malformed("ABORT with a %d byte body", h.Len), "")
		}
		pr.err = ErrAborted
		return ErrAborted
	}
	return pr.lost(malformed("unexpected %v frame in a PUT upload", h.Type), "")
}

// inFrame describes the position in the middle of a DATA frame body.
func (pr *putReader) inFrame() string {
	return fmt.Sprintf("in the middle of a DATA frame (%d of its %d bytes missing)", pr.rem, pr.frameLen)
}

func (pr *putReader) Read(p []byte) (int, error) {
	if pr.err != nil {
		return 0, pr.err
	}
	if pr.done {
		return 0, io.EOF
	}
	for pr.rem == 0 {
		if err := pr.nextFrame(); err != nil {
			return 0, err
		}
	}
	if len(p) == 0 {
		return 0, nil
	}
	if uint32(len(p)) > pr.rem {
		p = p[:pr.rem]
	}
	n, err := pr.sc.fc.br.Read(p)
	pr.rem -= uint32(n)
	pr.n += int64(n)
	if err != nil {
		return n, pr.lost(err, pr.inFrame())
	}
	return n, nil
}

// maxDrain bounds the upload bytes a failed PUT skips to find the next
// request; past it the connection is closed (after the ERROR reply).
const maxDrain = 64 << 20

// errDrainLimit: the upload went on past the drain limit.
var errDrainLimit = errors.New("upload goes on past the drain limit")

// drain skips the rest of the upload and returns how many data bytes it
// skipped; the error is nil only if the upload ended with its empty DATA
// frame, errDrainLimit once limit bytes were skipped without its end.
func (pr *putReader) drain(limit int64) (int64, error) {
	var n int64
	for {
		if n >= limit {
			return n, errDrainLimit
		}
		if pr.rem > 0 {
			d, err := pr.sc.fc.br.Discard(int(pr.rem))
			n += int64(d)
			pr.n += int64(d)
			pr.rem -= uint32(d)
			if err != nil {
				return n, pr.lost(err, pr.inFrame())
			}
		}
		if err := pr.nextFrame(); err != nil {
			if err == io.EOF {
				return n, nil
			}
			return n, err
		}
	}
}

var dataBufPool = sync.Pool{New: func() any { b := make([]byte, DataFrameSize); return &b }}

// dataWriter sends what is written to it as DATA frames of at most
// DataFrameSize bytes each, without copying big payloads (see
// frameConn.data), and counts them against the blob's size.
type dataWriter struct {
	fc    *frameConn
	limit uint64 // the blob's size
	sent  uint64
	werr  error // a failed write: the connection is gone
}

var errTooLong = errors.New("blob yields more than its size")

func (w *dataWriter) Write(p []byte) (int, error) {
	if w.sent+uint64(len(p)) > w.limit {
		return 0, errTooLong
	}
	n := 0
	for len(p) > 0 {
		k := min(len(p), DataFrameSize)
		if err := w.fc.data(p[:k]); err != nil {
			w.werr = err
			return n, err
		}
		n += k
		w.sent += uint64(k)
		p = p[k:]
	}
	return n, nil
}

func (sc *conn) get(ctx context.Context, body []byte) bool {
	name, err := decodeNameReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	if err := checkName(name); err != nil {
		return sc.sendError(errorFor(err))
	}
	info, rc, err := sc.s.b.Open(ctx, name)
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	defer rc.Close()
	off := sc.fc.begin(FrameInfo)
	sc.fc.wbuf = appendInfo(sc.fc.wbuf, &info)
	sc.fc.end(off)
	// A reader with WriteTo (the node's) writes its chunks straight into
	// DATA frames: no per-request buffer. Others are copied through a
	// pooled buffer of one frame.
	w := &dataWriter{fc: sc.fc, limit: info.Size}
	var rerr error
	if wt, ok := rc.(io.WriterTo); ok {
		_, rerr = wt.WriteTo(w)
	} else {
		bp := dataBufPool.Get().(*[]byte)
		_, rerr = io.CopyBuffer(struct{ io.Writer }{w}, rc, *bp)
		dataBufPool.Put(bp)
	}
	switch {
	case w.werr != nil:
		return false
	case errors.Is(rerr, errTooLong):
		return sc.sendError(&Error{Code: CodeSizeMismatch,
			Message: fmt.Sprintf("get %q: blob yields more than its %d bytes", name, info.Size)})
	case rerr != nil:
		if ctx.Err() != nil && sc.s.ctx.Err() == nil {
			return false // the client hung up
		}
		e := errorFor(rerr)
		if !strings.Contains(e.Message, name) {
			e = &Error{Code: e.Code, Message: fmt.Sprintf("get %q: %s", name, e.Message)}
		}
		return sc.sendError(e)
	}
	if w.sent != info.Size {
		return sc.sendError(&Error{Code: CodeSizeMismatch,
			Message: fmt.Sprintf("get %q: blob yields %d bytes, not %d", name, w.sent, info.Size)})
	}
	sc.fc.frame(FrameEnd, nil)
	return sc.fc.flush() == nil
}

func (sc *conn) stat(ctx context.Context, body []byte) bool {
	name, err := decodeNameReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	var info Info
	if err = checkName(name); err == nil {
		info, err = sc.s.b.Stat(ctx, name)
	}
	return sc.replyInfo(info, err)
}

func (sc *conn) list(ctx context.Context, body []byte) bool {
	prefix, err := decodeNameReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	if err := blob.ValidatePrefix(prefix); err != nil {
		return sc.sendError(&Error{Code: CodeInvalidName, Message: err.Error()})
	}
	infos, err := sc.s.b.List(ctx, prefix)
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	// One LISTING frame per ~1 MiB of entries; at least one frame.
	for i := 0; ; {
		j, size := i, 4
		for j < len(infos) && (j == i || size+infoLen(&infos[j]) <= listingChunk) {
			size += infoLen(&infos[j])
			j++
		}
		if size > MaxFrameBody {
			return sc.sendError(&Error{Code: CodeInternal, Message: fmt.Sprintf("list: entry %q too big to send", infos[i].Name)})
		}
		off := sc.fc.begin(FrameListing)
		sc.fc.wbuf = appendListing(sc.fc.wbuf, infos[i:j])
		sc.fc.end(off)
		if len(sc.fc.wbuf) >= bufSize {
			if err := sc.fc.flush(); err != nil {
				return false
			}
		}
		if i = j; i >= len(infos) {
			break
		}
	}
	sc.fc.frame(FrameEnd, nil)
	return sc.fc.flush() == nil
}

func (sc *conn) remove(ctx context.Context, body []byte) bool {
	name, err := decodeNameReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	if err = checkName(name); err == nil {
		err = sc.s.b.Remove(ctx, name)
	}
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	sc.fc.frame(FrameOK, nil)
	return sc.fc.flush() == nil
}

func (sc *conn) status(ctx context.Context, body []byte) bool {
	if len(body) != 0 {
		return sc.badRequest(malformed("STATUS with a %d byte body", len(body)))
	}
	st, err := sc.s.b.Status(ctx)
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	js, err := json.Marshal(st)
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	sc.fc.frame(FrameStatusJ, js)
	return sc.fc.flush() == nil
}

func (sc *conn) providers(ctx context.Context, body []byte) bool {
	name, err := decodeNameReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	if err := checkName(name); err != nil {
		return sc.sendError(errorFor(err))
	}
	res, err := sc.s.b.Providers(ctx, name)
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	if res.Providers == nil {
		res.Providers = []Provider{}
	}
	js, err := json.Marshal(res)
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	sc.fc.frame(FrameProvidersJ, js)
	return sc.fc.flush() == nil
}

func (sc *conn) preheat(ctx context.Context, body []byte) bool {
	name, sites, err := decodePreheatReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	if err := checkName(name); err != nil {
		return sc.sendError(errorFor(err))
	}
	res, err := sc.s.b.Preheat(ctx, name, sites)
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	if res == nil {
		res = []PreheatResult{}
	}
	js, err := json.Marshal(res)
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	sc.fc.frame(FramePreheatJ, js)
	return sc.fc.flush() == nil
}
