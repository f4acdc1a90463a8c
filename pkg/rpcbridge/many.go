package rpcbridge

import (
	"context"
	"io"
)

// Many names in one call (protocol version 7; docs/rpcbridge.md §6.14):
// GET_MANY asks for many names (or every name under a prefix) and is
// answered entry by entry, each an ENTRY (its Info, then its bytes in DATA
// frames) or an ENTRY_ERROR, the reply ending with a SUMMARY; PUT_MANY
// uploads many blobs, each a PUT_ITEM (name and size) followed by exactly
// size bytes of DATA, the batch ending with an empty DATA (or an ABORT
// between items), and is answered the same way.
const (
	FrameGetMany    FrameType = 0x40 // u32 flags (bit 0: by prefix), str prefix, u32 count, count x str name
	FramePutMany    FrameType = 0x41 // u32 chunk size; then PUT_ITEMs, an empty DATA (or ABORT)
	FramePutItem    FrameType = 0x42 // str name, u64 size; then size bytes of DATA (or ABORT: this item only)
	FrameEntry      FrameType = 0x37 // u32 index, Info; then Info.Size bytes of DATA (GET_MANY)
	FrameEntryError FrameType = 0x38 // u32 index, str name, u32 code, str message
	FrameSummary    FrameType = 0x39 // u32 entries, u32 ok, u32 failed, u64 bytes: ends the reply
)

// ManyVersion is the protocol version that brings GET_MANY and PUT_MANY.
const ManyVersion = 7

// GetManyByPrefix is GET_MANY's flag: the names are every name under the
// prefix that LIST would give, not a list.
const GetManyByPrefix = 1 << 0

// Limits of GET_MANY.
const (
	// MaxManyBody bounds a GET_MANY request body (a larger list of names
	// is split into several requests by the clients).
	MaxManyBody = 1 << 20
	// MaxManyNames bounds the names of one GET_MANY.
	MaxManyNames = 1 << 16
	// minEntryErrorLen is the encoded size of an ENTRY_ERROR with empty
	// strings.
	minEntryErrorLen = 4 + 4 + 4 + 4
	summaryLen       = 4 + 4 + 4 + 8
)

func init() {
	frameNames[FrameGetMany] = "GET_MANY"
	frameNames[FramePutMany] = "PUT_MANY"
	frameNames[FramePutItem] = "PUT_ITEM"
	frameNames[FrameEntry] = "ENTRY"
	frameNames[FrameEntryError] = "ENTRY_ERROR"
	frameNames[FrameSummary] = "SUMMARY"
}

// ManyRequest selects the names of a GetMany: Names, in their order, or
// (ByPrefix) every name under Prefix that the daemon lists ("" every name;
// a prefix as LIST takes it).
type ManyRequest struct {
	Names    []string
	Prefix   string
	ByPrefix bool
}

// ManyEntry is one entry of a GET_MANY or PUT_MANY reply.
type ManyEntry struct {
	// Index is the entry's position: in Names (or the PUT_MANY's items),
	// or in the daemon's listing of the prefix.
	Index int
	Name  string
	// Info is the blob's (Err nil); Err the entry's own error (an *Error:
	// errors.Is matches the blob sentinels).
	Info Info
	Err  error
}

// ManySummary ends a GET_MANY or PUT_MANY reply: how many entries it had,
// how many succeeded and failed, and the bytes of those that succeeded.
type ManySummary struct {
	Entries int    `json:"entries"`
	OK      int    `json:"ok"`
	Failed  int    `json:"failed"`
	Bytes   uint64 `json:"bytes"`
}

// ManyBackend is an optional extension of Backend: one that fetches many
// names better together than one Open each (one request per source)
// implements it, and the server uses it for GET_MANY. A Backend without it
// is served by Opens run in parallel.
type ManyBackend interface {
	// OpenMany opens the blobs of names (checked with blob.ValidateName)
	// and calls each once per name, from any goroutine, possibly several
	// at once, with the name's index, and its info and a reader of its
	// verified bytes (which each reads and closes), or the name's error.
	// It returns when every name had its call, or ctx ended.
	OpenMany(ctx context.Context, names []string, each func(i int, info Info, rc io.ReadCloser, err error)) error
}

// ManyPutter is an optional extension of Backend: one whose Put publishes
// the name after storing it (the omst daemon announces it up its tree, a
// round trip to the root) implements it, and PUT_MANY stores its items
// with Store as they arrive and publishes them together with PublishMany,
// in one announcement instead of one per item.
type ManyPutter interface {
	// Store stores the bytes of r under name with the rules of Put, but
	// does not publish the name: the put is complete once PublishMany has
	// taken its StoredPut.
	Store(ctx context.Context, name string, r io.Reader, opts PutOptions) (StoredPut, error)
	// PublishMany publishes stored puts together and returns, once each
	// is published as Put's would be on its return, their Infos (or
	// errors), in the order of puts.
	PublishMany(ctx context.Context, puts []StoredPut) ([]Info, []error)
}

// StoredPut is a put a ManyPutter stored and has not yet published; only
// the ManyPutter that made it knows what it holds.
type StoredPut any

// NameLister is an optional extension of Backend: the names under a
// prefix, as List gives them, without the work List does for each
// entry's Info (a node fetches missing manifests for their chunk sizes).
// GET_MANY by prefix uses it when the Backend has it.
type NameLister interface {
	ListNames(ctx context.Context, prefix string) ([]string, error)
}

// --- wire -------------------------------------------------------------------

// appendGetManyReq appends a GET_MANY body.
func appendGetManyReq(dst []byte, flags uint32, prefix string, names []string) []byte {
	dst = appendStr(appendU32(dst, flags), prefix)
	dst = appendU32(dst, uint32(len(names)))
	for _, n := range names {
		dst = appendStr(dst, n)
	}
	return dst
}

// getManyReqLen is the encoded size of a GET_MANY body.
func getManyReqLen(prefix string, names []string) int {
	n := 4 + 4 + len(prefix) + 4
	for _, s := range names {
		n += 4 + len(s)
	}
	return n
}

// decodeGetManyReq decodes a GET_MANY body: by prefix, the count is 0; by
// names, the prefix is empty and the count 1 ..= MaxManyNames. Names are
// not checked here (each bad one is its entry's error).
func decodeGetManyReq(b []byte) (flags uint32, prefix string, names []string, err error) {
	d := decoder{b: b}
	flags = d.u32("flags")
	prefix = d.str("prefix")
	n := d.u32("count")
	switch {
	case d.err != nil:
	case flags&^GetManyByPrefix != 0:
		d.fail("GET_MANY with unknown flags 0x%x", flags)
	case flags&GetManyByPrefix != 0 && n != 0:
		d.fail("GET_MANY by prefix with %d names", n)
	case flags&GetManyByPrefix == 0 && prefix != "":
		d.fail("GET_MANY by names with a prefix")
	case flags&GetManyByPrefix == 0 && n == 0:
		d.fail("GET_MANY without names")
	case n > MaxManyNames:
		d.fail("GET_MANY of %d names, more than %d", n, MaxManyNames)
	case uint64(n)*4 > uint64(len(d.b)):
		d.fail("GET_MANY count %d cannot fit in %d bytes", n, len(d.b))
	}
	if d.err == nil && n > 0 {
		names = make([]string, 0, n)
		for i := uint32(0); i < n && d.err == nil; i++ {
			names = append(names, d.str("name"))
		}
	}
	return flags, prefix, names, d.end()
}

// appendEntry appends an ENTRY body: u32 index, Info.
func appendEntry(dst []byte, index int, in *Info) []byte {
	return appendInfo(appendU32(dst, uint32(index)), in)
}

func decodeEntry(b []byte) (int, Info, error) {
	d := decoder{b: b}
	i := d.u32("index")
	in := d.info()
	return int(i), in, d.end()
}

// appendEntryError appends an ENTRY_ERROR body: u32 index, str name, u32
// code, str message (cut as ERROR's is).
func appendEntryError(dst []byte, index int, name string, e *Error) []byte {
	dst = appendStr(appendU32(dst, uint32(index)), name)
	return appendError(dst, e.Code, e.Message)
}

func decodeEntryError(b []byte) (int, string, *Error, error) {
	d := decoder{b: b}
	i := d.u32("index")
	name := d.str("name")
	code := d.u32("code")
	msg := d.str("message")
	if d.err == nil && code == 0 {
		d.fail("ENTRY_ERROR code 0")
	}
	if err := d.end(); err != nil {
		return 0, "", nil, err
	}
	return int(i), name, &Error{Code: Code(code), Message: msg}, nil
}

// appendSummary appends a SUMMARY body.
func appendSummary(dst []byte, s ManySummary) []byte {
	dst = appendU32(appendU32(appendU32(dst, uint32(s.Entries)), uint32(s.OK)), uint32(s.Failed))
	return appendU64(dst, s.Bytes)
}

// decodeSummary decodes a SUMMARY body; ok + failed must be the entries.
func decodeSummary(b []byte) (ManySummary, error) {
	d := decoder{b: b}
	s := ManySummary{Entries: int(d.u32("entries")), OK: int(d.u32("ok")), Failed: int(d.u32("failed"))}
	s.Bytes = d.u64("bytes")
	if d.err == nil && uint64(s.OK)+uint64(s.Failed) != uint64(s.Entries) {
		d.fail("SUMMARY of %d entries with %d ok and %d failed", s.Entries, s.OK, s.Failed)
	}
	return s, d.end()
}

// appendPutItem appends a PUT_ITEM body: str name, u64 size.
func appendPutItem(dst []byte, name string, size uint64) []byte {
	return appendU64(appendStr(dst, name), size)
}

func decodePutItem(b []byte) (string, uint64, error) {
	d := decoder{b: b}
	name := d.str("name")
	size := d.u64("size")
	return name, size, d.end()
}

// decodePutManyReq decodes a PUT_MANY body: u32 chunk size.
func decodePutManyReq(b []byte) (uint32, error) {
	d := decoder{b: b}
	cs := d.u32("chunk_size")
	return cs, d.end()
}
