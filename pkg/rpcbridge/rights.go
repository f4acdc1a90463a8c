package rpcbridge

import (
	"errors"
	"io"
	"net"
	"sync"
	"syscall"
)

// maxPendingFDs bounds the descriptors a connection may have sent that no
// request has claimed yet; more are closed on arrival (and the next request
// is refused as malformed).
const maxPendingFDs = 4

// rightsOOBSize is the control buffer of one read: room for
// maxPendingFDs descriptors. The kernel closes any that do not fit
// (MSG_CTRUNC), so a client cannot make the daemon hold more.
var rightsOOBSize = syscall.CmsgSpace(maxPendingFDs * 4)

// rightsReader reads a unix socket with recvmsg, keeping the descriptors
// that arrive with the bytes (SCM_RIGHTS), in order. A descriptor arrives
// with the first byte of the sendmsg that carried it, so once a request
// frame has been read, the descriptor sent with it is here.
type rightsReader struct {
	uc  *net.UnixConn
	oob []byte

	mu     sync.Mutex // Read may run in the request watcher's goroutine
	fds    []int
	excess bool // descriptors were closed for exceeding the bound
}

func newRightsReader(uc *net.UnixConn) *rightsReader {
	return &rightsReader{uc: uc, oob: make([]byte, rightsOOBSize)}
}

func (r *rightsReader) Read(p []byte) (int, error) {
	n, oobn, flags, _, err := r.uc.ReadMsgUnix(p, r.oob)
	if oobn > 0 || flags&syscall.MSG_CTRUNC != 0 {
		r.keep(r.oob[:max(oobn, 0)], flags&syscall.MSG_CTRUNC != 0)
	}
	if n < 0 { // an error: ReadMsgUnix may report -1
		n = 0
	}
	if err != nil && errors.Is(err, io.EOF) {
		// The end of the stream, as net.Conn's Read reports it (bufio and
		// the server check for io.EOF itself).
		err = io.EOF
	}
	return n, err
}

// keep queues the descriptors of a control message (at most
// maxPendingFDs in all; the rest are closed).
func (r *rightsReader) keep(oob []byte, truncated bool) {
	var got []int
	if msgs, err := syscall.ParseSocketControlMessage(oob); err == nil {
		for i := range msgs {
			if fds, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
				got = append(got, fds...)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if truncated {
		r.excess = true
	}
	for _, fd := range got {
		if len(r.fds) >= maxPendingFDs {
			syscall.Close(fd)
			r.excess = true
			continue
		}
		r.fds = append(r.fds, fd)
	}
}

// take returns the descriptors received and not yet taken, and whether
// some were dropped; the caller owns (closes) them.
func (r *rightsReader) take() (fds []int, excess bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fds, excess = r.fds, r.excess
	r.fds, r.excess = nil, false
	return fds, excess
}

// close closes the descriptors not taken.
func (r *rightsReader) close() {
	fds, _ := r.take()
	closeFDs(fds)
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}
