"""Wire encoding of the omst local API: pure functions, no IO.

Layout: docs/rpcbridge.md sections 2 to 6. Encoders return whole frames
(header and body) as bytes. Decoders take a frame *body* (the header has
already been checked with :func:`parse_header`), consume it exactly and
raise :class:`~omst.errors.ProtocolError` on anything malformed.
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

from .errors import ProtocolError
from .info import FLAG_LOCAL, FLAG_PINNED, Info

MAGIC = b"OMST"
HEADER_SIZE = 8
MAX_FRAME_BODY = 16 << 20
MAX_REQUEST_BODY = 64 << 10
DATA_FRAME_SIZE = 1 << 20
MIN_INFO_LEN = 40
EXTENT_LEN = 24
MAX_FDS = 64

_HEADER = struct.Struct(">IBBH")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_INFO_FIXED = struct.Struct(">QIIq")  # size, chunk_size, chunks, time
_EXTENT = struct.Struct(">QQQ")


class FrameType(enum.IntEnum):
    """Frame type byte (docs/rpcbridge.md section 4)."""

    HELLO = 0x01
    PUT = 0x10
    PUT_FILE = 0x11
    GET = 0x12
    GET_FILE = 0x13
    STAT = 0x14
    LIST = 0x15
    REMOVE = 0x16
    STATUS = 0x17
    GET_FD = 0x18
    PUT_FD = 0x1B
    GET_TO_FD = 0x1C
    DATA = 0x20
    ABORT = 0x21
    END = 0x22
    FDS = 0x23
    OK = 0x30
    INFO = 0x31
    LISTING = 0x32
    STATUS_JSON = 0x33
    ERROR = 0x3F


# Version 6's job namespaces (section 6.13). Like PREHEAT and PROVIDERS,
# they have no shared test vectors yet, so they stay out of FrameType
# (whose every member test_vectors.py checks against frames.txt).
REMOVE_PREFIX = 0x1D
SET_TTL = 0x1E
DU = 0x1F
NAMESPACE_JSON = 0x36
_NAMESPACE_TYPES = {REMOVE_PREFIX: "REMOVE_PREFIX", SET_TTL: "SET_TTL", DU: "DU", NAMESPACE_JSON: "NAMESPACE_JSON"}

# Version 7 (docs/rpcbridge.md section 6.14): many names in one request.
GET_MANY = 0x40
PUT_MANY = 0x41
PUT_ITEM = 0x42
ENTRY = 0x37
ENTRY_ERROR = 0x38
SUMMARY = 0x39
_MANY_TYPES = {GET_MANY: "GET_MANY", PUT_MANY: "PUT_MANY", PUT_ITEM: "PUT_ITEM", ENTRY: "ENTRY",
               ENTRY_ERROR: "ENTRY_ERROR", SUMMARY: "SUMMARY"}
GET_MANY_BY_PREFIX = 1
MAX_MANY_BODY = 1 << 20
MAX_MANY_NAMES = 1 << 16

# Version 8 (docs/rpcbridge.md section 6.15): a get into a file reports the
# bytes of the blob in the file so far; its vectors are in frames-v8.txt.
PROGRESS = 0x3A
PROGRESS_VERSION = 8
_PROGRESS_TYPES = {PROGRESS: "PROGRESS"}

_KNOWN_TYPES = (
    frozenset(int(t) for t in FrameType) | frozenset(_NAMESPACE_TYPES) | frozenset(_MANY_TYPES) | frozenset(_PROGRESS_TYPES)
)
_REQUEST_TYPES = frozenset(range(0x10, 0x20))


def type_name(ftype: int) -> str:
    """Return the name of a frame type byte (FRAME_0xNN if unknown)."""
    if ftype in _NAMESPACE_TYPES:
        return _NAMESPACE_TYPES[ftype]
    if ftype in _MANY_TYPES:
        return _MANY_TYPES[ftype]
    if ftype in _PROGRESS_TYPES:
        return _PROGRESS_TYPES[ftype]
    if ftype in _KNOWN_TYPES:
        return FrameType(ftype).name
    return f"FRAME_0x{ftype:02X}"


@dataclass(frozen=True)
class Extent:
    """One extent of an FDS frame (docs/rpcbridge.md section 6.9)."""

    blob_offset: int
    length: int
    file_offset: int


# --- header -----------------------------------------------------------------


def encode_header(ftype: int, length: int) -> bytes:
    """Return the 8-byte header of a frame of type ftype with a body of length bytes."""
    return _HEADER.pack(length, ftype, 0, 0)


def parse_header(b: bytes | bytearray | memoryview) -> Tuple[int, int]:
    """Decode and check a header; return (type, body length).

    Rejects nonzero flags or reserved bytes and bodies over 16 MiB. Unknown
    types are not rejected here (see :func:`check_frame`).
    """
    if len(b) != HEADER_SIZE:
        raise ProtocolError(f"header of {len(b)} bytes, want {HEADER_SIZE}")
    length, ftype, flags, reserved = _HEADER.unpack(b)
    if flags != 0 or reserved != 0:
        raise ProtocolError("nonzero flags/reserved bytes in frame header")
    if length > MAX_FRAME_BODY:
        raise ProtocolError(f"frame body of {length} bytes exceeds the {MAX_FRAME_BODY} byte limit")
    return ftype, length


def check_frame(ftype: int, length: int) -> None:
    """Reject unknown frame types and request frames over 64 KiB."""
    if ftype not in _KNOWN_TYPES:
        raise ProtocolError(f"unknown frame type 0x{ftype:02X}")
    if ftype == GET_MANY and length > MAX_MANY_BODY:
        raise ProtocolError(f"GET_MANY body of {length} bytes exceeds the {MAX_MANY_BODY} byte limit")
    if (ftype in _REQUEST_TYPES or ftype in (PUT_MANY, PUT_ITEM)) and length > MAX_REQUEST_BODY:
        raise ProtocolError(f"{type_name(ftype)} body of {length} bytes exceeds the {MAX_REQUEST_BODY} byte limit")


def encode_frame(ftype: int, body: bytes = b"") -> bytes:
    """Return a whole frame: header and body."""
    return _HEADER.pack(len(body), ftype, 0, 0) + body


# --- primitive fields ---------------------------------------------------------


def _str(b: bytes) -> bytes:
    return _U32.pack(len(b)) + b


def _utf8(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


class _Reader:
    """Reads fields from a body; every read is bounds-checked."""

    __slots__ = ("b", "pos", "what")

    def __init__(self, b: bytes | bytearray | memoryview, what: str) -> None:
        self.b = bytes(b)
        self.pos = 0
        self.what = what

    def fail(self, why: str) -> ProtocolError:
        return ProtocolError(f"malformed {self.what}: {why}")

    def remaining(self) -> int:
        return len(self.b) - self.pos

    def u32(self, field: str) -> int:
        if self.remaining() < 4:
            raise self.fail(f"truncated {field}")
        (v,) = _U32.unpack_from(self.b, self.pos)
        self.pos += 4
        return int(v)

    def u64(self, field: str) -> int:
        if self.remaining() < 8:
            raise self.fail(f"truncated {field}")
        (v,) = _U64.unpack_from(self.b, self.pos)
        self.pos += 8
        return int(v)

    def raw(self, n: int, field: str) -> bytes:
        if self.remaining() < n:
            raise self.fail(f"truncated {field}")
        v = self.b[self.pos : self.pos + n]
        self.pos += n
        return v

    def bstr(self, field: str) -> bytes:
        n = self.u32(field + " length")
        if n > self.remaining():
            raise self.fail(f"{field} length {n} exceeds the {self.remaining()} remaining bytes")
        return self.raw(n, field)

    def text(self, field: str) -> str:
        return self.bstr(field).decode("utf-8", "surrogateescape")

    def info(self) -> Info:
        name = self.text("name")
        cid = self.text("id")
        if self.remaining() < _INFO_FIXED.size:
            raise self.fail("truncated size/chunk_size/chunks/time")
        size, chunk_size, chunks, time = _INFO_FIXED.unpack_from(self.b, self.pos)
        self.pos += _INFO_FIXED.size
        origin = self.text("origin")
        flags = self.u32("flags")
        return Info(
            name=name,
            id=cid,
            size=size,
            chunk_size=chunk_size,
            chunks=chunks,
            time=time,
            origin=origin,
            local=bool(flags & FLAG_LOCAL),
            pinned=bool(flags & FLAG_PINNED),
        )

    def end(self) -> None:
        if self.remaining() != 0:
            raise self.fail(f"{self.remaining()} trailing bytes")


# --- HELLO ------------------------------------------------------------------


def encode_hello(version: int) -> bytes:
    """HELLO: "OMST", u32 version."""
    return encode_frame(FrameType.HELLO, MAGIC + _U32.pack(version))


def decode_hello(body: bytes) -> int:
    """Decode a HELLO body; return its version."""
    if body[:4] != MAGIC:
        raise ProtocolError(f"malformed HELLO: no {MAGIC!r} magic")
    r = _Reader(body[4:], "HELLO")
    v = r.u32("version")
    r.end()
    return v


# --- requests (client to server) ---------------------------------------------


def encode_put(name: bytes, chunk_size: int) -> bytes:
    """PUT: str name, u32 chunk_size (then DATA frames follow)."""
    return encode_frame(FrameType.PUT, _str(name) + _U32.pack(chunk_size))


def encode_put_file(name: bytes, chunk_size: int, path: bytes) -> bytes:
    """PUT_FILE: str name, u32 chunk_size, str path."""
    return encode_frame(FrameType.PUT_FILE, _str(name) + _U32.pack(chunk_size) + _str(path))


def encode_put_fd(name: bytes, chunk_size: int) -> bytes:
    """PUT_FD (version 5): str name, u32 chunk_size, a PUT's body. The frame
    must be sent with one descriptor (SCM_RIGHTS on its first byte)."""
    return encode_frame(FrameType.PUT_FD, _str(name) + _U32.pack(chunk_size))


def encode_name_request(ftype: int, name: bytes) -> bytes:
    """GET, STAT, REMOVE, GET_FD, GET_TO_FD (str name) or LIST (str prefix).
    GET_TO_FD must be sent with one descriptor (SCM_RIGHTS on its first byte)."""
    return encode_frame(ftype, _str(name))


def encode_get_file(name: bytes, path: bytes) -> bytes:
    """GET_FILE: str name, str path."""
    return encode_frame(FrameType.GET_FILE, _str(name) + _str(path))


REMOVE_EVERYWHERE = 1


def encode_remove_prefix(prefix: bytes, everywhere: bool) -> bytes:
    """REMOVE_PREFIX (version 6): str prefix, u32 flags (bit 0: everywhere)."""
    return encode_frame(REMOVE_PREFIX, _str(prefix) + _U32.pack(REMOVE_EVERYWHERE if everywhere else 0))


def encode_set_ttl(scope: bytes, ttl_ns: int) -> bytes:
    """SET_TTL (version 6): str scope, u64 TTL in nanoseconds."""
    return encode_frame(SET_TTL, _str(scope) + _U64.pack(ttl_ns))


MAX_TTL_NS = 365 * 24 * 3600 * 10**9  # a year (the daemon's namespace.MaxTTL)


def decode_remove_prefix(body: bytes) -> Tuple[str, int]:
    """Decode a REMOVE_PREFIX body: (prefix, flags); flags other than bit 0
    are malformed."""
    r = _Reader(body, "REMOVE_PREFIX")
    prefix, flags = r.text("prefix"), r.u32("flags")
    r.end()
    if flags & ~REMOVE_EVERYWHERE:
        raise ProtocolError(f"malformed REMOVE_PREFIX: unknown flags 0x{flags:x}")
    return prefix, flags


def decode_set_ttl(body: bytes) -> Tuple[str, int]:
    """Decode a SET_TTL body: (scope, ttl in ns); a TTL over a year is
    malformed."""
    r = _Reader(body, "SET_TTL")
    scope, ttl = r.text("scope"), r.u64("ttl")
    r.end()
    if ttl > MAX_TTL_NS:
        raise ProtocolError(f"malformed SET_TTL: a TTL of {ttl} ns exceeds a year")
    return scope, ttl


def encode_empty(ftype: int) -> bytes:
    """A frame with an empty body: STATUS, ABORT, END, OK, or an empty DATA."""
    return encode_frame(ftype, b"")


def data_header(n: int) -> bytes:
    """Header of a DATA frame carrying n bytes (the payload is sent after it)."""
    if not 0 <= n <= MAX_FRAME_BODY:
        raise ValueError(f"DATA payload of {n} bytes exceeds {MAX_FRAME_BODY}")
    return _HEADER.pack(n, FrameType.DATA, 0, 0)


def encode_data(payload: bytes) -> bytes:
    """A whole DATA frame (tests; real uploads send header and payload apart)."""
    return data_header(len(payload)) + bytes(payload)


def decode_put(body: bytes, what: str = "PUT") -> Tuple[str, int]:
    """Decode a PUT or PUT_FD body: (name, chunk_size)."""
    r = _Reader(body, what)
    name, cs = r.text("name"), r.u32("chunk size")
    r.end()
    return name, cs


def decode_put_file(body: bytes) -> Tuple[str, int, bytes]:
    """Decode a PUT_FILE body: (name, chunk_size, path)."""
    r = _Reader(body, "PUT_FILE")
    name, cs, path = r.text("name"), r.u32("chunk size"), r.bstr("path")
    r.end()
    return name, cs, path


def decode_name_request(body: bytes, what: str = "request") -> str:
    """Decode a GET, STAT, REMOVE, GET_FD, GET_TO_FD or LIST body: the name (prefix)."""
    r = _Reader(body, what)
    name = r.text("name")
    r.end()
    return name


def decode_get_file(body: bytes) -> Tuple[str, bytes]:
    """Decode a GET_FILE body: (name, path)."""
    r = _Reader(body, "GET_FILE")
    name, path = r.text("name"), r.bstr("path")
    r.end()
    return name, path


def decode_empty(body: bytes, what: str) -> None:
    """Check that a STATUS, ABORT, END or OK body is empty."""
    if len(body) != 0:
        raise ProtocolError(f"malformed {what}: {len(body)} byte body, want empty")


# --- replies (server to client) ----------------------------------------------


def encode_info_body(info: Info) -> bytes:
    """The Info layout, without a frame header."""
    return b"".join(
        (
            _str(_utf8(info.name)),
            _str(_utf8(info.id)),
            _INFO_FIXED.pack(info.size, info.chunk_size, info.chunks, info.time),
            _str(_utf8(info.origin)),
            _U32.pack(info.flags),
        )
    )


def encode_info(info: Info) -> bytes:
    """INFO: one Info."""
    return encode_frame(FrameType.INFO, encode_info_body(info))


def decode_info(body: bytes) -> Info:
    """Decode an INFO body."""
    r = _Reader(body, "INFO")
    info = r.info()
    r.end()
    return info


def encode_listing(infos: Sequence[Info]) -> bytes:
    """LISTING: u32 count, count Infos."""
    return encode_frame(FrameType.LISTING, _U32.pack(len(infos)) + b"".join(encode_info_body(i) for i in infos))


def decode_listing(body: bytes) -> List[Info]:
    """Decode a LISTING body; count is checked against the body size first."""
    r = _Reader(body, "LISTING")
    n = r.u32("count")
    if n * MIN_INFO_LEN > r.remaining():
        raise r.fail(f"count {n} does not fit in {r.remaining()} bytes")
    infos = [r.info() for _ in range(n)]
    r.end()
    return infos


def encode_status_json(doc: bytes) -> bytes:
    """STATUS_JSON: the JSON document as is."""
    return encode_frame(FrameType.STATUS_JSON, doc)


def decode_status_json(body: bytes, what: str = "STATUS_JSON") -> Dict[str, Any]:
    """Decode a STATUS_JSON (or NAMESPACE_JSON) body: one UTF-8 JSON object,
    nothing after it."""
    try:
        doc = json.loads(bytes(body).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError(f"malformed {what}: {e}") from None
    if not isinstance(doc, dict):
        raise ProtocolError(f"malformed {what}: a JSON {type(doc).__name__}, not an object")
    return doc


def encode_error(code: int, message: str) -> bytes:
    """ERROR: u32 code, str message."""
    return encode_frame(FrameType.ERROR, _U32.pack(code) + _str(message.encode("utf-8")))


def decode_error(body: bytes) -> Tuple[int, str]:
    """Decode an ERROR body: (code, message). Code 0 (never sent) is malformed."""
    r = _Reader(body, "ERROR")
    code = r.u32("code")
    if code == 0:
        raise r.fail("error code 0")
    msg = r.bstr("message").decode("utf-8", "replace")
    r.end()
    return code, msg


def encode_fds(extents: Sequence[Extent]) -> bytes:
    """FDS: u32 count, count Extents (descriptors travel as ancillary data)."""
    body = _U32.pack(len(extents)) + b"".join(_EXTENT.pack(e.blob_offset, e.length, e.file_offset) for e in extents)
    return encode_frame(FrameType.FDS, body)


def decode_fds(body: bytes) -> List[Extent]:
    """Decode an FDS body: 1..64 extents, each of length >= 1, exact size."""
    r = _Reader(body, "FDS")
    n = r.u32("count")
    if not 1 <= n <= MAX_FDS:
        raise r.fail(f"count {n} outside 1..{MAX_FDS}")
    if r.remaining() != n * EXTENT_LEN:
        raise r.fail(f"{r.remaining()} bytes for {n} extents, want {n * EXTENT_LEN}")
    out = []
    for _ in range(n):
        bo, ln, fo = _EXTENT.unpack(r.raw(EXTENT_LEN, "extent"))
        if ln == 0:
            raise r.fail("extent of length 0")
        out.append(Extent(bo, ln, fo))
    r.end()
    return out


# --- version 7: GET_MANY, PUT_MANY (docs/rpcbridge.md section 6.14) ------------------


def get_many_body_len(prefix: bytes, names: Sequence[bytes]) -> int:
    """The size of a GET_MANY body."""
    return 12 + len(prefix) + sum(4 + len(n) for n in names)


def encode_get_many(flags: int, prefix: bytes, names: Sequence[bytes]) -> bytes:
    """GET_MANY: u32 flags (bit 0: by prefix), str prefix, u32 count, count x str name."""
    return encode_frame(GET_MANY, _U32.pack(flags) + _str(prefix) + _U32.pack(len(names)) + b"".join(_str(n) for n in names))


def encode_put_many(chunk_size: int) -> bytes:
    """PUT_MANY: u32 chunk size."""
    return encode_frame(PUT_MANY, _U32.pack(chunk_size))


def encode_put_item(name: bytes, size: int) -> bytes:
    """PUT_ITEM: str name, u64 size (then size bytes of DATA)."""
    return encode_frame(PUT_ITEM, _str(name) + _U64.pack(size))


def decode_get_many(body: bytes) -> Tuple[int, str, List[str]]:
    """Decode a GET_MANY body: (flags, prefix, names), with its rules."""
    r = _Reader(body, "GET_MANY")
    flags, prefix, n = r.u32("flags"), r.text("prefix"), r.u32("count")
    if flags & ~GET_MANY_BY_PREFIX:
        raise r.fail(f"unknown flags 0x{flags:x}")
    if flags & GET_MANY_BY_PREFIX and n != 0:
        raise r.fail(f"by prefix with {n} names")
    if not flags & GET_MANY_BY_PREFIX and (prefix or n == 0):
        raise r.fail("by names with a prefix, or without names")
    if n > MAX_MANY_NAMES or n * 4 > r.remaining():
        raise r.fail(f"count {n} cannot fit")
    names = [r.text("name") for _ in range(n)]
    r.end()
    return flags, prefix, names


def decode_put_many(body: bytes) -> int:
    """Decode a PUT_MANY body: the chunk size."""
    r = _Reader(body, "PUT_MANY")
    cs = r.u32("chunk size")
    r.end()
    return cs


def decode_put_item(body: bytes) -> Tuple[str, int]:
    """Decode a PUT_ITEM body: (name, size)."""
    r = _Reader(body, "PUT_ITEM")
    name, size = r.text("name"), r.u64("size")
    r.end()
    return name, size


def decode_entry(body: bytes) -> Tuple[int, Info]:
    """Decode an ENTRY body: (index, info)."""
    r = _Reader(body, "ENTRY")
    index = r.u32("index")
    info = r.info()
    r.end()
    return index, info


def encode_entry(index: int, info: Info) -> bytes:
    """ENTRY: u32 index, Info."""
    return encode_frame(ENTRY, _U32.pack(index) + encode_info_body(info))


def decode_entry_error(body: bytes) -> Tuple[int, str, int, str]:
    """Decode an ENTRY_ERROR body: (index, name, code, message)."""
    r = _Reader(body, "ENTRY_ERROR")
    index, name, code = r.u32("index"), r.text("name"), r.u32("code")
    if code == 0:
        raise r.fail("error code 0")
    msg = r.bstr("message").decode("utf-8", "replace")
    r.end()
    return index, name, code, msg


def encode_entry_error(index: int, name: str, code: int, message: str) -> bytes:
    """ENTRY_ERROR: u32 index, str name, u32 code, str message."""
    return encode_frame(ENTRY_ERROR, _U32.pack(index) + _str(_utf8(name)) + _U32.pack(code) + _str(_utf8(message)))


def decode_summary(body: bytes) -> Tuple[int, int, int, int]:
    """Decode a SUMMARY body: (entries, ok, failed, bytes); ok + failed must be entries."""
    r = _Reader(body, "SUMMARY")
    entries, ok, failed, nbytes = r.u32("entries"), r.u32("ok"), r.u32("failed"), r.u64("bytes")
    r.end()
    if ok + failed != entries:
        raise r.fail(f"{entries} entries, {ok} ok and {failed} failed")
    return entries, ok, failed, nbytes


def encode_summary(entries: int, ok: int, failed: int, nbytes: int) -> bytes:
    """SUMMARY: u32 entries, u32 ok, u32 failed, u64 bytes."""
    return encode_frame(SUMMARY, _U32.pack(entries) + _U32.pack(ok) + _U32.pack(failed) + _U64.pack(nbytes))


# --- version 8: PROGRESS ----------------------------------------------------


def decode_progress(body: bytes) -> int:
    """Decode a PROGRESS body: u64 done, the bytes of the blob in the file so far."""
    if len(body) != 8:
        raise ProtocolError(f"malformed PROGRESS: {len(body)} byte body, want 8")
    return int(_U64.unpack(body)[0])


def encode_progress(done: int) -> bytes:
    """PROGRESS: u64 done."""
    return encode_frame(PROGRESS, _U64.pack(done))


def check_progress(done: int, last: int, size: int) -> None:
    """The client's rule for a PROGRESS of done bytes after one of last, in
    a reply whose INFO said size (section 6.15): it never goes back and
    never exceeds size. Raises ProtocolError otherwise."""
    if done > size:
        raise ProtocolError(f"PROGRESS of {done} bytes for a blob of {size}")
    if done < last:
        raise ProtocolError(f"PROGRESS went back from {last} to {done} bytes")
