package transfer

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

// ProtoFetch is the fetch protocol's ID; docs/protocol.md specifies every
// message byte by byte. 1.1.0 added REPORT and MANIFEST (manifests moved
// here from the names protocol).
const ProtoFetch protocol.ID = "/omst/fetch/1.1.0"

// Request types and reply statuses.
const (
	msgGet      byte = 0x20 // chunk bytes
	msgReport   byte = 0x21 // the chunk received for this request did not match its hash
	msgManifest byte = 0x22 // a blob's encoded manifest

	statusOK       byte = 0
	statusNotFound byte = 1
	statusError    byte = 2
)

// Limits enforced by the decoders.
const (
	maxErrorMsg = 1024
	// maxManifestBytes is the largest encoded manifest (blob.MaxChunks chunks).
	maxManifestBytes = 24 + blob.HashSize*blob.MaxChunks
	replyHeaderLen   = 5
	chunkReqLen      = 1 + 2 + 4 + blob.HashSize // GET and REPORT, without the CID bytes
)

// fetchRequest is one request: Type msgGet asks for chunk Index (hash
// Hash) of blob ID; msgReport tells the server that the bytes it sent for
// that chunk did not match Hash; msgManifest asks for blob ID's manifest
// (Index and Hash are unused).
type fetchRequest struct {
	Type  byte
	ID    cid.Cid
	Index uint32
	Hash  blob.Hash
}

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
	b = append(b, q.Type)
	b = binary.BigEndian.AppendUint16(b, uint16(len(idb)))
	b = append(b, idb...)
	if q.Type == msgManifest {
		return b
	}
	b = binary.BigEndian.AppendUint32(b, q.Index)
	return append(b, q.Hash[:]...)
}

// readFetchRequest reads one request.
func readFetchRequest(r *bufio.Reader) (fetchRequest, error) {
	var q fetchRequest
	var hdr [3]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return q, err
	}
	q.Type = hdr[0]
	switch q.Type {
	case msgGet, msgReport, msgManifest:
	default:
		return q, wire.Malformed("unknown fetch request 0x%02x", hdr[0])
	}
	n := int(binary.BigEndian.Uint16(hdr[1:]))
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
	if q.Type == msgManifest {
		want = 3 + len(q.ID.Bytes())
	}
	if r.Buffered() != 0 || len(b) != want {
		return q, wire.Malformed("trailing bytes after fetch request")
	}
	return q, nil
}

// appendFetchReplyHeader appends the fixed part of a reply.
func appendFetchReplyHeader(b []byte, status byte, n int) []byte {
	b = append(b, status)
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// checkFetchReplyHeader validates a reply header to a request whose OK
// body may hold at most limit bytes; it returns the status and the body
// length.
func checkFetchReplyHeader(hdr [replyHeaderLen]byte, limit int) (byte, int, error) {
	status := hdr[0]
	n := binary.BigEndian.Uint32(hdr[1:])
	switch status {
	case statusOK:
		if uint64(n) > uint64(limit) {
			return 0, 0, wire.Malformed("reply body of %d bytes exceeds %d", n, limit)
		}
	case statusNotFound, statusError:
		if n > maxErrorMsg {
			return 0, 0, wire.Malformed("message of %d bytes exceeds %d", n, maxErrorMsg)
		}
	default:
		return 0, 0, wire.Malformed("unknown fetch status %d", status)
	}
	return status, int(n), nil
}

// decodeFetchReply parses one whole reply held in b, to a request whose OK
// body may hold at most limit bytes.
func decodeFetchReply(b []byte, limit int) (status byte, body []byte, err error) {
	if len(b) < replyHeaderLen {
		return 0, nil, wire.Malformed("truncated fetch reply")
	}
	status, n, err := checkFetchReplyHeader([replyHeaderLen]byte(b[:replyHeaderLen]), limit)
	if err != nil {
		return 0, nil, err
	}
	if len(b) != replyHeaderLen+n {
		return 0, nil, wire.Malformed("fetch reply says %d bytes, holds %d", n, len(b)-replyHeaderLen)
	}
	return status, b[replyHeaderLen:], nil
}

// errorBody is err's message as the body of a NOT_FOUND or ERROR reply.
func errorBody(s string) []byte { return []byte(wire.TruncUTF8(s, maxErrorMsg)) }
