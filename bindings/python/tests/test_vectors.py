"""The shared test vectors, testdata/rpcbridge/frames.txt (docs/rpcbridge.md
section 11): decode every valid vector and compare its fields, encode every
valid vector from its fields and compare the hex, reject every invalid one.

The package has decoders and encoders for every frame type (those of the
server side too), so every valid vector is checked both ways.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import pytest

from omst import ProtocolError, _wire
from omst._wire import Extent, FrameType
from omst.info import Info

from conftest import find_up

Fields = List[Tuple[str, str]]


@dataclass
class Vector:
    name: str
    valid: bool = False
    why: str = ""
    hex: str = ""
    type: int = -1
    fields: Fields = field(default_factory=list)


def parse_vectors(text: str) -> List[Vector]:
    """Parse the frames.txt format: '#' comments, blank-line separated
    vectors, 'KEY VALUE' lines (value = the rest after the first space)."""
    out: List[Vector] = []
    cur = None
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.startswith("#"):
            continue
        if line.strip() == "":
            cur = None
            continue
        key, _, value = line.partition(" ")
        if key == "vector":
            cur = Vector(value)
            out.append(cur)
            continue
        assert cur is not None, f"line {lineno}: {line!r} outside a vector"
        if key == "valid":
            cur.valid = True
        elif key == "invalid":
            cur.why = value
        elif key == "hex":
            cur.hex += value
        elif key == "type":
            cur.type = int(value)
        else:
            cur.fields.append((key, value))
    return out


VECTORS_PATH = find_up("testdata/rpcbridge/frames.txt")
VECTORS = parse_vectors(VECTORS_PATH.read_text("utf-8")) if VECTORS_PATH else []
VALID = [v for v in VECTORS if v.valid]
INVALID = [v for v in VECTORS if not v.valid]
needs_vectors = pytest.mark.skipif(VECTORS_PATH is None, reason="testdata/rpcbridge/frames.txt not found")


# --- vector fields <-> decoded values ------------------------------------------------

INFO_KEYS = ["info.name", "info.id", "info.size", "info.chunk_size", "info.chunks", "info.time", "info.origin", "info.flags"]
EXTENT_KEYS = ["extent.blob_offset", "extent.length", "extent.file_offset"]


def info_fields(i: Info) -> Fields:
    vals = [i.name, i.id, i.size, i.chunk_size, i.chunks, i.time, i.origin, i.flags]
    return [(k, str(v)) for k, v in zip(INFO_KEYS, vals)]


class Fieldreader:
    """Hands out a vector's fields in order, checking their keys."""

    def __init__(self, fields: Fields) -> None:
        self.fields = list(fields)
        self.pos = 0

    def get(self, key: str) -> str:
        k, v = self.fields[self.pos]
        assert k == key, f"field {self.pos}: got key {k!r}, want {key!r}"
        self.pos += 1
        return v

    def int(self, key: str) -> int:
        return int(self.get(key))

    def info(self) -> Info:
        name, cid = self.get("info.name"), self.get("info.id")
        size, cs, n, t = (self.int(k) for k in INFO_KEYS[2:6])
        origin, flags = self.get("info.origin"), self.int("info.flags")
        return Info(name, cid, size, cs, n, t, origin, bool(flags & 1), bool(flags & 2))

    def done(self) -> None:
        assert self.pos == len(self.fields), f"unused fields {self.fields[self.pos:]}"


def decode_fields(ftype: int, body: bytes) -> Fields:
    """Decode a body of type ftype into vector fields (raises ProtocolError)."""
    if ftype == _wire.REMOVE_PREFIX:
        prefix, flags = _wire.decode_remove_prefix(body)
        return [("prefix", prefix), ("flags", str(flags))]
    if ftype == _wire.SET_TTL:
        scope, ttl = _wire.decode_set_ttl(body)
        return [("scope", scope), ("ttl", str(ttl))]
    if ftype == _wire.DU:
        return [("prefix", _wire.decode_name_request(body, "DU"))]
    if ftype == _wire.NAMESPACE_JSON:
        doc = _wire.decode_status_json(body, "NAMESPACE_JSON")
        return [("json", json.dumps(doc, separators=(",", ":")))]
    if ftype in _wire._MANY_TYPES:
        # Version 7's vectors are in frames-v7.txt (test_many.py).
        raise ProtocolError(f"no vector fields for {_wire.type_name(ftype)}")
    t = FrameType(ftype)
    if t == FrameType.HELLO:
        return [("magic", "OMST"), ("version", str(_wire.decode_hello(body)))]
    if t in (FrameType.PUT, FrameType.PUT_FD):
        name, cs = _wire.decode_put(body, t.name)
        return [("name", name), ("chunk_size", str(cs))]
    if t == FrameType.PUT_FILE:
        name, cs, path = _wire.decode_put_file(body)
        return [("name", name), ("chunk_size", str(cs)), ("path", path.decode("utf-8", "surrogateescape"))]
    if t in (FrameType.GET, FrameType.STAT, FrameType.REMOVE, FrameType.GET_FD, FrameType.GET_TO_FD):
        return [("name", _wire.decode_name_request(body, t.name))]
    if t == FrameType.LIST:
        return [("prefix", _wire.decode_name_request(body, "LIST"))]
    if t == FrameType.GET_FILE:
        name, path = _wire.decode_get_file(body)
        return [("name", name), ("path", path.decode("utf-8", "surrogateescape"))]
    if t in (FrameType.STATUS, FrameType.ABORT, FrameType.END, FrameType.OK):
        _wire.decode_empty(body, t.name)
        return []
    if t == FrameType.DATA:
        return [("payload", body.hex())]
    if t == FrameType.INFO:
        return info_fields(_wire.decode_info(body))
    if t == FrameType.LISTING:
        infos = _wire.decode_listing(body)
        return [("count", str(len(infos)))] + [f for i in infos for f in info_fields(i)]
    if t == FrameType.STATUS_JSON:
        doc = _wire.decode_status_json(body)
        return [("json", json.dumps(doc, separators=(",", ":")))]
    if t == FrameType.ERROR:
        code, msg = _wire.decode_error(body)
        return [("code", str(code)), ("message", msg)]
    if t == FrameType.FDS:
        exts = _wire.decode_fds(body)
        out = [("count", str(len(exts)))]
        for e in exts:
            out += [("extent.blob_offset", str(e.blob_offset)), ("extent.length", str(e.length)), ("extent.file_offset", str(e.file_offset))]
        return out
    raise AssertionError(f"no decoder for {t!r}")


def encode_from(ftype: int, fields: Fields) -> bytes:
    """Build the whole frame of type ftype from vector fields."""
    r = Fieldreader(fields)
    ns: Dict[int, Callable[[], bytes]] = {
        _wire.REMOVE_PREFIX: lambda: _remove_prefix(r.get("prefix"), r.int("flags")),
        _wire.SET_TTL: lambda: _wire.encode_set_ttl(r.get("scope").encode(), r.int("ttl")),
        _wire.DU: lambda: _wire.encode_name_request(_wire.DU, r.get("prefix").encode()),
        _wire.NAMESPACE_JSON: lambda: _wire.encode_frame(_wire.NAMESPACE_JSON, r.get("json").encode()),
    }
    if ftype in ns:
        frame = ns[ftype]()
        r.done()
        return frame
    t = FrameType(ftype)
    enc: Dict[FrameType, Callable[[], bytes]] = {
        FrameType.HELLO: lambda: (r.get("magic") == "OMST" or pytest.fail("magic")) and _wire.encode_hello(r.int("version")),
        FrameType.PUT: lambda: _wire.encode_put(r.get("name").encode(), r.int("chunk_size")),
        FrameType.PUT_FD: lambda: _wire.encode_put_fd(r.get("name").encode(), r.int("chunk_size")),
        FrameType.PUT_FILE: lambda: _wire.encode_put_file(r.get("name").encode(), r.int("chunk_size"), r.get("path").encode()),
        FrameType.GET_FILE: lambda: _wire.encode_get_file(r.get("name").encode(), r.get("path").encode()),
        FrameType.LIST: lambda: _wire.encode_name_request(t, r.get("prefix").encode()),
        FrameType.DATA: lambda: _wire.encode_data(bytes.fromhex(r.get("payload"))),
        FrameType.INFO: lambda: _wire.encode_info(r.info()),
        FrameType.LISTING: lambda: _wire.encode_listing([r.info() for _ in range(r.int("count"))]),
        FrameType.STATUS_JSON: lambda: _wire.encode_status_json(r.get("json").encode()),
        FrameType.ERROR: lambda: _wire.encode_error(r.int("code"), r.get("message")),
        FrameType.FDS: lambda: _wire.encode_fds(
            [Extent(*(r.int(k) for k in EXTENT_KEYS)) for _ in range(r.int("count"))]
        ),
    }
    for nt in (FrameType.GET, FrameType.STAT, FrameType.REMOVE, FrameType.GET_FD, FrameType.GET_TO_FD):
        enc[nt] = lambda: _wire.encode_name_request(t, r.get("name").encode())
    for et in (FrameType.STATUS, FrameType.ABORT, FrameType.END, FrameType.OK):
        enc[et] = lambda: _wire.encode_empty(t)
    frame = enc[t]()
    r.done()
    return frame


def _remove_prefix(prefix: str, flags: int) -> bytes:
    assert flags in (0, _wire.REMOVE_EVERYWHERE), f"flags {flags}: the client sends 0 or 1"
    return _wire.encode_remove_prefix(prefix.encode(), flags == _wire.REMOVE_EVERYWHERE)


def decode_frame(frame: bytes) -> Tuple[int, bytes]:
    """Header check, then type and length checks: (type, body)."""
    ftype, n = _wire.parse_header(frame[: _wire.HEADER_SIZE])
    _wire.check_frame(ftype, n)
    body = frame[_wire.HEADER_SIZE :]
    if len(body) != n:
        raise ProtocolError(f"frame body of {len(body)} bytes, header says {n}")
    return ftype, body


# --- tests -----------------------------------------------------------------------------


# The vectors of protocol version 5's PUT_FD and GET_TO_FD, by the names the
# Go generator gives them. Until frames.txt has them, the types are checked
# by test_fd_requests alone; once it has them, by every test here.
FD_VECTORS = {"put_fd": FrameType.PUT_FD, "get_to_fd": FrameType.GET_TO_FD}


@needs_vectors
def test_vectors_present() -> None:
    assert len(VALID) >= 20 and len(INVALID) >= 10
    named = {v.name for v in VALID}
    want = {int(t) for t in FrameType} - {int(t) for n, t in FD_VECTORS.items() if n not in named}
    want |= set(_wire._NAMESPACE_TYPES)
    assert {v.type for v in VALID} >= want, "a frame type without a valid vector"


@needs_vectors
@pytest.mark.parametrize("name", sorted(FD_VECTORS))
def test_fd_vectors(name: str) -> None:
    # A vector of that name, if frames.txt has it, is of the type with the
    # fields the Python client sends (test_encode_valid checks its hex).
    got = [v for v in VALID if v.name == name]
    if not got:
        pytest.skip(f"frames.txt has no {name} vector yet (added with the Go generator)")
    v = got[0]
    assert v.type == FD_VECTORS[name]
    keys = [k for k, _ in v.fields]
    assert keys == (["name", "chunk_size"] if name == "put_fd" else ["name"])
    assert encode_from(v.type, v.fields).hex() == v.hex


def test_fd_requests() -> None:
    # docs/rpcbridge.md sections 4 and 6.12, independent of frames.txt: a
    # PUT's body under type 0x1B, a GET's under 0x1C.
    assert _wire.encode_put_fd(b"shared/init", 0).hex() == "000000131b0000000000000b7368617265642f696e697400000000"
    assert _wire.encode_put_fd(b"a", 1 << 20).hex() == "000000091b000000000000016100100000"
    assert (
        _wire.encode_name_request(FrameType.GET_TO_FD, b"shared/init").hex()
        == "0000000f1c0000000000000b7368617265642f696e6974"
    )
    assert _wire.decode_put(bytes.fromhex("000000016100100000"), "PUT_FD") == ("a", 1 << 20)
    with pytest.raises(ProtocolError, match="PUT_FD"):
        _wire.decode_put(bytes.fromhex("0000000161"), "PUT_FD")
    _wire.check_frame(FrameType.PUT_FD, 64 << 10)
    with pytest.raises(ProtocolError):
        _wire.check_frame(FrameType.GET_TO_FD, (64 << 10) + 1)


@needs_vectors
@pytest.mark.parametrize("v", VALID, ids=[v.name for v in VALID])
def test_decode_valid(v: Vector) -> None:
    ftype, body = decode_frame(bytes.fromhex(v.hex))
    assert ftype == v.type
    got = decode_fields(ftype, body)
    if ftype in (FrameType.STATUS_JSON, _wire.NAMESPACE_JSON):
        assert json.loads(got[0][1]) == json.loads(v.fields[0][1])
    else:
        assert got == v.fields


@needs_vectors
@pytest.mark.parametrize("v", VALID, ids=[v.name for v in VALID])
def test_encode_valid(v: Vector) -> None:
    assert encode_from(v.type, v.fields).hex() == v.hex


@needs_vectors
@pytest.mark.parametrize("v", INVALID, ids=[v.name for v in INVALID])
def test_reject_invalid(v: Vector) -> None:
    with pytest.raises(ProtocolError):
        ftype, body = decode_frame(bytes.fromhex(v.hex))
        decode_fields(ftype, body)


def test_doc_worked_example() -> None:
    # docs/rpcbridge.md section 9, independent of the file.
    assert _wire.encode_name_request(FrameType.STAT, b"data/1").hex() == "0000000a1400000000000006646174612f31"
    assert _wire.encode_hello(2).hex() == "00000008010000004f4d535400000002"
    code, msg = _wire.decode_error(bytes.fromhex("000000010000001322646174612f31223a206e6f7420666f756e64"))
    assert (code, msg) == (1, '"data/1": not found')


def test_request_body_limit() -> None:
    with pytest.raises(ProtocolError):
        _wire.check_frame(FrameType.GET, (64 << 10) + 1)
    _wire.check_frame(FrameType.DATA, 16 << 20)


def mutations(frame: bytes, rng: random.Random, n: int) -> List[bytes]:
    """n random mutations of frame: flipped bytes, truncations, extensions,
    length fields rewritten, and splices of two places."""
    out = []
    for _ in range(n):
        b = bytearray(frame)
        op = rng.randrange(5)
        if op == 0 and b:
            for _ in range(rng.randint(1, 4)):
                b[rng.randrange(len(b))] = rng.randrange(256)
        elif op == 1:
            del b[rng.randrange(len(b) + 1) :]
        elif op == 2:
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 3 and len(b) >= 4:
            # A u32 somewhere (often a length) set to an edge value.
            i = rng.randrange(len(b) - 3)
            b[i : i + 4] = rng.choice([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, len(b), len(b) + 1]).to_bytes(4, "big")
        elif len(b) > 2:
            i, j = sorted(rng.sample(range(len(b)), 2))
            b = b[:i] + b[j:] + b[i:j]
        out.append(bytes(b))
    return out


@needs_vectors
def test_decoders_never_crash() -> None:
    # A fuzz pass over the decoders, seeded so that a failure reproduces:
    # every mutation of every valid vector either decodes or raises
    # ProtocolError; no other exception, no hang.
    rng = random.Random(20261123)
    n = 0
    for v in VALID:
        for m in mutations(bytes.fromhex(v.hex), rng, 1000):
            try:
                ftype, body = decode_frame(m)
                decode_fields(ftype, body)
            except ProtocolError:
                pass
            n += 1
    assert n == 1000 * len(VALID)
