"""Fixtures: a real omst daemon (started from bin/omst or $OMST_BIN) and a
scriptable fake daemon for failure cases a real one does not produce."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

import pytest

HERE = Path(__file__).resolve().parent
PKG_ROOT = HERE.parent
try:
    # The installed package if there is one (scripts/pyenv.sh installs the
    # checkout's with pip, so the packaging is tested too) ...
    import omst
except ImportError:
    # ... else the source tree.
    sys.path.insert(0, str(PKG_ROOT))
    import omst


def pytest_report_header() -> str:
    return f"omst package under test: {Path(omst.__file__).parent}"


def repo_root() -> Path:
    """The omst repository root: the nearest ancestor holding go.mod."""
    for d in [HERE, *HERE.parents]:
        if (d / "go.mod").is_file() and (d / "cmd" / "omst").is_dir():
            return d
    raise RuntimeError(f"no omst repository above {HERE}")


def find_up(rel: str) -> Optional[Path]:
    """The first ancestor-relative path rel that exists, walking up from here."""
    for d in [HERE, *HERE.parents]:
        if (d / rel).exists():
            return d / rel
    return None


def _omst_bin() -> str:
    env = os.environ.get("OMST_BIN")
    if env:
        return env
    root = repo_root()
    b = root / "bin" / "omst"
    if not b.exists():
        go = shutil.which("go") or "/usr/local/go/bin/go"
        subprocess.run(
            [go, "build", "-o", "bin/omst", "./cmd/omst"],
            cwd=root,
            env={**os.environ, "GOFLAGS": "-buildvcs=false"},
            check=True,
            timeout=600,
        )
    return str(b)


class Daemon:
    """A throwaway omst daemon with its own home directory."""

    def __init__(self, binary: str, *args: str) -> None:
        self.binary = binary
        self.args = list(args)  # more daemon flags
        self.home = tempfile.mkdtemp(prefix="omstpy")
        self.sock = os.path.join(self.home, "omst.sock")
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def start(self, timeout: float = 20.0) -> "Daemon":
        self.log = open(os.path.join(self.home, "daemon.log"), "ab")
        self.proc = subprocess.Popen(
            [self.binary, "daemon", "--home", self.home, "--listen", "/ip4/127.0.0.1/tcp/0", "--log-level", "warn", *self.args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"omst daemon exited with {self.proc.returncode}: {self.log_text()}")
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(self.sock)
                return self
            except OSError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"omst daemon did not accept within {timeout} s: {self.log_text()}")
                time.sleep(0.01)
            finally:
                s.close()

    def log_text(self) -> str:
        try:
            return Path(self.home, "daemon.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the daemon and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture(scope="session")
def omst_bin() -> str:
    return _omst_bin()


@pytest.fixture(scope="session")
def daemon(omst_bin: str) -> Iterator[Daemon]:
    """One daemon shared by the whole session (tests use unique names)."""
    d = Daemon(omst_bin).start()
    yield d
    d.cleanup()


@pytest.fixture
def fresh_daemon(omst_bin: str) -> Iterator[Daemon]:
    """A daemon of the test's own, for tests that kill or restart it."""
    d = Daemon(omst_bin).start()
    yield d
    d.cleanup()


@pytest.fixture(params=["GET", "GET_FD"])
def client(daemon: Daemon, request: pytest.FixtureRequest) -> Iterator[omst.Client]:
    """A client of the session daemon; get_into runs with plain GET, or with
    GET_FD for every size (if the daemon speaks protocol version 2)."""
    c = omst.Client(daemon.sock, timeout=30, get_fd=request.param == "GET_FD")
    c.get_fd_min_size = 0
    if request.param == "GET_FD" and c.protocol_version < 2:
        pytest.skip("the daemon does not speak protocol version 2 (GET_FD)")
    yield c
    c.close()


@pytest.fixture
def plain_client(daemon: Daemon) -> Iterator[omst.Client]:
    c = omst.Client(daemon.sock, timeout=30)
    yield c
    c.close()


@pytest.fixture
def ns() -> str:
    """A name prefix unique to the test."""
    return "t/" + uuid.uuid4().hex[:12]


class FakeDaemon:
    """A unix socket server running handler(conn) for each connection in a
    thread; for replies a real daemon never sends."""

    def __init__(self, handler: Callable[[socket.socket], None]) -> None:
        self.dir = tempfile.mkdtemp(prefix="omstfake")
        self.sock = os.path.join(self.dir, "fake.sock")
        self.handler = handler
        self.srv = socket.socket(socket.AF_UNIX)
        self.srv.bind(self.sock)
        self.srv.listen(8)
        self.conns: List[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._run, args=(c,), daemon=True).start()

    def _run(self, c: socket.socket) -> None:
        try:
            self.handler(c)
        except OSError:
            pass

    def close(self) -> None:
        self.srv.close()
        for c in self.conns:
            c.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def recv_frame(c: socket.socket) -> Tuple[Optional[int], bytes]:
    """Read one frame from c: (type, body); (None, b"") at EOF."""
    hdr = b""
    while len(hdr) < 8:
        b = c.recv(8 - len(hdr))
        if not b:
            return None, b""
        hdr += b
    n = int.from_bytes(hdr[:4], "big")
    body = b""
    while len(body) < n:
        b = c.recv(n - len(body))
        if not b:
            return None, b""
        body += b
    return hdr[4], body


@pytest.fixture
def fake_daemon() -> Iterator[Callable[[Callable[[socket.socket], None]], FakeDaemon]]:
    made: List[FakeDaemon] = []

    def make(handler: Callable[[socket.socket], None]) -> FakeDaemon:
        f = FakeDaemon(handler)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    """Record skipped tests for `make test`'s last line: the Makefile sets
    OMST_SKIPS to a file that parts of the test command append
    "part: reason" lines to."""
    path = os.environ.get("OMST_SKIPS")
    skipped = terminalreporter.stats.get("skipped", [])
    if not path or not skipped:
        return
    reasons = []
    for rep in skipped:
        longrepr = rep.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        if reason not in reasons:
            reasons.append(reason)
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"pytest: {len(skipped)} skipped ({'; '.join(reasons[:3])})\n")
