package transfer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

// ProtoFetch is the fetch protocol's ID; docs/protocol.md specifies every
// message byte by byte. 1.1.0 added REPORT, MANIFEST (manifests moved here
// from the names protocol), GET_DIRECT and the REDIRECT reply; 1.2.0 adds
// GET_SIBLING, a GET that says the asker is of the server's site.
const ProtoFetch protocol.ID = "/omst/fetch/1.2.0"

// ProtoFetch110 is the previous version, still served and spoken: a 1.1.0
// stream carries no GET_SIBLING (a client sends a plain GET instead).
const ProtoFetch110 protocol.ID = "/omst/fetch/1.1.0"

// Request types and reply statuses.
const (
	msgGet       byte = 0x20 // chunk bytes
	msgReport    byte = 0x21 // the chunk received for this request did not match its hash
	msgManifest  byte = 0x22 // a blob's encoded manifest
	msgGetDirect byte = 0x23 // chunk bytes from this node itself: a redirect failed
	// msgGetSibling is a GET from a node of the server's own site (1.2.0):
	// decoded as msgGet with fetchRequest.Sibling set.
	msgGetSibling byte = 0x24

	statusOK       byte = 0
	statusNotFound byte = 1
	statusError    byte = 2
	statusRedirect byte = 3 // ask the sibling named in the body

	directSlow      byte = 1 // GET_DIRECT flag: the sibling named was slow, not failed
	directIfPresent byte = 2 // GET_DIRECT flag: only if the chunk is stored here now (a hedge)
)

// Limits enforced by the decoders.
const (
	maxErrorMsg = 1024
	// maxManifestBytes is the largest encoded manifest (blob.MaxChunks
	// chunks: 128 MiB).
	maxManifestBytes = blob.MaxManifestLen
	replyHeaderLen   = 4 + 1 + 4                        // tag, status, length
	reqHeaderLen     = 1 + 4 + 2                        // type, tag, CID length
	chunkReqLen      = reqHeaderLen + 4 + blob.HashSize // GET and REPORT, without the CID bytes
	maxPeerIDLen     = 128                              // a peer ID's bytes
	maxRedirectAddrs = 8
	maxAddrBytes     = 256 // one binary multiaddr
	maxRedirectBody  = 1 + maxPeerIDLen + 1 + maxRedirectAddrs*(2+maxAddrBytes)
)

// fetchRequest is one request: Type msgGet asks for chunk Index (hash
// Hash) of blob ID; msgGetDirect too, from the server itself, because the
// sibling it redirected the client to (Failed, if known) could not deliver;
// msgReport tells the server that the bytes it sent for that chunk did not
// match Hash; msgManifest asks for blob ID's manifest (Index and Hash are
// unused). Tag, chosen by the client and unique among its requests
// outstanding on the stream, comes back in the reply: replies come in the
// order they are ready, not the order of the requests.
type fetchRequest struct {
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
	// Sibling (msgGet only; sent as GET_SIBLING): the asker is a node of
	// the server's site that is neither its parent nor its child. It is
	// the asker's word, used for the server's accounting only.
	Sibling bool
}

// isGet reports whether q asks for chunk bytes (GET or GET_DIRECT).
func (q fetchRequest) isGet() bool { return q.Type == msgGet || q.Type == msgGetDirect }

// replyLimit is the largest OK body a reply to q may carry.
func (q fetchRequest) replyLimit() int {
	switch q.Type {
	case msgManifest:
		return maxManifestBytes
	case msgReport:
		return 1
	}
	return blob.MaxChunkSize
}

func appendFetchRequest(b []byte, q fetchRequest) []byte {
	idb := q.ID.Bytes()
	t := q.Type
	if t == msgGet && q.Sibling {
		t = msgGetSibling
	}
	b = append(b, t)
	b = binary.BigEndian.AppendUint32(b, q.Tag)
	b = binary.BigEndian.AppendUint16(b, uint16(len(idb)))
	b = append(b, idb...)
	if q.Type == msgManifest {
		return b
	}
	b = binary.BigEndian.AppendUint32(b, q.Index)
	b = append(b, q.Hash[:]...)
	if q.Type == msgGetDirect {
		var flags byte
		if q.Slow {
			flags |= directSlow
		}
		if q.IfPresent {
			flags |= directIfPresent
		}
		b = append(b, flags, byte(len(q.Failed)))
		b = append(b, q.Failed...)
	}
	return b
}

// readFetchRequest reads one request.
func readFetchRequest(r *bufio.Reader) (fetchRequest, error) {
	var q fetchRequest
	var hdr [reqHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return q, err // io.EOF between requests: the client is done
	}
	q.Type = hdr[0]
	switch q.Type { // before waiting for more bytes
	case msgGet, msgReport, msgManifest, msgGetDirect:
	case msgGetSibling:
		q.Type, q.Sibling = msgGet, true
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
	if q.Type != msgManifest {
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
	if q.Type == msgManifest {
		return q, nil
	}
	q.Index = binary.BigEndian.Uint32(b[n:])
	copy(q.Hash[:], b[n+4:])
	if q.Hash.IsZero() {
		return q, wire.Malformed("zero chunk hash")
	}
	if q.Type == msgGetDirect {
		flags, err := r.ReadByte()
		if err != nil {
			return q, wire.Unexpected(err)
		}
		if flags&^(directSlow|directIfPresent) != 0 {
			return q, wire.Malformed("GET_DIRECT flags 0x%02x", flags)
		}
		q.Slow, q.IfPresent = flags&directSlow != 0, flags&directIfPresent != 0
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

// decodeFetchRequest parses one whole request held in b.
func decodeFetchRequest(b []byte) (fetchRequest, error) {
	r := bufio.NewReaderSize(wire.NewSliceReader(b), 16)
	q, err := readFetchRequest(r)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return q, wire.Malformed("truncated fetch request")
		}
		return q, err
	}
	want := chunkReqLen + len(q.ID.Bytes())
	switch q.Type {
	case msgManifest:
		want = reqHeaderLen + len(q.ID.Bytes())
	case msgGetDirect:
		want += 2 + len(q.Failed)
	}
	if r.Buffered() != 0 || len(b) != want {
		return q, wire.Malformed("trailing bytes after fetch request")
	}
	return q, nil
}

// appendFetchReplyHeader appends the fixed part of a reply to request tag.
func appendFetchReplyHeader(b []byte, tag uint32, status byte, n int) []byte {
	b = binary.BigEndian.AppendUint32(b, tag)
	b = append(b, status)
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// parseFetchReplyHeader splits a reply header into the request's tag, the
// status and the body length (checked by checkReplyLen once the request is
// known).
func parseFetchReplyHeader(hdr [replyHeaderLen]byte) (tag uint32, status byte, n uint32) {
	return binary.BigEndian.Uint32(hdr[:]), hdr[4], binary.BigEndian.Uint32(hdr[5:])
}

// checkReplyLen validates the status and body length of a reply to a
// request whose OK body may hold at most limit bytes.
func checkReplyLen(status byte, n uint32, limit int) error {
	switch status {
	case statusOK:
		if uint64(n) > uint64(limit) {
			return wire.Malformed("reply body of %d bytes exceeds %d", n, limit)
		}
	case statusNotFound, statusError:
		if n > maxErrorMsg {
			return wire.Malformed("message of %d bytes exceeds %d", n, maxErrorMsg)
		}
	case statusRedirect:
		if n > maxRedirectBody {
			return wire.Malformed("redirect of %d bytes exceeds %d", n, maxRedirectBody)
		}
	default:
		return wire.Malformed("unknown fetch status %d", status)
	}
	return nil
}

// decodeFetchReply parses one whole reply held in b, to a request whose OK
// body may hold at most limit bytes.
func decodeFetchReply(b []byte, limit int) (tag uint32, status byte, body []byte, err error) {
	if len(b) < replyHeaderLen {
		return 0, 0, nil, wire.Malformed("truncated fetch reply")
	}
	tag, status, n := parseFetchReplyHeader([replyHeaderLen]byte(b[:replyHeaderLen]))
	if err := checkReplyLen(status, n, limit); err != nil {
		return 0, 0, nil, err
	}
	if uint64(len(b)) != replyHeaderLen+uint64(n) {
		return 0, 0, nil, wire.Malformed("fetch reply says %d bytes, holds %d", n, len(b)-replyHeaderLen)
	}
	return tag, status, b[replyHeaderLen:], nil
}

// redirect is the body of a REDIRECT reply: the sibling to ask, and
// addresses to reach it at.
type redirect struct {
	Peer  peer.ID
	Addrs []ma.Multiaddr
}

// appendRedirect appends r's body: peer ID (u8 length + bytes), u8 number
// of addresses, each a u16 length + binary multiaddr. Addresses beyond the
// limits are left out.
func appendRedirect(b []byte, r redirect) []byte {
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

// decodeRedirect parses a REDIRECT body.
func decodeRedirect(b []byte) (redirect, error) {
	var r redirect
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

// errorBody is err's message as the body of a NOT_FOUND or ERROR reply.
func errorBody(s string) []byte { return []byte(wire.TruncUTF8(s, maxErrorMsg)) }
