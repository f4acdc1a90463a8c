"""Puts are all or nothing (issue #10): streams, an input that fails or is
interrupted (ABORT, the connection kept), a file that changes while it is
read, a client killed mid-upload."""

from __future__ import annotations

import io
import os
import signal
import socket
import threading
import time
from typing import Iterator

import pytest

import omst
from conftest import Daemon

MiB = 1 << 20

# What the daemon logs for an upload that ended without its closing empty
# DATA frame (a cut connection, as opposed to an ABORT).
CUT_LINE = "upload ended without its closing empty DATA frame"


def pattern(n: int, seed: int = 0) -> bytes:
    block = bytes((i * 131 + seed * 17 + (i >> 8)) & 0xFF for i in range(4093))
    return (block * (n // len(block) + 1))[:n]


def cut_logged(d: Daemon, name: str) -> bool:
    """Whether the daemon's log has the cut upload of name."""
    return any(CUT_LINE in line and f"name={name} " in line for line in d.log_text().splitlines())


def wait_logged(d: Daemon, name: str, timeout: float = 5.0) -> bool:
    """Whether the daemon logs a cut upload of name within timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cut_logged(d, name):
            return True
        time.sleep(0.02)
    return False


def test_put_streams(plain_client: omst.Client, ns: str, tmp_path: "os.PathLike[str]") -> None:
    c = plain_client
    data = pattern(3 * MiB + 17, 1)
    path = os.path.join(tmp_path, "f")
    with open(path, "wb") as f:
        f.write(data)
    with open(path, "rb") as f:
        c.put(f"{ns}/file", f)
    with open(path, "rb", buffering=0) as f:
        f.seek(1000)
        c.put(f"{ns}/offset", f)
    c.put(f"{ns}/bytesio", io.BytesIO(data))
    c.put(f"{ns}/gen", (data[i : i + 700_000] for i in range(0, len(data), 700_000)))
    c.put(f"{ns}/list", [b"", data[:10], memoryview(data)[10 : 2 * MiB + 5], b"", data[2 * MiB + 5 :]])
    c.put(f"{ns}/empty", iter(()))
    for name, want in [("file", data), ("offset", data[1000:]), ("bytesio", data), ("gen", data), ("list", data),
                       ("empty", b"")]:
        assert c.get(f"{ns}/{name}") == want, name
    with pytest.raises(TypeError):
        c.put(f"{ns}/text", io.StringIO("text"))
    with pytest.raises(TypeError):
        c.put(f"{ns}/int", 5)


def _failing_source(exc: BaseException) -> Iterator[bytes]:
    yield pattern(2 * MiB, 2)
    yield pattern(MiB + 3, 3)
    raise exc


class _FailingFile(io.RawIOBase):
    """A binary file whose reads fail after n bytes."""

    def __init__(self, n: int, exc: BaseException) -> None:
        self.left, self.exc = n, exc

    def readable(self) -> bool:
        return True

    def readinto(self, b: "memoryview") -> int:  # type: ignore[override]
        if self.left <= 0:
            raise self.exc
        k = min(len(b), self.left, 100_000)
        b[:k] = bytes(k)
        self.left -= k
        return k


@pytest.mark.parametrize(
    "make",
    [
        lambda: _failing_source(ValueError("source failed")),
        lambda: _failing_source(KeyboardInterrupt()),
        lambda: _FailingFile(5 * MiB, OSError(5, "Input/output error")),
    ],
    ids=["generator-raises", "generator-interrupted", "file-read-fails"],
)
def test_failing_input_aborts(daemon: Daemon, ns: str, make: object) -> None:
    # The input fails between frames: the client sends ABORT (not the empty
    # DATA), re-raises the input's exception, and keeps its connection.
    c = omst.Client(daemon.sock, timeout=30)
    c.put(f"{ns}/warmup", b"x")
    conn = c._conn
    name = f"{ns}/failed"
    src = make()  # type: ignore[operator]
    with pytest.raises((ValueError, KeyboardInterrupt, OSError)):
        c.put(name, src)
    assert c._conn is conn, "the connection was dropped instead of aborting the upload"
    with pytest.raises(omst.NotFound):
        c.stat(name)
    assert c._conn is conn
    assert not cut_logged(daemon, name), "the daemon saw a cut connection, not an ABORT"
    c.close()


class _ChangingFile(io.FileIO):
    """A file that changes itself after its first read."""

    def __init__(self, path: str, change: str) -> None:
        super().__init__(path, "rb")
        self.change = change
        self.reads = 0

    def readinto(self, b: "memoryview") -> int:  # type: ignore[override]
        n = super().readinto(b)
        self.reads += 1
        if self.reads == 1:
            if self.change == "shrink":
                os.truncate(self.name, MiB + 100)
            elif self.change == "grow":
                with open(self.name, "ab") as f:
                    f.write(b"more")
            else:
                with open(self.name, "r+b") as f:
                    f.seek(3 * MiB)
                    f.write(b"changed")
                os.utime(self.name, ns=(10**18, 10**18))
        return n or 0


@pytest.mark.parametrize(
    "change, want",
    [("shrink", f"it shrank from {4 * MiB} to {MiB + 100} bytes"), ("grow", f"it grew beyond its {4 * MiB} bytes"),
     ("rewrite", "modification time changed")],
)
def test_changed_file_fails(daemon: Daemon, ns: str, tmp_path: "os.PathLike[str]", change: str, want: str) -> None:
    path = os.path.join(tmp_path, "f")
    with open(path, "wb") as f:
        f.write(pattern(4 * MiB, 4))
    c = omst.Client(daemon.sock, timeout=30)
    name = f"{ns}/changed"
    with _ChangingFile(path, change) as f:
        with pytest.raises(omst.OmstIOError) as ei:
            c.put(name, f)
    msg = str(ei.value)
    assert "file changed while it was read" in msg and path in msg and want in msg, msg
    with pytest.raises(omst.NotFound):
        c.stat(name)
    c.close()


class Relay:
    """Passes one client connection to the daemon, but only the client's
    first `limit` bytes; then it stops reading the client (whose writes
    block) until cut() closes both sides."""

    def __init__(self, dir: str, daemon_sock: str, limit: int) -> None:
        self.path = os.path.join(dir, "relay.sock")
        self.daemon_sock = daemon_sock
        self.limit = limit
        self.forwarded = 0
        self.at_limit = threading.Event()
        self._cut = threading.Event()
        self.srv = socket.socket(socket.AF_UNIX)
        self.srv.bind(self.path)
        self.srv.listen(1)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        c, _ = self.srv.accept()
        d = socket.socket(socket.AF_UNIX)
        d.connect(self.daemon_sock)

        def back() -> None:
            try:
                while True:
                    b = d.recv(65536)
                    if not b:
                        return
                    c.sendall(b)
            except OSError:
                return

        threading.Thread(target=back, daemon=True).start()
        try:
            while self.forwarded < self.limit:
                b = c.recv(min(65536, self.limit - self.forwarded))
                if not b:
                    break
                d.sendall(b)
                self.forwarded += len(b)
        except OSError:
            pass
        self.at_limit.set()
        self._cut.wait()
        for s in (c, d):
            try:
                s.shutdown(socket.SHUT_RDWR)  # also wakes the thread blocked in recv
            except OSError:
                pass
            s.close()
        self.srv.close()

    def cut(self) -> None:
        self._cut.set()
        self.thread.join(10)


def _check_cut_left_nothing(d: Daemon, name: str, data: bytes) -> None:
    assert wait_logged(d, name), f"the daemon did not log the cut upload of {name}: {d.log_text()}"
    c = omst.Client(d.sock, timeout=30)
    with pytest.raises(omst.NotFound):
        c.stat(name)
    c.put(name, data)
    assert c.get(name) == data
    c.close()


def _fork(child: "object") -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            child()  # type: ignore[operator]
            code = 0
        finally:
            os._exit(code)
    return pid


def test_killed_mid_put_leaves_no_name(daemon: Daemon, ns: str, tmp_path: "os.PathLike[str]") -> None:
    # A child putting a 32 MiB buffer is SIGKILLed once 8 MiB (and a bit,
    # mid-frame) reached the daemon.
    name = f"{ns}/killed"
    data = pattern(32 * MiB, 6)
    relay = Relay(str(tmp_path), daemon.sock, 8 * MiB + 77)
    pid = _fork(lambda: omst.Client(relay.path, timeout=60).put(name, data))
    assert relay.at_limit.wait(30)
    time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    relay.cut()
    _check_cut_left_nothing(daemon, name, data)


def test_killed_mid_put_from_pipe_leaves_no_name(daemon: Daemon, ns: str) -> None:
    # A child streaming a pipe into a put is SIGKILLed after 8 MiB.
    name = f"{ns}/pipe-killed"
    data = pattern(8 * MiB, 7)
    r, w = os.pipe()
    pid = _fork(lambda: omst.Client(daemon.sock, timeout=60).put(name, os.fdopen(r, "rb")))
    os.close(r)
    os.write(w, data)  # the pipe holds 64 KiB: the child has read the rest
    time.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(w)
    _check_cut_left_nothing(daemon, name, data)


def test_sigint_while_reading_aborts(daemon: Daemon, ns: str) -> None:
    # SIGINT while the put waits for its input: KeyboardInterrupt, ABORT,
    # and the connection stays usable.
    name = f"{ns}/sigint"
    r, w = os.pipe()
    result_r, result_w = os.pipe()

    def child() -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        c = omst.Client(daemon.sock, timeout=60)
        c.put(f"{name}-warmup", b"x")
        conn = c._conn
        outcome = b"completed"
        try:
            c.put(name, os.fdopen(r, "rb"))
        except KeyboardInterrupt:
            outcome = b"interrupted"
            try:
                c.stat(name)
            except omst.NotFound:
                outcome += b" not-found"
            if c._conn is conn:
                outcome += b" same-connection"
        os.write(result_w, outcome)

    pid = _fork(child)
    os.close(r)
    os.close(result_w)
    os.write(w, pattern(2 * MiB, 8))
    time.sleep(0.3)
    os.kill(pid, signal.SIGINT)
    _, status = os.waitpid(pid, 0)
    outcome = os.read(result_r, 100)
    os.close(result_r)
    os.close(w)
    assert outcome == b"interrupted not-found same-connection" and os.WEXITSTATUS(status) == 0, outcome
    assert not cut_logged(daemon, name), "the daemon saw a cut connection, not an ABORT"


def test_cut_upload_reported(daemon: Daemon, ns: str) -> None:
    # A raw PUT cut between frames: nothing stored (the daemon side).
    from omst import _wire

    name = f"{ns}/raw"
    s = socket.socket(socket.AF_UNIX)
    s.connect(daemon.sock)
    s.sendall(_wire.encode_hello(1))
    s.recv(16)
    s.sendall(_wire.encode_put(name.encode(), 0) + _wire.data_header(5) + b"hello")
    s.close()
    assert wait_logged(daemon, name)
    with pytest.raises(omst.NotFound):
        omst.Client(daemon.sock).stat(name)

