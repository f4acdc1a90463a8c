package rpcbridge

// Wire encoding: pure functions over byte slices, no IO. Every decoder here
// is a fuzz target (fuzz_test.go). The layout is specified in
// docs/rpcbridge.md; keep the two in step.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ProtocolVersion is the highest version of the local API protocol this
// package speaks: a client asks for it in HELLO, a server answers with the
// smaller of it and the client's. Version 2 adds GET_FD and FDS; version 3
// PREHEAT and PREHEAT_JSON; version 4 PROVIDERS and PROVIDERS_JSON; version
// 5 PUT_FD and GET_TO_FD (files opened by the client, passed as
// descriptors); version 6 REMOVE_PREFIX, SET_TTL, DU and NAMESPACE_JSON
// (namespace.go); version 7 GET_MANY and PUT_MANY (many.go); version 8
// PROGRESS in the replies to GET_TO_FD and GET_FILE (progress.go).
const ProtocolVersion = 8

// MinProtocolVersion is the lowest version this package still speaks.
const MinProtocolVersion = 1

// Magic opens every HELLO body.
const Magic = "OMST"

const (
	// HeaderSize is the size of a frame header.
	HeaderSize = 8
	// MaxFrameBody is the largest frame body a decoder accepts (16 MiB).
	MaxFrameBody = 16 << 20
	// MaxRequestBody bounds the body of a request frame (PUT, GET, ...;
	// not DATA): the largest valid one is far smaller.
	MaxRequestBody = 64 << 10
	// DataFrameSize is the payload size this package uses for DATA frames
	// it sends; receivers accept any size up to MaxFrameBody.
	DataFrameSize = 1 << 20
	// MaxPathLen bounds the path field of PUT_FILE and GET_FILE.
	MaxPathLen = 4096
	// maxMessageLen bounds the message of the ERROR frames the server sends.
	maxMessageLen = 4096
	// minInfoLen is the encoded size of an Info whose strings are empty.
	minInfoLen = 4 + 4 + 8 + 4 + 4 + 8 + 4 + 4
	// MaxExtentsPerFrame bounds the extents (and so the descriptors) of one
	// FDS frame; SCM_RIGHTS allows at most 253 per message.
	MaxExtentsPerFrame = 64
	// extentLen is the encoded size of an Extent.
	extentLen = 3 * 8
)

// FrameType is the type byte of a frame header.
type FrameType uint8

// Frame types. Requests go client to server; replies server to client;
// DATA goes both ways (PUT upload, GET download).
const (
	FrameHello FrameType = 0x01 // both ways: magic + version

	FramePut       FrameType = 0x10 // name, chunk size; then DATA..., empty DATA (or ABORT)
	FramePutFile   FrameType = 0x11 // name, chunk size, path
	FrameGet       FrameType = 0x12 // name
	FrameGetFile   FrameType = 0x13 // name, path
	FrameStat      FrameType = 0x14 // name
	FrameList      FrameType = 0x15 // prefix
	FrameRemove    FrameType = 0x16 // name
	FrameStatus    FrameType = 0x17 // empty
	FrameGetFD     FrameType = 0x18 // name (version 2): zero-copy GET; reply INFO, FDS..., END
	FramePreheat   FrameType = 0x19 // name, sites (version 3): children fetch the blob now; reply PREHEAT_JSON
	FrameProviders FrameType = 0x1A // name or blob ID (version 4): who holds the blob; reply PROVIDERS_JSON
	FramePutFD     FrameType = 0x1B // name, chunk size (version 5), with one descriptor: put the file the client opened; reply INFO
	FrameGetToFD   FrameType = 0x1C // name (version 5), with one descriptor: write the blob into the file the client opened; reply INFO, END

	FrameData  FrameType = 0x20 // raw bytes; empty = end of a PUT upload
	FrameAbort FrameType = 0x21 // client aborts a PUT upload; empty body
	FrameEnd   FrameType = 0x22 // server: end of a GET, GET_FD or LIST stream; empty body
	FrameFDS   FrameType = 0x23 // server (version 2): u32 count + count Extents, with count descriptors

	FrameOK         FrameType = 0x30 // empty body
	FrameInfo       FrameType = 0x31 // one Info
	FrameListing    FrameType = 0x32 // u32 count + count Infos (a LIST reply may hold several)
	FrameStatusJ    FrameType = 0x33 // the STATUS JSON document
	FramePreheatJ   FrameType = 0x34 // (version 3) the PREHEAT results, a JSON array
	FrameProvidersJ FrameType = 0x35 // (version 4) the PROVIDERS reply, a JSON object
	FrameError      FrameType = 0x3F // u32 code + message
)

var frameNames = map[FrameType]string{
	FrameHello: "HELLO", FramePut: "PUT", FramePutFile: "PUT_FILE", FrameGet: "GET", FrameGetFile: "GET_FILE",
	FrameStat: "STAT", FrameList: "LIST", FrameRemove: "REMOVE", FrameStatus: "STATUS", FrameGetFD: "GET_FD",
	FrameData: "DATA", FrameAbort: "ABORT", FrameEnd: "END", FrameFDS: "FDS", FrameOK: "OK", FrameInfo: "INFO",
	FrameListing: "LISTING", FrameStatusJ: "STATUS_JSON", FrameError: "ERROR",
	FramePutFD: "PUT_FD", FrameGetToFD: "GET_TO_FD",
	FramePreheat: "PREHEAT", FramePreheatJ: "PREHEAT_JSON", FrameProviders: "PROVIDERS", FrameProvidersJ: "PROVIDERS_JSON",
}

func (t FrameType) String() string {
	if s, ok := frameNames[t]; ok {
		return s
	}
	return fmt.Sprintf("FRAME_0x%02X", uint8(t))
}

// Info flag bits.
const (
	flagLocal  = 1 << 0
	flagPinned = 1 << 1
)

// errMalformed marks bytes that do not decode; the server answers
// BAD_REQUEST and closes the connection.
var errMalformed = errors.New("malformed frame")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(format, args...))
}

// header is a decoded frame header.
type header struct {
	Len  uint32
	Type FrameType
}

// putHeader writes a frame header into b[:HeaderSize].
func putHeader(b []byte, t FrameType, n int) {
	binary.BigEndian.PutUint32(b, uint32(n))
	b[4] = byte(t)
	b[5], b[6], b[7] = 0, 0, 0
}

// appendHeader appends a frame header.
func appendHeader(dst []byte, t FrameType, n int) []byte {
	return append(dst, byte(n>>24), byte(n>>16), byte(n>>8), byte(n), byte(t), 0, 0, 0)
}

// parseHeader decodes a frame header: u32 body length, u8 type, u8 flags
// (must be 0), u16 reserved (must be 0). It rejects bodies larger than
// MaxFrameBody, so callers never allocate more than that. Unknown types are
// not rejected here (the reader decides what it expects).
func parseHeader(b []byte) (header, error) {
	if len(b) < HeaderSize {
		return header{}, malformed("short header (%d bytes)", len(b))
	}
	h := header{Len: binary.BigEndian.Uint32(b), Type: FrameType(b[4])}
	if b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return header{}, malformed("nonzero flags/reserved bytes in header")
	}
	if h.Len > MaxFrameBody {
		return header{}, malformed("frame body of %d bytes exceeds the %d byte limit", h.Len, MaxFrameBody)
	}
	return h, nil
}

// --- primitive fields -------------------------------------------------------

func appendU32(dst []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(dst, v) }
func appendU64(dst []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(dst, v) }

// appendStr appends a byte string: u32 length + bytes.
func appendStr(dst []byte, s string) []byte {
	dst = appendU32(dst, uint32(len(s)))
	return append(dst, s...)
}

// decoder reads fields from a body; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = malformed(format, args...)
	}
}

func (d *decoder) u32(field string) uint32 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 4 {
		d.fail("truncated %s", field)
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64(field string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("truncated %s", field)
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) str(field string) string {
	n := d.u32(field + " length")
	if d.err != nil {
		return ""
	}
	if uint64(n) > uint64(len(d.b)) {
		d.fail("%s length %d exceeds the %d remaining bytes", field, n, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// end fails unless the whole body was consumed.
func (d *decoder) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

// --- HELLO ------------------------------------------------------------------

// appendHello appends a HELLO body: 4 bytes "OMST", u32 version.
func appendHello(dst []byte, version uint32) []byte {
	dst = append(dst, Magic...)
	return appendU32(dst, version)
}

// decodeHello decodes a HELLO body and returns its version.
func decodeHello(b []byte) (uint32, error) {
	if len(b) < 4 || string(b[:4]) != Magic {
		return 0, malformed("HELLO without the %q magic", Magic)
	}
	d := decoder{b: b[4:]}
	v := d.u32("version")
	return v, d.end()
}

// --- requests -----------------------------------------------------------------

// appendPutReq appends a PUT body: str name, u32 chunk size.
func appendPutReq(dst []byte, name string, chunkSize uint32) []byte {
	return appendU32(appendStr(dst, name), chunkSize)
}

func decodePutReq(b []byte) (name string, chunkSize uint32, err error) {
	d := decoder{b: b}
	name = d.str("name")
	chunkSize = d.u32("chunk size")
	return name, chunkSize, d.end()
}

// appendPutFileReq appends a PUT_FILE body: str name, u32 chunk size, str path.
func appendPutFileReq(dst []byte, name string, chunkSize uint32, path string) []byte {
	return appendStr(appendPutReq(dst, name, chunkSize), path)
}

func decodePutFileReq(b []byte) (name string, chunkSize uint32, path string, err error) {
	d := decoder{b: b}
	name = d.str("name")
	chunkSize = d.u32("chunk size")
	path = d.str("path")
	return name, chunkSize, path, d.end()
}

// appendNameReq appends the body of GET, STAT, REMOVE (str name) and LIST
// (str prefix).
func appendNameReq(dst []byte, name string) []byte { return appendStr(dst, name) }

// maxPreheatSites bounds the sites of a PREHEAT request.
const maxPreheatSites = 1024

// appendPreheatReq appends a PREHEAT body: str name, u32 count, count × str site.
func appendPreheatReq(dst []byte, name string, sites []string) []byte {
	dst = appendU32(appendStr(dst, name), uint32(len(sites)))
	for _, s := range sites {
		dst = appendStr(dst, s)
	}
	return dst
}

func decodePreheatReq(b []byte) (name string, sites []string, err error) {
	d := decoder{b: b}
	name = d.str("name")
	n := d.u32("count")
	if d.err == nil && n > maxPreheatSites {
		d.fail("PREHEAT with %d sites, more than %d", n, maxPreheatSites)
	}
	for i := uint32(0); d.err == nil && i < n; i++ {
		sites = append(sites, d.str("site"))
	}
	return name, sites, d.end()
}

func decodeNameReq(b []byte) (string, error) {
	d := decoder{b: b}
	name := d.str("name")
	return name, d.end()
}

// appendGetFileReq appends a GET_FILE body: str name, str path.
func appendGetFileReq(dst []byte, name, path string) []byte {
	return appendStr(appendStr(dst, name), path)
}

func decodeGetFileReq(b []byte) (name, path string, err error) {
	d := decoder{b: b}
	name = d.str("name")
	path = d.str("path")
	return name, path, d.end()
}

// --- replies ------------------------------------------------------------------

// appendInfo appends an Info: str name, str id, u64 size, u32 chunk size,
// u32 chunks, i64 time, str origin, u32 flags.
func appendInfo(dst []byte, in *Info) []byte {
	dst = appendStr(dst, in.Name)
	dst = appendStr(dst, in.ID)
	dst = appendU64(dst, in.Size)
	dst = appendU32(dst, in.ChunkSize)
	dst = appendU32(dst, in.Chunks)
	dst = appendU64(dst, uint64(in.Time))
	dst = appendStr(dst, in.Origin)
	var flags uint32
	if in.Local {
		flags |= flagLocal
	}
	if in.Pinned {
		flags |= flagPinned
	}
	return appendU32(dst, flags)
}

func (d *decoder) info() Info {
	var in Info
	in.Name = d.str("name")
	in.ID = d.str("id")
	in.Size = d.u64("size")
	in.ChunkSize = d.u32("chunk size")
	in.Chunks = d.u32("chunks")
	in.Time = int64(d.u64("time"))
	in.Origin = d.str("origin")
	flags := d.u32("flags")
	in.Local = flags&flagLocal != 0
	in.Pinned = flags&flagPinned != 0
	return in
}

// infoLen returns the encoded size of in.
func infoLen(in *Info) int {
	return minInfoLen + len(in.Name) + len(in.ID) + len(in.Origin)
}

// decodeInfo decodes an INFO body.
func decodeInfo(b []byte) (Info, error) {
	d := decoder{b: b}
	in := d.info()
	return in, d.end()
}

// appendListing appends a LISTING body: u32 count, count Infos.
func appendListing(dst []byte, infos []Info) []byte {
	dst = appendU32(dst, uint32(len(infos)))
	for i := range infos {
		dst = appendInfo(dst, &infos[i])
	}
	return dst
}

// decodeListing decodes a LISTING body and appends its Infos to dst.
func decodeListing(dst []Info, b []byte) ([]Info, error) {
	d := decoder{b: b}
	n := d.u32("count")
	if d.err != nil {
		return dst, d.err
	}
	if uint64(n)*minInfoLen > uint64(len(d.b)) {
		return dst, malformed("LISTING count %d does not fit in %d bytes", n, len(d.b))
	}
	dst = grow(dst, int(n))
	for i := uint32(0); i < n && d.err == nil; i++ {
		dst = append(dst, d.info())
	}
	return dst, d.end()
}

func grow(s []Info, n int) []Info {
	if cap(s)-len(s) < n {
		ns := make([]Info, len(s), len(s)+n)
		copy(ns, s)
		return ns
	}
	return s
}

// appendError appends an ERROR body: u32 code, str message. The message is
// cut to maxMessageLen bytes (at a UTF-8 boundary).
func appendError(dst []byte, code Code, msg string) []byte {
	if len(msg) > maxMessageLen {
		cut := maxMessageLen
		for cut > 0 && msg[cut]&0xC0 == 0x80 {
			cut--
		}
		msg = msg[:cut]
	}
	return appendStr(appendU32(dst, uint32(code)), msg)
}

// decodeError decodes an ERROR body.
func decodeError(b []byte) (*Error, error) {
	d := decoder{b: b}
	code := d.u32("code")
	msg := d.str("message")
	if err := d.end(); err != nil {
		return nil, err
	}
	if code == 0 {
		// 0 is never sent; keep the reply an error all the same.
		return &Error{Code: CodeInternal, Message: "error code 0: " + msg}, nil
	}
	return &Error{Code: Code(code), Message: msg}, nil
}

// ExtentRange places bytes of a blob in a file: the blob's bytes
// [BlobOffset, BlobOffset+Length) are the file's bytes from FileOffset.
type ExtentRange struct {
	BlobOffset uint64
	Length     uint64
	FileOffset uint64
}

// appendFDS appends an FDS body: u32 count, count extents of u64 blob
// offset, u64 length, u64 file offset.
func appendFDS(dst []byte, xs []ExtentRange) []byte {
	dst = appendU32(dst, uint32(len(xs)))
	for _, x := range xs {
		dst = appendU64(dst, x.BlobOffset)
		dst = appendU64(dst, x.Length)
		dst = appendU64(dst, x.FileOffset)
	}
	return dst
}

// decodeFDS decodes an FDS body: a count of 1..MaxExtentsPerFrame and
// exactly that many extents, each of at least one byte.
func decodeFDS(b []byte) ([]ExtentRange, error) {
	d := decoder{b: b}
	n := d.u32("count")
	if d.err != nil {
		return nil, d.err
	}
	if n == 0 || n > MaxExtentsPerFrame {
		return nil, malformed("FDS count %d outside 1..%d", n, MaxExtentsPerFrame)
	}
	if uint64(len(d.b)) != uint64(n)*extentLen {
		return nil, malformed("FDS body holds %d bytes of extents, want %d for count %d", len(d.b), uint64(n)*extentLen, n)
	}
	xs := make([]ExtentRange, n)
	for i := range xs {
		xs[i] = ExtentRange{BlobOffset: d.u64("blob offset"), Length: d.u64("length"), FileOffset: d.u64("file offset")}
		if xs[i].Length == 0 {
			return nil, malformed("FDS extent %d is empty", i)
		}
	}
	return xs, d.end()
}
