"""Many names in one request against a real daemon: get_many, iter_many,
get_many_into, put_many (GET_MANY, PUT_MANY: docs/rpcbridge.md section
6.14), the fallback on a daemon of version 6, and the version 7 vectors
(testdata/rpcbridge/frames-v7.txt)."""

from __future__ import annotations

from typing import List

import pytest

import omst
from omst import _wire
from omst.errors import ProtocolError

from conftest import find_up
from test_vectors import INFO_KEYS, Fieldreader, Vector, info_fields, parse_vectors


def blob(i: int, n: int) -> bytes:
    return bytes((i * 31 + k * 7) & 0xFF for k in range(n))


def test_put_many_then_get_many(plain_client: omst.Client, ns: str) -> None:
    c = plain_client
    assert c.protocol_version >= 7
    items = {f"{ns}/r/{i}": blob(i, 16 << 10) for i in range(60)}
    items[f"{ns}/r/empty"] = b""
    items[f"{ns}/r/big"] = blob(99, 700 << 10)  # streamed by the daemon
    put = c.put_many(items)
    assert put.all_ok and len(put) == 62 and put.summary[:3] == (62, 62, 0)
    assert put[f"{ns}/r/7"].size == 16 << 10
    # One entry missing: its own error; the rest come.
    names = list(items) + [f"{ns}/r/missing"]
    got = c.get_many(names)
    assert set(got) == set(items) and all(got[n] == items[n] for n in items)
    assert list(got.errors) == [f"{ns}/r/missing"]
    assert isinstance(got.errors[f"{ns}/r/missing"], omst.NotFound)
    assert got.summary == (63, 62, 1, sum(len(b) for b in items.values()))
    # By prefix, as an iterator.
    seen = dict(c.iter_many(prefix=f"{ns}/r/"))
    assert seen == items
    # The client is in step after it.
    assert c.stat(f"{ns}/r/3").size == 16 << 10


def test_get_many_into(plain_client: omst.Client, ns: str) -> None:
    c = plain_client
    c.put_many({f"{ns}/a": b"abc", f"{ns}/b": b"defgh"})
    bufs = {f"{ns}/a": bytearray(3), f"{ns}/b": bytearray(4), f"{ns}/c": bytearray(1)}
    res = c.get_many_into(bufs)
    assert res == {f"{ns}/a": 3}
    assert bytes(bufs[f"{ns}/a"]) == b"abc"
    assert isinstance(res.errors[f"{ns}/b"], omst.SizeMismatch) and bufs[f"{ns}/b"] == bytearray(4)
    assert isinstance(res.errors[f"{ns}/c"], omst.NotFound)
    assert c.get(f"{ns}/b") == b"defgh"


def test_put_many_bad_name(plain_client: omst.Client, ns: str) -> None:
    res = plain_client.put_many([(f"{ns}/ok", b"1"), (f"{ns}//bad", b"2"), (f"{ns}/ok2", b"3")])
    assert set(res) == {f"{ns}/ok", f"{ns}/ok2"}
    assert isinstance(res.errors[f"{ns}//bad"], omst.InvalidName)


def test_many_bad_arguments(plain_client: omst.Client, ns: str) -> None:
    with pytest.raises(ValueError):
        plain_client.get_many()
    with pytest.raises(ValueError):
        plain_client.get_many([f"{ns}/a"], prefix=ns)
    with pytest.raises(TypeError):
        plain_client.get_many(f"{ns}/a")
    with pytest.raises(omst.InvalidName):
        plain_client.get_many(prefix="a//")
    with pytest.raises(omst.InvalidName):
        plain_client.get_many(["ok", "a/../b"])


def test_many_on_version_6(daemon, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A client that offers at most version 6, as against a daemon of 6: one
    # GET or PUT per name, the same answers.
    monkeypatch.setattr(omst.client, "PROTOCOL_VERSIONS", (6, 5, 2, 1))
    c = omst.Client(daemon.sock, timeout=30)
    try:
        assert c.protocol_version == 6
        res = c.put_many({f"{ns}/x": b"1", f"{ns}/y": b"22"})
        assert res.all_ok
        got = c.get_many(prefix=f"{ns}/")
        assert dict(got) == {f"{ns}/x": b"1", f"{ns}/y": b"22"}
        got = c.get_many([f"{ns}/x", f"{ns}/nope"])
        assert dict(got) == {f"{ns}/x": b"1"} and isinstance(got.errors[f"{ns}/nope"], omst.NotFound)
        buf = bytearray(2)
        assert c.get_many_into({f"{ns}/y": buf}) == {f"{ns}/y": 2} and buf == b"22"
    finally:
        c.close()


# --- the version 7 vectors ----------------------------------------------------------

V7_PATH = find_up("testdata/rpcbridge/frames-v7.txt")
V7: List[Vector] = parse_vectors(V7_PATH.read_text("utf-8")) if V7_PATH else []


def v7_fields(ftype: int, body: bytes):
    if ftype == _wire.GET_MANY:
        flags, prefix, names = _wire.decode_get_many(body)
        return [("flags", str(flags)), ("prefix", prefix), ("count", str(len(names)))] + [("name", n) for n in names]
    if ftype == _wire.PUT_MANY:
        return [("chunk_size", str(_wire.decode_put_many(body)))]
    if ftype == _wire.PUT_ITEM:
        name, size = _wire.decode_put_item(body)
        return [("name", name), ("size", str(size))]
    if ftype == _wire.ENTRY:
        i, info = _wire.decode_entry(body)
        return [("index", str(i))] + info_fields(info)
    if ftype == _wire.ENTRY_ERROR:
        i, name, code, msg = _wire.decode_entry_error(body)
        return [("index", str(i)), ("name", name), ("code", str(code)), ("message", msg)]
    if ftype == _wire.SUMMARY:
        e, ok, f, b = _wire.decode_summary(body)
        return [("entries", str(e)), ("ok", str(ok)), ("failed", str(f)), ("bytes", str(b))]
    if ftype == _wire.FrameType.HELLO:
        return [("magic", "OMST"), ("version", str(_wire.decode_hello(body)))]
    raise ProtocolError(f"no decoder for {ftype}")


@pytest.mark.skipif(not V7, reason="testdata/rpcbridge/frames-v7.txt not found")
@pytest.mark.parametrize("v", V7, ids=[v.name for v in V7])
def test_v7_vectors(v: Vector) -> None:
    frame = bytes.fromhex(v.hex)
    if not v.valid:
        with pytest.raises(ProtocolError):
            ftype, n = _wire.parse_header(frame[:8])
            _wire.check_frame(ftype, n)
            v7_fields(ftype, frame[8:])
        return
    ftype, n = _wire.parse_header(frame[:8])
    _wire.check_frame(ftype, n)
    assert ftype == v.type and v7_fields(ftype, frame[8:]) == v.fields
    r = Fieldreader(v.fields)
    enc = {
        _wire.GET_MANY: lambda: _wire.encode_get_many(
            r.int("flags"), r.get("prefix").encode(), [r.get("name").encode() for _ in range(r.int("count"))]
        ),
        _wire.PUT_MANY: lambda: _wire.encode_put_many(r.int("chunk_size")),
        _wire.PUT_ITEM: lambda: _wire.encode_put_item(r.get("name").encode(), r.int("size")),
        _wire.ENTRY: lambda: _wire.encode_entry(r.int("index"), r.info()),
        _wire.ENTRY_ERROR: lambda: _wire.encode_entry_error(r.int("index"), r.get("name"), r.int("code"), r.get("message")),
        _wire.SUMMARY: lambda: _wire.encode_summary(r.int("entries"), r.int("ok"), r.int("failed"), r.int("bytes")),
        _wire.FrameType.HELLO: lambda: (r.get("magic"), _wire.encode_hello(r.int("version")))[1],
    }[ftype]()
    r.done()
    assert enc.hex() == v.hex
    assert INFO_KEYS  # the INFO keys of ENTRY are test_vectors.py's


def test_iter_many_abandoned(plain_client: omst.Client, ns: str) -> None:
    # An iterator left after its first entry drops the connection (the
    # rest of the reply is not read); the next call works on a new one.
    c = plain_client
    c.put_many({f"{ns}/{i}": bytes([i]) * 100 for i in range(20)})
    it = c.iter_many(prefix=f"{ns}/")
    name, data = next(it)
    assert data == bytes([int(name.rsplit("/", 1)[1])]) * 100
    it.close()
    assert c.get(f"{ns}/3") == bytes([3]) * 100
    assert len(c.get_many(prefix=f"{ns}/")) == 20
