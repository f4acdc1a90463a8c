package rpcbridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/omst-project/omst/pkg/blob"
)

// ErrNoGetFD is returned by GetFD when the daemon negotiated protocol
// version 1 (it cannot pass descriptors); use Get instead.
var ErrNoGetFD = errors.New("the daemon speaks protocol version 1: no GET_FD")

// fdOOBSize is the control buffer for one FDS frame's descriptors.
var fdOOBSize = syscall.CmsgSpace(MaxExtentsPerFrame * 4)

// GetFD gets the blob named name without copying its bytes through the
// socket (GET_FD, protocol version 2): the daemon verifies the blob and
// passes open, read-only files of it. It returns the blob's info and its
// extents in order, covering exactly Info.Size bytes; the caller closes
// every File (mapping a file first keeps its bytes reachable). On error no
// file is left open.
func (c *Client) GetFD(ctx context.Context, name string) (Info, []Extent, error) {
	op := fmt.Sprintf("get %q", name)
	if err := blob.ValidateName(name); err != nil {
		return Info{}, nil, fmt.Errorf("%s: %w", op, err)
	}
	if err := c.acquire(ctx); err != nil {
		return Info{}, nil, err
	}
	defer c.mu.Unlock()
	if c.version < 2 {
		return Info{}, nil, fmt.Errorf("%s: %w", op, ErrNoGetFD)
	}
	uc, ok := c.fc.c.(*net.UnixConn)
	if !ok {
		return Info{}, nil, fmt.Errorf("%s: GET_FD needs a unix socket", op)
	}
	if err := c.send(FrameGetFD, func(b []byte) []byte { return appendNameReq(b, name) }); err != nil {
		return Info{}, nil, fmt.Errorf("%s: %w", op, err)
	}
	uc, _ = c.fc.c.(*net.UnixConn) // send may have reconnected
	w := c.watch(ctx)
	r := &fdReader{uc: uc, oob: make([]byte, fdOOBSize)}
	// Anything the buffered reader already holds belongs to this reply.
	if n := c.fc.br.Buffered(); n > 0 {
		b, _ := c.fc.br.Peek(n)
		r.buf = append(r.buf, b...)
		c.fc.br.Discard(n)
	}
	info, xs, err := r.reply()
	if err != nil {
		for _, x := range xs {
			x.File.Close()
		}
		r.closeQueued()
		return Info{}, nil, c.fail(ctx, w, op, err, r.inStep)
	}
	if w.release() {
		c.drop()
	}
	return info, xs, nil
}

// fdReader reads one GET_FD reply with recvmsg, queueing the descriptors
// that arrive with the bytes.
type fdReader struct {
	uc     *net.UnixConn
	buf    []byte // received, not yet consumed
	oob    []byte
	fds    []int // received, not yet claimed by an FDS frame
	inStep bool  // the reply ended cleanly (END or ERROR): the connection is reusable
}

// fill reads until at least n bytes are buffered.
func (r *fdReader) fill(n int) error {
	var tmp [64 << 10]byte
	for len(r.buf) < n {
		k, oobn, flags, _, err := r.uc.ReadMsgUnix(tmp[:], r.oob)
		if oobn > 0 {
			if perr := r.takeRights(r.oob[:oobn]); perr != nil {
				return perr
			}
		}
		if flags&syscall.MSG_CTRUNC != 0 {
			return errFDTable
		}
		r.buf = append(r.buf, tmp[:k]...)
		if err != nil {
			return err
		}
		if k == 0 {
			return fmt.Errorf("connection closed by the daemon: %w", syscall.ECONNRESET)
		}
	}
	return nil
}

func (r *fdReader) takeRights(oob []byte) error {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return fmt.Errorf("control message: %w", err)
	}
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			syscall.CloseOnExec(fd)
		}
		r.fds = append(r.fds, fds...)
	}
	return nil
}

func (r *fdReader) frame() (header, []byte, error) {
	if err := r.fill(HeaderSize); err != nil {
		return header{}, nil, err
	}
	h, err := parseHeader(r.buf[:HeaderSize])
	if err != nil {
		return h, nil, err
	}
	if err := r.fill(HeaderSize + int(h.Len)); err != nil {
		return h, nil, err
	}
	body := append([]byte(nil), r.buf[HeaderSize:HeaderSize+int(h.Len)]...)
	r.buf = r.buf[HeaderSize+int(h.Len):]
	return h, body, nil
}

// reply reads INFO, FDS... and END; on error it returns the extents
// received so far (for the caller to close).
func (r *fdReader) reply() (Info, []Extent, error) {
	h, body, err := r.frame()
	if err != nil {
		return Info{}, nil, err
	}
	switch h.Type {
	case FrameInfo:
	case FrameError:
		r.inStep = len(r.fds) == 0
		return Info{}, nil, replyError(body)
	default:
		return Info{}, nil, unexpected(h, "INFO")
	}
	info, err := decodeInfo(body)
	if err != nil {
		return Info{}, nil, err
	}
	var xs []Extent
	var next uint64
	for {
		h, body, err := r.frame()
		if err != nil {
			return info, xs, err
		}
		switch h.Type {
		case FrameFDS:
			rs, err := decodeFDS(body)
			if err != nil {
				return info, xs, err
			}
			if len(r.fds) < len(rs) {
				return info, xs, malformed("FDS frame of %d extents came with %d descriptors", len(rs), len(r.fds))
			}
			for i, x := range rs {
				f := os.NewFile(uintptr(r.fds[i]), fmt.Sprintf("%s[%d]", info.Name, x.BlobOffset))
				xs = append(xs, Extent{ExtentRange: x, File: f})
			}
			r.fds = r.fds[len(rs):]
			for _, x := range rs {
				if x.BlobOffset != next || x.Length > info.Size-next {
					return info, xs, malformed("extent [%d, +%d) does not continue the blob at %d of %d bytes", x.BlobOffset, x.Length, next, info.Size)
				}
				next += x.Length
			}
		case FrameEnd:
			if len(body) != 0 {
				return info, xs, malformed("END with a %d-byte body", len(body))
			}
			if len(r.fds) > 0 {
				return info, xs, malformed("%d descriptors arrived without an FDS frame", len(r.fds))
			}
			if next != info.Size {
				return info, xs, fmt.Errorf("extents cover %d bytes, not %d: %w", next, info.Size, blob.ErrSizeMismatch)
			}
			r.inStep = len(r.buf) == 0
			return info, xs, nil
		case FrameError:
			r.inStep = len(r.fds) == 0 && len(r.buf) == 0
			return info, xs, replyError(body)
		default:
			return info, xs, unexpected(h, "FDS or END")
		}
	}
}

func (r *fdReader) closeQueued() {
	for _, fd := range r.fds {
		syscall.Close(fd)
	}
	r.fds = nil
}
