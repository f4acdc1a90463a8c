package rpcbridge

// The requests that move a blob between the daemon and a file: PUT_FD and
// GET_TO_FD (version 5), on a file the client opened with its own rights
// and passed as a descriptor, and the older PUT_FILE and GET_FILE, on a
// path the daemon opens, served only to a caller of the daemon's own uid
// (docs/security.md, "The local socket").

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/omst-project/omst/pkg/localfile"
	"github.com/omst-project/omst/pkg/stablefile"
)

// takeFD claims the descriptors that came with a request frame of type t:
// exactly one for PUT_FD and GET_TO_FD (kept in sc.fd), none for any other.
// A wrong count is malformed (the descriptors are closed).
func (sc *conn) takeFD(t FrameType) error {
	want := 0
	if t == FramePutFD || t == FrameGetToFD {
		want = 1
	}
	if sc.rights == nil {
		if want > 0 {
			return malformed("%v needs a unix socket connection", t)
		}
		return nil
	}
	fds, excess := sc.rights.take()
	if excess || len(fds) != want {
		closeFDs(fds)
		if excess {
			return malformed("more descriptors than a request may carry arrived with %v", t)
		}
		return malformed("%v came with %d descriptors, want %d", t, len(fds), want)
	}
	if want == 1 {
		sc.fd = fds[0]
	}
	return nil
}

// closeFD closes the request's descriptor if the handler did not take it.
func (sc *conn) closeFD() {
	if sc.fd >= 0 {
		unix.Close(sc.fd)
		sc.fd = -1
	}
}

// callerFile is a file a caller passed as a descriptor.
type callerFile struct {
	f       *os.File
	regular bool
	append  bool // opened with O_APPEND
	flags   int  // status flags when received
	setNB   bool // O_NONBLOCK was set here (and is cleared again by close)
	fd      uintptr
	closed  bool
}

// callerFileName names a passed file in errors: the daemon does not know
// its path (the client adds it).
const callerFileName = "the caller's file"

// openCallerFile takes sc.fd for reading (write false) or writing: it must
// be open for that, and not be a directory. A file that is not regular (a
// pipe, a FIFO, a terminal) is made non-blocking while the daemon uses it,
// so that a cancelled request or a deadline ends a blocked read or write
// (the flag is shared with the caller's descriptor, and put back by close).
func (sc *conn) openCallerFile(write bool) (*callerFile, error) {
	fd := sc.fd
	sc.fd = -1
	fail := func(format string, args ...any) (*callerFile, error) {
		unix.Close(fd)
		return nil, &Error{Code: CodeBadRequest, Message: fmt.Sprintf(format, args...)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail("stat the passed descriptor: %v", err)
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return fail("flags of the passed descriptor: %v", err)
	}
	acc := fl & unix.O_ACCMODE
	switch {
	case fl&unix.O_PATH != 0:
		return fail("the passed descriptor was opened with O_PATH: it can be neither read nor written")
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return fail("the passed descriptor is a directory")
	case write && acc == unix.O_RDONLY:
		return fail("the passed descriptor is not open for writing")
	case !write && acc == unix.O_WRONLY:
		return fail("the passed descriptor is not open for reading")
	}
	cf := &callerFile{regular: st.Mode&unix.S_IFMT == unix.S_IFREG, append: fl&unix.O_APPEND != 0, flags: fl, fd: uintptr(fd)}
	if !cf.regular && fl&unix.O_NONBLOCK == 0 {
		if err := unix.SetNonblock(fd, true); err == nil {
			cf.setNB = true
		}
	}
	cf.f = os.NewFile(uintptr(fd), callerFileName)
	return cf, nil
}

// close puts the status flags back and closes the daemon's copy of the
// descriptor; later calls do nothing.
func (cf *callerFile) close() {
	if cf.closed {
		return
	}
	cf.closed = true
	if cf.setNB {
		unix.FcntlInt(cf.fd, unix.F_SETFL, cf.flags)
	}
	cf.f.Close()
}

// putFD serves PUT_FD: the body is a PUT's; the file is read as PUT_FILE
// reads one (a regular file from its offset to its size, unchanged; a
// stream to its end of file).
func (sc *conn) putFD(ctx context.Context, body []byte) bool {
	name, cs, err := decodePutReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	var info Info
	if err = checkName(name); err == nil {
		if err = checkChunkSize(cs); err == nil {
			var cf *callerFile
			if cf, err = sc.openCallerFile(false); err == nil {
				info, err = sc.putFrom(ctx, name, cf.f, PutOptions{ChunkSize: int(cs)})
				cf.close()
			}
		}
	}
	return sc.replyInfo(info, err)
}

// putFrom stores the bytes of f (a regular file, or a stream) under name,
// with stablefile's checks; it owns f until it returns (not closed).
func (sc *conn) putFrom(ctx context.Context, name string, f *os.File, opts PutOptions) (Info, error) {
	// stablefile closes the file it reads: give it a duplicate handle
	// (registered with the poller, as f is, if it is non-blocking).
	dup, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return Info{}, fmt.Errorf("put %q: %w", name, err)
	}
	unix.CloseOnExec(dup)
	nf := os.NewFile(uintptr(dup), f.Name())
	r, err := stablefile.New(ctx, nf)
	if err != nil {
		return Info{}, fmt.Errorf("put %q: %w", name, err)
	}
	defer r.Close()
	return sc.s.b.Put(ctx, name, r, opts)
}

// getToFD serves GET_TO_FD: INFO once the blob is found, then (version 8)
// PROGRESS frames, then, when every byte is in the caller's file, END (or
// ERROR instead).
func (sc *conn) getToFD(ctx context.Context, body []byte) bool {
	name, err := decodeNameReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	if err := checkName(name); err != nil {
		return sc.sendError(errorFor(err))
	}
	cf, err := sc.openCallerFile(true)
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	defer cf.close() // a no-op after the close in replyGetTo; there after a panic
	return sc.replyGetTo(ctx, func(started func(Info, ProgressFunc) error) (Info, error) {
		info, err := sc.writeBlob(ctx, name, cf, started)
		// The file's flags are the caller's again, and the daemon's copy
		// closed, before the reply says the request is over.
		cf.close()
		return info, err
	})
}

// replyGetTo answers a get into a file that write performs: INFO when
// write calls started (the blob is found), then, on a connection of
// version 8, PROGRESS frames at most every ProgressEvery while the bytes
// go in and one of every byte at the end, then END; or ERROR instead of
// the rest. It reports whether the connection stays open.
func (sc *conn) replyGetTo(ctx context.Context, write func(started func(Info, ProgressFunc) error) (Info, error)) bool {
	var mu sync.Mutex // the reply's writes: INFO here, PROGRESS from ps
	ps := &progressSender{mu: &mu, fc: sc.fc, now: time.Now, tick: realTicker}
	sentInfo := false
	info, err := write(func(info Info, done ProgressFunc) error {
		mu.Lock()
		off := sc.fc.begin(FrameInfo)
		sc.fc.wbuf = appendInfo(sc.fc.wbuf, &info)
		sc.fc.end(off)
		err := sc.fc.flush()
		mu.Unlock()
		sentInfo = true
		if err == nil && done != nil && sc.version >= ProgressVersion {
			ps.done = done
			ps.start(time.Now())
		}
		return err
	})
	if perr := ps.stop(); perr != nil && err == nil {
		err = fmt.Errorf("%w: %w", errReplyWrite, perr)
	}
	switch {
	case err == nil:
		if sc.version >= ProgressVersion {
			sc.fc.frame(FrameProgress, appendProgress(nil, info.Size))
		}
		sc.fc.frame(FrameEnd, nil)
		return sc.fc.flush() == nil
	case errors.Is(err, errReplyWrite):
		return false
	case sentInfo && ctx.Err() != nil && sc.s.ctx.Err() == nil:
		return false // the client hung up
	}
	return sc.sendError(errorFor(err))
}

// errReplyWrite marks a failed write of a reply frame: the connection is
// gone.
var errReplyWrite = errors.New("reply could not be written")

// writeBlob writes the verified bytes of the blob named name into cf: a
// regular file (not opened O_APPEND) then holds exactly the blob (written
// from offset 0, then cut to its size); anything else gets the bytes in
// order, each write bounded by the IO timeout. started, if not nil, is
// called with the blob's info and what tells its progress before the
// first byte is written.
func (sc *conn) writeBlob(ctx context.Context, name string, cf *callerFile, started func(Info, ProgressFunc) error) (Info, error) {
	if fb, ok := sc.s.b.(FileBackend); ok && cf.regular && !cf.append {
		return sc.writeBlobFile(ctx, fb, name, cf, started)
	}
	info, rc, err := sc.s.b.Open(ctx, name)
	if err != nil {
		return Info{}, err
	}
	defer rc.Close()
	fw := &fileWriter{limit: info.Size}
	if started != nil {
		if err := started(info, fw.done.Load); err != nil {
			return info, fmt.Errorf("%w: %w", errReplyWrite, err)
		}
	}
	if cf.regular && !cf.append {
		fw.w = io.NewOffsetWriter(cf.f, 0)
	} else {
		fw.w = &deadlineWriter{f: cf.f, d: sc.s.iot}
		stop := context.AfterFunc(ctx, func() { cf.f.SetWriteDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	var rerr error
	if wt, ok := rc.(io.WriterTo); ok {
		_, rerr = wt.WriteTo(fw)
	} else {
		bp := dataBufPool.Get().(*[]byte)
		_, rerr = io.CopyBuffer(struct{ io.Writer }{fw}, rc, *bp)
		dataBufPool.Put(bp)
	}
	switch {
	case fw.werr != nil:
		if ctx.Err() != nil {
			return info, fmt.Errorf("get %q: %w", name, context.Cause(ctx))
		}
		return info, fmt.Errorf("get %q: write to %s: %w", name, callerFileName, fw.werr)
	case errors.Is(rerr, errTooLong):
		return info, &Error{Code: CodeSizeMismatch, Message: fmt.Sprintf("get %q: blob yields more than its %d bytes", name, info.Size)}
	case rerr != nil:
		if !strings.Contains(rerr.Error(), name) {
			rerr = fmt.Errorf("get %q: %w", name, rerr)
		}
		return info, rerr
	case fw.done.Load() != info.Size:
		return info, &Error{Code: CodeSizeMismatch, Message: fmt.Sprintf("get %q: blob yields %d bytes, not %d", name, fw.done.Load(), info.Size)}
	}
	if cf.regular && !cf.append {
		if err := cf.f.Truncate(int64(info.Size)); err != nil {
			return info, fmt.Errorf("get %q: cut %s to %d bytes: %w", name, callerFileName, info.Size, err)
		}
	}
	info.Local = true
	return info, nil
}

// writeBlobFile is writeBlob through the backend's GetToFile.
func (sc *conn) writeBlobFile(ctx context.Context, fb FileBackend, name string, cf *callerFile, started func(Info, ProgressFunc) error) (Info, error) {
	var replyErr error
	cb := func(info Info, done ProgressFunc) error {
		if started == nil {
			return nil
		}
		replyErr = started(info, done)
		return replyErr
	}
	info, err := fb.GetToFile(ctx, name, cf.f, cb)
	switch {
	case replyErr != nil:
		return info, fmt.Errorf("%w: %w", errReplyWrite, replyErr)
	case err != nil && ctx.Err() != nil:
		return info, fmt.Errorf("get %q: %w", name, context.Cause(ctx))
	}
	return info, err
}

// fileWriter counts what is written against the blob's size (done, read
// by the reply's progress while the bytes go) and keeps the write error
// apart from the reader's.
type fileWriter struct {
	w     io.Writer
	limit uint64
	done  atomic.Uint64
	werr  error
}

func (w *fileWriter) Write(p []byte) (int, error) {
	if w.done.Load()+uint64(len(p)) > w.limit {
		return 0, errTooLong
	}
	k, err := w.w.Write(p)
	w.done.Add(uint64(k))
	if err != nil {
		w.werr = err
	}
	return k, err
}

// deadlineWriter bounds each write to a stream by d (where the file
// supports deadlines: pipes, FIFOs, terminals).
type deadlineWriter struct {
	f *os.File
	d time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.f.SetWriteDeadline(time.Now().Add(w.d))
	return w.f.Write(p)
}

// forbidPaths refuses PUT_FILE and GET_FILE to a caller that is not the
// daemon's user: the daemon would open the path with its own rights.
func (sc *conn) forbidPaths(t FrameType) error {
	if sc.caller.Daemon {
		return nil
	}
	return &Error{Code: CodeForbidden, Message: fmt.Sprintf(
		"%v: the daemon opens paths only for its own user (uid %d), and this caller is %s: "+
			"open the file yourself and pass it (PUT_FD, GET_TO_FD: protocol version 5)", t, daemonUID, sc.caller)}
}

// putFile serves PUT_FILE for the daemon's own user: the path is opened as
// localfile.OpenRead opens it (links followed only where the kernel's
// protected_symlinks rule allows).
func (sc *conn) putFile(ctx context.Context, body []byte) bool {
	name, cs, path, err := decodePutFileReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	var info Info
	if err = sc.forbidPaths(FramePutFile); err == nil {
		if err = checkName(name); err == nil {
			if err = checkChunkSize(cs); err == nil {
				if err = checkPath(path); err == nil {
					info, err = sc.putPath(ctx, name, path, PutOptions{ChunkSize: int(cs)})
				}
			}
		}
	}
	return sc.replyInfo(info, err)
}

func (sc *conn) putPath(ctx context.Context, name, path string, opts PutOptions) (Info, error) {
	f, err := localfile.OpenRead(ctx, path)
	if err != nil {
		return Info{}, fmt.Errorf("put %q from %s: %w", name, path, err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG && st.Mode&unix.S_IFMT != unix.S_IFIFO {
		// Only what PUT_FILE always read: opening a device may have
		// effects, and a socket or device is no file to put.
		return Info{}, fmt.Errorf("put %q from %s: not a regular file or FIFO: %w", name, path, unix.EINVAL)
	}
	return sc.putFrom(ctx, name, f, opts)
}

// getFile serves GET_FILE for the daemon's own user: the destination is
// prepared as localfile.Create does (atomic for a regular or new file,
// links followed only where protected_symlinks allows, in place for a FIFO
// or device). Before version 8 the reply is one INFO once the file is
// complete; from version 8 it is GET_TO_FD's: INFO once the blob is found,
// PROGRESS frames, END.
func (sc *conn) getFile(ctx context.Context, body []byte) bool {
	name, path, err := decodeGetFileReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	if err = sc.forbidPaths(FrameGetFile); err == nil {
		if err = checkName(name); err == nil {
			err = checkPath(path)
		}
	}
	if err != nil || sc.version < ProgressVersion {
		var info Info
		if err == nil {
			info, err = sc.getPath(ctx, name, path, nil)
		}
		return sc.replyInfo(info, err)
	}
	return sc.replyGetTo(ctx, func(started func(Info, ProgressFunc) error) (Info, error) {
		return sc.getPath(ctx, name, path, started)
	})
}

func (sc *conn) getPath(ctx context.Context, name, path string, started func(Info, ProgressFunc) error) (Info, error) {
	dst, err := localfile.Create(ctx, path)
	if err != nil {
		return Info{}, fmt.Errorf("get %q to %s: %w", name, path, err)
	}
	cf := &callerFile{f: dst.File, regular: dst.Regular, fd: dst.File.Fd()}
	info, err := sc.writeBlob(ctx, name, cf, started)
	if err != nil {
		dst.Abort()
		if errors.Is(err, errReplyWrite) {
			return Info{}, err
		}
		return Info{}, fmt.Errorf("get %q to %s: %w", name, path, dropName(err, name))
	}
	if err := dst.Commit(); err != nil {
		return Info{}, fmt.Errorf("get %q to %s: %w", name, path, err)
	}
	return info, nil
}

// dropName removes the "get NAME: " that writeBlob put in front of err's
// text, for a caller that says it itself.
func dropName(err error, name string) error {
	prefix := fmt.Sprintf("get %q: ", name)
	if s := err.Error(); strings.HasPrefix(s, prefix) {
		return &Error{Code: CodeOf(err), Message: strings.TrimPrefix(s, prefix)}
	}
	return err
}
