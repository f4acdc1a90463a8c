"""GET_FD (protocol version 2) against a fake daemon that passes
descriptors: extents and file offsets honoured, protocol violations
rejected, no descriptor leaked."""

from __future__ import annotations

import os
import socket
import tempfile
from typing import Callable, List

import pytest

import omst
from omst import _wire
from omst._wire import Extent, FrameType

from conftest import FakeDaemon, recv_frame

BLOB = bytes(range(256)) * 64  # 16 KiB


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")


def _file_with(data: bytes, pad: int) -> int:
    """An unlinked temporary file holding pad zero bytes then data; its fd."""
    f = tempfile.TemporaryFile()
    f.write(b"\0" * pad + data)
    f.flush()
    return os.dup(f.fileno())


Script = Callable[[socket.socket], None]


def _v2_daemon(make: Callable[[Script], FakeDaemon], reply: Callable[[socket.socket, int], None]) -> str:
    """A fake version 2 daemon answering each request with reply(conn, type)."""

    def handler(c: socket.socket) -> None:
        recv_frame(c)
        c.sendall(_wire.encode_hello(2))
        while True:
            t, _ = recv_frame(c)
            if t is None:
                return
            reply(c, t)

    return make(handler).sock


def _info(size: int) -> omst.Info:
    return omst.Info("x", "bafy", size, 4096, 4, 0, "peer", True, True)


def _send_fds(c: socket.socket, extents: List[Extent], fds: List[int]) -> None:
    socket.send_fds(c, [_wire.encode_fds(extents)], fds)


def _client(sock: str) -> omst.Client:
    c = omst.Client(sock, timeout=5)
    c.get_fd_min_size = 0
    assert c.protocol_version == 2
    return c


def test_extents_and_offsets(fake_daemon: Callable[[Script], FakeDaemon]) -> None:
    # Two extents in one file at different offsets, a third in a second frame.
    fd1 = _file_with(BLOB[:12288], 8192)
    fd2 = _file_with(BLOB[12288:], 0)

    def reply(c: socket.socket, t: int) -> None:
        c.sendall(_wire.encode_info(_info(len(BLOB))))
        _send_fds(c, [Extent(0, 4096, 8192), Extent(4096, 8192, 12288)], [fd1, fd1])
        _send_fds(c, [Extent(12288, 4096, 0)], [fd2])
        c.sendall(_wire.encode_empty(FrameType.END))

    c = _client(_v2_daemon(fake_daemon, reply))
    before = open_fds()
    buf = bytearray(len(BLOB))
    assert c.get_into("x", buf) == len(BLOB)
    assert buf == BLOB
    assert open_fds() == before, "descriptor leaked"
    # get() of unknown size uses plain GET: the fake answers it the same
    # way, which is a protocol violation for GET.
    with pytest.raises(omst.ProtocolError):
        c.get("x")
    os.close(fd1)
    os.close(fd2)


@pytest.mark.parametrize(
    "case",
    ["no_descriptors", "extra_descriptors", "gap", "beyond_size", "short_cover", "error_after_fds", "short_file", "data_frame"],
)
def test_violations(fake_daemon: Callable[[Script], FakeDaemon], case: str) -> None:
    fd = _file_with(BLOB, 0)
    half = len(BLOB) // 2
    info = _info(len(BLOB))
    expect: type = omst.ProtocolError

    def reply(c: socket.socket, t: int) -> None:
        c.sendall(_wire.encode_info(info))
        if case == "no_descriptors":
            c.sendall(_wire.encode_fds([Extent(0, len(BLOB), 0)]))
        elif case == "extra_descriptors":
            _send_fds(c, [Extent(0, len(BLOB), 0)], [fd, fd])
        elif case == "gap":
            _send_fds(c, [Extent(0, half, 0), Extent(half + 1, half - 1, half + 1)], [fd, fd])
        elif case == "beyond_size":
            _send_fds(c, [Extent(0, len(BLOB) + 1, 0)], [fd])
        elif case == "short_cover":
            _send_fds(c, [Extent(0, half, 0)], [fd])
        elif case == "error_after_fds":
            _send_fds(c, [Extent(0, half, 0)], [fd])
            c.sendall(_wire.encode_error(7, "chunk 1 corrupt"))
            return
        elif case == "short_file":
            _send_fds(c, [Extent(0, len(BLOB), 100)], [fd])
        elif case == "data_frame":
            c.sendall(_wire.encode_data(BLOB))
        c.sendall(_wire.encode_empty(FrameType.END))

    if case == "short_cover":
        expect = omst.SizeMismatch
    elif case == "error_after_fds":
        expect = omst.Corrupt
    elif case == "short_file":
        expect = omst.Corrupt
    c = _client(_v2_daemon(fake_daemon, reply))
    before = open_fds()
    with pytest.raises(expect):
        c.get_into("x", bytearray(len(BLOB)))
    if c._conn is not None:  # kept only if in step
        assert c._conn._fds is None
    assert open_fds() <= before, "descriptor leaked"
    os.close(fd)


def test_size_mismatch_closes_descriptors(fake_daemon: Callable[[Script], FakeDaemon]) -> None:
    fd = _file_with(BLOB, 0)

    def reply(c: socket.socket, t: int) -> None:
        c.sendall(_wire.encode_info(_info(len(BLOB))))
        _send_fds(c, [Extent(0, len(BLOB), 0)], [fd])
        c.sendall(_wire.encode_empty(FrameType.END))

    c = _client(_v2_daemon(fake_daemon, reply))
    before = open_fds()
    buf = bytearray(b"\x55" * (len(BLOB) - 1))
    with pytest.raises(omst.SizeMismatch):
        c.get_into("x", buf)
    assert buf == b"\x55" * (len(BLOB) - 1)
    assert open_fds() == before
    assert c._conn is not None, "a small mismatched reply is drained, the connection kept"
    os.close(fd)


def test_version_1_daemon_uses_get(fake_daemon: Callable[[Script], FakeDaemon]) -> None:
    seen: List[int] = []

    def handler(c: socket.socket) -> None:
        t, body = recv_frame(c)
        if int.from_bytes(body[4:], "big") != 1:
            c.sendall(_wire.encode_error(9, "unsupported protocol version"))
            return
        c.sendall(_wire.encode_hello(1))
        while True:
            t, _ = recv_frame(c)
            if t is None:
                return
            seen.append(t)
            c.sendall(_wire.encode_info(_info(4)) + _wire.encode_data(b"abcd") + _wire.encode_empty(FrameType.END))

    c = omst.Client(fake_daemon(handler).sock, timeout=5)
    c.get_fd_min_size = 0
    buf = bytearray(4)
    assert c.get_into("x", buf) == 4 and buf == b"abcd"
    assert seen == [FrameType.GET] and c.protocol_version == 1


