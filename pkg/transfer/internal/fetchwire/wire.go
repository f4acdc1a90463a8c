// Package fetchwire holds the messages of omst's fetch protocol
// (/omst/fetch/1.4.0, 1.3.0, 1.2.0 and 1.1.0), specified byte by byte in
// docs/protocol.md: the requests (GET, GET_SIBLING, GET_DIRECT, REPORT,
// MANIFEST), the reply header and statuses (OUTBOARD and PIECE for a chunk
// in pieces, BUSY for a deflected GET_DIRECT), the REDIRECT and BUSY
// bodies, their
// encoders and decoders. Decoders are pure, check every length against an
// explicit limit (which for a reply depends on the request) before
// allocating, and never panic; what they refuse wraps wire.ErrMalformed.
// Fuzz targets: fuzz_test.go.
package fetchwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
)

// ProtoFetch is the fetch protocol's ID; docs/protocol.md specifies every
// message byte by byte. 1.1.0 added REPORT, MANIFEST (manifests moved here
// from the names protocol), GET_DIRECT and the REDIRECT reply; 1.2.0 adds
// GET_SIBLING, a GET that says the asker is of the server's site; 1.3.0
// lets a chunk's reply come in verified pieces (OUTBOARD, then PIECEs),
// so that a relay passes each piece on as it arrives; 1.4.0 lets a relay
// deflect a plain GET_DIRECT that asks for it (flag deflect): answer it
// with a REDIRECT to another holder of the chunk that has it complete, or
// BUSY with a retry-after, at most MaxDeflections times per chunk.
const ProtoFetch protocol.ID = "/omst/fetch/1.4.0"

// ProtoFetch130 is the version before deflected GET_DIRECTs, still served
// and spoken: a 1.3.0 stream carries no deflect flag, so no BUSY and no
// REDIRECT to a GET_DIRECT.
const ProtoFetch130 protocol.ID = "/omst/fetch/1.3.0"

// ProtoFetch120 is the version before pieces, still served and spoken: a
// 1.2.0 stream carries every chunk in one OK reply.
const ProtoFetch120 protocol.ID = "/omst/fetch/1.2.0"

// ProtoFetch110 is the previous version, still served and spoken: a 1.1.0
// stream carries no GET_SIBLING (a client sends a plain GET instead).
const ProtoFetch110 protocol.ID = "/omst/fetch/1.1.0"

// Request types and reply statuses.
const (
	MsgGet       byte = 0x20 // chunk bytes
	MsgReport    byte = 0x21 // the chunk received for this request did not match its hash
	MsgManifest  byte = 0x22 // a blob's encoded manifest
	MsgGetDirect byte = 0x23 // chunk bytes from this node itself: a redirect failed
	// MsgGetSibling is a GET from a node of the server's own site (1.2.0):
	// decoded as MsgGet with Request.Sibling set.
	MsgGetSibling byte = 0x24

	StatusOK       byte = 0
	StatusNotFound byte = 1
	StatusError    byte = 2
	StatusRedirect byte = 3 // ask the sibling named in the body
	// StatusOutboard (1.3.0, a chunk request only) starts a reply in
	// pieces: the body is the chunk's outboard (package piece); PIECE
	// frames with the same tag follow.
	StatusOutboard byte = 4
	// StatusPiece (1.3.0) carries bytes of a chunk whose OUTBOARD came
	// earlier under the same tag: offset u32, then the bytes; the pieces of
	// a reply come in order, contiguous from offset 0, and the reply ends
	// with the piece that reaches the chunk's end, or with a NOT_FOUND or
	// ERROR under the same tag.
	StatusPiece byte = 5
	// StatusBusy (1.4.0, a reply to a GET_DIRECT with Deflect only): the
	// relay's port is busy; ask again (the same GET_DIRECT) after the
	// retry-after in the body (BusyBody).
	StatusBusy byte = 6
	// PieceHeaderLen is the offset before a PIECE's bytes.
	PieceHeaderLen = 4

	directSlow      byte = 1 // GET_DIRECT flag: the sibling named was slow, not failed
	directIfPresent byte = 2 // GET_DIRECT flag: only if the chunk is stored here now (a hedge)
	directDeflect   byte = 4 // GET_DIRECT flag (1.4.0): a REDIRECT or BUSY reply is welcome
)

// Deflections of a GET_DIRECT (1.4.0). A relay answers one child's
// GET_DIRECTs for one chunk with at most MaxDeflections REDIRECTs and
// BUSYs in all, then serves the chunk (a relay may deflect fewer); a
// client takes no more: the next is malformed, and the chunk is asked of
// its other sources. A BUSY's retry-after is 1 ms to MaxRetryAfter.
const (
	MaxDeflections = 3
	MaxRetryAfter  = 10 * time.Second
	// BusyBodyLen is a BUSY reply's body: retryAfter u32, milliseconds.
	BusyBodyLen = 4
)

// Bodies of the OK reply to a REPORT.
const (
	ReportIntact  byte = 0 // the reported chunk was absent or verified intact
	ReportDamaged byte = 1 // it was damaged and has been dropped
)

// Limits enforced by the decoders.
const (
	MaxErrorMsg = 1024 // the body of a NOT_FOUND or ERROR reply
	// MaxManifestBytes is the largest encoded manifest (blob.MaxChunks
	// chunks: 128 MiB).
	MaxManifestBytes = blob.MaxManifestLen
	ReplyHeaderLen   = 4 + 1 + 4                        // tag, status, length
	reqHeaderLen     = 1 + 4 + 2                        // type, tag, CID length
	chunkReqLen      = reqHeaderLen + 4 + blob.HashSize // GET and REPORT, without the CID bytes
	maxPeerIDLen     = 128                              // a peer ID's bytes
	maxRedirectAddrs = 8
	maxAddrBytes     = 256 // one binary multiaddr
	MaxRedirectBody  = 1 + maxPeerIDLen + 1 + maxRedirectAddrs*(2+maxAddrBytes)
)

// Request is one request: Type MsgGet asks for chunk Index (hash
// Hash) of blob ID; MsgGetDirect too, from the server itself, because the
// sibling it redirected the client to (Failed, if known) could not deliver;
// MsgReport tells the server that the bytes it sent for that chunk did not
// match Hash; MsgManifest asks for blob ID's manifest (Index and Hash are
// unused). Tag, chosen by the client and unique among its requests
// outstanding on the stream, comes back in the reply: replies come in the
// order they are ready, not the order of the requests.
type Request struct {
	Type   byte
	Tag    uint32
	ID     cid.Cid
	Index  uint32
	Hash   blob.Hash
	Failed peer.ID // GET_DIRECT only: the sibling that failed
	Slow   bool    // GET_DIRECT only: Failed was only slow (a hedge)
	// IfPresent (GET_DIRECT only): answer NOT_FOUND at once unless the
	// chunk is in the server's store (a hedge).
	IfPresent bool
	// Deflect (GET_DIRECT only, not with IfPresent; sent only to a peer
	// that speaks 1.4.0): the asker takes a REDIRECT to another holder
	// (never Failed) or a BUSY in reply (MaxDeflections per chunk).
	Deflect bool
	// Sibling (MsgGet only; sent as GET_SIBLING): the asker is a node of
	// the server's site that is neither its parent nor its child. It is
	// the asker's word, used for the server's accounting only.
	Sibling bool
}

// IsGet reports whether q asks for chunk bytes (GET or GET_DIRECT).
func (q Request) IsGet() bool { return q.Type == MsgGet || q.Type == MsgGetDirect }

// Deflectable reports whether a reply to q may be a BUSY, or a REDIRECT
// although q is a GET_DIRECT: q is a GET_DIRECT with Deflect.
func (q Request) Deflectable() bool { return q.Type == MsgGetDirect && q.Deflect }

// ReplyLimit is the largest OK body a reply to q may carry.
func (q Request) ReplyLimit() int {
	switch q.Type {
	case MsgManifest:
		return MaxManifestBytes
	case MsgReport:
		return 1
	}
	return blob.MaxChunkSize
}

// AppendRequest appends q's encoding to b.
func AppendRequest(b []byte, q Request) []byte {
	idb := q.ID.Bytes()
	t := q.Type
	if t == MsgGet && q.Sibling {
		t = MsgGetSibling
	}
	b = append(b, t)
	b = binary.BigEndian.AppendUint32(b, q.Tag)
	b = binary.BigEndian.AppendUint16(b, uint16(len(idb)))
	b = append(b, idb...)
	if q.Type == MsgManifest {
		return b
	}
	b = binary.BigEndian.AppendUint32(b, q.Index)
	b = append(b, q.Hash[:]...)
	if q.Type == MsgGetDirect {
		var flags byte
		if q.Slow {
			flags |= directSlow
		}
		if q.IfPresent {
			flags |= directIfPresent
		}
		if q.Deflect {
			flags |= directDeflect
		}
		b = append(b, flags, byte(len(q.Failed)))
		b = append(b, q.Failed...)
	}
	return b
}

// ReadRequest reads one request from r: io.EOF (unwrapped) when r ends
// before its first byte, an error wrapping wire.ErrMalformed when it is
// malformed.
func ReadRequest(r *bufio.Reader) (Request, error) {
	var q Request
	var hdr [reqHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return q, err // io.EOF between requests: the client is done
	}
	q.Type = hdr[0]
	switch q.Type { // before waiting for more bytes
	case MsgGet, MsgReport, MsgManifest, MsgGetDirect:
	case MsgGetSibling:
		q.Type, q.Sibling = MsgGet, true
	default:
		return q, wire.Malformed("unknown fetch request 0x%02x", hdr[0])
	}
	if _, err := io.ReadFull(r, hdr[1:]); err != nil {
		return q, wire.Unexpected(err)
	}
	q.Tag = binary.BigEndian.Uint32(hdr[1:])
	n := int(binary.BigEndian.Uint16(hdr[5:]))
	if n > wire.MaxCIDLen {
		return q, wire.Malformed("CID of %d bytes", n)
	}
	var buf [wire.MaxCIDLen + 4 + blob.HashSize]byte
	b := buf[:n]
	if q.Type != MsgManifest {
		b = buf[:n+4+blob.HashSize]
	}
	if _, err := io.ReadFull(r, b); err != nil {
		return q, wire.Unexpected(err)
	}
	id, err := wire.DecodeCID(b[:n])
	if err != nil {
		return q, err
	}
	q.ID = id
	if q.Type == MsgManifest {
		return q, nil
	}
	q.Index = binary.BigEndian.Uint32(b[n:])
	copy(q.Hash[:], b[n+4:])
	if q.Hash.IsZero() {
		return q, wire.Malformed("zero chunk hash")
	}
	if q.Type == MsgGetDirect {
		flags, err := r.ReadByte()
		if err != nil {
			return q, wire.Unexpected(err)
		}
		if flags&^(directSlow|directIfPresent|directDeflect) != 0 || flags&(directIfPresent|directDeflect) == directIfPresent|directDeflect {
			return q, wire.Malformed("GET_DIRECT flags 0x%02x", flags)
		}
		q.Slow, q.IfPresent, q.Deflect = flags&directSlow != 0, flags&directIfPresent != 0, flags&directDeflect != 0
		k, err := r.ReadByte()
		if err != nil {
			return q, wire.Unexpected(err)
		}
		if k > maxPeerIDLen {
			return q, wire.Malformed("peer ID of %d bytes", k)
		}
		if k > 0 {
			f := make([]byte, k)
			if _, err := io.ReadFull(r, f); err != nil {
				return q, wire.Unexpected(err)
			}
			id, err := peer.IDFromBytes(f)
			if err != nil {
				return q, wire.Malformed("bad peer ID: %v", err)
			}
			q.Failed = id
		}
	}
	return q, nil
}

// DecodeRequest parses one whole request held in b.
func DecodeRequest(b []byte) (Request, error) {
	r := bufio.NewReaderSize(wire.NewSliceReader(b), 16)
	q, err := ReadRequest(r)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return q, wire.Malformed("truncated fetch request")
		}
		return q, err
	}
	want := chunkReqLen + len(q.ID.Bytes())
	switch q.Type {
	case MsgManifest:
		want = reqHeaderLen + len(q.ID.Bytes())
	case MsgGetDirect:
		want += 2 + len(q.Failed)
	}
	if r.Buffered() != 0 || len(b) != want {
		return q, wire.Malformed("trailing bytes after fetch request")
	}
	return q, nil
}

// AppendPieceHeader appends the header of a PIECE reply to request tag
// carrying n bytes at offset off.
func AppendPieceHeader(b []byte, tag uint32, off, n int) []byte {
	b = AppendReplyHeader(b, tag, StatusPiece, PieceHeaderLen+n)
	return binary.BigEndian.AppendUint32(b, uint32(off))
}

// AppendReplyHeader appends the fixed part of a reply to request tag.
func AppendReplyHeader(b []byte, tag uint32, status byte, n int) []byte {
	b = binary.BigEndian.AppendUint32(b, tag)
	b = append(b, status)
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// ParseReplyHeader splits a reply header into the request's tag, the
// status and the body length (checked by CheckReplyLen once the request is
// known).
func ParseReplyHeader(hdr [ReplyHeaderLen]byte) (tag uint32, status byte, n uint32) {
	return binary.BigEndian.Uint32(hdr[:]), hdr[4], binary.BigEndian.Uint32(hdr[5:])
}

// CheckReplyLen validates the status and body length of a reply to a
// request whose OK body may hold at most limit bytes.
func CheckReplyLen(status byte, n uint32, limit int) error {
	switch status {
	case StatusOK:
		if uint64(n) > uint64(limit) {
			return wire.Malformed("reply body of %d bytes exceeds %d", n, limit)
		}
	case StatusNotFound, StatusError:
		if n > MaxErrorMsg {
			return wire.Malformed("message of %d bytes exceeds %d", n, MaxErrorMsg)
		}
	case StatusRedirect:
		if n > MaxRedirectBody {
			return wire.Malformed("redirect of %d bytes exceeds %d", n, MaxRedirectBody)
		}
	case StatusOutboard:
		if n > uint32(piece.OutboardLen(min(limit, blob.MaxChunkSize))) {
			return wire.Malformed("outboard of %d bytes exceeds %d", n, piece.OutboardLen(min(limit, blob.MaxChunkSize)))
		}
	case StatusPiece:
		if n <= PieceHeaderLen || uint64(n) > PieceHeaderLen+uint64(limit) {
			return wire.Malformed("piece of %d bytes (at most %d)", n, PieceHeaderLen+limit)
		}
	case StatusBusy:
		if n != BusyBodyLen {
			return wire.Malformed("BUSY of %d bytes (want %d)", n, BusyBodyLen)
		}
	default:
		return wire.Malformed("unknown fetch status %d", status)
	}
	return nil
}

// DecodeReply parses one whole reply held in b, to a request whose OK
// body may hold at most limit bytes.
func DecodeReply(b []byte, limit int) (tag uint32, status byte, body []byte, err error) {
	if len(b) < ReplyHeaderLen {
		return 0, 0, nil, wire.Malformed("truncated fetch reply")
	}
	tag, status, n := ParseReplyHeader([ReplyHeaderLen]byte(b[:ReplyHeaderLen]))
	if err := CheckReplyLen(status, n, limit); err != nil {
		return 0, 0, nil, err
	}
	if uint64(len(b)) != ReplyHeaderLen+uint64(n) {
		return 0, 0, nil, wire.Malformed("fetch reply says %d bytes, holds %d", n, len(b)-ReplyHeaderLen)
	}
	return tag, status, b[ReplyHeaderLen:], nil
}

// Redirect is the body of a REDIRECT reply: the sibling to ask, and
// addresses to reach it at.
type Redirect struct {
	Peer  peer.ID
	Addrs []ma.Multiaddr
}

// AppendRedirect appends r's body: peer ID (u8 length + bytes), u8 number
// of addresses, each a u16 length + binary multiaddr. Addresses beyond the
// limits are left out.
func AppendRedirect(b []byte, r Redirect) []byte {
	b = append(b, byte(len(r.Peer)))
	b = append(b, r.Peer...)
	var addrs [][]byte
	for _, a := range r.Addrs {
		if ab := a.Bytes(); len(ab) <= maxAddrBytes && len(addrs) < maxRedirectAddrs {
			addrs = append(addrs, ab)
		}
	}
	b = append(b, byte(len(addrs)))
	for _, ab := range addrs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(ab)))
		b = append(b, ab...)
	}
	return b
}

// DecodeRedirect parses a REDIRECT body.
func DecodeRedirect(b []byte) (Redirect, error) {
	var r Redirect
	if len(b) < 1 || int(b[0]) > maxPeerIDLen || len(b) < 1+int(b[0])+1 {
		return r, wire.Malformed("truncated redirect")
	}
	id, err := peer.IDFromBytes(b[1 : 1+b[0]])
	if err != nil {
		return r, wire.Malformed("redirect to a bad peer ID: %v", err)
	}
	r.Peer = id
	b = b[1+b[0]:]
	n := int(b[0])
	b = b[1:]
	if n > maxRedirectAddrs {
		return r, wire.Malformed("redirect with %d addresses", n)
	}
	for range n {
		if len(b) < 2 {
			return r, wire.Malformed("truncated redirect address")
		}
		k := int(binary.BigEndian.Uint16(b))
		if k > maxAddrBytes || len(b) < 2+k {
			return r, wire.Malformed("redirect address of %d bytes", k)
		}
		a, err := ma.NewMultiaddrBytes(b[2 : 2+k])
		if err != nil {
			return r, wire.Malformed("bad redirect address: %v", err)
		}
		r.Addrs = append(r.Addrs, a)
		b = b[2+k:]
	}
	if len(b) != 0 {
		return r, wire.Malformed("%d bytes after the redirect", len(b))
	}
	return r, nil
}

// AppendBusy appends a BUSY reply's body: retry-after d in milliseconds,
// within [1 ms, MaxRetryAfter].
func AppendBusy(b []byte, d time.Duration) []byte {
	ms := min(max(d.Milliseconds(), 1), MaxRetryAfter.Milliseconds())
	return binary.BigEndian.AppendUint32(b, uint32(ms))
}

// DecodeBusy parses a BUSY reply's body: the retry-after, within [1 ms,
// MaxRetryAfter] (else malformed).
func DecodeBusy(b []byte) (time.Duration, error) {
	if len(b) != BusyBodyLen {
		return 0, wire.Malformed("BUSY body of %d bytes (want %d)", len(b), BusyBodyLen)
	}
	d := time.Duration(binary.BigEndian.Uint32(b)) * time.Millisecond
	if d < time.Millisecond || d > MaxRetryAfter {
		return 0, wire.Malformed("BUSY retry-after of %v (1 ms to %v)", d, MaxRetryAfter)
	}
	return d, nil
}

// ErrorBody is message s as the body of a NOT_FOUND or ERROR reply, cut
// to MaxErrorMsg bytes at a rune boundary.
func ErrorBody(s string) []byte { return []byte(wire.TruncUTF8(s, MaxErrorMsg)) }
