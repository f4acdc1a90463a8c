"""put_file, get_file, put_fd and get_to_fd: the client opens files with its
own rights and passes descriptors (PUT_FD, GET_TO_FD: protocol version 5),
and never sends PUT_FILE or GET_FILE, which a daemon of another uid refuses.
Against the real daemon (also one running as another user than the
client), and fake daemons for what a real one does not do: record the
frames, fail after INFO, take long, speak an older version."""

from __future__ import annotations

import errno
import json
import os
import socket
import stat
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import pytest

import omst
from omst import _wire
from omst._wire import FrameType

from conftest import Daemon, FakeDaemon

MiB = 1 << 20
NOBODY = 65534
ATTACKER = 54321


def fork() -> int:
    """os.fork, quiet about the threads pytest's process may have (Python
    3.12 warns): the child uses only what it had before (no import, no
    lock another thread could hold) and leaves with os._exit."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (other users' files and links)")


def pattern(n: int, seed: int = 0) -> bytes:
    block = bytes((i * 131 + seed * 17 + (i >> 8)) & 0xFF for i in range(4093))
    return (block * (n // len(block) + 1))[:n]


def write(path: "os.PathLike[str] | str", data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def read(path: "os.PathLike[str] | str") -> bytes:
    with open(path, "rb") as f:
        return f.read()


def leftovers(d: "os.PathLike[str] | str") -> List[str]:
    """Temporary files of gets left in d."""
    return [n for n in os.listdir(d) if ".omst-" in n]


def read_all(fd: int, out: List[bytes]) -> None:
    """Read fd to its end into out[0] (a thread's target)."""
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            break
        chunks.append(b)
    out.append(b"".join(chunks))


def write_all(fd: int, data: bytes, close: bool = True) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    if close:
        os.close(fd)


@pytest.fixture
def c(daemon: Daemon) -> Iterator[omst.Client]:
    cl = omst.Client(daemon.sock, timeout=30)
    yield cl
    cl.close()


# --- against the real daemon ----------------------------------------------------------


def test_speaks_version_8(c: omst.Client) -> None:
    assert c.protocol_version == 8


@pytest.mark.parametrize("size, chunk_size", [(0, 0), (1, 0), (3 * MiB + 7, 0), (MiB + 1, 65536)])
def test_round_trip(c: omst.Client, ns: str, tmp_path: Path, size: int, chunk_size: int) -> None:
    data = pattern(size, size)
    src = tmp_path / "src"
    write(src, data)
    cid = c.put_file(f"{ns}/f", src, chunk_size)
    info = c.stat(f"{ns}/f")
    assert info.id == cid and info.size == size
    if chunk_size:
        assert info.chunk_size == chunk_size
    assert c.get(f"{ns}/f") == data
    got = c.get_file(f"{ns}/f", tmp_path / "out")
    assert (got.id, got.size, got.local) == (cid, size, True)
    assert read(tmp_path / "out") == data
    # Again onto the existing file: replaced (a new inode), nothing left over.
    write(tmp_path / "out", b"older and longer" * 1000)
    ino = os.stat(tmp_path / "out").st_ino
    c.get_file(f"{ns}/f", str(tmp_path / "out"))
    assert read(tmp_path / "out") == data and os.stat(tmp_path / "out").st_ino != ino
    assert leftovers(tmp_path) == []


def test_relative_paths(c: omst.Client, ns: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write("rel.bin", b"relative")
    c.put_file(f"{ns}/rel", "rel.bin")
    os.mkdir("sub")
    c.get_file(f"{ns}/rel", b"sub/../sub/out.bin")
    assert read(tmp_path / "sub" / "out.bin") == b"relative"


def test_file_errors(c: omst.Client, ns: str, tmp_path: Path) -> None:
    with pytest.raises(omst.OmstIOError) as ei:
        c.put_file(f"{ns}/g", tmp_path / "missing")
    assert ei.value.errno == errno.ENOENT and str(tmp_path / "missing") in str(ei.value)
    assert f"put '{ns}/g'" in str(ei.value)
    with pytest.raises(omst.OmstIOError) as ei:
        c.put_file(f"{ns}/g", tmp_path)
    assert ei.value.errno == errno.EISDIR
    c.put(f"{ns}/x", b"x")
    with pytest.raises(omst.OmstIOError) as ei:
        c.get_file(f"{ns}/x", tmp_path)
    assert ei.value.errno == errno.EISDIR
    with pytest.raises(omst.OmstIOError) as ei:
        c.get_file(f"{ns}/x", tmp_path / "nodir" / "x")
    assert ei.value.errno == errno.ENOENT
    with pytest.raises(omst.InvalidName):
        c.put_file("/bad", tmp_path / "missing")
    with pytest.raises(omst.NotFound):
        c.stat(f"{ns}/g")


def test_get_failure_leaves_destination(c: omst.Client, ns: str, tmp_path: Path) -> None:
    # The destination is unchanged on error, and no temporary file stays.
    write(tmp_path / "keep", b"old bytes")
    with pytest.raises(omst.NotFound):
        c.get_file(f"{ns}/nope", tmp_path / "keep")
    assert read(tmp_path / "keep") == b"old bytes"
    with pytest.raises(omst.NotFound):
        c.get_file(f"{ns}/nope", tmp_path / "new")
    assert not (tmp_path / "new").exists()
    assert leftovers(tmp_path) == []


def test_get_into_fifo_and_devnull(c: omst.Client, ns: str, tmp_path: Path) -> None:
    # An existing FIFO or device is written in place, not replaced.
    data = pattern(3 * MiB, 3)
    c.put(f"{ns}/b", data)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: List[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=reader)
    t.start()
    info = c.get_file(f"{ns}/b", fifo)
    t.join(30)
    assert info.size == len(data) and got == [data]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and leftovers(tmp_path) == []
    assert c.get_file(f"{ns}/b", "/dev/null").size == len(data)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_fifo_without_reader_times_out(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    cl = omst.Client(daemon.sock, timeout=0.3)
    cl.put(f"{ns}/b", b"abc")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(omst.Timeout, match="no reader"):
        cl.get_file(f"{ns}/b", tmp_path / "fifo")
    with pytest.raises(omst.Timeout, match="no writer"):
        cl.put_file(f"{ns}/f", tmp_path / "fifo")
    assert cl.stat(f"{ns}/b").size == 3  # the client is still usable
    cl.close()


def test_put_file_kinds(c: omst.Client, ns: str, tmp_path: Path) -> None:
    # What the caller can open is read to its end: a FIFO (waiting for its
    # writer), a device; a directory is refused.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    data = pattern(2 * MiB + 5, 9)

    def writer() -> None:
        with open(fifo, "wb") as f:
            f.write(data)

    t = threading.Thread(target=writer)
    t.start()
    c.put_file(f"{ns}/fifo", fifo)
    t.join(30)
    assert c.get(f"{ns}/fifo") == data
    c.put_file(f"{ns}/null", "/dev/null")
    assert c.stat(f"{ns}/null").size == 0


def test_magic_links_are_the_clients(c: omst.Client, ns: str, tmp_path: Path) -> None:
    # /dev/fd/N is this process's descriptor N (the daemon's own would be
    # another file, or none).
    r, w = os.pipe()
    try:
        threading.Thread(target=write_all, args=(w, b"through /dev/fd")).start()
        c.put_file(f"{ns}/m", f"/dev/fd/{r}")
    finally:
        os.close(r)
    assert c.get(f"{ns}/m") == b"through /dev/fd"
    with open(tmp_path / "out", "wb") as f:
        c.get_file(f"{ns}/m", f"/dev/fd/{f.fileno()}")
    assert read(tmp_path / "out") == b"through /dev/fd" and leftovers(tmp_path) == []


@pytest.fixture
def planted(tmp_path: Path) -> Tuple[Path, Path]:
    """A sticky world-writable directory (like /tmp) and a victim file
    beside it (tests/test_localfile.py has the resolution cases)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    os.chmod(tmp, 0o1777)
    victim = tmp_path / "victim"
    write(victim, b"precious")
    return tmp, victim


@needs_root
def test_planted_link_not_followed(c: omst.Client, ns: str, planted: Tuple[Path, Path]) -> None:
    # A link another user planted in a sticky world-writable directory
    # (/tmp/out -> someone's ~/.bashrc) is not followed, for a get or a put,
    # whatever fs.protected_symlinks says; the victim keeps its bytes.
    tmp, victim = planted
    out = tmp / "out"
    os.symlink(victim, out)
    os.lchown(out, ATTACKER, ATTACKER)
    c.put(f"{ns}/evil", b"overwritten")
    with pytest.raises(omst.UnsafePath) as ei:
        c.get_file(f"{ns}/evil", out)
    assert ei.value.errno == errno.EACCES and str(out) in str(ei.value)
    with pytest.raises(omst.UnsafePath):
        c.put_file(f"{ns}/stolen", out)
    assert read(victim) == b"precious" and os.path.islink(out)
    assert leftovers(tmp) == [] and leftovers(victim.parent) == []
    with pytest.raises(omst.NotFound):
        c.stat(f"{ns}/stolen")
    # A link of one's own there is followed, and its target replaced.
    mine = tmp / "mine"
    os.symlink(victim, mine)
    c.get_file(f"{ns}/evil", mine)
    assert read(victim) == b"overwritten" and os.path.islink(mine)


@needs_root
def test_planted_fifo_not_written(c: omst.Client, ns: str, planted: Tuple[Path, Path]) -> None:
    tmp, _ = planted
    fifo = tmp / "fifo"
    os.mkfifo(fifo, 0o666)
    os.chown(fifo, ATTACKER, ATTACKER)
    c.put(f"{ns}/b", b"bytes")
    with pytest.raises(omst.UnsafePath, match="FIFO not written"):
        c.get_file(f"{ns}/b", fifo)


def test_put_fd_pipe_and_file(c: omst.Client, ns: str, tmp_path: Path) -> None:
    data = pattern(3 * MiB + 1, 4)
    r, w = os.pipe()
    threading.Thread(target=write_all, args=(w, data)).start()
    try:
        info = c.put_fd(f"{ns}/p", r)
    finally:
        os.close(r)
    assert info.size == len(data) and c.get(f"{ns}/p") == data
    # A file object: from its position, not from what its buffer read ahead;
    # afterwards at the end (the daemon read through the shared offset).
    write(tmp_path / "f", data)
    with open(tmp_path / "f", "rb") as f:
        assert f.read(3) == data[:3]
        info = c.put_fd(f"{ns}/f", f, chunk_size=65536)
        assert f.tell() == len(data) and f.read() == b""
    assert (info.size, info.chunk_size) == (len(data) - 3, 65536)
    assert c.get(f"{ns}/f") == data[3:]
    # A descriptor at an offset: from there.
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    os.lseek(fd, MiB, os.SEEK_SET)
    try:
        assert c.put_fd(f"{ns}/off", fd).size == len(data) - MiB
        assert os.lseek(fd, 0, os.SEEK_CUR) == len(data)
    finally:
        os.close(fd)


def test_get_to_fd_pipe_and_file(c: omst.Client, ns: str, tmp_path: Path) -> None:
    data = pattern(3 * MiB + 1, 5)
    c.put(f"{ns}/b", data)
    r, w = os.pipe()
    got: List[bytes] = []
    t = threading.Thread(target=read_all, args=(r, got))
    t.start()
    try:
        info = c.get_to_fd(f"{ns}/b", w)
    finally:
        os.close(w)
    t.join(30)
    os.close(r)
    assert info.size == len(data) and info.local and got == [data]
    # A regular file holds exactly the blob (written from 0, cut to size),
    # after what a file object had buffered was flushed.
    with open(tmp_path / "f", "w+b") as f:
        f.write(b"x" * (5 * MiB))  # longer than the blob, partly in f's buffer
        c.get_to_fd(f"{ns}/b", f)
        f.seek(0)
        assert f.read() == data
    assert read(tmp_path / "f") == data
    # O_APPEND: the bytes go after what was there.
    write(tmp_path / "a", b"head:")
    with open(tmp_path / "a", "ab") as f:
        c.get_to_fd(f"{ns}/b", f)
    assert read(tmp_path / "a") == b"head:" + data


def test_bad_descriptors(c: omst.Client, ns: str, tmp_path: Path) -> None:
    c.put(f"{ns}/b", b"b")
    write(tmp_path / "f", b"f")
    ro = os.open(tmp_path / "f", os.O_RDONLY)
    wo = os.open(tmp_path / "f", os.O_WRONLY)
    dirfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    pathfd = os.open(tmp_path / "f", getattr(os, "O_PATH", os.O_RDONLY))
    try:
        with pytest.raises(omst.BadRequest, match="not open for writing"):
            c.get_to_fd(f"{ns}/b", ro)
        with pytest.raises(omst.BadRequest, match="not open for reading"):
            c.put_fd(f"{ns}/x", wo)
        with pytest.raises(omst.BadRequest, match="directory"):
            c.put_fd(f"{ns}/x", dirfd)
        if hasattr(os, "O_PATH"):
            with pytest.raises(omst.BadRequest, match="O_PATH"):
                c.put_fd(f"{ns}/x", pathfd)
    finally:
        for fd in (ro, wo, dirfd, pathfd):
            os.close(fd)
    with pytest.raises(omst.BadRequest, match="descriptor"):
        c.put_fd(f"{ns}/x", ro)  # closed
    with pytest.raises(TypeError):
        c.put_fd(f"{ns}/x", "a path")  # type: ignore[arg-type]
    assert read(tmp_path / "f") == b"f"
    with pytest.raises(omst.NotFound):
        c.stat(f"{ns}/x")
    assert c.get(f"{ns}/b") == b"b"


def test_module_functions(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    omst.set_default_client(omst.Client(daemon.sock, timeout=30))
    try:
        with open(tmp_path / "f", "wb+") as f:
            f.write(b"module level")
            f.seek(0)
            assert omst.put_fd(f"{ns}/m", f).size == 12
        with open(tmp_path / "g", "wb") as f:
            assert omst.get_to_fd(f"{ns}/m", f).size == 12
        assert read(tmp_path / "g") == b"module level"
    finally:
        omst.default_client().close()
        omst.set_default_client(None)


# --- a daemon of another uid ------------------------------------------------------------


def _as_nobody(fn: Callable[[], Dict[str, object]]) -> Dict[str, object]:
    """Run fn in a forked child of uid and gid 65534; return what it returns
    (or {"error": ...})."""
    r, w = os.pipe()
    pid = fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                out = fn()
            except BaseException as e:  # reported to the parent
                out = {"error": f"{type(e).__name__}: {e}"}
            write_all(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    got: List[bytes] = []
    read_all(r, got)
    os.close(r)
    os.waitpid(pid, 0)
    return dict(json.loads(got[0] or b"{}"))


@needs_root
def test_other_uid(omst_bin: str, ns: str) -> None:
    # The daemon runs as root with its socket open to a group; the client
    # runs as uid 65534. It puts a file only it can read and gets into a
    # directory only it can write, through descriptors; the daemon would
    # refuse it PUT_FILE (FORBIDDEN: the daemon opens paths only for its own
    # user), which the client used to send. Files it may not open are
    # refused by the kernel, not opened by the daemon for it.
    d = Daemon(omst_bin, "--socket-group", str(NOBODY)).start()
    work = tempfile.mkdtemp(prefix="omstuid")
    rootdir = tempfile.mkdtemp(prefix="omstroot")
    try:
        os.chown(work, NOBODY, NOBODY)  # mode 0700: only the client
        os.chmod(rootdir, 0o755)  # readable, not writable, by the client
        mine = os.path.join(work, "mine")
        data = pattern(MiB + 3, 7)
        write(mine, data)
        os.chown(mine, NOBODY, NOBODY)
        os.chmod(mine, 0o600)
        secret = os.path.join(rootdir, "secret")
        write(secret, b"root only")
        os.chmod(secret, 0o600)

        def client() -> Dict[str, object]:
            out: Dict[str, object] = {}
            cl = omst.Client(d.sock, timeout=30)
            out["version"] = cl.protocol_version
            out["id"] = cl.put_file(f"{ns}/mine", mine)
            cl.get_file(f"{ns}/mine", os.path.join(work, "copy"))
            for key, call in [
                ("secret", lambda: cl.put_file(f"{ns}/secret", secret)),
                ("rootdir", lambda: cl.get_file(f"{ns}/mine", os.path.join(rootdir, "x"))),
            ]:
                try:
                    call()
                    out[key] = "done"
                except omst.OmstIOError as e:
                    out[key] = e.errno
            frame = _wire.encode_put_file(f"{ns}/old".encode(), 0, mine.encode())
            try:
                cl._run(lambda conn: cl._call(conn, frame, FrameType.INFO, "put_file"))
                out["put_file"] = "served"
            except omst.OmstError as e:
                out["put_file"] = type(e).__name__
            cl.close()
            return out

        got = _as_nobody(client)
        assert got.get("version") == 8, got
        assert got["secret"] == errno.EACCES and got["rootdir"] == errno.EACCES, got
        assert got["put_file"] == "Forbidden", got
        copy = os.path.join(work, "copy")
        assert read(copy) == data and os.stat(copy).st_uid == NOBODY
        assert os.listdir(rootdir) == ["secret"] and leftovers(work) == []
        with omst.Client(d.sock) as root:
            assert root.stat(f"{ns}/mine").id == got["id"]
            assert root.get(f"{ns}/mine") == data
            for n in ("secret", "old"):
                with pytest.raises(omst.NotFound):
                    root.stat(f"{ns}/{n}")
    finally:
        d.cleanup()
        for p in (work, rootdir):
            for n in os.listdir(p):
                os.unlink(os.path.join(p, n))
            os.rmdir(p)


# --- fake daemons -------------------------------------------------------------------------


def recv_frame_fds(c: socket.socket) -> Tuple[Optional[int], bytes, List[int]]:
    """Read one frame and the descriptors that came with it: (type, body,
    fds); type None at EOF."""
    fds: List[int] = []

    def take(n: int) -> Optional[bytes]:
        b = b""
        while len(b) < n:
            msg, got, _, _ = socket.recv_fds(c, n - len(b), 4)
            fds.extend(got)
            if not msg:
                return None
            b += msg
        return b

    hdr = take(8)
    if hdr is None:
        return None, b"", fds
    body = take(int.from_bytes(hdr[:4], "big"))
    if body is None:
        return None, b"", fds
    return hdr[4], body, fds


def _info(name: str, size: int) -> omst.Info:
    return omst.Info(name, "bafyfake", size, MiB, 1, 0, "peer", False, False)


class Recorder:
    """A fake daemon of protocol version `version`: keeps blobs in memory,
    serves PUT, GET, PUT_FD and GET_TO_FD (reading and writing the passed
    descriptors as the real one does), and records each request as (type
    name, descriptors that came with it)."""

    def __init__(self, make: Callable[[Callable[[socket.socket], None]], FakeDaemon], version: int) -> None:
        self.version = version
        self.blobs: Dict[str, bytes] = {}
        self.seen: List[Tuple[str, int]] = []
        # Hooks for GET_TO_FD: the bytes written, then the reply instead of END.
        self.get_fail: Optional[bytes] = None
        self.delay = 0.0  # seconds between two writes (or reads) of a byte
        self.sock = make(self.handle).sock

    def handle(self, c: socket.socket) -> None:
        _, body, _ = recv_frame_fds(c)
        c.sendall(_wire.encode_hello(min(self.version, int.from_bytes(body[4:], "big"))))
        while True:
            t, body, fds = recv_frame_fds(c)
            if t is None:
                return
            self.seen.append((_wire.type_name(t), len(fds)))
            try:
                self.serve(c, t, body, fds)
            finally:
                for fd in fds:
                    os.close(fd)

    def serve(self, c: socket.socket, t: int, body: bytes, fds: List[int]) -> None:
        if t in (FrameType.PUT, FrameType.PUT_FD):
            name, _ = _wire.decode_put(body)
            data = b""
            if t == FrameType.PUT:
                while True:
                    dt, payload, _ = recv_frame_fds(c)
                    self.seen.append((_wire.type_name(dt or 0), 0))
                    if not payload:
                        break
                    data += payload
            else:
                while True:
                    b = os.read(fds[0], 1 if self.delay else 1 << 20)
                    if not b:
                        break
                    data += b
                    time.sleep(self.delay)
            self.blobs[name] = data
            c.sendall(_wire.encode_info(_info(name, len(data))))
        elif t in (FrameType.GET, FrameType.GET_TO_FD):
            name = _wire.decode_name_request(body)
            if name not in self.blobs:
                c.sendall(_wire.encode_error(1, f"{name!r}: not found"))
                return
            data = self.blobs[name]
            c.sendall(_wire.encode_info(_info(name, len(data))))
            if t == FrameType.GET:
                for off in range(0, len(data), 4096):
                    c.sendall(_wire.encode_data(data[off : off + 4096]))
                c.sendall(_wire.encode_empty(FrameType.END))
                return
            fd = fds[0]
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
            out = data if self.get_fail is None else self.get_fail
            step = 1 if self.delay else max(1, len(out))
            for off in range(0, len(out), step):
                if regular:
                    os.pwrite(fd, out[off : off + step], off)
                else:
                    write_all(fd, out[off : off + step], close=False)
                time.sleep(self.delay)
            if self.get_fail is not None:
                c.sendall(_wire.encode_error(7, f"get {name!r}: chunk 1 is corrupt"))
                return
            if regular:
                os.ftruncate(fd, len(data))
            c.sendall(_wire.encode_empty(FrameType.END))
        else:
            c.sendall(_wire.encode_error(3, f"unexpected {_wire.type_name(t)}"))


@pytest.fixture
def recorder(fake_daemon: Callable[[Callable[[socket.socket], None]], FakeDaemon]) -> Callable[[int], Recorder]:
    return lambda version: Recorder(fake_daemon, version)


@pytest.mark.parametrize("version", [5, 4, 2])
def test_frames_sent(recorder: Callable[[int], Recorder], tmp_path: Path, version: int) -> None:
    # The client never sends PUT_FILE or GET_FILE. To a daemon of version 5
    # it passes one descriptor with PUT_FD and GET_TO_FD; to an older one it
    # streams the bytes itself (PUT and DATA, GET), with the same results.
    rec = recorder(version)
    cl = omst.Client(rec.sock, timeout=10)
    data = pattern(100_000, 1)
    write(tmp_path / "src", data)
    cl.put_file("f", tmp_path / "src")
    assert rec.blobs["f"] == data
    write(tmp_path / "dst", b"old" * 100_000)
    cl.get_file("f", tmp_path / "dst")
    assert read(tmp_path / "dst") == data and leftovers(tmp_path) == []
    # put_fd from a pipe, get_to_fd into a pipe and into a regular file
    # longer than the blob (cut to its size).
    r, w = os.pipe()
    threading.Thread(target=write_all, args=(w, data[:5000])).start()
    cl.put_fd("p", r)
    os.close(r)
    assert rec.blobs["p"] == data[:5000]
    r, w = os.pipe()
    got: List[bytes] = []
    t = threading.Thread(target=read_all, args=(r, got))
    t.start()
    cl.get_to_fd("p", w)
    os.close(w)
    t.join(10)
    os.close(r)
    assert got == [data[:5000]]
    with open(tmp_path / "long", "wb") as f:
        f.write(b"z" * 200_000)
        cl.get_to_fd("p", f)
    assert read(tmp_path / "long") == data[:5000]
    cl.close()
    types = [t for t, _ in rec.seen]
    assert "PUT_FILE" not in types and "GET_FILE" not in types
    if version >= 5:
        assert rec.seen == [("PUT_FD", 1), ("GET_TO_FD", 1), ("PUT_FD", 1), ("GET_TO_FD", 1), ("GET_TO_FD", 1)]
    else:
        assert [t for t in types if t != "DATA"] == ["PUT", "GET", "PUT", "GET", "GET"]
        assert all(n == 0 for _, n in rec.seen)


@pytest.mark.parametrize("version", [5, 2])
def test_failure_after_info_leaves_destination(
    recorder: Callable[[int], Recorder], tmp_path: Path, version: int
) -> None:
    # The daemon fails after it wrote part of the blob: the destination is
    # unchanged and the temporary file gone.
    rec = recorder(version)
    rec.blobs["b"] = pattern(50_000)
    rec.get_fail = b"partial bytes"
    if version < 5:
        # A version 2 daemon fails the stream: INFO, DATA, then ERROR.
        def serve(c: socket.socket, t: int, body: bytes, fds: List[int]) -> None:
            c.sendall(_wire.encode_info(_info("b", 50_000)) + _wire.encode_data(b"partial bytes"))
            c.sendall(_wire.encode_error(7, "get 'b': chunk 1 is corrupt"))

        rec.serve = serve  # type: ignore[method-assign]
    cl = omst.Client(rec.sock, timeout=10)
    write(tmp_path / "keep", b"old bytes")
    with pytest.raises(omst.Corrupt, match="corrupt"):
        cl.get_file("b", tmp_path / "keep")
    assert read(tmp_path / "keep") == b"old bytes" and leftovers(tmp_path) == []
    with pytest.raises(omst.Corrupt):
        cl.get_file("b", tmp_path / "new")
    assert sorted(os.listdir(tmp_path)) == ["keep"]
    cl.close()


def test_daemon_errors_name_the_file(fake_daemon: Callable[..., FakeDaemon], tmp_path: Path) -> None:
    # The daemon knows no path: the client puts it into the message.
    def handler(c: socket.socket) -> None:
        recv_frame_fds(c)
        c.sendall(_wire.encode_hello(5))
        while True:
            t, _, fds = recv_frame_fds(c)
            for fd in fds:
                os.close(fd)
            if t is None:
                return
            c.sendall(_wire.encode_error(4, "put \"x\": the caller's file: file changed while it was read"))

    cl = omst.Client(fake_daemon(handler).sock, timeout=5)
    write(tmp_path / "f", b"f")
    with pytest.raises(omst.OmstIOError) as ei:
        cl.put_file("x", tmp_path / "f")
    assert str(ei.value) == f"put \"x\": {tmp_path / 'f'}: file changed while it was read"
    cl.close()


@pytest.mark.parametrize("what", ["get", "put"])
def test_waits_while_the_daemon_progresses(recorder: Callable[[int], Recorder], tmp_path: Path, what: str) -> None:
    # A reply that comes only when the whole file has been moved may take
    # longer than the client's timeout, as long as the file moves (the
    # daemon's offset in it, or its size); a daemon that stops is a Timeout.
    rec = recorder(5)
    rec.blobs["b"] = b"0123456789"
    rec.delay = 0.1  # one byte each 0.1 s: 1 s in all, against a 0.4 s timeout
    cl = omst.Client(rec.sock, timeout=0.4)
    write(tmp_path / "src", b"abcdefghij")
    if what == "get":
        assert cl.get_file("b", tmp_path / "out").size == 10
        assert read(tmp_path / "out") == b"0123456789"
    else:
        assert cl.put_file("p", tmp_path / "src") == "bafyfake"
        assert rec.blobs["p"] == b"abcdefghij"
    rec.delay = 1.5  # stalls
    start = time.monotonic()
    with pytest.raises(omst.Timeout, match="no progress"):
        if what == "get":
            cl.get_file("b", tmp_path / "out2")
        else:
            cl.put_file("p", tmp_path / "src")
    assert time.monotonic() - start < 1.4
    assert not (tmp_path / "out2").exists() and leftovers(tmp_path) == []
    cl.close()
