package rpcbridge

// The client side of the requests that move a blob between the daemon and a
// file. Files are opened here, with the caller's rights (pkg/localfile), and
// passed to the daemon as descriptors (PUT_FD, GET_TO_FD: protocol version
// 5); a daemon that speaks an older version gets the bytes through the
// socket instead (PUT, GET). The client never asks a daemon to open a path.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/localfile"
	"github.com/omst-project/omst/pkg/stablefile"
)

// PutFile stores the file at path under name. The file is opened here,
// with this process's rights (links followed as localfile.Resolve allows),
// and read by the daemon through its descriptor (PutFD): a regular file
// must not change while it is read, anything else is read to its end of
// file (a FIFO's open waits for a writer, no longer than ctx). Errors name
// path.
func (c *Client) PutFile(ctx context.Context, name, path string, opts PutOptions) (Info, error) {
	if err := blob.ValidateName(name); err != nil {
		return Info{}, err
	}
	if err := checkOpts(opts); err != nil {
		return Info{}, err
	}
	f, err := localfile.OpenRead(ctx, path)
	if err != nil {
		return Info{}, fmt.Errorf("put %q: %w", name, err)
	}
	defer f.Close()
	info, err := c.PutFD(ctx, name, f, opts)
	if err != nil {
		return Info{}, PutFrom(err, name, path)
	}
	return info, nil
}

// PutFD stores the contents of f under name, read by the daemon through a
// copy of f's descriptor (PUT_FD): a regular file from its current offset
// to the size it has now (the put fails, storing nothing, if it changes
// meanwhile: stablefile's checks); anything else as a stream to its end of
// file. f's offset moves. A daemon older than protocol version 5 gets the
// bytes read here and streamed (Put), with the same checks. f stays open.
func (c *Client) PutFD(ctx context.Context, name string, f *os.File, opts PutOptions) (Info, error) {
	if err := blob.ValidateName(name); err != nil {
		return Info{}, err
	}
	if err := checkOpts(opts); err != nil {
		return Info{}, err
	}
	if err := c.acquire(ctx); err != nil {
		return Info{}, err
	}
	if c.version < 5 {
		c.mu.Unlock()
		return c.putStreamFrom(ctx, name, f, opts)
	}
	defer c.mu.Unlock()
	op := fmt.Sprintf("put %q", name)
	if err := c.sendFD(FramePutFD, func(b []byte) []byte { return appendPutReq(b, name, uint32(opts.ChunkSize)) }, f); err != nil {
		return Info{}, fmt.Errorf("%s: %w", op, err)
	}
	w := c.watch(ctx)
	info, err := readInfoReply(c.fc)
	if err != nil {
		return Info{}, c.fail(ctx, w, op, err, true)
	}
	if w.release() {
		c.drop()
	}
	return info, nil
}

// putStreamFrom is PutFD for a daemon without PUT_FD.
func (c *Client) putStreamFrom(ctx context.Context, name string, f *os.File, opts PutOptions) (Info, error) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return Info{}, fmt.Errorf("put %q: %w", name, err)
	}
	unix.CloseOnExec(fd)
	r, err := stablefile.New(ctx, os.NewFile(uintptr(fd), f.Name()))
	if err != nil {
		return Info{}, fmt.Errorf("put %q: %w", name, err)
	}
	defer r.Close()
	return c.Put(ctx, name, r, opts)
}

// GetFile writes the blob named name to path, prepared here with this
// process's rights (localfile.Create): a regular file, or a path where
// nothing exists, is replaced atomically (the bytes go into a temporary
// file beside it, renamed onto it only when every byte is written and
// verified; on error path is unchanged); a link is followed as
// localfile.Resolve allows, and its target replaced; an existing FIFO or
// device is written in place. The daemon writes the bytes into the
// descriptor (GetToFD). Errors name path.
func (c *Client) GetFile(ctx context.Context, name, path string) (Info, error) {
	return c.GetFileWith(ctx, name, path, GetHooks{})
}

// GetHooks follow a get into a file. Started, if not nil, is called with
// the blob's info as soon as the daemon has found it, before its bytes
// come. Progress, if not nil, is called with the bytes of the blob in the
// file so far, as the daemon reports them (protocol version 8: PROGRESS,
// at most every ProgressEvery), and last with every byte (info.Size) when
// the get succeeded, whatever the daemon's version. Both are called on
// the goroutine of the get.
type GetHooks struct {
	Started  func(Info)
	Progress func(done uint64)
}

// GetFileWith is GetFile with hooks that follow it (a progress bar).
func (c *Client) GetFileWith(ctx context.Context, name, path string, hooks GetHooks) (Info, error) {
	dst, err := localfile.Create(ctx, path)
	if err != nil {
		return Info{}, fmt.Errorf("get %q: %w", name, err)
	}
	info, err := c.GetToFD(ctx, name, dst.File, hooks)
	if err != nil {
		dst.Abort()
		return Info{}, fmt.Errorf("get %q to %s: %w", name, path, err)
	}
	if err := dst.Commit(); err != nil {
		return Info{}, fmt.Errorf("get %q to %s: %w", name, path, err)
	}
	return info, nil
}

// GetToFD has the daemon write the verified bytes of the blob named name
// into f, through a copy of its descriptor (GET_TO_FD): a regular file not
// opened with O_APPEND then holds exactly the blob (written from offset 0,
// cut to the blob's size); anything else (a pipe, a FIFO, a terminal,
// O_APPEND) receives the bytes in order. hooks follow the get (GetHooks).
// A daemon older than protocol version 5 sends the bytes through the
// socket (Get) and they are written here the same way. f stays open. name
// is checked by the daemon (INVALID_NAME, an *Error matching
// blob.ErrInvalidName), not here: the CLI checks its arguments, and the
// daemon every name it is sent.
func (c *Client) GetToFD(ctx context.Context, name string, f *os.File, hooks GetHooks) (Info, error) {
	if err := c.acquire(ctx); err != nil {
		return Info{}, err
	}
	if c.version < 5 {
		c.mu.Unlock()
		return c.getStreamTo(ctx, name, f, hooks)
	}
	defer c.mu.Unlock()
	op := fmt.Sprintf("get %q", name)
	if err := c.sendFD(FrameGetToFD, func(b []byte) []byte { return appendNameReq(b, name) }, f); err != nil {
		return Info{}, fmt.Errorf("%s: %w", op, err)
	}
	w := c.watch(ctx)
	info, err := readInfoReply(c.fc)
	if err != nil {
		return Info{}, c.fail(ctx, w, op, err, true)
	}
	if hooks.Started != nil {
		hooks.Started(info)
	}
	if err := c.readGetToEnd(info, hooks.Progress); err != nil {
		return Info{}, c.fail(ctx, w, op, err, true)
	}
	if w.release() {
		c.drop()
	}
	info.Local = true
	return info, nil
}

// readGetToEnd reads the rest of a reply to GET_TO_FD (or GET_FILE of
// version 8) after its INFO: PROGRESS frames (version 8), each passed to
// progress, then END (or ERROR). On a connection of version 8 the last
// PROGRESS before END must say every byte; before it, progress is called
// with every byte at END.
func (c *Client) readGetToEnd(info Info, progress func(uint64)) error {
	var last uint64
	for {
		h, body, err := readReply(c.fc)
		if err != nil {
			return err
		}
		switch h.Type {
		case FrameProgress:
			if c.version < ProgressVersion {
				return unexpected(h, "END")
			}
			d, err := decodeProgress(body)
			if err == nil {
				err = checkProgress(d, last, info.Size)
			}
			if err != nil {
				return err
			}
			last = d
			if progress != nil {
				progress(d)
			}
			continue
		case FrameEnd:
			if len(body) != 0 {
				return malformed("END with a %d-byte body", len(body))
			}
			if c.version >= ProgressVersion && last != info.Size {
				return malformed("END after PROGRESS of %d bytes, not the blob's %d", last, info.Size)
			}
			if c.version < ProgressVersion && progress != nil {
				progress(info.Size)
			}
			return nil
		case FrameError:
			return replyError(body)
		default:
			return unexpected(h, "END")
		}
	}
}

// getStreamTo is GetToFD for a daemon without GET_TO_FD.
func (c *Client) getStreamTo(ctx context.Context, name string, f *os.File, hooks GetHooks) (Info, error) {
	info, rc, err := c.GetStream(ctx, name)
	if err != nil {
		return Info{}, err
	}
	defer rc.Close()
	if hooks.Started != nil {
		hooks.Started(info)
	}
	var w io.Writer = f
	fi, err := f.Stat()
	if err != nil {
		return Info{}, fmt.Errorf("get %q: %w", name, err)
	}
	fl, _ := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	inPlace := fi.Mode().IsRegular() && fl&unix.O_APPEND == 0
	if inPlace {
		w = io.NewOffsetWriter(f, 0)
	}
	if _, err := io.Copy(struct{ io.Writer }{w}, rc); err != nil {
		return Info{}, fmt.Errorf("get %q: %w", name, err)
	}
	if inPlace {
		if err := f.Truncate(int64(info.Size)); err != nil {
			return Info{}, fmt.Errorf("get %q: %w", name, err)
		}
	}
	if hooks.Progress != nil {
		hooks.Progress(info.Size)
	}
	info.Local = true
	return info, nil
}

// PutFrom returns err, the error of a put of name, with the file it came
// from in its text: `put "NAME" from PATH: ...` (the daemon's errors start
// with `put "NAME": `). errors.Is, errors.As and CodeOf see err.
func PutFrom(err error, name, path string) error {
	prefix := fmt.Sprintf("put %q: ", name)
	msg := err.Error()
	if strings.HasPrefix(msg, prefix) {
		msg = msg[len(prefix):]
	}
	return &fromErr{msg: fmt.Sprintf("put %q from %s: %s", name, path, msg), err: err}
}

type fromErr struct {
	msg string
	err error
}

func (e *fromErr) Error() string { return e.msg }
func (e *fromErr) Unwrap() error { return e.err }

// sendFD writes a request frame with f's descriptor attached (one sendmsg:
// the descriptor travels with the frame's first byte). Like send, it
// reconnects and retries once if the write fails on a connection that
// already carried requests.
func (c *Client) sendFD(t FrameType, body func([]byte) []byte, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("descriptor of %s: %w", f.Name(), err)
	}
	for attempt := 0; ; attempt++ {
		uc, ok := c.fc.c.(*net.UnixConn)
		if !ok {
			return fmt.Errorf("%v needs a unix socket connection", t)
		}
		off := c.fc.begin(t)
		c.fc.wbuf = body(c.fc.wbuf)
		c.fc.end(off)
		frame := c.fc.wbuf
		c.fc.wbuf = c.fc.wbuf[:0]
		c.fc.setWriteDeadline()
		var n int
		var werr error
		if cerr := rc.Control(func(fd uintptr) {
			n, _, werr = uc.WriteMsgUnix(frame, syscall.UnixRights(int(fd)), nil)
		}); cerr != nil {
			return fmt.Errorf("descriptor of %s: %w", f.Name(), cerr)
		}
		if werr == nil && n < len(frame) {
			_, werr = uc.Write(frame[n:])
		}
		if werr == nil {
			c.used = true
			return nil
		}
		retry := attempt == 0 && c.used && n == 0
		c.drop()
		if !retry || errors.Is(werr, syscall.EBADF) {
			return c.connErr(werr)
		}
		if err := c.connect(); err != nil {
			return err
		}
	}
}
