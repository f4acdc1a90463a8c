package rpcbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
)

// getFD serves GET_FD (protocol version 2): INFO, then the blob's extents
// in FDS frames of at most MaxExtentsPerFrame, each sent with its
// descriptors as SCM_RIGHTS, then END (or ERROR instead).
func (sc *conn) getFD(ctx context.Context, body []byte) bool {
	name, err := decodeNameReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	if err := checkName(name); err != nil {
		return sc.sendError(errorFor(err))
	}
	uc, ok := sc.fc.c.(*net.UnixConn)
	if !ok {
		return sc.sendError(&Error{Code: CodeBadRequest, Message: "GET_FD needs a unix socket connection"})
	}
	info, it, err := sc.s.b.OpenExtents(ctx, name)
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	defer it.Close()
	off := sc.fc.begin(FrameInfo)
	sc.fc.wbuf = appendInfo(sc.fc.wbuf, &info)
	sc.fc.end(off)
	if err := sc.fc.flush(); err != nil {
		return false
	}
	batch := make([]Extent, 0, MaxExtentsPerFrame)
	defer func() { closeExtents(batch) }()
	var next uint64 // blob offset the next extent must start at
	for {
		x, err := it.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil && sc.s.ctx.Err() == nil {
				return false // the client hung up
			}
			e := errorFor(err)
			if !strings.Contains(e.Message, name) {
				e = &Error{Code: e.Code, Message: fmt.Sprintf("get %q: %s", name, e.Message)}
			}
			return sc.sendError(e)
		}
		batch = append(batch, x)
		if x.BlobOffset != next || x.Length == 0 || x.Length > info.Size-next {
			return sc.sendError(&Error{Code: CodeInternal, Message: fmt.Sprintf(
				"get %q: extent [%d, +%d) does not continue the blob at %d of %d bytes", name, x.BlobOffset, x.Length, next, info.Size)})
		}
		next += x.Length
		if len(batch) == MaxExtentsPerFrame {
			if err := sc.sendFDS(uc, batch); err != nil {
				return false
			}
			closeExtents(batch)
			batch = batch[:0]
		}
	}
	if next != info.Size {
		return sc.sendError(&Error{Code: CodeSizeMismatch,
			Message: fmt.Sprintf("get %q: extents cover %d bytes, not %d", name, next, info.Size)})
	}
	if len(batch) > 0 {
		if err := sc.sendFDS(uc, batch); err != nil {
			return false
		}
		closeExtents(batch)
		batch = batch[:0]
	}
	sc.fc.frame(FrameEnd, nil)
	return sc.fc.flush() == nil
}

// sendFDS writes one FDS frame for xs with their descriptors attached, in
// one sendmsg (the rest of the frame, if the kernel took only part, with
// plain writes: the descriptors travel with the first byte).
func (sc *conn) sendFDS(uc *net.UnixConn, xs []Extent) error {
	rs := make([]ExtentRange, len(xs))
	fds := make([]int, len(xs))
	for i, x := range xs {
		rs[i] = x.ExtentRange
		fds[i] = int(x.File.Fd())
	}
	frame := appendFDS(appendHeader(nil, FrameFDS, 4+extentLen*len(xs)), rs)
	sc.fc.setWriteDeadline()
	n, _, err := uc.WriteMsgUnix(frame, syscall.UnixRights(fds...), nil)
	if err != nil {
		return fmt.Errorf("send FDS: %w", err)
	}
	if n < len(frame) {
		if _, err := uc.Write(frame[n:]); err != nil {
			return fmt.Errorf("send FDS: %w", err)
		}
	}
	return nil
}

func closeExtents(xs []Extent) {
	for _, x := range xs {
		if x.File != nil {
			x.File.Close()
		}
	}
}

// errFDTable reports that the descriptors of an FDS frame did not arrive
// (MSG_CTRUNC: usually the receiver's descriptor table is full).
var errFDTable = errors.New("descriptors of an FDS frame were lost (descriptor table full?)")
