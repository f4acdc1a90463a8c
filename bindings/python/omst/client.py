"""The omst client: one connection to the local daemon, safe across threads
and forks.

A :class:`Client` holds at most one connection and serialises requests on
it with a lock. It remembers the process that opened the connection: in a
forked child (``os.fork``, ``multiprocessing``, ``ProcessPoolExecutor``) the
inherited socket is closed without sending anything on it and the child
opens its own connection on first use. After a connection failure the next
call reconnects; a request is never retried after the daemon may have
acted on it (except a request whose first write found the connection
closed by the daemon, e.g. as idle).
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

from . import _wire
from ._conn import Buffer, Connection
from ._input import put_source
from ._wire import FrameType
from .errors import (
    BadRequest,
    ClientClosed,
    ConnectionLost,
    Corrupt,
    InternalError,
    OmstError,
    ProtocolError,
    SizeMismatch,
    error_for_code,
)
from .info import Info
from .names import NameLike, PathLike, absolute_path, validate_chunk_size, validate_name, validate_prefix

__all__ = ["Client", "default_socket", "default_timeout", "PROTOCOL_VERSIONS", "DEFAULT_TIMEOUT"]

#: Protocol versions offered in HELLO, highest first (docs/rpcbridge.md
#: section 6.1). Version 2 adds GET_FD, which get and get_into use when the
#: daemon speaks it. The handshake falls back along this list when the
#: daemon answers ERROR UNSUPPORTED_VERSION (a daemon that predates version 2).
PROTOCOL_VERSIONS: Tuple[int, ...] = (2, 1)

#: Default per-operation socket timeout in seconds (each send or receive
#: must make progress within it); OMST_TIMEOUT_MS overrides it.
DEFAULT_TIMEOUT = 120.0

#: When get_into finds a size mismatch, it reads and discards the blob if at
#: most this many bytes, else drops the connection.
DRAIN_LIMIT = 4 << 20

#: get_into uses GET_FD (if enabled and spoken) for buffers at least this big.
GET_FD_MIN_SIZE = 1 << 20

#: Seconds to wait for the daemon's reply to an ABORT before closing the
#: connection instead.
ABORT_TIMEOUT = 5.0

T = TypeVar("T")


def default_socket() -> str:
    """The daemon socket: $OMST_SOCKET, else $OMST_HOME/omst.sock, else ~/.omst/omst.sock."""
    s = os.environ.get("OMST_SOCKET")
    if s:
        return s
    h = os.environ.get("OMST_HOME")
    if h:
        return os.path.join(h, "omst.sock")
    return os.path.join(os.path.expanduser("~"), ".omst", "omst.sock")


def default_timeout() -> float:
    """The socket timeout in seconds: $OMST_TIMEOUT_MS / 1000 if set, else 120."""
    env = os.environ.get("OMST_TIMEOUT_MS")
    if env:
        try:
            ms = int(env)
        except ValueError:
            raise ValueError(f"OMST_TIMEOUT_MS={env!r} is not an integer number of milliseconds") from None
        if ms <= 0:
            raise ValueError(f"OMST_TIMEOUT_MS={env!r} must be positive")
        return ms / 1000.0
    return DEFAULT_TIMEOUT


def _writable_view(buffer: Any) -> memoryview:
    """A flat writable byte view of buffer (no copy).

    Raises:
        TypeError: buffer is read-only, not C-contiguous, or not a buffer.
    """
    mv = memoryview(buffer)
    if mv.readonly:
        raise TypeError(f"get_into needs a writable buffer; {type(buffer).__name__} is read-only")
    if not mv.c_contiguous:
        raise TypeError("get_into needs a C-contiguous buffer")
    if mv.format == "B" and mv.ndim == 1:
        return mv
    try:
        return mv.cast("B")
    except (TypeError, ValueError):
        # Formats memoryview.cast refuses (e.g. non-native byte order on
        # older Pythons): view the same memory through ctypes.
        arr = (ctypes.c_ubyte * mv.nbytes).from_buffer(buffer)
        return memoryview(arr).cast("B")


_clients: "weakref.WeakSet[Client]" = weakref.WeakSet()


class Client:
    """A connection to the omst daemon's local API.

    Args:
        socket: the daemon's socket path (default: :func:`default_socket`).
        timeout: seconds each socket send or receive may wait for progress
            (default: :func:`default_timeout`, 120 s). When it expires the
            call raises Timeout and the connection is dropped.
        connect: connect at once (so a missing daemon raises
            DaemonUnavailable here); else on first use.
        get_fd: let get_into use GET_FD when the daemon speaks protocol
            version 2 and the buffer has at least ``get_fd_min_size`` bytes
            (default 1 MiB): the daemon passes descriptors of the blob's
            verified files and the client reads them with preadv, instead
            of the bytes crossing the socket (about twice the throughput;
            slower for small blobs). False: always plain GET.

    All methods are thread-safe (requests are serialised); a client may be
    used in forked children and pickled (the copy connects on its own).
    Names are str (or UTF-8 bytes) and are checked before anything is sent.
    """

    def __init__(
        self,
        socket: Optional[PathLike] = None,
        timeout: Optional[float] = None,
        connect: bool = True,
        get_fd: bool = True,
    ) -> None:
        self.socket: str = default_socket() if socket is None else os.fsdecode(socket)
        self.get_fd = get_fd
        self.get_fd_min_size = GET_FD_MIN_SIZE
        self.timeout: float = default_timeout() if timeout is None else float(timeout)
        if not self.timeout > 0:
            raise ValueError(f"timeout must be positive, got {timeout!r}")
        self._lock = threading.Lock()
        self._conn: Optional[Connection] = None
        self._closed = False
        _clients.add(self)
        if connect:
            with self._lock:
                self._connection()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("connected" if self._conn is not None else "idle")
        return f"<omst.Client socket={self.socket!r} {state}>"

    def __reduce__(self) -> Tuple[Callable[..., "Client"], Tuple[str, float, bool, bool]]:
        return (Client, (self.socket, self.timeout, False, self.get_fd))

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def protocol_version(self) -> int:
        """The negotiated protocol version (connects if needed)."""
        with self._lock:
            return self._connection().version

    def close(self) -> None:
        """Close the connection; later calls raise ClientClosed. Waits for a
        call in progress in another thread to finish. Idempotent."""
        with self._lock:
            self._closed = True
            self._drop()

    # --- connection management (callers hold the lock) ------------------------------

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _after_fork_in_child(self) -> None:
        # The lock may have been held by a thread that does not exist here.
        self._lock = threading.Lock()
        self._drop()

    def _connection(self) -> Connection:
        if self._closed:
            raise ClientClosed(f"omst client for {self.socket} is closed")
        conn = self._conn
        if conn is not None and conn.pid != os.getpid():
            # Inherited over a fork without the at-fork hook: never touch
            # the parent's stream; just close our copy of the descriptor.
            self._drop()
            conn = None
        if conn is not None and conn.used and conn.peer_closed():
            self._drop()
            conn = None
        if conn is None:
            conn = Connection.open(self.socket, self.timeout, PROTOCOL_VERSIONS)
            self._conn = conn
        return conn

    def _run(self, request: Callable[[Connection], T]) -> T:
        """Run one request under the lock. If it fails with the stream out of
        step (connection lost, protocol error, timeout, interrupt), drop the
        connection. If its first write fails on a connection that carried
        requests before (the daemon may have closed it as idle), reconnect
        and run it once more."""
        with self._lock:
            for attempt in (0, 1):
                conn = self._connection()
                retry_ok = attempt == 0 and conn.used
                try:
                    return request(conn)
                except ConnectionLost:
                    self._drop()
                    if retry_ok and conn.sent == 0:
                        continue
                    raise
                except (BadRequest, InternalError):
                    # The daemon may close the connection after these
                    # (docs/rpcbridge.md section 7): reconnect next time.
                    self._drop()
                    raise
                except BaseException:
                    if conn.busy:
                        self._drop()
                    raise
            raise AssertionError("unreachable")

    # --- reply helpers ------------------------------------------------------------------

    @staticmethod
    def _error(body: bytes) -> OmstError:
        code, msg = _wire.decode_error(body)
        return error_for_code(code, msg)

    @staticmethod
    def _reply(conn: Connection, want: int, op: str) -> bytes:
        """Read a one-frame reply of type want and return its body; an ERROR
        reply is raised (the connection stays in step)."""
        ftype, n = conn.read_header()
        if ftype == want:
            body = conn.read_body(n)
            conn.finish()
            return body
        if ftype == FrameType.ERROR:
            body = conn.read_body(n)
            conn.finish()
            raise Client._error(body)
        raise ProtocolError(f"{op}: daemon sent {_wire.type_name(ftype)} ({n} bytes), expected {_wire.type_name(want)}")

    @staticmethod
    def _call(conn: Connection, frame: bytes, want: int, op: str) -> bytes:
        conn.begin()
        conn.send([frame])
        return Client._reply(conn, want, op)

    # --- public API ---------------------------------------------------------------------

    def put(self, name: NameLike, data: Any, chunk_size: int = 0) -> str:
        """Store data under name and return the blob ID (CID).

        data is any bytes-like object (bytes, bytearray, memoryview, a
        numpy array), a binary file-like object (read from its current
        position), or an iterable of bytes-like chunks (e.g. a generator).
        A bytes-like object is sent straight from its buffer in DATA frames
        of 1 MiB, without copying (a non-contiguous array is copied once,
        in C order). chunk_size 0 is the daemon's default, else 4 KiB ..=
        64 MiB.

        All or nothing: the upload is ended, and the name made visible,
        only after the last byte of data. If reading data raises (a
        generator's exception, a file's OSError, KeyboardInterrupt while
        reading), the client sends ABORT and re-raises the exception; if
        the upload is interrupted while a frame is being sent, or the
        connection fails, the connection is closed. Either way the daemon
        stores nothing. A file object on a regular file must not change
        while it is read: if it shrinks, grows or is modified, the put
        fails with OmstIOError ("file changed while it was read").
        """
        return self.put_info(name, data, chunk_size).id

    def put_info(self, name: NameLike, data: Any, chunk_size: int = 0) -> Info:
        """Like :meth:`put`, but return the new blob's Info."""
        raw = validate_name(name)
        validate_chunk_size(chunk_size)
        source = put_source(data)
        request = _wire.encode_put(raw, chunk_size)
        op = f"put {raw!r}"

        def run(conn: Connection) -> Info:
            conn.begin()
            pending: List[Buffer] = [request]
            if source.stream:
                # Send PUT before reading anything: if the connection turns
                # out dead, the request is retried on a new one with the
                # stream untouched.
                conn.send(pending)
                pending = []
            sending = False  # a frame is being written: the stream position is unknown
            try:
                for piece in source.pieces():
                    pending.append(_wire.data_header(len(piece)))
                    pending.append(piece)
                    sending = True
                    conn.send(pending)
                    sending = False
                    pending = []
                # The end of the upload: only after the last byte of data.
                pending.append(_wire.data_header(0))
                sending = True
                conn.send(pending)
            except ConnectionLost:
                # The daemon may have said why before closing (e.g. ABORTED
                # when it shuts down).
                reply = conn.pending_error(1.0) if conn.sent else None
                if reply is not None:
                    raise error_for_code(*reply) from None
                raise
            except BaseException:
                # Reading data failed or was interrupted. Between frames the
                # upload can be aborted and the connection kept; otherwise
                # it stays busy and _run closes it (the daemon discards a
                # cut upload too).
                if not sending:
                    if conn.sent == 0:
                        conn.busy = False  # nothing was sent
                    else:
                        conn.abort(ABORT_TIMEOUT)
                raise
            return _wire.decode_info(self._reply(conn, FrameType.INFO, op))

        return self._run(run)

    def put_file(self, name: NameLike, path: PathLike, chunk_size: int = 0) -> str:
        """Have the daemon read the file at path (made absolute here) and
        store it under name; return the blob ID. The daemon opens the file
        with its own rights."""
        raw = validate_name(name)
        validate_chunk_size(chunk_size)
        frame = _wire.encode_put_file(raw, chunk_size, absolute_path(path))
        op = f"put {raw!r} from file"
        return self._run(lambda c: _wire.decode_info(self._call(c, frame, FrameType.INFO, op))).id

    def get_file(self, name: NameLike, path: PathLike) -> Info:
        """Have the daemon write the blob to path (made absolute here),
        atomically (path is unchanged on error); return its Info."""
        raw = validate_name(name)
        frame = _wire.encode_get_file(raw, absolute_path(path))
        op = f"get {raw!r} to file"
        return self._run(lambda c: _wire.decode_info(self._call(c, frame, FrameType.INFO, op)))

    def stat(self, name: NameLike) -> Info:
        """Return the Info of name. Raises NotFound if there is none."""
        raw = validate_name(name)
        frame = _wire.encode_name_request(FrameType.STAT, raw)
        return self._run(lambda c: _wire.decode_info(self._call(c, frame, FrameType.INFO, "stat")))

    def rm(self, name: NameLike) -> None:
        """Forget name on this node (and unpin its blob here)."""
        raw = validate_name(name)
        frame = _wire.encode_name_request(FrameType.REMOVE, raw)
        self._run(lambda c: _wire.decode_empty(self._call(c, frame, FrameType.OK, "remove"), "OK"))

    remove = rm

    def status(self) -> Dict[str, Any]:
        """Return the daemon's status document (docs/rpcbridge.md section 5.3)."""
        frame = _wire.encode_empty(FrameType.STATUS)
        return self._run(lambda c: _wire.decode_status_json(self._call(c, frame, FrameType.STATUS_JSON, "status")))

    def ls(self, prefix: NameLike = "") -> List[Info]:
        """Return the Infos of the names under prefix ("" = every name), in
        the daemon's order. A prefix is a name, optionally ending in '/'."""
        raw = validate_prefix(prefix)
        frame = _wire.encode_name_request(FrameType.LIST, raw)

        def run(conn: Connection) -> List[Info]:
            conn.begin()
            conn.send([frame])
            infos: List[Info] = []
            while True:
                ftype, n = conn.read_header()
                body = conn.read_body(n)
                if ftype == FrameType.LISTING:
                    infos.extend(_wire.decode_listing(body))
                elif ftype == FrameType.END:
                    _wire.decode_empty(body, "END")
                    conn.finish()
                    return infos
                elif ftype == FrameType.ERROR:
                    conn.finish()
                    raise self._error(body)
                else:
                    raise ProtocolError(f"list: daemon sent {_wire.type_name(ftype)}, expected LISTING or END")

        return self._run(run)

    def get(self, name: NameLike) -> bytes:
        """Return the blob's bytes. Raises unless the daemon confirmed the
        whole blob (END after exactly size bytes); never returns partial
        data. For big blobs prefer :meth:`get_into` (no extra copy)."""
        raw = validate_name(name)
        holder: List[bytearray] = []

        def dest_for(info: Info) -> memoryview:
            holder.append(bytearray(info.size))
            return memoryview(holder[0])

        self._run(lambda conn: self._download(conn, raw, dest_for, False))
        return bytes(holder[0])

    def get_into(self, name: NameLike, buffer: Any) -> int:
        """Fill buffer (a writable, C-contiguous buffer: bytearray,
        memoryview, numpy array, mmap) with the blob and return its size.

        The bytes are written straight into buffer (no intermediate copy).
        If the blob's size differs from buffer's size in bytes, raise
        SizeMismatch without writing to buffer. If the download fails after
        it started, buffer holds an unspecified mix of old and new bytes.
        """
        raw = validate_name(name)
        dest = _writable_view(buffer)

        def dest_for(info: Info) -> memoryview:
            if info.size != len(dest):
                raise SizeMismatch(f"get {info.name!r}: the blob has {info.size} bytes, the buffer {len(dest)} bytes")
            return dest

        big = len(dest) >= self.get_fd_min_size
        return self._run(lambda conn: self._download(conn, raw, dest_for, self.get_fd and big)).size

    def _download(
        self, conn: Connection, raw: bytes, dest_for: Callable[[Info], memoryview], want_fd: bool
    ) -> Info:
        """GET raw, or GET_FD if want_fd and the connection speaks version 2,
        into the buffer dest_for(info) returns. If dest_for raises, the
        reply is drained (small blobs) or the connection closed, and its
        exception propagates."""
        use_fd = want_fd and conn.version >= 2
        conn.begin()
        if use_fd:
            conn.begin_fds()
        ok = False
        try:
            request = FrameType.GET_FD if use_fd else FrameType.GET
            conn.send([_wire.encode_name_request(request, raw)])
            ftype, n = conn.read_header()
            body = conn.read_body(n)
            if ftype == FrameType.ERROR:
                conn.finish()
                raise self._error(body)
            if ftype != FrameType.INFO:
                raise ProtocolError(f"get: daemon sent {_wire.type_name(ftype)}, expected INFO")
            info = _wire.decode_info(body)
            try:
                dest = dest_for(info)
            except BaseException:
                if info.size <= DRAIN_LIMIT:
                    self._receive(conn, info, None, use_fd)
                else:
                    conn.close()  # the daemon cancels the request; _run drops it (busy)
                raise
            self._receive(conn, info, dest, use_fd)
            ok = True
            return info
        finally:
            if use_fd and conn.end_fds():
                # Descriptors that no FDS frame claimed: out of step.
                conn.busy = True
                if ok:
                    raise ProtocolError(f"omst daemon at {conn.path}: descriptors arrived without an FDS frame")

    def _receive(self, conn: Connection, info: Info, dest: Optional[memoryview], use_fd: bool) -> None:
        """Read the rest of a GET or GET_FD reply (after INFO) into dest
        (discard it if dest is None) until END; check that exactly info.size
        bytes came."""
        size = info.size
        got = 0
        while True:
            ftype, n = conn.read_header()
            if ftype == FrameType.DATA and not use_fd:
                if got + n > size:
                    raise ProtocolError(f"get {info.name!r}: DATA beyond the blob's {size} bytes")
                if dest is None:
                    conn.skip(n)
                else:
                    conn.read_into(dest[got : got + n])
                got += n
            elif ftype == FrameType.FDS and use_fd:
                extents = _wire.decode_fds(conn.read_body(n))
                fds = conn.take_fds(len(extents))
                try:
                    for x in extents:
                        if x.blob_offset != got or x.length > size - got:
                            raise ProtocolError(
                                f"get {info.name!r}: extent [{x.blob_offset}, +{x.length}) does not continue "
                                f"the blob at {got} of {size} bytes"
                            )
                        got += x.length
                    if dest is not None:
                        for x, fd in zip(extents, fds):
                            _pread_full(fd, dest[x.blob_offset : x.blob_offset + x.length], x.file_offset, info.name)
                finally:
                    for fd in fds:
                        os.close(fd)
            elif ftype == FrameType.END:
                _wire.decode_empty(conn.read_body(n), "END")
                conn.finish()
                if got != size:
                    raise SizeMismatch(f"get {info.name!r}: the reply ended after {got} of {size} bytes")
                return
            elif ftype == FrameType.ERROR:
                body = conn.read_body(n)
                conn.finish()
                raise self._error(body)
            else:
                want = "FDS or END" if use_fd else "DATA or END"
                raise ProtocolError(f"get {info.name!r}: daemon sent {_wire.type_name(ftype)}, expected {want}")


def _pread_full(fd: int, dest: memoryview, offset: int, name: str) -> None:
    """Fill dest from the file fd at offset; a short file is Corrupt."""
    pos = 0
    total = len(dest)
    while pos < total:
        n = os.preadv(fd, [dest[pos:]], offset + pos)
        if n <= 0:
            raise Corrupt(f"get {name!r}: a file passed by the daemon ends {total - pos} bytes before its extent")
        pos += n


def _after_fork_in_child() -> None:
    for c in list(_clients):
        c._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
