package tree

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/omst-project/omst/pkg/blob"
)

// Protocol IDs. docs/protocol.md specifies every message byte by byte.
const (
	ProtoTree  protocol.ID = "/omst/tree/1.0.0"
	ProtoNames protocol.ID = "/omst/names/1.0.0"
	ProtoFetch protocol.ID = "/omst/fetch/1.0.0"
)

// Limits enforced by every decoder.
const (
	maxSite        = 256
	maxAddrs       = 32
	maxAddrLen     = 1024
	maxCIDLen      = 256
	maxErrorMsg    = 1024
	maxRecordBytes = 4096
	maxHelloBytes  = 2 + maxSite + 1 + maxAddrs*(2+maxAddrLen)
	// maxManifestBytes is the largest encoded manifest (blob.MaxChunks chunks).
	maxManifestBytes = 24 + blob.HashSize*blob.MaxChunks
	frameHeaderLen   = 5
	fetchReqLen      = 1 + 2 + 4 + blob.HashSize // without the CID bytes
)

// Message types of /omst/tree/1.0.0.
const (
	msgHello   byte = 0x01 // child -> parent
	msgWelcome byte = 0x02 // parent -> child
	msgPing    byte = 0x03 // child -> parent
	msgPong    byte = 0x04 // parent -> child
)

// Message types of /omst/names/1.0.0.
const (
	msgLookup   byte = 0x10
	msgAnnounce byte = 0x11
	msgManifest byte = 0x12

	msgFound      byte = 0x90
	msgNotFound   byte = 0x91
	msgAck        byte = 0x92
	msgManifestOK byte = 0x93
	msgError      byte = 0x9F
)

// Fetch protocol request types and reply statuses.
const (
	msgGet    byte = 0x20
	msgReport byte = 0x21 // the chunk received for this request did not match its hash

	statusOK       byte = 0
	statusNotFound byte = 1
	statusError    byte = 2
)

// errMalformed marks a message that breaks the wire format.
var errMalformed = errors.New("malformed message")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
}

// frameLimit returns the largest payload a frame of type typ may carry, or
// -1 if typ is unknown.
func frameLimit(typ byte) int {
	switch typ {
	case msgHello:
		return maxHelloBytes
	case msgWelcome:
		return 2 + maxSite
	case msgPing, msgPong:
		return 8
	case msgLookup:
		return blob.MaxNameLen
	case msgAnnounce, msgFound:
		return maxRecordBytes
	case msgManifest:
		return maxCIDLen
	case msgNotFound, msgAck:
		return 0
	case msgManifestOK:
		return maxManifestBytes
	case msgError:
		return 1 + maxErrorMsg // code, message
	}
	return -1
}

// appendFrame appends a frame: type u8, payload length u32, payload.
func appendFrame(b []byte, typ byte, payload []byte) []byte {
	b = append(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

// readFrame reads one frame from r. The payload length is checked against
// frameLimit(typ) before anything is allocated, and the buffer grows only as
// bytes actually arrive, so a lying length costs the sender, not us.
func readFrame(r io.Reader) (typ byte, payload []byte, err error) {
	var hdr [frameHeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	typ = hdr[0]
	n := binary.BigEndian.Uint32(hdr[1:])
	limit := frameLimit(typ)
	if limit < 0 {
		return 0, nil, malformed("unknown message type 0x%02x", typ)
	}
	if uint64(n) > uint64(limit) {
		return 0, nil, malformed("message type 0x%02x of %d bytes exceeds %d", typ, n, limit)
	}
	payload, err = readN(r, int(n))
	if err != nil {
		return 0, nil, err
	}
	return typ, payload, nil
}

// readN reads exactly n bytes, allocating in steps of at most 1 MiB.
func readN(r io.Reader, n int) ([]byte, error) {
	const step = 1 << 20
	if n <= step {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, unexpected(err)
		}
		return b, nil
	}
	b := make([]byte, 0, step)
	for len(b) < n {
		k := min(step, n-len(b))
		b = append(b, make([]byte, k)...)
		if _, err := io.ReadFull(r, b[len(b)-k:]); err != nil {
			return nil, unexpected(err)
		}
	}
	return b, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// decodeFrame parses one whole frame held in b (the pure form of readFrame).
func decodeFrame(b []byte) (typ byte, payload []byte, err error) {
	if len(b) < frameHeaderLen {
		return 0, nil, malformed("frame of %d bytes is shorter than its header", len(b))
	}
	typ, payload, err = readFrame(byteReader(b))
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, malformed("truncated frame")
		}
		return 0, nil, err
	}
	if len(payload)+frameHeaderLen != len(b) {
		return 0, nil, malformed("%d trailing bytes", len(b)-len(payload)-frameHeaderLen)
	}
	return typ, payload, nil
}

type sliceReader struct{ b []byte }

func byteReader(b []byte) *sliceReader { return &sliceReader{b} }

func (s *sliceReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}

// ---- /omst/tree/1.0.0 ----

// hello is the first message a child sends its parent.
type hello struct {
	Site  string
	Addrs []string
}

func encodeHello(h hello) []byte {
	b := appendString16(nil, h.Site)
	b = append(b, byte(len(h.Addrs)))
	for _, a := range h.Addrs {
		b = appendString16(b, a)
	}
	return b
}

// decodeHello parses a HELLO payload.
func decodeHello(b []byte) (hello, error) {
	var h hello
	site, b, err := takeString16(b, maxSite)
	if err != nil {
		return h, fmt.Errorf("hello site: %w", err)
	}
	h.Site = site
	if len(b) < 1 {
		return h, malformed("hello: no address count")
	}
	n := int(b[0])
	b = b[1:]
	if n > maxAddrs {
		return h, malformed("hello: %d addresses exceed %d", n, maxAddrs)
	}
	for range n {
		var a string
		if a, b, err = takeString16(b, maxAddrLen); err != nil {
			return h, fmt.Errorf("hello address: %w", err)
		}
		h.Addrs = append(h.Addrs, a)
	}
	if len(b) != 0 {
		return h, malformed("hello: %d trailing bytes", len(b))
	}
	return h, nil
}

// decodeWelcome parses a WELCOME payload (the parent's site).
func decodeWelcome(b []byte) (string, error) {
	site, rest, err := takeString16(b, maxSite)
	if err != nil {
		return "", fmt.Errorf("welcome: %w", err)
	}
	if len(rest) != 0 {
		return "", malformed("welcome: %d trailing bytes", len(rest))
	}
	return site, nil
}

func appendString16(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func takeString16(b []byte, max int) (string, []byte, error) {
	if len(b) < 2 {
		return "", nil, malformed("truncated length")
	}
	n := int(binary.BigEndian.Uint16(b))
	if n > max {
		return "", nil, malformed("string of %d bytes exceeds %d", n, max)
	}
	if len(b) < 2+n {
		return "", nil, malformed("truncated string")
	}
	return string(b[2 : 2+n]), b[2+n:], nil
}

// ---- /omst/names/1.0.0 ----

// namesRequest is one request on a names stream.
type namesRequest struct {
	Type   byte        // msgLookup, msgAnnounce or msgManifest
	Name   string      // LOOKUP
	Record blob.Record // ANNOUNCE
	ID     cid.Cid     // MANIFEST
}

func encodeNamesRequest(q namesRequest) []byte {
	switch q.Type {
	case msgLookup:
		return appendFrame(nil, msgLookup, []byte(q.Name))
	case msgAnnounce:
		r := q.Record
		r.Via = ""
		return appendFrame(nil, msgAnnounce, r.Encode())
	case msgManifest:
		return appendFrame(nil, msgManifest, q.ID.Bytes())
	}
	panic(fmt.Sprintf("encodeNamesRequest: type 0x%02x", q.Type))
}

// decodeNamesRequest parses the payload of a names request of type typ.
// Names are checked with blob.ValidateName; a record's Via is cleared (it
// is the sender's routing state, not ours).
func decodeNamesRequest(typ byte, payload []byte) (namesRequest, error) {
	q := namesRequest{Type: typ}
	switch typ {
	case msgLookup:
		if err := blob.ValidateName(string(payload)); err != nil {
			return q, err
		}
		q.Name = string(payload)
	case msgAnnounce:
		r, err := blob.DecodeRecord(payload)
		if err != nil {
			return q, err
		}
		r.Via = ""
		q.Record = r
	case msgManifest:
		id, err := decodeCID(payload)
		if err != nil {
			return q, err
		}
		q.ID = id
	default:
		return q, malformed("unknown names request 0x%02x", typ)
	}
	return q, nil
}

func decodeCID(b []byte) (cid.Cid, error) {
	if len(b) > maxCIDLen {
		return cid.Undef, malformed("CID of %d bytes", len(b))
	}
	n, id, err := cid.CidFromBytes(b)
	if err != nil {
		return cid.Undef, fmt.Errorf("%w: bad CID: %v", errMalformed, err)
	}
	if n != len(b) {
		return cid.Undef, malformed("%d bytes after the CID", len(b)-n)
	}
	return id, nil
}

// namesReply is the one reply to a names request.
type namesReply struct {
	Type     byte // msgFound, msgNotFound, msgAck, msgManifestOK, msgError
	Record   blob.Record
	Manifest []byte
	Code     byte // of an ERROR: errOther, errUnreachable or errInvalidName
	Message  string
}

// Codes carried by a names ERROR, so that a cause keeps its meaning across
// hops: a worker whose head cannot reach the root learns that the root is
// unreachable, not merely that its head failed. Unknown codes read as
// errOther.
const (
	errOther       byte = 0
	errUnreachable byte = 1 // an upstream peer could not be reached
	errInvalidName byte = 2
)

// decodeNamesReply parses the payload of a names reply of type typ. A FOUND
// record's Via is cleared.
func decodeNamesReply(typ byte, payload []byte) (namesReply, error) {
	p := namesReply{Type: typ}
	switch typ {
	case msgFound:
		r, err := blob.DecodeRecord(payload)
		if err != nil {
			return p, err
		}
		r.Via = ""
		p.Record = r
	case msgNotFound, msgAck:
		if len(payload) != 0 {
			return p, malformed("reply 0x%02x with %d payload bytes", typ, len(payload))
		}
	case msgManifestOK:
		if len(payload) > maxManifestBytes {
			return p, malformed("manifest of %d bytes", len(payload))
		}
		p.Manifest = payload
	case msgError:
		if len(payload) < 1 || len(payload) > 1+maxErrorMsg {
			return p, malformed("error payload of %d bytes", len(payload))
		}
		p.Code, p.Message = payload[0], string(payload[1:])
	default:
		return p, malformed("unknown names reply 0x%02x", typ)
	}
	return p, nil
}

// errorFrame encodes err as a names ERROR: its code, then its message cut
// to maxErrorMsg bytes.
func errorFrame(err error) []byte {
	msg := truncUTF8(err.Error(), maxErrorMsg)
	code := errOther
	switch {
	case errors.Is(err, blob.ErrUnreachable):
		code = errUnreachable
	case errors.Is(err, blob.ErrInvalidName):
		code = errInvalidName
	}
	return appendFrame(nil, msgError, append([]byte{code}, msg...))
}

// truncUTF8 cuts s to at most n bytes, at a rune boundary.
func truncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// remoteError is the error a peer's ERROR reply stands for.
func remoteError(who string, rep namesReply) error {
	switch rep.Code {
	case errUnreachable:
		return fmt.Errorf("%s answered: %w (%s)", who, blob.ErrUnreachable, rep.Message)
	case errInvalidName:
		return fmt.Errorf("%s answered: %w (%s)", who, blob.ErrInvalidName, rep.Message)
	}
	return fmt.Errorf("%s answered: %s", who, rep.Message)
}

// ---- /omst/fetch/1.0.0 ----

// fetchRequest asks for chunk Index (hash Hash) of blob ID, or with Report
// tells the server that the bytes it sent for that chunk did not match Hash.
type fetchRequest struct {
	ID     cid.Cid
	Index  uint32
	Hash   blob.Hash
	Report bool
}

func appendFetchRequest(b []byte, q fetchRequest) []byte {
	idb := q.ID.Bytes()
	typ := msgGet
	if q.Report {
		typ = msgReport
	}
	b = append(b, typ)
	b = binary.BigEndian.AppendUint16(b, uint16(len(idb)))
	b = append(b, idb...)
	b = binary.BigEndian.AppendUint32(b, q.Index)
	return append(b, q.Hash[:]...)
}

// readFetchRequest reads one GET or REPORT request.
func readFetchRequest(r *bufio.Reader) (fetchRequest, error) {
	var q fetchRequest
	var hdr [3]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return q, err
	}
	switch hdr[0] {
	case msgGet:
	case msgReport:
		q.Report = true
	default:
		return q, malformed("unknown fetch request 0x%02x", hdr[0])
	}
	n := int(binary.BigEndian.Uint16(hdr[1:]))
	if n > maxCIDLen {
		return q, malformed("CID of %d bytes", n)
	}
	var buf [maxCIDLen + 4 + blob.HashSize]byte
	b := buf[:n+4+blob.HashSize]
	if _, err := io.ReadFull(r, b); err != nil {
		return q, unexpected(err)
	}
	id, err := decodeCID(b[:n])
	if err != nil {
		return q, err
	}
	q.ID = id
	q.Index = binary.BigEndian.Uint32(b[n:])
	copy(q.Hash[:], b[n+4:])
	if q.Hash.IsZero() {
		return q, malformed("zero chunk hash")
	}
	return q, nil
}

// decodeFetchRequest parses one whole GET or REPORT request held in b.
func decodeFetchRequest(b []byte) (fetchRequest, error) {
	r := bufio.NewReaderSize(byteReader(b), 16)
	q, err := readFetchRequest(r)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return q, malformed("truncated fetch request")
		}
		return q, err
	}
	if r.Buffered() != 0 || len(b) != fetchReqLen+len(q.ID.Bytes()) {
		return q, malformed("trailing bytes after fetch request")
	}
	return q, nil
}

// fetchReplyHeader is the fixed part of a fetch reply.
func appendFetchReplyHeader(b []byte, status byte, n int) []byte {
	b = append(b, status)
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// checkFetchReplyHeader validates a reply header; it returns the status and
// the body length.
func checkFetchReplyHeader(hdr [frameHeaderLen]byte) (byte, int, error) {
	status := hdr[0]
	n := binary.BigEndian.Uint32(hdr[1:])
	switch status {
	case statusOK:
		if n > blob.MaxChunkSize {
			return 0, 0, malformed("chunk of %d bytes exceeds %d", n, blob.MaxChunkSize)
		}
	case statusNotFound, statusError:
		if n > maxErrorMsg {
			return 0, 0, malformed("message of %d bytes exceeds %d", n, maxErrorMsg)
		}
	default:
		return 0, 0, malformed("unknown fetch status %d", status)
	}
	return status, int(n), nil
}

// decodeFetchReply parses one whole fetch reply held in b.
func decodeFetchReply(b []byte) (status byte, body []byte, err error) {
	if len(b) < frameHeaderLen {
		return 0, nil, malformed("truncated fetch reply")
	}
	status, n, err := checkFetchReplyHeader([frameHeaderLen]byte(b[:frameHeaderLen]))
	if err != nil {
		return 0, nil, err
	}
	if len(b) != frameHeaderLen+n {
		return 0, nil, malformed("fetch reply says %d bytes, holds %d", n, len(b)-frameHeaderLen)
	}
	return status, b[frameHeaderLen:], nil
}
