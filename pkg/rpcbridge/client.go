package rpcbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/omst-project/omst/pkg/blob"
)

const (
	dialTimeout  = 5 * time.Second
	helloTimeout = 10 * time.Second
	// abortTimeout bounds the wait for the reply to an ABORT.
	abortTimeout = 5 * time.Second
	// drainLimit: closing a GET stream early reads the rest if at most this
	// many bytes remain, else drops the connection.
	drainLimit = 4 << 20
)

// DefaultSocket returns the daemon socket to use: $OMST_SOCKET, else
// $OMST_HOME/omst.sock, else ~/.omst/omst.sock.
func DefaultSocket() string {
	if s := os.Getenv("OMST_SOCKET"); s != "" {
		return s
	}
	if h := os.Getenv("OMST_HOME"); h != "" {
		return filepath.Join(h, "omst.sock")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = "."
	}
	return filepath.Join(home, ".omst", "omst.sock")
}

// Client is a connection to the daemon's local API. It is safe for
// concurrent use: requests are serialised on the one connection (a stream
// returned by GetStream holds the connection until it is read to the end or
// closed, so do not call other methods from the goroutine that holds an
// open stream). After a connection error the next request reconnects.
type Client struct {
	path string

	mu  sync.Mutex // serialises requests; held by an open GetStream
	fc  *frameConn // nil when disconnected
	buf []byte     // DATA buffer
	// used: the connection has carried a request (a write failure on it
	// may just mean the daemon closed it as idle: reconnect and retry).
	used bool
	// version is the protocol version negotiated on the connection.
	version uint32

	cmu    sync.Mutex // guards conn and closed (Close does not wait for mu)
	conn   net.Conn
	closed bool
}

// Dial connects to the daemon listening at path and exchanges HELLO. If
// nothing listens there the error wraps ErrNoDaemon and names the path.
func Dial(path string) (*Client, error) {
	c := &Client{path: path}
	if err := c.connect(); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Client) connect() error {
	conn, err := net.DialTimeout("unix", c.path, dialTimeout)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			var se *os.SyscallError
			if errors.As(err, &se) {
				err = se
			}
			return fmt.Errorf("%w at %s (%w)", ErrNoDaemon, c.path, err)
		}
		return fmt.Errorf("connect to the omst daemon at %s: %w", c.path, err)
	}
	fc := newFrameConn(conn, 0)
	version, err := handshake(fc)
	if err != nil {
		conn.Close()
		var e *Error
		if errors.As(err, &e) {
			return err
		}
		return fmt.Errorf("omst daemon at %s: hello: %w", c.path, err)
	}
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.closed {
		conn.Close()
		return ErrClosed
	}
	c.conn, c.fc, c.used, c.version = conn, fc, false, version
	return nil
}

// handshake exchanges HELLO and returns the version the daemon chose: at
// most ProtocolVersion, at least MinProtocolVersion.
func handshake(fc *frameConn) (uint32, error) {
	fc.c.SetDeadline(time.Now().Add(helloTimeout))
	fc.frame(FrameHello, appendHello(nil, ProtocolVersion))
	if err := fc.flush(); err != nil {
		return 0, err
	}
	h, body, err := readReply(fc)
	if err != nil {
		return 0, err
	}
	var v uint32
	switch h.Type {
	case FrameHello:
		if v, err = decodeHello(body); err != nil {
			return 0, err
		}
		if v < MinProtocolVersion || v > ProtocolVersion {
			return 0, fmt.Errorf("daemon answered protocol version %d, want %d to %d", v, MinProtocolVersion, ProtocolVersion)
		}
	case FrameError:
		return 0, replyError(body)
	default:
		return 0, unexpected(h, "HELLO")
	}
	fc.c.SetDeadline(time.Time{})
	return v, nil
}

// readReply reads a reply frame with its body (DATA bodies are left
// unread: the caller streams them).
func readReply(fc *frameConn) (header, []byte, error) {
	h, err := fc.readHeader()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return h, nil, err
	}
	if h.Type == FrameData {
		return h, nil, nil
	}
	if (h.Type == FrameEnd || h.Type == FrameOK) && h.Len != 0 {
		return h, nil, malformed("%v with a %d-byte body", h.Type, h.Len)
	}
	body, err := fc.readBody(h.Len)
	return h, body, err
}

// readInfoReply reads a reply that must be INFO (or ERROR, returned as an
// *Error); any other frame type is a protocol error.
func readInfoReply(fc *frameConn) (Info, error) {
	h, rb, err := readReply(fc)
	if err != nil {
		return Info{}, err
	}
	switch h.Type {
	case FrameInfo:
		return decodeInfo(rb)
	case FrameError:
		return Info{}, replyError(rb)
	default:
		return Info{}, unexpected(h, "INFO")
	}
}

// replyError decodes an ERROR body into an *Error.
func replyError(body []byte) error {
	e, err := decodeError(body)
	if err != nil {
		return err
	}
	return e
}

func unexpected(h header, want string) error {
	return malformed("daemon sent %v (%d bytes), expected %s", h.Type, h.Len, want)
}

// Close closes the connection. An open GetStream fails.
func (c *Client) Close() error {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	if c.conn != nil {
		return c.conn.Close()
	}
	return nil
}

// acquire locks the client for one request and makes sure it is connected.
func (c *Client) acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.cmu.Lock()
	closed := c.closed
	c.cmu.Unlock()
	if closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if c.fc == nil {
		if err := c.connect(); err != nil {
			c.mu.Unlock()
			return err
		}
	}
	return nil
}

// drop closes the connection; the next request reconnects.
func (c *Client) drop() {
	c.cmu.Lock()
	if c.conn != nil {
		c.conn.Close()
	}
	c.conn, c.fc = nil, nil
	c.cmu.Unlock()
}

// send writes a request frame. If the write fails on a connection that
// already carried requests (the daemon may have closed it as idle), it
// reconnects and retries once.
func (c *Client) send(t FrameType, body func([]byte) []byte) error {
	for attempt := 0; ; attempt++ {
		off := c.fc.begin(t)
		c.fc.wbuf = body(c.fc.wbuf)
		c.fc.end(off)
		err := c.fc.flush()
		if err == nil {
			c.used = true
			return nil
		}
		retry := attempt == 0 && c.used
		c.drop()
		if !retry {
			return c.connErr(err)
		}
		if err := c.connect(); err != nil {
			return err
		}
	}
}

func (c *Client) connErr(err error) error {
	if errors.Is(err, errMalformed) {
		return fmt.Errorf("omst daemon at %s: protocol error: %w", c.path, err)
	}
	return fmt.Errorf("omst daemon at %s: connection lost: %w", c.path, err)
}

// ctxWatch interrupts the connection's IO when a context ends.
type ctxWatch struct {
	stop  func() bool
	fired chan struct{}
}

func (c *Client) watch(ctx context.Context) *ctxWatch {
	w := &ctxWatch{}
	if ctx.Done() == nil {
		return w
	}
	conn := c.fc.c
	w.fired = make(chan struct{})
	w.stop = context.AfterFunc(ctx, func() {
		conn.SetDeadline(time.Unix(1, 0))
		close(w.fired)
	})
	return w
}

// release ends the watch; it reports whether it fired (then the
// connection has a past deadline).
func (w *ctxWatch) release() bool {
	if w.stop == nil || w.stop() {
		return false
	}
	<-w.fired
	return true
}

// fail turns an IO error into the error to return: the context's error if
// it ended, and drops the connection unless keep.
func (c *Client) fail(ctx context.Context, w *ctxWatch, op string, err error, keep bool) error {
	fired := w.release()
	var e *Error
	switch {
	case errors.As(err, &e) && !errors.Is(err, errMalformed):
		// A reply: the connection is still in step, but the daemon may
		// close it after BAD_REQUEST or INTERNAL (its state after a bug
		// is unknown): reconnect for the next request.
		if e.Code == CodeBadRequest || e.Code == CodeInternal {
			keep = false
		}
	case ctx.Err() != nil:
		err = fmt.Errorf("%s: %w", op, ctxErr(ctx))
		keep = false
	default:
		err = fmt.Errorf("%s: %w", op, c.connErr(err))
		keep = false
	}
	if fired || !keep {
		c.drop()
	}
	return err
}

// ctxErr returns the error of an ended ctx, followed by its cause when the
// cause says more (e.g. "interrupt signal received" from
// signal.NotifyContext).
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %v", err, cause)
	}
	return err
}

// call sends one request and reads its one-frame reply, handled by reply.
func (c *Client) call(ctx context.Context, op string, t FrameType, body func([]byte) []byte,
	want FrameType, reply func(body []byte) error) error {
	if err := c.acquire(ctx); err != nil {
		return err
	}
	defer c.mu.Unlock()
	if err := c.send(t, body); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	w := c.watch(ctx)
	h, rb, err := readReply(c.fc)
	if err == nil {
		switch h.Type {
		case want:
			err = reply(rb)
		case FrameError:
			err = replyError(rb)
		default:
			err = unexpected(h, want.String())
		}
	}
	if err != nil {
		return c.fail(ctx, w, op, err, true)
	}
	if w.release() {
		c.drop()
	}
	return nil
}

func checkOpts(opts PutOptions) error {
	if opts.ChunkSize == 0 {
		return nil
	}
	if err := blob.ValidateChunkSize(opts.ChunkSize); err != nil {
		return fmt.Errorf("rpcbridge: %w", err)
	}
	return nil
}

func (c *Client) dataBuf(n int) []byte {
	if cap(c.buf) < n {
		c.buf = make([]byte, n)
	}
	return c.buf[:n]
}

// Put uploads the bytes of r under name, in DATA frames of DataFrameSize
// bytes. It ends the upload with the empty DATA frame, which makes the
// daemon store the blob, only when r returns io.EOF itself. If r returns
// any other error (io.ErrUnexpectedEOF and wrapped io.EOF included) or ctx
// ends, Put sends ABORT instead, and the daemon makes no name visible. If a
// write to the daemon fails, or ctx ends while a DATA frame is being
// written (the frame cannot be finished), Put drops the connection without
// ending the upload, which the daemon discards too.
//
// ctx is checked after every Read of r: a Read that blocks (a pipe, a
// terminal) delays the ABORT until it returns. Wrap such a reader so that
// ctx ending interrupts it if that matters.
func (c *Client) Put(ctx context.Context, name string, r io.Reader, opts PutOptions) (Info, error) {
	op := fmt.Sprintf("put %q", name)
	if err := blob.ValidateName(name); err != nil {
		return Info{}, err
	}
	if err := checkOpts(opts); err != nil {
		return Info{}, err
	}
	if err := c.acquire(ctx); err != nil {
		return Info{}, err
	}
	defer c.mu.Unlock()
	if err := c.send(FramePut, func(b []byte) []byte { return appendPutReq(b, name, uint32(opts.ChunkSize)) }); err != nil {
		return Info{}, fmt.Errorf("%s: %w", op, err)
	}
	w := c.watch(ctx)
	buf := c.dataBuf(DataFrameSize)
	for {
		n, rerr := r.Read(buf)
		if ctx.Err() != nil {
			// Checked before writing: once ctx ends, a write may be cut
			// by the watch (then the connection is dropped, not aborted).
			return Info{}, c.abort(ctx, w, op, ctxErr(ctx))
		}
		if n > 0 {
			if err := c.fc.data(buf[:n]); err != nil {
				return Info{}, c.writeFailed(ctx, w, op, err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return Info{}, c.abort(ctx, w, op, fmt.Errorf("read input: %w", rerr))
		}
	}
	c.fc.frame(FrameData, nil)
	if err := c.fc.flush(); err != nil {
		return Info{}, c.writeFailed(ctx, w, op, err)
	}
	info, err := readInfoReply(c.fc)
	if err != nil {
		return Info{}, c.fail(ctx, w, op, err, true)
	}
	if w.release() {
		c.drop()
	}
	return info, nil
}

// abort sends ABORT and waits for the daemon's reply, so the connection
// stays usable; it returns cause, wrapped.
func (c *Client) abort(ctx context.Context, w *ctxWatch, op string, cause error) error {
	w.release()
	err := fmt.Errorf("%s: upload aborted: %w", op, cause)
	c.fc.c.SetDeadline(time.Now().Add(abortTimeout))
	c.fc.frame(FrameAbort, nil)
	if c.fc.flush() != nil {
		c.drop()
		return err
	}
	h, _, rerr := readReply(c.fc)
	if rerr != nil || h.Type != FrameError {
		c.drop()
		return err
	}
	c.fc.c.SetDeadline(time.Time{})
	return err
}

// writeFailed handles a failed write during an upload: the daemon may have
// answered (e.g. BAD_REQUEST) before closing; report that if so.
func (c *Client) writeFailed(ctx context.Context, w *ctxWatch, op string, err error) error {
	if ctx.Err() == nil {
		c.fc.c.SetReadDeadline(time.Now().Add(time.Second))
		if h, rb, rerr := readReply(c.fc); rerr == nil && h.Type == FrameError {
			err = replyError(rb)
		}
	}
	return c.fail(ctx, w, op, err, false)
}

// Stat returns the info of name.
func (c *Client) Stat(ctx context.Context, name string) (Info, error) {
	if err := blob.ValidateName(name); err != nil {
		return Info{}, err
	}
	var info Info
	err := c.call(ctx, fmt.Sprintf("stat %q", name), FrameStat,
		func(b []byte) []byte { return appendNameReq(b, name) },
		FrameInfo, func(b []byte) (err error) { info, err = decodeInfo(b); return err })
	return info, err
}

// Remove forgets name on the daemon.
func (c *Client) Remove(ctx context.Context, name string) error {
	if err := blob.ValidateName(name); err != nil {
		return err
	}
	return c.call(ctx, fmt.Sprintf("remove %q", name), FrameRemove,
		func(b []byte) []byte { return appendNameReq(b, name) },
		FrameOK, func(b []byte) error {
			if len(b) != 0 {
				return malformed("OK with a %d byte body", len(b))
			}
			return nil
		})
}

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	err := c.call(ctx, "status", FrameStatus, func(b []byte) []byte { return b },
		FrameStatusJ, func(b []byte) error {
			if err := json.Unmarshal(b, &st); err != nil {
				return malformed("STATUS_JSON: %v", err)
			}
			return nil
		})
	return st, err
}

// List returns the infos of the names under prefix ("" = all).
func (c *Client) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	op := fmt.Sprintf("list %q", prefix)
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	defer c.mu.Unlock()
	if err := c.send(FrameList, func(b []byte) []byte { return appendNameReq(b, prefix) }); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	w := c.watch(ctx)
	var infos []Info
	for {
		h, rb, err := readReply(c.fc)
		if err == nil {
			switch h.Type {
			case FrameListing:
				infos, err = decodeListing(infos, rb)
			case FrameEnd:
				if len(rb) != 0 {
					err = malformed("END with a %d byte body", len(rb))
					break
				}
				if w.release() {
					c.drop()
				}
				return infos, nil
			case FrameError:
				err = replyError(rb)
			default:
				err = unexpected(h, "LISTING or END")
			}
		}
		if err != nil {
			return nil, c.fail(ctx, w, op, err, true)
		}
	}
}

// Get writes the blob named name to w and returns its info. It fails (and
// w may have received part of the blob) if the daemon reports an error
// mid-stream or the stream is cut.
func (c *Client) Get(ctx context.Context, name string, w io.Writer) (Info, error) {
	info, rc, err := c.GetStream(ctx, name)
	if err != nil {
		return Info{}, err
	}
	st := rc.(*stream)
	buf := c.dataBuf(int(min(max(info.Size, 4<<10), DataFrameSize)))
	for {
		n, rerr := st.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				st.Close()
				return info, fmt.Errorf("get %q: write: %w", name, werr)
			}
		}
		if rerr == io.EOF {
			return info, nil
		}
		if rerr != nil {
			st.Close()
			return info, rerr
		}
	}
}

// GetStream starts reading the blob named name: it returns the blob's info
// first, then its bytes through the reader, which returns io.EOF only after
// the daemon confirmed the whole blob (an error if the stream ends in
// ERROR or is cut). The client is busy until the reader has returned
// io.EOF or an error, or is closed; Close before the end reads the rest if
// it is small, else drops the connection.
func (c *Client) GetStream(ctx context.Context, name string) (Info, io.ReadCloser, error) {
	if err := blob.ValidateName(name); err != nil {
		return Info{}, nil, err
	}
	op := fmt.Sprintf("get %q", name)
	if err := c.acquire(ctx); err != nil {
		return Info{}, nil, err
	}
	if err := c.send(FrameGet, func(b []byte) []byte { return appendNameReq(b, name) }); err != nil {
		c.mu.Unlock()
		return Info{}, nil, fmt.Errorf("%s: %w", op, err)
	}
	w := c.watch(ctx)
	info, err := readInfoReply(c.fc)
	if err != nil {
		err = c.fail(ctx, w, op, err, true)
		c.mu.Unlock()
		return Info{}, nil, err
	}
	return info, &stream{c: c, ctx: ctx, w: w, op: op, info: info}, nil
}

var errStreamClosed = errors.New("rpcbridge: read from a closed stream")

// stream reads the DATA frames of a GET reply.
type stream struct {
	c    *Client
	ctx  context.Context
	w    *ctxWatch
	op   string
	info Info
	rem  uint32 // unread bytes of the current DATA frame
	got  uint64 // bytes received
	err  error  // sticky; io.EOF after END
	done bool   // the client was released
	// draining: Close set a read deadline, to clear if the connection is kept
	draining bool
}

// finish records the end of the stream and releases the client.
func (s *stream) finish(err error, keep bool) error {
	if s.done {
		return s.err
	}
	if err == io.EOF {
		if s.w.release() {
			s.c.drop()
		}
	} else {
		err = s.c.fail(s.ctx, s.w, s.op, err, keep)
	}
	if s.draining && s.c.fc != nil {
		s.c.fc.c.SetReadDeadline(time.Time{})
	}
	s.err, s.done = err, true
	s.c.mu.Unlock()
	return err
}

func (s *stream) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	fc := s.c.fc
	for s.rem == 0 {
		h, err := fc.readHeader()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, s.finish(err, false)
		}
		switch h.Type {
		case FrameData:
			if s.got+uint64(h.Len) > s.info.Size {
				return 0, s.finish(malformed("DATA beyond the blob's %d bytes", s.info.Size), false)
			}
			s.rem = h.Len
		case FrameEnd:
			if h.Len != 0 {
				return 0, s.finish(malformed("END with a %d byte body", h.Len), false)
			}
			if s.got != s.info.Size {
				return 0, s.finish(&Error{Code: CodeSizeMismatch,
					Message: fmt.Sprintf("%s: stream ended after %d of %d bytes", s.op, s.got, s.info.Size)}, true)
			}
			return 0, s.finish(io.EOF, true)
		case FrameError:
			body, err := fc.readBody(h.Len)
			if err == nil {
				err = replyError(body)
			}
			return 0, s.finish(err, true)
		default:
			return 0, s.finish(unexpected(h, "DATA, END or ERROR"), false)
		}
	}
	if len(p) == 0 {
		return 0, nil
	}
	if uint32(len(p)) > s.rem {
		p = p[:s.rem]
	}
	n, err := fc.br.Read(p)
	s.rem -= uint32(n)
	s.got += uint64(n)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return n, s.finish(err, false)
	}
	return n, nil
}

// Close ends the stream; before the end it reads the rest if at most
// drainLimit bytes remain, else it drops the connection.
func (s *stream) Close() error {
	if s.done {
		s.err = errStreamClosed
		return nil
	}
	if s.info.Size-s.got <= drainLimit && s.ctx.Err() == nil {
		s.draining = true
		s.c.fc.c.SetReadDeadline(time.Now().Add(abortTimeout))
		var sink [32 << 10]byte
		for s.err == nil {
			s.Read(sink[:])
		}
	} else {
		s.finish(errStreamClosed, false)
	}
	s.err = errStreamClosed
	return nil
}

// ErrNoProviders is returned by Providers when the daemon speaks a
// protocol version without PROVIDERS (before 4).
var ErrNoProviders = errors.New("the daemon does not support PROVIDERS (protocol version 4)")

// Providers asks the daemon who holds the blob named name (or whose blob
// ID name is) in full.
func (c *Client) Providers(ctx context.Context, name string) (Providers, error) {
	if err := blob.ValidateName(name); err != nil {
		return Providers{}, err
	}
	c.mu.Lock()
	version := c.version
	c.mu.Unlock()
	if version != 0 && version < 4 {
		return Providers{}, fmt.Errorf("providers of %q: %w", name, ErrNoProviders)
	}
	var res Providers
	err := c.call(ctx, fmt.Sprintf("providers of %q", name), FrameProviders,
		func(b []byte) []byte { return appendNameReq(b, name) },
		FrameProvidersJ, func(b []byte) error {
			if err := json.Unmarshal(b, &res); err != nil {
				return malformed("PROVIDERS_JSON: %v", err)
			}
			return nil
		})
	return res, err
}

// ErrNoPreheat is returned by Preheat when the daemon speaks a protocol
// version without PREHEAT (before 3).
var ErrNoPreheat = errors.New("the daemon does not support PREHEAT (protocol version 3)")

// Preheat asks the daemon's children (of the given sites only, if any) to
// fetch the blob named name now, and waits for their answers.
func (c *Client) Preheat(ctx context.Context, name string, sites []string) ([]PreheatResult, error) {
	if err := blob.ValidateName(name); err != nil {
		return nil, err
	}
	if len(sites) > maxPreheatSites {
		return nil, fmt.Errorf("preheat %q: %d sites, more than %d", name, len(sites), maxPreheatSites)
	}
	c.mu.Lock()
	version := c.version
	c.mu.Unlock()
	if version != 0 && version < 3 {
		return nil, fmt.Errorf("preheat %q: %w", name, ErrNoPreheat)
	}
	var res []PreheatResult
	err := c.call(ctx, fmt.Sprintf("preheat %q", name), FramePreheat,
		func(b []byte) []byte { return appendPreheatReq(b, name, sites) },
		FramePreheatJ, func(b []byte) error {
			if err := json.Unmarshal(b, &res); err != nil {
				return malformed("PREHEAT_JSON: %v", err)
			}
			return nil
		})
	return res, err
}
