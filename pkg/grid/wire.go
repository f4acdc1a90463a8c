package grid

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Every signed form is body || sig u16 length + signature (64 bytes).
const sigLen = 64

// maxSigned bounds any signed form a decoder accepts.
const maxSigned = 1 + 32 + 8*3 + 4 + 8*MaxRevoked + 2 + sigLen + MaxPeerIDLen + 2 + 1 + MaxPrefixes*(2+MaxPrefixLen)

func appendSig(b, sig []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(sig)))
	return append(b, sig...)
}

func splitSig(b []byte, what string) (body, sig []byte, err error) {
	if len(b) > maxSigned {
		return nil, nil, fmt.Errorf("%s: %d bytes, more than %d", what, len(b), maxSigned)
	}
	if len(b) < 2+sigLen {
		return nil, nil, fmt.Errorf("%s: %d bytes, too short", what, len(b))
	}
	n := len(b) - 2 - sigLen
	if binary.BigEndian.Uint16(b[n:]) != sigLen {
		return nil, nil, fmt.Errorf("%s: no %d-byte signature at its end", what, sigLen)
	}
	return b[:n], b[n+2:], nil
}

type writer struct{ b []byte }

func (w *writer) u8(v byte)    { w.b = append(w.b, v) }
func (w *writer) u32(v uint32) { w.b = binary.BigEndian.AppendUint32(w.b, v) }
func (w *writer) u64(v uint64) { w.b = binary.BigEndian.AppendUint64(w.b, v) }
func (w *writer) i64(v int64)  { w.u64(uint64(v)) }
func (w *writer) raw(b []byte) { w.b = append(w.b, b...) }
func (w *writer) str(b []byte) { w.b = binary.BigEndian.AppendUint16(w.b, uint16(len(b))); w.raw(b) }
func (w *writer) strs(s []string) {
	w.u8(byte(len(s)))
	for _, x := range s {
		w.str([]byte(x))
	}
}

// reader decodes, remembering the first error; every length is checked
// against its limit before anything is allocated.
type reader struct {
	b   []byte
	err error
}

var errShort = errors.New("truncated")

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.err = errShort
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() byte {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (r *reader) i64() int64 { return int64(r.u64()) }

func (r *reader) raw(n int) []byte { return r.take(n) }

func (r *reader) str(limit int) string {
	b := r.take(2)
	if b == nil {
		return ""
	}
	n := int(binary.BigEndian.Uint16(b))
	if n > limit {
		r.err = fmt.Errorf("a field of %d bytes, more than %d", n, limit)
		return ""
	}
	return string(r.take(n))
}

func (r *reader) strs(max, limit int) []string {
	n := int(r.u8())
	if r.err == nil && n > max {
		r.err = fmt.Errorf("%d entries, more than %d", n, max)
	}
	var out []string
	for i := 0; i < n && r.err == nil; i++ {
		out = append(out, r.str(limit))
	}
	return out
}

func (r *reader) done(what string) error {
	if r.err != nil {
		return fmt.Errorf("%s: %w", what, r.err)
	}
	if len(r.b) != 0 {
		return fmt.Errorf("%s: %d bytes after its fields", what, len(r.b))
	}
	return nil
}

func peerID(s string) peer.ID {
	if id, err := peer.Decode(s); err == nil {
		return id
	}
	return peer.ID(s)
}
