"""Socket IO for one connection to the daemon: connect, HELLO, frames.

A :class:`Connection` owns one unix stream socket. It reads through a small
buffer (so a small reply costs one or two ``recv`` calls) and receives big
payloads straight into the caller's memory with ``recv_into``. It writes
with ``sendmsg`` (header and payload in one call, payload not copied).

Every socket failure is turned into an :class:`~omst.errors.OmstError`:
EOF, reset or a broken pipe into ConnectionLost, a socket timeout into
Timeout, a failed connect into DaemonUnavailable.
"""

from __future__ import annotations

import array
import os
import select
import socket
from collections import deque
from typing import Callable, Deque, List, Optional, Sequence, Tuple, Union

from . import _wire
from ._wire import FrameType
from .errors import (
    ConnectionLost,
    DaemonUnavailable,
    OmstError,
    ProtocolError,
    Timeout,
    UnsupportedVersion,
    error_for_code,
)

Buffer = Union[bytes, bytearray, memoryview]

_RBUF_SIZE = 64 << 10
# Control buffer for the descriptors of one FDS frame (at most 64).
_ANCBUF_SIZE = socket.CMSG_SPACE(_wire.MAX_FDS * array.array("i").itemsize)
_MSG_CMSG_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)


class Connection:
    """One handshaken connection. Not thread-safe: the client locks around it.

    Attributes:
        path: the socket path.
        version: the protocol version the daemon answered in HELLO.
        pid: the process that opened the connection (a forked child must not use it).
        used: a request was sent on it (so the daemon may since have closed it as idle).
        busy: a request was sent and its reply is not fully read; if an
            exception leaves it set, the stream is out of step and the
            connection must be closed.
        sent: bytes written since the last :meth:`begin`.
    """

    def __init__(self, sock: socket.socket, path: str, timeout: float | None) -> None:
        self.sock = sock
        self.path = path
        self.timeout = timeout
        self.version = 0
        self.pid = os.getpid()
        self.used = False
        self.busy = False
        self.sent = 0
        self._buf = bytearray(_RBUF_SIZE)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        # Not None while a GET_FD reply is read: descriptors received and
        # not yet claimed by an FDS frame, in arrival order.
        self._fds: Optional[Deque[int]] = None

    # --- opening and closing -------------------------------------------------

    @classmethod
    def open(cls, path: str, timeout: float | None, versions: Sequence[int]) -> "Connection":
        """Connect to the daemon at path and exchange HELLO.

        versions lists the protocol versions to offer, highest first; if the
        daemon answers ERROR UNSUPPORTED_VERSION the next one is offered on a
        new connection (the daemon closes the refused one).

        Raises:
            DaemonUnavailable: nothing listens at path (or connect failed).
            UnsupportedVersion: the daemon refused every offered version.
            ProtocolError, ConnectionLost, Timeout: the handshake failed.
        """
        last: OmstError | None = None
        for v in versions:
            conn = cls._connect(path, timeout)
            try:
                conn._hello(v)
                return conn
            except UnsupportedVersion as e:
                last = e
                conn.close()
            except BaseException:
                conn.close()
                raise
        assert last is not None, "no protocol version offered"
        raise last

    @classmethod
    def _connect(cls, path: str, timeout: float | None) -> "Connection":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            sock.close()
            raise DaemonUnavailable(f"no omst daemon at {path} ({e.strerror or e})") from None
        except socket.timeout:
            sock.close()
            raise DaemonUnavailable(f"connect to the omst daemon at {path}: timed out") from None
        except OSError as e:
            sock.close()
            raise DaemonUnavailable(f"cannot connect to the omst daemon at {path}: {e.strerror or e}") from None
        return cls(sock, path, timeout)

    def _hello(self, version: int) -> None:
        self.begin()
        self.send([_wire.encode_hello(version)])
        ftype, n = self.read_header()
        body = self.read_body(n)
        if ftype == FrameType.HELLO:
            v = _wire.decode_hello(body)
            if not 1 <= v <= version:
                raise ProtocolError(f"omst daemon at {self.path} answered protocol version {v} to {version}")
            self.version = v
        elif ftype == FrameType.ERROR:
            code, msg = _wire.decode_error(body)
            raise error_for_code(code, f"omst daemon at {self.path}: hello: {msg}")
        else:
            raise ProtocolError(f"omst daemon at {self.path} answered HELLO with {_wire.type_name(ftype)}")
        self.finish()
        self.used = False

    def close(self) -> None:
        """Close the socket descriptor. Sends nothing (no shutdown), so a
        forked child may close its inherited copy without disturbing the
        parent's connection. Also closes descriptors of an unfinished
        GET_FD reply."""
        self.end_fds()
        try:
            self.sock.close()
        except OSError:
            pass

    def peer_closed(self) -> bool:
        """Whether the socket is readable between requests: the daemon closed
        it (idle timeout, shutdown) or sent something unsolicited. Either way
        the connection is unusable."""
        if self._start != self._end:
            return True
        try:
            p = select.poll()
            p.register(self.sock.fileno(), select.POLLIN)
            return bool(p.poll(0))
        except (OSError, ValueError):
            return True

    def pending_error(self, wait: float) -> Optional[Tuple[int, str]]:
        """After a failed write: whether the daemon sent an ERROR before it
        closed the connection (waiting at most wait seconds). Returns
        (code, message) or None. The connection is unusable afterwards."""
        try:
            self.sock.settimeout(wait)
            ftype, n = self.read_header()
            if ftype != _wire.FrameType.ERROR:
                return None
            return _wire.decode_error(self.read_body(n))
        except (OmstError, OSError):
            return None

    def abort(self, wait: float) -> bool:
        """Abort the upload in progress: send ABORT (the stream must be at a
        frame boundary) and read the daemon's ERROR ABORTED, waiting at
        most wait seconds. Returns whether that worked: the connection is
        then in step again (else it is still busy and must be closed)."""
        try:
            self.sock.settimeout(wait)
            self.send([_wire.encode_empty(FrameType.ABORT)])
            ftype, n = self.read_header()
            self.read_body(n)
            if ftype != FrameType.ERROR:
                return False
            self.finish()
            return True
        except (OmstError, OSError):
            return False
        finally:
            try:
                self.sock.settimeout(self.timeout)
            except OSError:
                pass

    # --- descriptor passing (GET_FD, protocol version 2) -------------------------

    def begin_fds(self) -> None:
        """Start reading a GET_FD reply: from now on the socket is read only
        with recvmsg, and descriptors that arrive are queued."""
        self._fds = deque()

    def take_fds(self, n: int) -> List[int]:
        """Claim the n oldest queued descriptors (those of an FDS frame just read).

        Raises:
            ProtocolError: fewer than n descriptors arrived.
        """
        q = self._fds
        if q is None or len(q) < n:
            have = 0 if q is None else len(q)
            raise ProtocolError(f"omst daemon at {self.path}: FDS frame of {n} extents came with {have} descriptors")
        return [q.popleft() for _ in range(n)]

    def end_fds(self) -> int:
        """Stop reading a GET_FD reply; close descriptors still queued and
        return how many there were (more than 0 breaks the protocol)."""
        q, self._fds = self._fds, None
        if not q:
            return 0
        for fd in q:
            try:
                os.close(fd)
            except OSError:
                pass
        return len(q)

    def _recv_with_fds(self, view: memoryview) -> int:
        assert self._fds is not None
        n, ancdata, flags, _ = self.sock.recvmsg_into([view], _ANCBUF_SIZE, _MSG_CMSG_CLOEXEC)
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                for fd in fds:
                    if not _MSG_CMSG_CLOEXEC:
                        os.set_inheritable(fd, False)
                    self._fds.append(fd)
        if flags & socket.MSG_CTRUNC:
            raise ProtocolError(
                f"omst daemon at {self.path}: descriptors of an FDS frame were lost (MSG_CTRUNC: descriptor table full?)"
            )
        return int(n)

    # --- request bookkeeping ---------------------------------------------------

    def begin(self) -> None:
        """Mark the start of a request: the stream is out of step until finish()."""
        self.busy = True
        self.sent = 0

    def finish(self) -> None:
        """Mark the reply as completely read: the stream is in step again."""
        self.busy = False
        self.used = True

    # --- errors ----------------------------------------------------------------

    def _lost(self, what: str, e: BaseException | None = None) -> OmstError:
        if isinstance(e, socket.timeout):
            return Timeout(f"omst daemon at {self.path}: {what}: no progress for {self.timeout} s")
        detail = ""
        if isinstance(e, OSError):
            detail = f": {e.strerror or e}"
        return ConnectionLost(f"omst daemon at {self.path}: connection lost while {what}{detail}")

    # --- writing ---------------------------------------------------------------

    def send(self, parts: List[Buffer]) -> None:
        """Write parts, in order, with as few sendmsg calls as the kernel allows.

        The parts are not copied; each must be a contiguous byte buffer.
        """
        views = [memoryview(p) for p in parts if len(p)]
        sock = self.sock
        try:
            while views:
                n = sock.sendmsg(views)
                self.sent += n
                while n:
                    first = views[0]
                    if n >= len(first):
                        n -= len(first)
                        del views[0]
                    else:
                        views[0] = first[n:]
                        n = 0
        except (socket.timeout, OSError) as e:
            raise self._lost("sending", e) from None

    def send_fd(self, frame: bytes, fd: int) -> None:
        """Write a request frame with the descriptor fd attached (PUT_FD,
        GET_TO_FD): one sendmsg whose SCM_RIGHTS control message holds fd,
        so that the descriptor travels with the frame's first byte; any
        rest of the frame is written after it."""
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]).tobytes())]
        try:
            n = self.sock.sendmsg([frame], rights)
        except (socket.timeout, OSError) as e:
            raise self._lost("sending", e) from None
        self.sent += n
        if n < len(frame):
            self.send([memoryview(frame)[n:]])

    def wait_reply(self, progress: Optional[Callable[[], object]], what: str) -> None:
        """Wait until the reply starts to arrive, for as long as the
        request makes progress: each time the socket timeout passes without
        a byte, progress() is called (None: not at all) and the wait goes on
        only if its value changed since the last call (e.g. the offset of a
        file the daemon reads, the size of a file it writes); else Timeout
        is raised. Used for replies that come only when a whole file has
        been moved."""
        if progress is None or self.timeout is None or self._start != self._end:
            return
        p = select.poll()
        p.register(self.sock.fileno(), select.POLLIN)
        last = _progress(progress)
        while not p.poll(self.timeout * 1000):
            now = _progress(progress)
            if now is None or now == last:
                raise Timeout(f"omst daemon at {self.path}: {what}: no progress for {self.timeout} s")
            last = now

    # --- reading ---------------------------------------------------------------

    def _fill(self, need: int) -> None:
        """Make at least need bytes (<= buffer size) available in the buffer."""
        avail = self._end - self._start
        if self._start and len(self._buf) - self._start < need:
            self._view[:avail] = self._view[self._start : self._end]
            self._start, self._end = 0, avail
        while self._end - self._start < need:
            try:
                if self._fds is None:
                    n = self.sock.recv_into(self._view[self._end :])
                else:
                    n = self._recv_with_fds(self._view[self._end :])
            except (socket.timeout, OSError) as e:
                raise self._lost("receiving", e) from None
            if n == 0:
                raise self._lost("receiving (the daemon closed the connection)")
            self._end += n

    def read_exact(self, n: int) -> bytes:
        """Read exactly n bytes and return them."""
        if n <= len(self._buf):
            if self._end - self._start < n:
                self._fill(n)
            b = bytes(self._view[self._start : self._start + n])
            self._start += n
            if self._start == self._end:
                self._start = self._end = 0
            return b
        out = bytearray(n)
        self.read_into(memoryview(out))
        return bytes(out)

    def read_header(self) -> Tuple[int, int]:
        """Read and check one frame header; return (type, body length)."""
        if self._end - self._start < _wire.HEADER_SIZE:
            self._fill(_wire.HEADER_SIZE)
        ftype, n = _wire.parse_header(self._view[self._start : self._start + _wire.HEADER_SIZE])
        self._start += _wire.HEADER_SIZE
        if self._start == self._end:
            self._start = self._end = 0
        return ftype, n

    def read_body(self, n: int) -> bytes:
        """Read a frame body of n bytes (n <= 16 MiB, checked by read_header)."""
        if n == 0:
            return b""
        return self.read_exact(n)

    def read_into(self, dest: memoryview) -> None:
        """Fill dest (a writable 1-D byte memoryview) from the stream.

        Buffered bytes are copied first; the rest is received directly into
        dest, except that a small remainder goes through the buffer so that
        the next frame header arrives with it.
        """
        total = len(dest)
        pos = 0
        avail = self._end - self._start
        if avail:
            k = min(avail, total)
            dest[:k] = self._view[self._start : self._start + k]
            self._start += k
            pos = k
            if self._start == self._end:
                self._start = self._end = 0
        sock = self.sock
        while pos < total:
            rest = total - pos
            if rest < len(self._buf) // 2 or self._fds is not None:
                self._fill(1)
                k = min(self._end - self._start, rest)
                dest[pos : pos + k] = self._view[self._start : self._start + k]
                self._start += k
                if self._start == self._end:
                    self._start = self._end = 0
                pos += k
                continue
            try:
                n = sock.recv_into(dest[pos:], rest)
            except (socket.timeout, OSError) as e:
                raise self._lost("receiving", e) from None
            if n == 0:
                raise self._lost("receiving (the daemon closed the connection)")
            pos += n

    def skip(self, n: int) -> None:
        """Read and discard n bytes."""
        scratch = memoryview(bytearray(min(n, 1 << 20)))
        while n:
            k = min(n, len(scratch))
            self.read_into(scratch[:k])
            n -= k


def _progress(progress: Callable[[], object]) -> object:
    """progress(), or None if it failed (no progress to be seen)."""
    try:
        return progress()
    except OSError:
        return None
