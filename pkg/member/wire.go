package member

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/grid"
)

// Wire forms (big-endian). Each message is the whole of one direction of a
// stream: the sender closes its side after it.
//
//	hello      = version u8 (1) | cert u32-len | revocations u32-len (0: none)
//	join       = version u8 (1) | kind u8 (1 redeem, 2 renew) |
//	             subject u16-len (peer ID bytes) | payload u32-len
//	             (redeem: the token's text; renew: the current certificate)
//	reply      = status u8 (0 OK, 1 refused) | message u16-len (refused)
//	joinReply  = status u8 (0) | grid key u16-len | cert u32-len |
//	             revocations u32-len ; or a refused reply
const (
	version = 1

	kindRedeem = 1
	kindRenew  = 2

	statusOK      = 0
	statusRefused = 1

	// MaxCert bounds a certificate on the wire.
	MaxCert = 4096
	// MaxRevocations bounds a revocation list on the wire.
	MaxRevocations = 8*grid.MaxRevoked + 1024
	// MaxPayload bounds a join request's token or certificate.
	MaxPayload = 8192
	// MaxMessage bounds a refusal's text.
	MaxMessage = 1024

	maxHello     = 1 + 4 + MaxCert + 4 + MaxRevocations
	maxJoin      = 1 + 1 + 2 + grid.MaxPeerIDLen + 4 + MaxPayload
	maxJoinReply = 1 + 2 + 64 + 4 + MaxCert + 4 + MaxRevocations
)

type hello struct {
	Cert, Revocations []byte
}

func encodeHello(h hello) []byte {
	b := []byte{version}
	b = appendBytes32(b, h.Cert)
	return appendBytes32(b, h.Revocations)
}

func decodeHello(b []byte) (hello, error) {
	r := reader{b: b}
	r.version()
	h := hello{Cert: r.bytes32(MaxCert, "certificate"), Revocations: r.bytes32(MaxRevocations, "revocations")}
	return h, r.done("hello")
}

type joinRequest struct {
	Kind    byte
	Subject peer.ID
	Payload []byte
}

func encodeJoin(q joinRequest) []byte {
	b := []byte{version, q.Kind}
	b = appendBytes16(b, []byte(q.Subject))
	return appendBytes32(b, q.Payload)
}

func decodeJoin(b []byte) (joinRequest, error) {
	r := reader{b: b}
	r.version()
	q := joinRequest{Kind: r.u8()}
	if r.err == nil && q.Kind != kindRedeem && q.Kind != kindRenew {
		r.err = fmt.Errorf("unknown kind %d", q.Kind)
	}
	q.Subject = peer.ID(r.bytes16(grid.MaxPeerIDLen, "subject"))
	q.Payload = r.bytes32(MaxPayload, "payload")
	if err := r.done("join request"); err != nil {
		return joinRequest{}, err
	}
	if err := q.Subject.Validate(); err != nil {
		return joinRequest{}, wire.Malformed("join request: subject: %v", err)
	}
	return q, nil
}

type joinReply struct {
	GridKey, Cert, Revocations []byte
}

func encodeJoinReply(j joinReply) []byte {
	b := []byte{statusOK}
	b = appendBytes16(b, j.GridKey)
	b = appendBytes32(b, j.Cert)
	return appendBytes32(b, j.Revocations)
}

// decodeJoinReply returns the reply, or the peer's refusal as an error
// wrapping ErrRefused.
func decodeJoinReply(b []byte) (joinReply, error) {
	if len(b) > 0 && b[0] != statusOK {
		return joinReply{}, decodeReply(b)
	}
	r := reader{b: b}
	r.u8()
	j := joinReply{GridKey: r.bytes16(64, "grid key"), Cert: r.bytes32(MaxCert, "certificate"), Revocations: r.bytes32(MaxRevocations, "revocations")}
	return j, r.done("join reply")
}

// ErrRefused wraps a peer's refusal (its text follows).
var ErrRefused = errors.New("refused")

func encodeReply(err error) []byte {
	if err == nil {
		return []byte{statusOK}
	}
	return appendBytes16([]byte{statusRefused}, []byte(wire.TruncUTF8(err.Error(), MaxMessage)))
}

// decodeReply returns nil for OK, the refusal wrapped in ErrRefused, or a
// malformed-reply error.
func decodeReply(b []byte) error {
	r := reader{b: b}
	switch st := r.u8(); {
	case r.err != nil:
	case st == statusOK:
		return r.done("reply")
	case st == statusRefused:
		msg := r.bytes16(MaxMessage, "message")
		if err := r.done("reply"); err != nil {
			return err
		}
		return fmt.Errorf("%w: %s", ErrRefused, msg)
	default:
		r.err = fmt.Errorf("unknown status %d", st)
	}
	return r.done("reply")
}

func appendBytes16(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
	return append(b, v...)
}

func appendBytes32(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

// reader decodes, keeping the first error; lengths are checked against
// their limits before anything is taken.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.err = errors.New("truncated")
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() byte {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) version() {
	if v := r.u8(); r.err == nil && v != version {
		r.err = fmt.Errorf("version %d, want %d", v, version)
	}
}

func (r *reader) bytes16(limit int, what string) []byte {
	b := r.take(2)
	if b == nil {
		return nil
	}
	return r.field(int(binary.BigEndian.Uint16(b)), limit, what)
}

func (r *reader) bytes32(limit int, what string) []byte {
	b := r.take(4)
	if b == nil {
		return nil
	}
	n := binary.BigEndian.Uint32(b)
	if n > uint32(limit) {
		r.err = fmt.Errorf("%s of %d bytes, more than %d", what, n, limit)
		return nil
	}
	return r.field(int(n), limit, what)
}

func (r *reader) field(n, limit int, what string) []byte {
	if n > limit {
		r.err = fmt.Errorf("%s of %d bytes, more than %d", what, n, limit)
		return nil
	}
	if n == 0 {
		return nil
	}
	return r.take(n)
}

func (r *reader) done(what string) error {
	if r.err != nil {
		return wire.Malformed("%s: %v", what, r.err)
	}
	if len(r.b) != 0 {
		return wire.Malformed("%s: %d bytes after its fields", what, len(r.b))
	}
	return nil
}

// readAll reads one direction of a stream, at most limit bytes.
func readAll(s io.Reader, limit int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(s, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, wire.Malformed("message of more than %d bytes", limit)
	}
	return b, nil
}
