"""A get into a file reports its bytes (protocol version 8, docs/rpcbridge.md
section 6.15): get_file's and get_to_fd's progress callback, checked as the
Go client checks the PROGRESS frames, against the real daemon, scripted
daemons of versions 8 and 7, and the shared vectors of
testdata/rpcbridge/frames-v8.txt."""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from pathlib import Path
from typing import Callable, List, Tuple

import pytest

import omst
from omst import _wire
from omst._wire import FrameType
from omst.errors import ProtocolError

from conftest import Daemon, FakeDaemon, find_up
from test_files import leftovers, pattern, read, recv_frame_fds, write
from test_vectors import Fieldreader, Vector, parse_vectors

MiB = 1 << 20

# --- the version 8 vectors -----------------------------------------------------------

V8_PATH = find_up("testdata/rpcbridge/frames-v8.txt")
V8: List[Vector] = parse_vectors(V8_PATH.read_text("utf-8")) if V8_PATH else []


def v8_fields(ftype: int, body: bytes) -> List[Tuple[str, str]]:
    if ftype == _wire.PROGRESS:
        return [("done", str(_wire.decode_progress(body)))]
    if ftype == FrameType.HELLO:
        return [("magic", "OMST"), ("version", str(_wire.decode_hello(body)))]
    raise ProtocolError(f"no decoder for {ftype}")


def test_v8_vectors_present() -> None:
    assert V8_PATH is not None, "testdata/rpcbridge/frames-v8.txt not found"
    assert sum(v.type == _wire.PROGRESS for v in V8) >= 3 and sum(not v.valid for v in V8) >= 3


@pytest.mark.parametrize("v", V8, ids=[v.name for v in V8])
def test_v8_vectors(v: Vector) -> None:
    frame = bytes.fromhex(v.hex)
    if not v.valid:
        with pytest.raises(ProtocolError):
            ftype, n = _wire.parse_header(frame[:8])
            _wire.check_frame(ftype, n)
            v8_fields(ftype, frame[8:])
        return
    ftype, n = _wire.parse_header(frame[:8])
    _wire.check_frame(ftype, n)
    assert ftype == v.type and v8_fields(ftype, frame[8:]) == v.fields
    r = Fieldreader(v.fields)
    if ftype == _wire.PROGRESS:
        enc = _wire.encode_progress(r.int("done"))
    else:
        r.get("magic")
        enc = _wire.encode_hello(r.int("version"))
    r.done()
    assert enc.hex() == v.hex


def test_check_progress() -> None:
    _wire.check_progress(0, 0, 0)
    _wire.check_progress(10, 10, 10)
    with pytest.raises(ProtocolError, match="went back"):
        _wire.check_progress(4, 5, 10)
    with pytest.raises(ProtocolError, match="blob of 10"):
        _wire.check_progress(11, 0, 10)


def test_progress_decoder_fuzz() -> None:
    # Random bodies (seeded): decoded exactly when 8 bytes, else
    # ProtocolError; never another exception.
    rng = random.Random(20261127)
    for _ in range(5000):
        body = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 17)))
        try:
            done = _wire.decode_progress(body)
        except ProtocolError:
            assert len(body) != 8
            continue
        assert len(body) == 8 and _wire.encode_progress(done)[8:] == body


# --- scripted daemons ----------------------------------------------------------------------


class Scripted:
    """A daemon of protocol version `version` holding one blob: GET_TO_FD is
    answered INFO, then on version 8 the bytes in three parts each followed
    by PROGRESS, then END. Some names break the rules on purpose: "back"
    (a PROGRESS goes back), "over" (beyond the size), "short" (a body of 4
    bytes), "noend" (END before every byte), "progress7" (a PROGRESS on
    any version)."""

    def __init__(self, make: Callable[[Callable[[socket.socket], None]], FakeDaemon], version: int, data: bytes) -> None:
        self.version = version
        self.data = data
        self.sock = make(self.handle).sock

    def handle(self, c: socket.socket) -> None:
        _, body, _ = recv_frame_fds(c)
        v = min(self.version, int.from_bytes(body[4:], "big"))
        c.sendall(_wire.encode_hello(v))
        while True:
            t, body, fds = recv_frame_fds(c)
            if t is None:
                return
            try:
                if t != FrameType.GET_TO_FD or len(fds) != 1:
                    c.sendall(_wire.encode_error(3, "unexpected request"))
                    return
                self.get(c, v, _wire.decode_name_request(body), fds[0])
            finally:
                for fd in fds:
                    os.close(fd)

    def get(self, c: socket.socket, v: int, name: str, fd: int) -> None:
        n = len(self.data)
        third = n // 3
        info = _wire.encode_info(omst.Info(name, "bafyfake", n, MiB, 1, 0, "peer", False, False))
        bad = {
            "back": _wire.encode_progress(2 * third) + _wire.encode_progress(third),
            "over": _wire.encode_progress(n + 1),
            "short": _wire.encode_frame(_wire.PROGRESS, b"\0\0\0\1"),
            "noend": _wire.encode_progress(third) + _wire.encode_empty(FrameType.END),
            "progress7": _wire.encode_progress(n),
        }
        if name in bad:
            c.sendall(info + bad[name])
            return
        c.sendall(info)
        at = 0
        for cut in (third, 2 * third, n):
            os.pwrite(fd, self.data[at:cut], at)
            at = cut
            if v >= 8:
                c.sendall(_wire.encode_progress(at))
        os.ftruncate(fd, n)
        c.sendall(_wire.encode_empty(FrameType.END))


def test_scripted_version_8(fake_daemon: Callable[..., FakeDaemon], tmp_path: Path) -> None:
    data = pattern(30_000, 8)
    cl = omst.Client(Scripted(fake_daemon, 8, data).sock, timeout=10)
    assert cl.protocol_version == 8
    seen: List[Tuple[int, int]] = []
    info = cl.get_file("a", tmp_path / "out", progress=lambda d, s: seen.append((d, s)))
    assert info.size == 30_000 and read(tmp_path / "out") == data
    assert seen == [(10_000, 30_000), (20_000, 30_000), (30_000, 30_000)]
    # get_to_fd, and the call without a callback.
    seen.clear()
    with open(tmp_path / "fd", "wb") as f:
        cl.get_to_fd("a", f, progress=lambda d, s: seen.append((d, s)))
    assert read(tmp_path / "fd") == data and seen[-1] == (30_000, 30_000) and len(seen) == 3
    cl.get_file("a", tmp_path / "plain")
    assert read(tmp_path / "plain") == data

    # Malformed reports: ProtocolError, the destination as it was.
    for name in ("back", "over", "short", "noend"):
        write(tmp_path / "keep", b"precious")
        with pytest.raises(ProtocolError, match="PROGRESS"):
            cl.get_file(name, tmp_path / "keep", progress=lambda d, s: None)
        assert read(tmp_path / "keep") == b"precious", name
        assert [p for p in leftovers(tmp_path)] == [], name

    # The callback raises: the get stops, the destination is as it was, the
    # client goes on (on a new connection).
    class Stop(Exception):
        pass

    def stop(d: int, s: int) -> None:
        raise Stop()

    with pytest.raises(Stop):
        cl.get_file("a", tmp_path / "keep", progress=stop)
    assert read(tmp_path / "keep") == b"precious" and leftovers(tmp_path) == []
    cl.get_file("a", tmp_path / "keep")
    assert read(tmp_path / "keep") == data
    cl.close()


def test_scripted_version_7(fake_daemon: Callable[..., FakeDaemon], tmp_path: Path) -> None:
    # A daemon of version 7 sends no PROGRESS: the callback is called once,
    # with every byte, when the get succeeded; a PROGRESS from it is a
    # protocol error.
    data = pattern(30_000, 7)
    cl = omst.Client(Scripted(fake_daemon, 7, data).sock, timeout=10)
    assert cl.protocol_version == 7
    seen: List[Tuple[int, int]] = []
    cl.get_file("a", tmp_path / "out", progress=lambda d, s: seen.append((d, s)))
    assert read(tmp_path / "out") == data and seen == [(30_000, 30_000)]
    with pytest.raises(ProtocolError, match="PROGRESS"):
        cl.get_file("progress7", tmp_path / "out", progress=lambda d, s: None)
    assert read(tmp_path / "out") == data and leftovers(tmp_path) == []
    cl.close()


# --- the real daemon ---------------------------------------------------------------------


def check_calls(seen: List[Tuple[int, int]], size: int) -> None:
    assert seen, "the callback was not called"
    dones = [d for d, _ in seen]
    assert all(a < b for a, b in zip(dones, dones[1:])), dones
    assert dones[-1] == size and all(s == size for _, s in seen)


def test_real_daemon_progress(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    # A 64 MiB get into a file calls the callback with increasing values
    # ending at the size; into a pipe read slowly (1 MiB per 20 ms) several
    # times, as the bytes go.
    data = os.urandom(64 * MiB)
    write(tmp_path / "src", data)
    cl = omst.Client(daemon.sock, timeout=60)
    assert cl.protocol_version == 8
    cl.put_file(f"{ns}/big", tmp_path / "src")
    seen: List[Tuple[int, int]] = []
    info = cl.get_file(f"{ns}/big", tmp_path / "out", progress=lambda d, s: seen.append((d, s)))
    assert info.size == len(data) and read(tmp_path / "out") == data
    check_calls(seen, len(data))

    seen.clear()
    r, w = os.pipe()
    got: List[bytes] = []

    def reader() -> None:
        while True:
            b = os.read(r, MiB)
            if not b:
                return
            got.append(b)
            time.sleep(0.02)

    t = threading.Thread(target=reader)
    t.start()
    try:
        start = time.monotonic()
        cl.get_to_fd(f"{ns}/big", w, progress=lambda d, s: seen.append((d, s)))
    finally:
        os.close(w)
        t.join(60)
        os.close(r)
    assert b"".join(got) == data
    check_calls(seen, len(data))
    if time.monotonic() - start > 0.5:
        assert len(seen) >= 3, seen
    cl.close()


def test_real_daemon_old_version(daemon: Daemon, ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A connection of version 7 (a daemon of 5 to 7): no PROGRESS; the
    # callback once, with the size.
    monkeypatch.setattr(omst.client, "PROTOCOL_VERSIONS", (7, 6, 5, 2, 1))
    cl = omst.Client(daemon.sock, timeout=30)
    assert cl.protocol_version == 7
    cl.put(f"{ns}/b", b"x" * 5000)
    seen: List[Tuple[int, int]] = []
    cl.get_file(f"{ns}/b", tmp_path / "o", progress=lambda d, s: seen.append((d, s)))
    assert seen == [(5000, 5000)] and read(tmp_path / "o") == b"x" * 5000
    cl.close()
