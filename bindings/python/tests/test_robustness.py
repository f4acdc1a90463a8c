"""Failures: no daemon, daemon killed mid-get, daemon restarted, timeouts,
protocol violations, version fallback."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from typing import Any, Callable, List

import pytest

import omst
from omst import _conn, _wire
from omst._wire import FrameType

from conftest import Daemon, FakeDaemon, recv_frame

MiB = 1 << 20


def test_no_daemon_fails_at_once(tmp_path: Any) -> None:
    t = time.monotonic()
    with pytest.raises(omst.DaemonUnavailable) as ei:
        omst.Client(os.path.join(tmp_path, "omst.sock"))
    assert "no omst daemon at" in str(ei.value)
    # A stale socket file nobody listens on.
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(tmp_path, "stale.sock"))
    s.close()
    with pytest.raises(omst.DaemonUnavailable):
        omst.Client(os.path.join(tmp_path, "stale.sock")).get("x")
    assert time.monotonic() - t < 2


@pytest.mark.parametrize("get_fd", [False, True], ids=["GET", "GET_FD"])
def test_daemon_killed_mid_get(fresh_daemon: Daemon, monkeypatch: pytest.MonkeyPatch, get_fd: bool) -> None:
    c = omst.Client(fresh_daemon.sock, timeout=20, get_fd=get_fd)
    size = 256 * MiB
    big = bytearray(size)
    big[::4096] = b"\x01" * (size // 4096)
    c.put("big", big)
    del big

    # Kill the daemon once the first blob bytes (GET) or descriptors
    # (GET_FD) have arrived.
    started = threading.Event()
    method = "take_fds" if get_fd and c.protocol_version >= 2 else "read_into"
    real = getattr(_conn.Connection, method)

    def spy(self: _conn.Connection, arg: Any) -> Any:
        started.set()
        return real(self, arg)

    monkeypatch.setattr(_conn.Connection, method, spy)
    outcome: List[Any] = []

    def getter(call: Callable[[], Any]) -> None:
        try:
            outcome.append(call())
        except BaseException as e:  # noqa: BLE001
            outcome.append(e)

    buf = bytearray(size)
    th = threading.Thread(target=getter, args=(lambda: c.get_into("big", buf),))
    th.start()
    assert started.wait(20), "the get never started"
    fresh_daemon.kill()
    t = time.monotonic()
    th.join(15)
    assert not th.is_alive(), "get did not fail after the daemon died"
    assert time.monotonic() - t < 15
    assert isinstance(outcome[0], omst.ConnectionLost), outcome
    # Later calls fail fast: the daemon is gone.
    with pytest.raises(omst.DaemonUnavailable):
        c.stat("big")


def test_daemon_restarted_client_reconnects(fresh_daemon: Daemon) -> None:
    c = omst.Client(fresh_daemon.sock)
    c.put("x", b"before")
    fresh_daemon.stop()
    fresh_daemon.start()  # same home, same socket: the name persists
    assert c.get("x") == b"before"  # the stale connection is noticed and replaced
    c.close()


def _hello_then(reply: Callable[[socket.socket, int, bytes], None]) -> Callable[[socket.socket], None]:
    """A fake daemon handler: HELLO v1, then reply(conn, type, body) per request."""

    def handler(c: socket.socket) -> None:
        t, _ = recv_frame(c)
        c.sendall(_wire.encode_hello(1))
        while True:
            t, body = recv_frame(c)
            if t is None:
                return
            reply(c, t, body)

    return handler


def test_client_timeout(fake_daemon: Callable[..., FakeDaemon]) -> None:
    f = fake_daemon(_hello_then(lambda c, t, b: None))  # never answers
    c = omst.Client(f.sock, timeout=0.3)
    t = time.monotonic()
    with pytest.raises(omst.Timeout):
        c.stat("x")
    assert time.monotonic() - t < 3
    assert c._conn is None  # dropped


def test_stalled_mid_get(fake_daemon: Callable[..., FakeDaemon]) -> None:
    info = omst.Info("x", "bafy", 1000, 1 << 20, 1, 0, "peer", True, True)

    def reply(c: socket.socket, t: int, b: bytes) -> None:
        c.sendall(_wire.encode_info(info) + _wire.encode_data(b"z" * 500))  # then silence

    f = fake_daemon(_hello_then(reply))
    c = omst.Client(f.sock, timeout=0.3)
    with pytest.raises(omst.Timeout):
        c.get("x")


@pytest.mark.parametrize(
    "frames, exc",
    [
        # size 10 but 12 bytes of DATA
        ([_wire.encode_data(b"a" * 12), _wire.encode_empty(FrameType.END)], omst.ProtocolError),
        # END after 5 of 10 bytes: not a complete blob
        ([_wire.encode_data(b"a" * 5), _wire.encode_empty(FrameType.END)], omst.SizeMismatch),
        # ERROR instead of END
        ([_wire.encode_data(b"a" * 5), _wire.encode_error(6, "peer gone")], omst.Unreachable),
        # unknown error code: a generic OmstError
        ([_wire.encode_error(77, "new")], omst.OmstError),
        # connection cut after part of the blob
        ([_wire.encode_data(b"a" * 5)], omst.ConnectionLost),
        # nonzero flags in a header
        ([b"\x00\x00\x00\x00\x22\x01\x00\x00"], omst.ProtocolError),
        # oversize frame
        ([struct.pack(">IBBH", (16 << 20) + 1, 0x20, 0, 0)], omst.ProtocolError),
        # unexpected frame type
        ([_wire.encode_empty(FrameType.OK)], omst.ProtocolError),
    ],
)
def test_bad_get_replies(fake_daemon: Callable[..., FakeDaemon], frames: List[bytes], exc: type) -> None:
    info = omst.Info("x", "bafy", 10, 1 << 20, 1, 0, "peer", True, True)

    def reply(c: socket.socket, t: int, b: bytes) -> None:
        c.sendall(_wire.encode_info(info) + b"".join(frames))
        if exc is omst.ConnectionLost:
            c.close()

    f = fake_daemon(_hello_then(reply))
    c = omst.Client(f.sock, timeout=5)
    with pytest.raises(exc):
        c.get("x")
    with pytest.raises(exc):
        c.get_into("x", bytearray(10))


def test_listing_count_checked(fake_daemon: Callable[..., FakeDaemon]) -> None:
    def reply(c: socket.socket, t: int, b: bytes) -> None:
        # count 1000 in a 4-byte body
        c.sendall(_wire.encode_frame(FrameType.LISTING, struct.pack(">I", 1000)))

    c = omst.Client(fake_daemon(_hello_then(reply)).sock, timeout=5)
    with pytest.raises(omst.ProtocolError):
        c.ls()


def test_version_fallback(fake_daemon: Callable[..., FakeDaemon]) -> None:
    offered: List[int] = []

    def handler(c: socket.socket) -> None:
        t, body = recv_frame(c)
        v = int.from_bytes(body[4:], "big")
        offered.append(v)
        if v > 1:
            c.sendall(_wire.encode_error(9, f"unsupported protocol version {v}"))
            c.close()
            return
        c.sendall(_wire.encode_hello(1))
        recv_frame(c)

    f = fake_daemon(handler)
    conn = _conn.Connection.open(f.sock, 5, (2, 1))
    assert conn.version == 1 and offered == [2, 1]
    conn.close()
    with pytest.raises(omst.UnsupportedVersion):
        _conn.Connection.open(f.sock, 5, (3,))


def test_hello_answered_with_higher_version(fake_daemon: Callable[..., FakeDaemon]) -> None:
    def handler(c: socket.socket) -> None:
        recv_frame(c)
        c.sendall(_wire.encode_hello(omst.client.PROTOCOL_VERSIONS[0] + 1))
        recv_frame(c)

    with pytest.raises(omst.ProtocolError):
        omst.Client(fake_daemon(handler).sock, timeout=5)


def test_real_daemon_hello(daemon: Daemon) -> None:
    # Whatever the daemon speaks, the client ends up on a version it offered.
    c = omst.Client(daemon.sock)
    assert c.protocol_version in omst.client.PROTOCOL_VERSIONS
    assert c.protocol_version == 8, "this checkout's daemon speaks version 8"
    c.close()
    conn = _conn.Connection.open(daemon.sock, 5, (2, 1))
    assert conn.version in (1, 2)
    conn.close()


def test_put_daemon_errors_and_closes(fake_daemon: Callable[..., FakeDaemon]) -> None:
    # The daemon gives up mid-upload (e.g. shutting down): it says why and
    # closes; the client reports the daemon's error, not a bare lost connection.
    def handler(c: socket.socket) -> None:
        recv_frame(c)
        c.sendall(_wire.encode_hello(1))
        recv_frame(c)  # PUT
        recv_frame(c)  # first DATA
        c.sendall(_wire.encode_error(11, "daemon shutting down"))
        c.close()

    c = omst.Client(fake_daemon(handler).sock, timeout=5)
    with pytest.raises(omst.Aborted):
        c.put("x", bytes(64 << 20))
    assert c._conn is None


@pytest.mark.parametrize("code, exc", [(10, omst.InternalError), (3, omst.BadRequest)])
def test_reconnects_after_internal_or_bad_request(
    fake_daemon: Callable[..., FakeDaemon], code: int, exc: type
) -> None:
    # After INTERNAL or BAD_REQUEST the daemon may close the connection
    # (docs/rpcbridge.md section 7): the client must not reuse it, even when
    # the close has not reached it yet.
    info = omst.Info("x", "bafy", 0, 1 << 20, 0, 0, "peer", True, True)
    conns: List[int] = []

    def handler(c: socket.socket) -> None:
        conns.append(1)
        first = len(conns) == 1
        recv_frame(c)
        c.sendall(_wire.encode_hello(1))
        t, _ = recv_frame(c)
        if first:
            c.sendall(_wire.encode_error(code, "daemon bug"))
            recv_frame(c)  # a reused connection would send here, then never get an answer
            return
        while t is not None:
            c.sendall(_wire.encode_info(info))
            t, _ = recv_frame(c)

    c = omst.Client(fake_daemon(handler).sock, timeout=2)
    with pytest.raises(exc):
        c.stat("x")
    assert c.stat("x").name == "x"
    assert len(conns) == 2
