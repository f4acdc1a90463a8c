package rpcbridge

import (
	"bufio"
	"io"
	"net"
	"time"
)

const (
	// bufSize is the size at which gathered frames are flushed.
	bufSize = 64 << 10
	// readBufSize is the read buffer of a connection: headers and small
	// bodies go through it, big DATA payloads are read past it straight
	// into the reader's buffer. Small, so that a thousand idle clients
	// cost little.
	readBufSize = 16 << 10
	// writeBufInit is the write buffer's initial capacity (it grows up to
	// about bufSize when frames are gathered).
	writeBufInit = 4 << 10
	// payloads at least this big are written with writev, not copied into
	// the write buffer.
	directWrite = 32 << 10
)

// frameConn reads and writes frames on one connection. Small frames are
// gathered in wbuf and written on flush; big DATA payloads go out with
// writev together with what is buffered, without a copy.
type frameConn struct {
	c    net.Conn
	br   *bufio.Reader
	wbuf []byte
	hdr  [HeaderSize]byte
	body []byte // reusable buffer for control frame bodies
	wto  time.Duration
}

func newFrameConn(c net.Conn, writeTimeout time.Duration) *frameConn {
	return &frameConn{c: c, br: bufio.NewReaderSize(c, readBufSize), wbuf: make([]byte, 0, writeBufInit), wto: writeTimeout}
}

// readHeader reads and checks one frame header.
func (fc *frameConn) readHeader() (header, error) {
	if _, err := io.ReadFull(fc.br, fc.hdr[:]); err != nil {
		return header{}, err
	}
	return parseHeader(fc.hdr[:])
}

// readBody reads a body of n bytes (n <= MaxFrameBody, checked by
// parseHeader) into a reused buffer, valid until the next readBody.
func (fc *frameConn) readBody(n uint32) ([]byte, error) {
	if cap(fc.body) < int(n) {
		fc.body = make([]byte, n, max(int(n), 4<<10))
	}
	b := fc.body[:n]
	if _, err := io.ReadFull(fc.br, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// begin starts a frame of type t in the write buffer; finish with end.
func (fc *frameConn) begin(t FrameType) int {
	off := len(fc.wbuf)
	fc.wbuf = appendHeader(fc.wbuf, t, 0)
	return off
}

// end fixes the length of the frame begun at off.
func (fc *frameConn) end(off int) {
	putHeader(fc.wbuf[off:], FrameType(fc.wbuf[off+4]), len(fc.wbuf)-off-HeaderSize)
}

// frame buffers a frame with the given body.
func (fc *frameConn) frame(t FrameType, body []byte) {
	fc.wbuf = appendHeader(fc.wbuf, t, len(body))
	fc.wbuf = append(fc.wbuf, body...)
}

func (fc *frameConn) setWriteDeadline() {
	if fc.wto > 0 {
		fc.c.SetWriteDeadline(time.Now().Add(fc.wto))
	}
}

// flush writes the buffered frames.
func (fc *frameConn) flush() error {
	if len(fc.wbuf) == 0 {
		return nil
	}
	fc.setWriteDeadline()
	_, err := fc.c.Write(fc.wbuf)
	fc.wbuf = fc.wbuf[:0]
	return err
}

// data sends a DATA frame carrying p (len(p) <= MaxFrameBody). Small
// payloads are buffered; big ones are written at once with what is
// buffered, in one writev.
func (fc *frameConn) data(p []byte) error {
	fc.wbuf = appendHeader(fc.wbuf, FrameData, len(p))
	if len(p) < directWrite {
		fc.wbuf = append(fc.wbuf, p...)
		if len(fc.wbuf) >= bufSize {
			return fc.flush()
		}
		return nil
	}
	fc.setWriteDeadline()
	bufs := net.Buffers{fc.wbuf, p}
	_, err := bufs.WriteTo(fc.c)
	fc.wbuf = fc.wbuf[:0]
	return err
}
