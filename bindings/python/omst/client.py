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

Files are opened by the client, with its own rights (omst._localfile), and
passed to the daemon as descriptors (PUT_FD, GET_TO_FD); the client never
asks the daemon to open a path (PUT_FILE, GET_FILE), which a daemon of
another uid refuses anyway.
"""

from __future__ import annotations

import ctypes
import dataclasses
import fcntl
import io
import os
import select
import stat
import threading
import weakref
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Protocol, Sequence, Tuple, TypeVar, Union

from . import _localfile, _many, _wire
from ._conn import Buffer, Connection
from ._input import put_source
from ._many import Entry, ManyResult
from ._slurm import slurm_socket
from ._wire import FrameType
from .errors import (
    BadRequest,
    ClientClosed,
    ConnectionLost,
    Corrupt,
    InternalError,
    OmstError,
    OmstIOError,
    ProtocolError,
    SizeMismatch,
    Timeout,
    error_for_code,
)
from .info import Info
from .names import NameLike, PathLike, validate_chunk_size, validate_name, validate_prefix, validate_rm_prefix

__all__ = ["Client", "FileArg", "Progress", "default_socket", "default_timeout", "PROTOCOL_VERSIONS", "DEFAULT_TIMEOUT"]

#: Protocol versions offered in HELLO, highest first (docs/rpcbridge.md
#: section 6.1). The daemon answers the smaller of the offer and its own
#: highest, and the client uses only what the answer has: version 2 adds
#: GET_FD, which get_into uses; version 5 adds PUT_FD and GET_TO_FD, which
#: put_file, get_file, put_fd and get_to_fd use (below 5 they stream the
#: bytes through PUT and GET instead); versions 3 and 4 add requests this
#: client does not send; version 7 adds GET_MANY and PUT_MANY, which
#: get_many, iter_many, get_many_into and put_many use (below 7 they send
#: one GET or PUT per name); version 8 adds the PROGRESS frames that follow
#: a get into a file, which get_file's and get_to_fd's progress callback
#: reports (below 8 it is called once, at the end). The handshake falls back along this list when the
#: daemon answers ERROR UNSUPPORTED_VERSION (a daemon that predates
#: version 2).
PROTOCOL_VERSIONS: Tuple[int, ...] = (8, 7, 6, 5, 2, 1)

#: A get's progress callback: called with (done, size), the bytes of the
#: blob in the file so far and its size (Client.get_file).
Progress = Callable[[int, int], object]

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
    """The daemon socket: $OMST_SOCKET, else $OMST_HOME/omst.sock, else inside a
    Slurm job this node's daemon of the job if ``omst slurm up`` started one
    (omst._slurm), else ~/.omst/omst.sock."""
    s = os.environ.get("OMST_SOCKET")
    if s:
        return s
    h = os.environ.get("OMST_HOME")
    if h:
        return os.path.join(h, "omst.sock")
    js = slurm_socket()
    if js:
        return js
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
        """Store the file at path under name and return the blob ID.

        The file is opened here, with this process's rights and nobody
        else's, and the daemon reads it through the descriptor (PUT_FD,
        protocol version 5; an older daemon gets the bytes read and
        streamed by the client, as :meth:`put` streams a file). The path is
        resolved by the client: a symbolic link is followed only where
        Linux's ``fs.protected_symlinks = 1`` would follow it (a link of
        another user in a sticky world-writable directory such as /tmp is
        not: UnsafePath), whatever the host's setting; a relative path is
        taken against the working directory, and ``/dev/stdin`` or
        ``/dev/fd/N`` are this process's files. A directory is refused.

        A regular file is read from its start to the size it has when the
        daemon starts, and must not change meanwhile (OmstIOError, "file
        changed while it was read", and nothing is stored). Anything else
        (a FIFO, whose open waits for a writer at most the client's
        timeout; a pipe; a device) is read to its end of file. Errors name
        path (OmstIOError with ``errno`` when the client could not open it).
        """
        raw = validate_name(name)
        validate_chunk_size(chunk_size)
        op = f"put {_shown(raw)}"
        fd = _localfile.open_read(path, self.timeout, op=op)
        try:
            return self._put_fd(raw, fd, chunk_size, op, os.fsdecode(path)).id
        finally:
            os.close(fd)

    def put_fd(self, name: NameLike, file: FileArg, chunk_size: int = 0) -> Info:
        """Store the contents of file (a descriptor, or an object with
        ``fileno()`` such as an open file or ``sys.stdin``) under name and
        return the new blob's Info. The file must be open for reading.

        The daemon reads the file through a copy of the descriptor (PUT_FD,
        protocol version 5; an older daemon gets the bytes read here and
        streamed): a regular file from the descriptor's current offset to
        the size it has when the daemon starts (it must not change
        meanwhile: OmstIOError, "file changed while it was read", and
        nothing is stored); anything else (a pipe, a FIFO, a socket, a
        terminal) as a stream to its end of file. The descriptor's offset
        moves (the daemon shares it). For a buffered binary file object
        the descriptor is first set to the object's position, and the
        object is set to the descriptor's offset afterwards; bytes that a
        text wrapper (``sys.stdin``) or a buffered stream has already read
        ahead are not seen by the daemon. file is not closed.

        Raises:
            BadRequest: the descriptor is not open for reading, is a
                directory or was opened with O_PATH.
        """
        raw = validate_name(name)
        validate_chunk_size(chunk_size)
        fd = _descriptor(file, write=False)
        try:
            return self._put_fd(raw, fd, chunk_size, f"put {_shown(raw)}", None)
        finally:
            _resync(file, fd)

    def _put_fd(self, raw: bytes, fd: int, chunk_size: int, op: str, where: Optional[str]) -> Info:
        st, _ = _check_descriptor(fd, False, op)
        frame = _wire.encode_put_fd(raw, chunk_size)
        # The daemon's reads move the shared offset of a regular file.
        progress = (lambda: os.lseek(fd, 0, os.SEEK_CUR)) if stat.S_ISREG(st.st_mode) else None

        def run(conn: Connection) -> Info:
            if conn.version < 5:
                raise _StreamInstead()
            conn.begin()
            conn.send_fd(frame, fd)
            conn.wait_reply(progress, op)
            return _wire.decode_info(self._reply(conn, FrameType.INFO, op))

        try:
            return self._run(run)
        except _StreamInstead:
            pass
        except OmstError as e:
            if where is not None and e.code:
                _name_file(e, where)
            raise
        # A daemon older than version 5: stream the bytes read here, with
        # put's checks (a regular file read from its offset to its size,
        # unchanged), from a descriptor of our own (closed after).
        f = io.FileIO(os.dup(fd), "rb", closefd=True)
        f.name = where if where is not None else f"descriptor {fd}"
        with f:
            return self.put_info(raw, f, chunk_size)

    def get_file(self, name: NameLike, path: PathLike, progress: Optional[Progress] = None) -> Info:
        """Write the blob named name to path and return its Info.

        The destination is prepared here, with this process's rights and
        nobody else's, and the daemon writes into it through a descriptor
        (GET_TO_FD, protocol version 5; an older daemon sends the bytes,
        which the client writes): a regular file, or a path where nothing
        exists yet, is replaced atomically (the bytes go into a new
        temporary file ``.BASE.omst-RANDOM`` beside it, with a replaced
        file's permission bits, group where the caller is in it and, as
        root, owner, or new, mode 0644 less the umask, renamed onto path only when every byte is written and
        verified; on error path is unchanged and the temporary file
        removed). An existing FIFO or device (``/dev/null``,
        ``/dev/stdout``) is written in place; a FIFO's open waits for a
        reader at most the client's timeout. Links are followed as
        :meth:`put_file` follows them, and a link's target is replaced, not
        the link; another user's FIFO in a sticky world-writable directory
        is refused (UnsafePath), and so is a directory. Errors name path.

        progress, if given, is called as ``progress(done, size)``: done is
        the bytes of the blob in the file so far, size the blob's. A daemon
        of protocol version 8 reports them as the get goes (PROGRESS
        frames, at most every 100 ms), done never going back, the last call
        with done == size once every verified byte is in; an older daemon
        gives one call, with done == size, when the get succeeded. Reports
        that go back or exceed size, or an END before size, raise
        ProtocolError. An exception raised by progress stops the get (the
        connection is dropped, which cancels it in the daemon; path is
        unchanged) and propagates.
        """
        raw = validate_name(name)
        op = f"get {_shown(raw)}"
        dest = _localfile.create(path, self.timeout, op=op)
        try:
            info = self._get_to_fd(raw, dest.fd, op, os.fsdecode(path), progress)
        except BaseException:
            dest.abort()
            raise
        dest.commit()
        return info

    def get_to_fd(self, name: NameLike, file: FileArg, progress: Optional[Progress] = None) -> Info:
        """Write the verified bytes of the blob named name into file (a
        descriptor, or an object with ``fileno()`` such as an open file or
        ``sys.stdout``) and return its Info. The file must be open for
        writing.

        The daemon writes through a copy of the descriptor (GET_TO_FD,
        protocol version 5; an older daemon sends the bytes and they are
        written here the same way): a regular file not opened with
        O_APPEND then holds exactly the blob (written from offset 0 with
        pwrite, which does not move the descriptor's offset, and cut to
        the blob's size); anything else (a pipe, a FIFO, a terminal,
        O_APPEND) receives the bytes in order. A file object is flushed
        first. If the get fails after it started, a regular file holds an
        unspecified mix of old and new bytes (:meth:`get_file` writes a
        temporary file instead). file is not closed. progress: as
        :meth:`get_file`'s.

        Raises:
            BadRequest: the descriptor is not open for writing, is a
                directory or was opened with O_PATH.
        """
        raw = validate_name(name)
        fd = _descriptor(file, write=True)
        try:
            return self._get_to_fd(raw, fd, f"get {_shown(raw)}", None, progress)
        finally:
            _resync(file, fd)

    def _get_to_fd(
        self, raw: bytes, fd: int, op: str, where: Optional[str], progress: Optional[Progress] = None
    ) -> Info:
        st, flags = _check_descriptor(fd, True, op)
        regular = stat.S_ISREG(st.st_mode)
        frame = _wire.encode_name_request(FrameType.GET_TO_FD, raw)

        def moved() -> object:
            # The daemon's writes grow or touch a regular file.
            s = os.fstat(fd)
            return (s.st_size, s.st_mtime_ns)

        def run(conn: Connection) -> Info:
            if conn.version < 5:
                raise _StreamInstead()
            conn.begin()
            conn.send_fd(frame, fd)
            ftype, n = conn.read_header()
            body = conn.read_body(n)
            if ftype == FrameType.ERROR:
                conn.finish()
                raise self._error(body)
            if ftype != FrameType.INFO:
                raise ProtocolError(f"{op}: daemon sent {_wire.type_name(ftype)}, expected INFO")
            info = _wire.decode_info(body)
            # Version 8: PROGRESS frames, the last of every byte, then END.
            v8 = conn.version >= _wire.PROGRESS_VERSION
            last = 0
            while True:
                conn.wait_reply(moved if regular else None, op)
                ftype, n = conn.read_header()
                body = conn.read_body(n)
                if ftype == _wire.PROGRESS and v8:
                    done = _wire.decode_progress(body)
                    _wire.check_progress(done, last, info.size)
                    last = done
                    if progress is not None:
                        progress(done, info.size)
                    continue
                if ftype == FrameType.END:
                    _wire.decode_empty(body, "END")
                    if v8 and last != info.size:
                        raise ProtocolError(f"{op}: END after PROGRESS of {last} bytes, not the blob's {info.size}")
                    conn.finish()
                    if not v8 and progress is not None:
                        progress(info.size, info.size)
                    return dataclasses.replace(info, local=True)
                if ftype == FrameType.ERROR:
                    conn.finish()
                    raise self._error(body)
                want = "PROGRESS or END" if v8 else "END"
                raise ProtocolError(f"{op}: daemon sent {_wire.type_name(ftype)}, expected {want}")

        try:
            return self._run(run)
        except _StreamInstead:
            pass
        except OmstError as e:
            if where is not None and e.code:
                _name_file(e, where)
            raise
        in_place = regular and not flags & os.O_APPEND
        info = self._run(lambda conn: self._get_stream_to(conn, raw, fd, in_place, op, where))
        if progress is not None:
            progress(info.size, info.size)
        return info

    def _get_stream_to(
        self, conn: Connection, raw: bytes, fd: int, in_place: bool, op: str, where: Optional[str]
    ) -> Info:
        """GET_TO_FD for a daemon without it: GET, and write the DATA into
        fd, at their offsets and cut to the blob's size if in_place, else in
        order. A failed write leaves the reply unread (the connection is
        dropped, which cancels the request in the daemon)."""
        conn.begin()
        conn.send([_wire.encode_name_request(FrameType.GET, raw)])
        ftype, n = conn.read_header()
        body = conn.read_body(n)
        if ftype == FrameType.ERROR:
            conn.finish()
            raise self._error(body)
        if ftype != FrameType.INFO:
            raise ProtocolError(f"{op}: daemon sent {_wire.type_name(ftype)}, expected INFO")
        info = _wire.decode_info(body)
        size = info.size
        what = where if where is not None else f"descriptor {fd}"
        buf = memoryview(bytearray(max(1, min(size, _wire.DATA_FRAME_SIZE))))
        got = 0
        while True:
            ftype, n = conn.read_header()
            if ftype == FrameType.DATA:
                if got + n > size:
                    raise ProtocolError(f"{op}: DATA beyond the blob's {size} bytes")
                while n:
                    piece = buf[: min(n, len(buf))]
                    conn.read_into(piece)
                    _write_all(fd, piece, got if in_place else None, self.timeout, op, what)
                    got += len(piece)
                    n -= len(piece)
            elif ftype == FrameType.END:
                _wire.decode_empty(conn.read_body(n), "END")
                conn.finish()
                if got != size:
                    raise SizeMismatch(f"{op}: the reply ended after {got} of {size} bytes")
                break
            elif ftype == FrameType.ERROR:
                body = conn.read_body(n)
                conn.finish()
                raise self._error(body)
            else:
                raise ProtocolError(f"{op}: daemon sent {_wire.type_name(ftype)}, expected DATA or END")
        if in_place:
            try:
                os.ftruncate(fd, size)
            except OSError as e:
                raise OmstIOError(f"{op}: cut {what} to {size} bytes: {e.strerror or e}", errno=e.errno or 0) from None
        return dataclasses.replace(info, local=True)

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

    def remove(self, name: NameLike, everywhere: bool = False, recursive: bool = False) -> Optional[Dict[str, Any]]:
        """Forget name on this node, as :meth:`rm`; with recursive, every name
        under the prefix name ("job1" and "job1/" both mean the names under
        "job1/") on this node; with everywhere (which implies recursive), at
        every node of the grid, the DHT included: one signed removal that
        nodes down now apply when they return (docs/rpcbridge.md section
        6.13). Returns the daemon's answer for a prefix (``removed``: names
        dropped here, ``reached``: nodes that took it, ``unreached`` and
        ``failed``: neighbours not reached now), None for a name.

        Raises:
            InvalidName: an empty prefix, "/", or one breaking a name rule.
            Forbidden: a prefix outside this node's grid rights, or a caller
                that is not the daemon's user.
            ProtocolError: a daemon older than protocol version 6.
        """
        if not (everywhere or recursive):
            self.rm(name)
            return None
        raw = validate_rm_prefix(name)
        frame = _wire.encode_remove_prefix(raw, everywhere)
        return self._namespace_call(frame, "remove prefix")

    def set_ttl(self, scope: NameLike, seconds: float) -> Dict[str, Any]:
        """Give the names of scope ``seconds`` to live, grid-wide: a prefix
        ending in '/' (every name under it, put before or after; 0 clears
        it) or one name (its current record)."""
        if isinstance(scope, str) and scope.endswith("/") or isinstance(scope, (bytes, bytearray)) and scope.endswith(b"/"):
            raw = validate_rm_prefix(scope)
        else:
            raw = validate_name(scope)
        if not 0 <= seconds <= 365 * 86400:
            raise ValueError(f"TTL of {seconds} s: not within 0 and a year")
        frame = _wire.encode_set_ttl(raw, int(seconds * 1e9))
        return self._namespace_call(frame, "set ttl")

    def du(self, prefix: NameLike = "") -> Dict[str, Any]:
        """What prefix ("" everything) holds on this node: names, blobs,
        bytes, bytes held here, pinned and unpinned (evictable), and the
        namespace rules that concern it (docs/rpcbridge.md section 6.13)."""
        raw = validate_prefix(prefix)
        frame = _wire.encode_name_request(_wire.DU, raw)
        return self._namespace_call(frame, "du")

    def _namespace_call(self, frame: bytes, op: str) -> Dict[str, Any]:
        def run(conn: Connection) -> Dict[str, Any]:
            if conn.version < 6:
                raise ProtocolError(f"{op}: the daemon speaks protocol version {conn.version}; job namespaces need 6")
            return _wire.decode_status_json(self._call(conn, frame, _wire.NAMESPACE_JSON, op), "NAMESPACE_JSON")

        return self._run(run)

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

    # --- many names in one request (protocol version 7) ---------------------------------

    def get_many(self, names: Optional[Iterable[NameLike]] = None, *, prefix: Optional[NameLike] = None) -> ManyResult:
        """Fetch many blobs in one request (GET_MANY): the names given, or
        every name under prefix that the daemon lists ("job1/"; "" every
        name). Returns a ManyResult: a dict name -> bytes of those fetched,
        with ``errors`` (name -> OmstError: a missing name is NotFound, a
        refused one Forbidden...) and ``summary``. One entry's error does not
        stop the others; an error for the whole call (a bad prefix, the
        connection lost) is raised. See :meth:`iter_many` for a stream."""
        result = ManyResult()
        for name, val in self.iter_many(names, prefix=prefix):
            if isinstance(val, OmstError):
                result.errors[name] = val
            else:
                result[name] = val
        result._tally()
        return result

    def iter_many(self, names: Optional[Iterable[NameLike]] = None, *, prefix: Optional[NameLike] = None) -> Iterator[Entry]:
        """Like :meth:`get_many`, but yield (name, bytes) or (name, error)
        per entry as the daemon answers them (the order it has them ready,
        not the order of names). The client is busy until the iterator is
        exhausted; one abandoned early drops the connection."""
        raws, praw = self._many_args(names, prefix)
        return self._iter_many(raws, praw, lambda i, info: None)

    def get_many_into(self, buffers: Mapping[NameLike, Any]) -> ManyResult:
        """Fetch the blob of each name of buffers into its buffer (writable,
        C-contiguous: bytearray, numpy array, mmap), in one request. Returns
        a ManyResult of name -> size written; an entry whose blob's size
        differs from its buffer's is SizeMismatch (its buffer untouched); one
        that failed midway leaves its buffer with an unspecified mix."""
        keys = list(buffers)
        raws = [validate_name(k) for k in keys]
        views = [_writable_view(buffers[k]) for k in keys]

        def dest_for(i: int, info: Info) -> Optional[memoryview]:
            if info.size != len(views[i]):
                raise _many.size_error(info.name, info.size, len(views[i]))
            return views[i]

        result = ManyResult()
        for name, val in self._iter_many(raws, None, dest_for, sizes=True):
            if isinstance(val, OmstError):
                result.errors[name] = val
            else:
                result[name] = val
        result._tally()
        return result

    def put_many(self, items: Union[Mapping[NameLike, Any], Iterable[Tuple[NameLike, Any]]], chunk_size: int = 0) -> ManyResult:
        """Store many blobs in one request (PUT_MANY): items is a mapping, or
        pairs, of name -> bytes-like data. Returns a ManyResult of name ->
        Info of those stored, ``errors`` for the others (a name refused, the
        store full); each is stored or not on its own."""
        validate_chunk_size(chunk_size)
        pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
        result = ManyResult()
        good: List[Tuple[bytes, memoryview]] = []
        for name, data in pairs:
            try:
                raw = validate_name(name)
            except OmstError as e:
                result.errors[name if isinstance(name, str) else bytes(name).decode("utf-8", "replace")] = e
                continue
            mv = memoryview(data)
            good.append((raw, mv if mv.c_contiguous and mv.format == "B" else memoryview(mv.tobytes())))
        with self._lock:
            version = self._connection().version
        if version < _many.MANY_VERSION:
            answers: List[Union[Info, OmstError]] = []
            for raw, view in good:
                try:
                    answers.append(self.put_info(raw, view, chunk_size))
                except (ConnectionLost, ProtocolError, Timeout):
                    raise
                except OmstError as e:
                    answers.append(e)
        else:
            answers = self._run(lambda conn: _many.put_many_exchange(conn, good, chunk_size))
        for (raw, _), val in zip(good, answers):
            name = raw.decode("utf-8", "surrogateescape")
            if isinstance(val, OmstError):
                result.errors[name] = val
            else:
                result[name] = val
        result._tally()
        return result

    @staticmethod
    def _many_args(names: Optional[Iterable[NameLike]], prefix: Optional[NameLike]) -> Tuple[List[bytes], Optional[bytes]]:
        if (names is None) == (prefix is None):
            raise ValueError("give names or prefix=, not both")
        if prefix is not None:
            return [], validate_prefix(prefix)
        if isinstance(names, (str, bytes)):
            raise TypeError("names is a collection of names, not one name")
        return [validate_name(n) for n in names], None  # type: ignore[union-attr]

    def _iter_many(
        self,
        raws: List[bytes],
        praw: Optional[bytes],
        dest_for: Callable[[int, Info], Optional[memoryview]],
        sizes: bool = False,
    ) -> Iterator[Any]:
        with self._lock:
            version = self._connection().version
        if version < _many.MANY_VERSION:
            yield from self._iter_one_by_one(raws, praw, dest_for, sizes)
            return
        plan = [(0, [])] if praw is not None else list(_many.batches(raws))
        flags = _wire.GET_MANY_BY_PREFIX if praw is not None else 0
        for base, chunk in plan:
            with self._lock:
                conn = self._connection()
                conn.begin()
                done = False
                try:
                    conn.send([_wire.encode_get_many(flags, praw or b"", chunk)])
                    for _, name, val, dest in _many.read_entries(conn, base, dest_for):
                        if isinstance(val, OmstError) or dest is None:
                            yield name, val
                        elif sizes:
                            yield name, val.size
                        else:
                            yield name, bytes(dest)
                    done = True
                finally:
                    if not done:
                        self._drop()

    def _iter_one_by_one(
        self, raws: List[bytes], praw: Optional[bytes], dest_for: Callable[[int, Info], Optional[memoryview]], sizes: bool
    ) -> Iterator[Any]:
        if praw is not None:
            raws = [validate_name(i.name) for i in self.ls(praw)]
        for i, raw in enumerate(raws):
            name = raw.decode("utf-8", "surrogateescape")
            try:
                if sizes:
                    view = dest_for(i, self.stat(raw))
                    assert view is not None
                    yield name, self.get_into(raw, view)
                else:
                    yield name, self.get(raw)
            except (ConnectionLost, ProtocolError, Timeout):
                raise
            except OmstError as e:
                yield name, e

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


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


#: What put_fd and get_to_fd take: a descriptor, or an object with fileno().
FileArg = Union[int, _HasFileno]


class _StreamInstead(Exception):
    """Raised inside a request by a PUT_FD or GET_TO_FD that finds the
    connection's version below 5: the caller streams the bytes instead."""


# How the daemon names a passed file in its messages (it knows no path).
_CALLER_FILE = "the caller's file"


def _shown(raw: bytes) -> str:
    """A validated name, quoted, for messages."""
    return repr(raw.decode("utf-8", "replace"))


def _name_file(e: OmstError, where: str) -> None:
    """Make the daemon's error e name the file at where."""
    if _CALLER_FILE in e.message:
        msg = e.message.replace(_CALLER_FILE, where)
    else:
        msg = f"{e.message} (file {where})"
    e.message = msg
    e.args = (msg,)


def _descriptor(file: FileArg, write: bool) -> int:
    """The descriptor of file. A file object is flushed (write) and, if it
    is a seekable buffered binary file, its descriptor's offset set to the
    object's position."""
    if isinstance(file, bool):
        raise TypeError("file must be a descriptor or an object with fileno(), not bool")
    if isinstance(file, int):
        return file
    fileno = getattr(file, "fileno", None)
    if fileno is None:
        raise TypeError(f"file must be a descriptor or an object with fileno(), not {type(file).__name__}")
    if write:
        flush = getattr(file, "flush", None)
        if flush is not None:
            flush()
    fd = fileno()
    if not isinstance(fd, int):
        raise TypeError(f"{type(file).__name__}.fileno() returned {type(fd).__name__}, not int")
    if isinstance(file, io.BufferedIOBase) and file.seekable():
        _seek_buffered(file, file.tell())
    return fd


def _resync(file: FileArg, fd: int) -> None:
    """After the daemon used fd: set a seekable buffered binary file object
    to its descriptor's offset (dropping what it had buffered)."""
    if isinstance(file, io.BufferedIOBase) and not file.closed and file.seekable():
        try:
            _seek_buffered(file, os.lseek(fd, 0, os.SEEK_CUR))
        except OSError:
            pass


def _seek_buffered(f: io.BufferedIOBase, pos: int) -> None:
    # A seek to the end always reaches the descriptor (a SEEK_SET may stay
    # within the buffer); the next one then sets the descriptor to pos.
    f.seek(0, io.SEEK_END)
    f.seek(pos)


def _check_descriptor(fd: int, write: bool, op: str) -> Tuple[os.stat_result, int]:
    """Check what the daemon checks of a passed descriptor (open for
    reading or writing, not a directory, not O_PATH); return its stat and
    status flags.

    Raises:
        BadRequest: it fails a check, or is not an open descriptor.
    """
    try:
        st = os.fstat(fd)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError as e:
        raise BadRequest(f"{op}: descriptor {fd}: {e.strerror or e}") from None
    acc = flags & os.O_ACCMODE
    if flags & getattr(os, "O_PATH", 0):
        raise BadRequest(f"{op}: descriptor {fd} was opened with O_PATH: it can be neither read nor written")
    if stat.S_ISDIR(st.st_mode):
        raise BadRequest(f"{op}: descriptor {fd} is a directory")
    if write and acc == os.O_RDONLY:
        raise BadRequest(f"{op}: descriptor {fd} is not open for writing")
    if not write and acc == os.O_WRONLY:
        raise BadRequest(f"{op}: descriptor {fd} is not open for reading")
    return st, flags


def _write_all(fd: int, view: memoryview, offset: Optional[int], timeout: float, op: str, what: str) -> None:
    """Write view into fd: at offset with pwrite, or (None) with write. A
    non-blocking descriptor is waited for, at most timeout seconds at a
    time."""
    pos = 0
    while pos < len(view):
        try:
            if offset is None:
                n = os.write(fd, view[pos:])
            else:
                n = os.pwrite(fd, view[pos:], offset + pos)
        except BlockingIOError:
            p = select.poll()
            p.register(fd, select.POLLOUT)
            if not p.poll(timeout * 1000):
                raise Timeout(f"{op}: write to {what}: not writable for {timeout} s") from None
            continue
        except OSError as e:
            raise OmstIOError(f"{op}: write to {what}: {e.strerror or e}", errno=e.errno or 0) from None
        pos += n


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
