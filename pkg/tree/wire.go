package tree

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/namespace"
)

// Protocol IDs. docs/protocol.md specifies every message byte by byte.
// tree 1.1.0: REFUSED (a parent's answer to a HELLO it does not accept).
// A node serves both; a child asks with 1.1.0, and a parent resets a
// 1.0.0 stream it refuses.
// names 1.1.0: MANIFEST moved to the fetch protocol (pkg/transfer).
// names 1.2.0: LOOKUP_GET, PUSH, CHUNK.
// names 1.3.0: ANNOUNCE_BATCH, BATCH_ACK (many records in one message),
// the namespace rules' RULE, RULE_ACK, SYNC_RULES, RULES, and LIST,
// LISTED (the records under a prefix, a page at a time).
// A node serves all three and asks with the newest; to a peer that speaks
// only an older one it sends a LOOKUP_GET as a LOOKUP (1.1.0), a batch as
// one ANNOUNCE per record, and no rules (namesVersionHas).
const (
	ProtoTree    protocol.ID = "/omst/tree/1.1.0"
	ProtoTree10  protocol.ID = "/omst/tree/1.0.0"
	ProtoNames   protocol.ID = "/omst/names/1.3.0"
	ProtoNames12 protocol.ID = "/omst/names/1.2.0"
	ProtoNames11 protocol.ID = "/omst/names/1.1.0"
)

// namesProtos are the names versions a node serves and asks with, the
// newest first.
var namesProtos = []protocol.ID{ProtoNames, ProtoNames12, ProtoNames11}

// namesVersionHas reports whether a names request of type typ is part of
// version proto: a request outside the version its stream negotiated is
// malformed there, and is never sent on it.
func namesVersionHas(proto protocol.ID, typ byte) bool {
	switch typ {
	case msgLookup, msgAnnounce, msgPreheat:
		return proto == ProtoNames || proto == ProtoNames12 || proto == ProtoNames11
	case msgLookupGet:
		return proto == ProtoNames || proto == ProtoNames12
	case msgAnnounceBatch, msgRule, msgSyncRules, msgList:
		return proto == ProtoNames
	}
	return false
}

// Limits enforced by every decoder.
const (
	maxSite        = 256
	maxAddrs       = 32
	maxAddrLen     = 1024
	maxErrorMsg    = 1024
	maxRecordBytes = 4096 + blob.MaxProofLen
	// maxInlineManifest bounds a manifest carried in a FOUND reply
	// (32768 chunks: a 32 GiB blob of 1 MiB chunks); a bigger one is
	// fetched on its own.
	maxInlineManifest = 24 + blob.HashSize*32768
	maxHelloBytes     = 2 + maxSite + 1 + maxAddrs*(2+maxAddrLen)
	frameHeaderLen    = 5

	// MaxBatchRecords and MaxBatchBytes bound an ANNOUNCE_BATCH: its
	// records, and its payload. A sender fills a batch up to
	// SendBatchRecords and MaxBatchBytes.
	MaxBatchRecords = 1024
	MaxBatchBytes   = 1 << 20
	// SendBatchRecords is the most records this node puts in one
	// ANNOUNCE_BATCH: a relay stores a batch's records and answers it
	// within the request timeout, which 1,024 records did not always fit
	// on a loaded machine under the race detector.
	SendBatchRecords = 256
	// maxBatchManifest bounds a manifest carried beside a record in an
	// ANNOUNCE_BATCH (1,000 bytes: a blob of up to 30 chunks), so that a
	// small blob's name lists at every node up the tree with its chunk
	// size and count, with no manifest round trip.
	maxBatchManifest = 1000
	// maxEntryMsg bounds the message of one refused entry of a BATCH_ACK.
	maxEntryMsg    = 256
	maxBatchAckLen = 2 + MaxBatchRecords*(2+2+maxEntryMsg)

	// MaxListRecords and MaxListBytes bound a LISTED page: its records,
	// and its payload. A LIST asks for at most MaxListRecords.
	MaxListRecords = 1024
	MaxListBytes   = 1 << 20
	maxListReq     = 2 + 2 + blob.MaxNameLen + 2 + blob.MaxNameLen
)

// Message types of /omst/tree/1.1.0 (1.0.0: without REFUSED).
const (
	msgHello   byte = 0x01 // child -> parent
	msgWelcome byte = 0x02 // parent -> child
	msgPing    byte = 0x03 // child -> parent
	msgPong    byte = 0x04 // parent -> child
	// msgRefused (tree 1.1.0), parent -> child, instead of WELCOME or a
	// PONG: the parent does not take this node as its child (MayAdopt);
	// a UTF-8 message says why. The parent then closes the stream.
	msgRefused byte = 0x05
)

// Message types of /omst/names/1.3.0 (0x12 MANIFEST and 0x93 MANIFEST_OK
// of 1.0.0 are retired; 1.2.0 is 1.3.0 without ANNOUNCE_BATCH, BATCH_ACK
// and the rules' four; 1.1.0 is 1.2.0 without LOOKUP_GET, PUSH, CHUNK).
const (
	msgLookup   byte = 0x10
	msgAnnounce byte = 0x11
	msgPreheat  byte = 0x13 // parent -> child: fetch this record's blob now
	// msgLookupGet is a LOOKUP from a node about to fetch the blob: the
	// FOUND answering it may be followed by the blob's first chunks
	// (PUSH, then CHUNK frames; see Pusher).
	msgLookupGet byte = 0x14
	// msgRule sends a namespace rule (rules.go) to a parent or child; the
	// answer is RULE_ACK once it has gone through the receiver's side.
	msgRule byte = 0x15
	// msgSyncRules, child -> parent at the start of a session: the
	// child's rules, and which page of the parent's it wants (RULES).
	msgSyncRules byte = 0x16
	// msgAnnounceBatch (1.3.0), child -> parent: many records (each with
	// its blob's manifest when small) in one message; the answer,
	// BATCH_ACK, has an entry per record.
	msgAnnounceBatch byte = 0x17
	// msgList (1.3.0), child -> parent: a page of the records under a
	// prefix, after a name; the answer is LISTED.
	msgList byte = 0x18

	msgFound    byte = 0x90
	msgNotFound byte = 0x91
	msgAck      byte = 0x92
	msgPush     byte = 0x94 // after a FOUND answering LOOKUP_GET: chunks first..first+count-1 follow
	msgChunk    byte = 0x95 // one pushed chunk: index u32, bytes
	msgRuleAck  byte = 0x96 // reached u32, unreached u32
	msgRules    byte = 0x97 // next u32, rules
	msgBatchAck byte = 0x98 // count u16, an entry per record of the ANNOUNCE_BATCH
	msgListed   byte = 0x99 // more u8, count u16, the records (LIST's page)
	msgError    byte = 0x9F
)

// MaxPushBytes bounds the chunk bytes pushed after one FOUND (and so one
// CHUNK frame). 4 MiB covers what a new connection's congestion window
// can carry in its first round trips on a 100 Mbit/s, 40 ms WAN path.
const MaxPushBytes = 4 << 20

// malformed returns an error wrapping wire.ErrMalformed.
func malformed(format string, args ...any) error { return wire.Malformed(format, args...) }

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
	case msgRefused:
		return maxErrorMsg
	case msgLookup:
		return blob.MaxNameLen
	case msgLookupGet:
		return 2 + blob.MaxNameLen + wire.MaxCIDLen
	case msgAnnounce, msgPreheat:
		return maxRecordBytes
	case msgPush, msgRuleAck:
		return 8
	case msgRule:
		return namespace.MaxEncodedLen
	case msgSyncRules, msgRules:
		return maxRulesBytes
	case msgAnnounceBatch:
		return MaxBatchBytes
	case msgBatchAck:
		return maxBatchAckLen
	case msgList:
		return maxListReq
	case msgListed:
		return MaxListBytes
	case msgChunk:
		return 4 + MaxPushBytes
	case msgFound:
		return 2 + maxRecordBytes + maxInlineManifest
	case msgNotFound, msgAck:
		return 0
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
	payload, err = wire.ReadN(r, int(n))
	if err != nil {
		return 0, nil, err
	}
	return typ, payload, nil
}

// decodeFrame parses one whole frame held in b (the pure form of readFrame).
func decodeFrame(b []byte) (typ byte, payload []byte, err error) {
	if len(b) < frameHeaderLen {
		return 0, nil, malformed("frame of %d bytes is shorter than its header", len(b))
	}
	typ, payload, err = readFrame(wire.NewSliceReader(b))
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

// ---- /omst/tree/1.1.0 ----

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

// refusedFrame encodes a REFUSED: err's message, cut to maxErrorMsg bytes.
func refusedFrame(err error) []byte {
	return appendFrame(nil, msgRefused, []byte(wire.TruncUTF8(err.Error(), maxErrorMsg)))
}

// decodeRefused parses a REFUSED payload (its message, made valid UTF-8).
func decodeRefused(b []byte) string { return strings.ToValidUTF8(string(b), "?") }

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

// ---- /omst/names/1.3.0 ----

// namesRequest is one request on a names stream.
type namesRequest struct {
	Type byte   // msgLookup, msgLookupGet, msgAnnounce, msgPreheat, msgAnnounceBatch, msgRule, msgSyncRules
	Name string // LOOKUP, LOOKUP_GET
	// Have is, in a LOOKUP_GET, the blob of Name whose first chunk the
	// asker holds (cid.Undef: none): no chunks are pushed while it is the
	// current one.
	Have   cid.Cid
	Record blob.Record    // ANNOUNCE, PREHEAT
	Rule   namespace.Rule // RULE
	// From (the first of the parent's rules wanted) and Rules (the
	// child's) of a SYNC_RULES.
	From  uint32
	Rules []namespace.Rule
	// Batch is an ANNOUNCE_BATCH's records.
	Batch []batchEntry
	// List is a LIST's page request.
	List listQuery
}

// listQuery is a LIST: up to Limit (1 ..= MaxListRecords) records whose
// names start with Prefix (blob.ValidatePrefix; "" for all) and sort
// after After ("" for the first page; else a valid name under Prefix).
type listQuery struct {
	Prefix, After string
	Limit         int
}

// encodeList encodes a LIST: limit u16, prefix and after (u16 length,
// bytes each).
func encodeList(q listQuery) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(q.Limit))
	b = appendString16(b, q.Prefix)
	return appendFrame(nil, msgList, appendString16(b, q.After))
}

// decodeList parses a LIST payload and checks its fields.
func decodeList(b []byte) (listQuery, error) {
	var q listQuery
	if len(b) < 2 {
		return q, malformed("LIST of %d bytes", len(b))
	}
	q.Limit = int(binary.BigEndian.Uint16(b))
	if q.Limit < 1 || q.Limit > MaxListRecords {
		return q, malformed("LIST of %d records (1 to %d)", q.Limit, MaxListRecords)
	}
	var err error
	if q.Prefix, b, err = takeString16(b[2:], blob.MaxNameLen); err != nil {
		return q, fmt.Errorf("LIST prefix: %w", err)
	}
	if q.After, b, err = takeString16(b, blob.MaxNameLen); err != nil {
		return q, fmt.Errorf("LIST after: %w", err)
	}
	if len(b) != 0 {
		return q, malformed("LIST: %d trailing bytes", len(b))
	}
	if err := blob.ValidatePrefix(q.Prefix); err != nil {
		return q, fmt.Errorf("LIST: %w", err)
	}
	if q.After != "" {
		if err := blob.ValidateName(q.After); err != nil {
			return q, fmt.Errorf("LIST after: %w", err)
		}
		if !strings.HasPrefix(q.After, q.Prefix) {
			return q, malformed("LIST after %q, not under its prefix %q", q.After, q.Prefix)
		}
	}
	return q, nil
}

// listedSize is the LISTED payload's bytes before its records, and
// listedEntry a record's bytes in it.
const listedSize = 1 + 2

func listedEntry(r blob.Record) int { return 2 + len(r.Encode()) }

// encodeListed encodes a LISTED: more u8 (1: the prefix has records after
// the last one here), count u16, then per record its length u16 and bytes.
// The caller keeps the payload within MaxListBytes.
func encodeListed(recs []blob.Record, more bool) []byte {
	b := make([]byte, 0, 256)
	if more {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(recs)))
	for _, r := range recs {
		rb := r.Encode()
		b = binary.BigEndian.AppendUint16(b, uint16(len(rb)))
		b = append(b, rb...)
	}
	return appendFrame(nil, msgListed, b)
}

// decodeListed parses a LISTED payload: at most MaxListRecords records,
// each valid (blob.DecodeRecord). Whether they answer the LIST (under its
// prefix, in order, after its name) is checkListPage's.
func decodeListed(b []byte) ([]blob.Record, bool, error) {
	if len(b) < listedSize {
		return nil, false, malformed("LISTED of %d bytes", len(b))
	}
	if b[0] > 1 {
		return nil, false, malformed("LISTED with more = %d", b[0])
	}
	more := b[0] == 1
	n := int(binary.BigEndian.Uint16(b[1:]))
	if n > MaxListRecords {
		return nil, false, malformed("LISTED of %d records (at most %d)", n, MaxListRecords)
	}
	b = b[listedSize:]
	recs := make([]blob.Record, 0, min(n, len(b)/2))
	for i := range n {
		if len(b) < 2 {
			return nil, false, malformed("LISTED: record %d of %d cut short", i, n)
		}
		l := int(binary.BigEndian.Uint16(b))
		if l > maxRecordBytes || len(b) < 2+l {
			return nil, false, malformed("LISTED: record %d of %d bytes in %d", i, l, len(b)-2)
		}
		r, err := blob.DecodeRecord(b[2 : 2+l])
		if err != nil {
			return nil, false, fmt.Errorf("LISTED record %d: %w", i, err)
		}
		recs = append(recs, r)
		b = b[2+l:]
	}
	if len(b) != 0 {
		return nil, false, malformed("LISTED: %d trailing bytes", len(b))
	}
	return recs, more, nil
}

// batchEntry is one record of an ANNOUNCE_BATCH and, when small, the
// encoded manifest of its blob (not yet checked against its ID), or nil.
type batchEntry struct {
	Record   blob.Record
	Manifest []byte
}

// entrySize is the bytes e takes in an ANNOUNCE_BATCH's payload.
func entrySize(e batchEntry) int { return 2 + len(e.Record.Encode()) + 2 + len(e.Manifest) }

// batchLen returns how many of entries, from the first, the next batch
// takes: as many as fit SendBatchRecords and MaxBatchBytes, at least one.
func batchLen(sizes []int) int {
	total := 2
	for i, n := range sizes {
		if i == SendBatchRecords || (i > 0 && total+n > MaxBatchBytes) {
			return i
		}
		total += n
	}
	return len(sizes)
}

// encodeAnnounceBatch encodes an ANNOUNCE_BATCH: count u16, then per
// entry the record (u16 length, bytes) and the manifest (u16 length, 0
// for none, bytes).
func encodeAnnounceBatch(entries []batchEntry) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(entries)))
	for _, e := range entries {
		b = appendString16(b, string(e.Record.Encode()))
		b = appendString16(b, string(e.Manifest))
	}
	return appendFrame(nil, msgAnnounceBatch, b)
}

// decodeAnnounceBatch parses an ANNOUNCE_BATCH payload: 1 to
// MaxBatchRecords entries, each record valid (blob.DecodeRecord), each
// manifest at most maxBatchManifest bytes.
func decodeAnnounceBatch(b []byte) ([]batchEntry, error) {
	if len(b) < 2 {
		return nil, malformed("ANNOUNCE_BATCH of %d bytes", len(b))
	}
	n := int(binary.BigEndian.Uint16(b))
	if n == 0 || n > MaxBatchRecords {
		return nil, malformed("ANNOUNCE_BATCH of %d records (1 to %d)", n, MaxBatchRecords)
	}
	b = b[2:]
	out := make([]batchEntry, 0, min(n, len(b)/4))
	for i := range n {
		rb, rest, err := takeString16(b, maxRecordBytes)
		if err != nil {
			return nil, fmt.Errorf("ANNOUNCE_BATCH record %d: %w", i, err)
		}
		r, err := blob.DecodeRecord([]byte(rb))
		if err != nil {
			return nil, fmt.Errorf("ANNOUNCE_BATCH record %d: %w", i, err)
		}
		mb, rest, err := takeString16(rest, maxBatchManifest)
		if err != nil {
			return nil, fmt.Errorf("ANNOUNCE_BATCH manifest %d: %w", i, err)
		}
		e := batchEntry{Record: r}
		if len(mb) > 0 {
			e.Manifest = []byte(mb)
		}
		out = append(out, e)
		b = rest
	}
	if len(b) != 0 {
		return nil, malformed("ANNOUNCE_BATCH: %d trailing bytes", len(b))
	}
	return out, nil
}

// entryResult is one entry of a BATCH_ACK: the record was taken (stored,
// or older than the one held, or withdrawn there by a namespace rule), or
// refused with an ERROR's code and a message.
type entryResult struct {
	Refused bool
	Code    byte
	Message string
}

// encodeBatchAck encodes a BATCH_ACK: count u16, then per entry status u8
// (0 taken, 1 refused), and for a refused one its code u8 and message
// (u16 length, at most maxEntryMsg bytes).
func encodeBatchAck(res []entryResult) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(res)))
	for _, e := range res {
		if !e.Refused {
			b = append(b, 0)
			continue
		}
		b = append(b, 1, e.Code)
		b = appendString16(b, wire.TruncUTF8(e.Message, maxEntryMsg))
	}
	return appendFrame(nil, msgBatchAck, b)
}

// decodeBatchAck parses a BATCH_ACK payload.
func decodeBatchAck(b []byte) ([]entryResult, error) {
	if len(b) < 2 {
		return nil, malformed("BATCH_ACK of %d bytes", len(b))
	}
	n := int(binary.BigEndian.Uint16(b))
	if n == 0 || n > MaxBatchRecords {
		return nil, malformed("BATCH_ACK of %d entries (1 to %d)", n, MaxBatchRecords)
	}
	b = b[2:]
	out := make([]entryResult, 0, min(n, len(b)))
	for i := range n {
		if len(b) < 1 {
			return nil, malformed("BATCH_ACK: entry %d missing", i)
		}
		switch b[0] {
		case 0:
			out = append(out, entryResult{})
			b = b[1:]
		case 1:
			if len(b) < 2 {
				return nil, malformed("BATCH_ACK: entry %d truncated", i)
			}
			code := b[1]
			msg, rest, err := takeString16(b[2:], maxEntryMsg)
			if err != nil {
				return nil, fmt.Errorf("BATCH_ACK entry %d: %w", i, err)
			}
			out = append(out, entryResult{Refused: true, Code: code, Message: msg})
			b = rest
		default:
			return nil, malformed("BATCH_ACK: entry %d of status %d", i, b[0])
		}
	}
	if len(b) != 0 {
		return nil, malformed("BATCH_ACK: %d trailing bytes", len(b))
	}
	return out, nil
}

// refusedEntry is the BATCH_ACK entry for a record refused with err.
func refusedEntry(err error) entryResult {
	return entryResult{Refused: true, Code: errorCode(err), Message: wire.TruncUTF8(err.Error(), maxEntryMsg)}
}

func encodeNamesRequest(q namesRequest) []byte {
	switch q.Type {
	case msgLookup:
		return appendFrame(nil, msgLookup, []byte(q.Name))
	case msgLookupGet:
		b := appendString16(nil, q.Name)
		if q.Have.Defined() {
			b = append(b, q.Have.Bytes()...)
		}
		return appendFrame(nil, q.Type, b)
	case msgAnnounce, msgPreheat:
		return appendFrame(nil, q.Type, q.Record.Encode())
	case msgRule:
		return appendFrame(nil, q.Type, q.Rule.Encode())
	case msgSyncRules:
		return appendFrame(nil, q.Type, appendRuleList(binary.BigEndian.AppendUint32(nil, q.From), q.Rules))
	case msgAnnounceBatch:
		return encodeAnnounceBatch(q.Batch)
	case msgList:
		return encodeList(q.List)
	}
	panic(fmt.Sprintf("encodeNamesRequest: type 0x%02x", q.Type))
}

// decodeNamesRequest parses the payload of a names request of type typ.
// Names are checked with blob.ValidateName.
func decodeNamesRequest(typ byte, payload []byte) (namesRequest, error) {
	q := namesRequest{Type: typ}
	switch typ {
	case msgLookup:
		if err := blob.ValidateName(string(payload)); err != nil {
			return q, err
		}
		q.Name = string(payload)
	case msgLookupGet:
		name, rest, err := takeString16(payload, blob.MaxNameLen)
		if err != nil {
			return q, fmt.Errorf("LOOKUP_GET name: %w", err)
		}
		if err := blob.ValidateName(name); err != nil {
			return q, err
		}
		q.Name = name
		if len(rest) > 0 {
			if q.Have, err = wire.DecodeCID(rest); err != nil {
				return q, fmt.Errorf("LOOKUP_GET: %w", err)
			}
		}
	case msgAnnounce, msgPreheat:
		r, err := blob.DecodeRecord(payload)
		if err != nil {
			return q, err
		}
		q.Record = r
	case msgRule:
		r, err := namespace.Decode(payload)
		if err != nil {
			return q, fmt.Errorf("RULE: %w", err)
		}
		q.Rule = r
	case msgSyncRules:
		if len(payload) < 4 {
			return q, malformed("SYNC_RULES of %d bytes", len(payload))
		}
		q.From = binary.BigEndian.Uint32(payload)
		rules, err := decodeRuleList(payload[4:])
		if err != nil {
			return q, fmt.Errorf("SYNC_RULES: %w", err)
		}
		q.Rules = rules
	case msgAnnounceBatch:
		batch, err := decodeAnnounceBatch(payload)
		if err != nil {
			return q, err
		}
		q.Batch = batch
	case msgList:
		l, err := decodeList(payload)
		if err != nil {
			return q, err
		}
		q.List = l
	default:
		return q, malformed("unknown names request 0x%02x", typ)
	}
	return q, nil
}

// namesReply is the one reply to a names request.
type namesReply struct {
	Type   byte // msgFound, msgNotFound, msgAck, msgError
	Record blob.Record
	// Manifest is the encoded manifest of Record's blob that a FOUND may
	// carry (not yet checked against Record.ID), or nil.
	Manifest []byte
	Code     byte // of an ERROR: errOther, errUnreachable or errInvalidName
	Message  string
	// Reached and Unreached (RULE_ACK); Rules and Next (RULES).
	Reached, Unreached uint32
	Rules              []namespace.Rule
	Next               uint32
	// Entries (BATCH_ACK): one per record of the ANNOUNCE_BATCH.
	Entries []entryResult
	// Listed and More (LISTED): the page's records, and whether the
	// prefix has more after them.
	Listed []blob.Record
	More   bool
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

// encodeFound encodes a FOUND reply: the record (u16 length, bytes), then
// the encoded manifest of its blob, if any (the rest of the payload).
func encodeFound(r blob.Record, manifest []byte) []byte {
	rb := r.Encode()
	b := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(rb)+len(manifest)), uint16(len(rb)))
	b = append(append(b, rb...), manifest...)
	return appendFrame(nil, msgFound, b)
}

// decodeNamesReply parses the payload of a names reply of type typ.
func decodeNamesReply(typ byte, payload []byte) (namesReply, error) {
	p := namesReply{Type: typ}
	switch typ {
	case msgFound:
		if len(payload) < 2 {
			return p, malformed("FOUND of %d bytes", len(payload))
		}
		n := int(binary.BigEndian.Uint16(payload))
		if n > maxRecordBytes || len(payload) < 2+n {
			return p, malformed("FOUND with a record of %d bytes in %d", n, len(payload))
		}
		r, err := blob.DecodeRecord(payload[2 : 2+n])
		if err != nil {
			return p, err
		}
		p.Record = r
		if m := payload[2+n:]; len(m) > 0 {
			if len(m) > maxInlineManifest {
				return p, malformed("FOUND with a manifest of %d bytes", len(m))
			}
			p.Manifest = m
		}
	case msgNotFound, msgAck:
		if len(payload) != 0 {
			return p, malformed("reply 0x%02x with %d payload bytes", typ, len(payload))
		}
	case msgRuleAck:
		if len(payload) != 8 {
			return p, malformed("RULE_ACK of %d bytes", len(payload))
		}
		p.Reached, p.Unreached = binary.BigEndian.Uint32(payload), binary.BigEndian.Uint32(payload[4:])
	case msgRules:
		if len(payload) < 4 {
			return p, malformed("RULES of %d bytes", len(payload))
		}
		p.Next = binary.BigEndian.Uint32(payload)
		rules, err := decodeRuleList(payload[4:])
		if err != nil {
			return p, fmt.Errorf("RULES: %w", err)
		}
		p.Rules = rules
	case msgBatchAck:
		entries, err := decodeBatchAck(payload)
		if err != nil {
			return p, err
		}
		p.Entries = entries
	case msgListed:
		recs, more, err := decodeListed(payload)
		if err != nil {
			return p, err
		}
		p.Listed, p.More = recs, more
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

// pushHeader is a PUSH: chunks First .. First+Count-1 of the blob just
// found follow, one CHUNK frame each, in that order.
type pushHeader struct{ First, Count uint32 }

func encodePush(h pushHeader) []byte {
	b := binary.BigEndian.AppendUint32(nil, h.First)
	return appendFrame(nil, msgPush, binary.BigEndian.AppendUint32(b, h.Count))
}

// decodePush parses a PUSH payload.
func decodePush(b []byte) (pushHeader, error) {
	if len(b) != 8 {
		return pushHeader{}, malformed("PUSH of %d bytes", len(b))
	}
	h := pushHeader{First: binary.BigEndian.Uint32(b), Count: binary.BigEndian.Uint32(b[4:])}
	if h.Count == 0 || uint64(h.First)+uint64(h.Count) > blob.MaxChunks {
		return h, malformed("PUSH of chunks %d+%d", h.First, h.Count)
	}
	return h, nil
}

// appendChunkFrame appends a CHUNK frame: index u32, the chunk's bytes.
func appendChunkFrame(b []byte, index uint32, data []byte) []byte {
	b = append(b, msgChunk)
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(data)))
	b = binary.BigEndian.AppendUint32(b, index)
	return append(b, data...)
}

// decodeChunkFrame parses a CHUNK payload.
func decodeChunkFrame(b []byte) (index uint32, data []byte, err error) {
	if len(b) < 4 {
		return 0, nil, malformed("CHUNK of %d bytes", len(b))
	}
	return binary.BigEndian.Uint32(b), b[4:], nil
}

// errorFrame encodes err as a names ERROR: its code, then its message cut
// to maxErrorMsg bytes.
func errorFrame(err error) []byte {
	msg := wire.TruncUTF8(err.Error(), maxErrorMsg)
	return appendFrame(nil, msgError, append([]byte{errorCode(err)}, msg...))
}

// errorCode is the ERROR code that stands for err.
func errorCode(err error) byte {
	switch {
	case errors.Is(err, blob.ErrUnreachable):
		return errUnreachable
	case errors.Is(err, blob.ErrInvalidName):
		return errInvalidName
	}
	return errOther
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
