"""omst._localfile: the client opens and creates the files of put_file and
get_file itself, following symbolic links only where Linux's
fs.protected_symlinks = 1 would (whatever the host's setting), race-free on
the last component; a get's destination is a temporary file renamed onto
it, or a FIFO or device written in place. The Go package pkg/localfile's
tests, ported."""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
import warnings
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

import omst
from omst import _localfile

ATTACKER = 54321


def fork() -> int:
    """os.fork, quiet about the threads pytest's process may have (Python
    3.12 warns): the child uses only what it had before (no import, no
    lock another thread could hold) and leaves with os._exit."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


@pytest.fixture
def d(tmp_path: Path) -> bytes:
    """The test's directory, without links, as bytes."""
    return os.fsencode(os.path.realpath(tmp_path))


def write(path: bytes, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def read(path: bytes) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def write_fd(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def test_resolve(d: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    os.makedirs(d + b"/a/b")
    write(d + b"/a/b/f", b"x")
    os.symlink(b"a/b", d + b"/lb")  # relative link to a directory
    os.symlink(d + b"/a/b/f", d + b"/lf")  # absolute link to a file
    os.symlink(b"lf", d + b"/llf")  # link to a link
    os.symlink(b"missing", d + b"/dangling")
    os.symlink(b"loop2", d + b"/loop1")
    os.symlink(b"loop1", d + b"/loop2")
    os.symlink(b"../b/../../a/b/f", d + b"/a/b/dotdot")  # ".." after a link
    for path, want in [
        (b"/a/b/f", b"/a/b/f"),
        (b"/lb/f", b"/a/b/f"),
        (b"/lf", b"/a/b/f"),
        (b"/llf", b"/a/b/f"),
        (b"/lb/../b/./f", b"/a/b/f"),
        (b"//a///b/f", b"/a/b/f"),
        (b"/lb/new", b"/a/b/new"),  # the last component need not exist
        (b"/dangling", b"/missing"),
        (b"/a/b/dotdot", b"/a/b/f"),
    ]:
        assert _localfile.resolve(d + path) == (d + want, False), path
    for path, code in [
        (d + b"/loop1", errno.ELOOP),
        (d + b"/nodir/f", errno.ENOENT),
        (d + b"/a/b/f/g", errno.ENOTDIR),
        (b"", errno.ENOENT),
    ]:
        with pytest.raises(omst.OmstIOError) as ei:
            _localfile.resolve(path)
        assert ei.value.errno == code, (path, ei.value)
        assert os.fsdecode(path) in str(ei.value)
    # Relative paths are taken against the working directory; str works too.
    monkeypatch.chdir(d + b"/a")
    assert _localfile.resolve("b/f") == (d + b"/a/b/f", False)


def _st(mode: int, uid: int) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


def test_may_follow() -> None:
    me, other, owner = 1000, 2000, 3000
    sticky_ww = _st(stat.S_IFDIR | stat.S_ISVTX | 0o777, owner)
    plain_ww = _st(stat.S_IFDIR | 0o777, owner)
    sticky_priv = _st(stat.S_IFDIR | stat.S_ISVTX | 0o755, owner)
    for link, directory, want in [
        (me, sticky_ww, True),  # one's own link
        (owner, sticky_ww, True),  # the directory owner's link
        (other, sticky_ww, False),  # a link planted in /tmp
        (other, plain_ww, True),  # not sticky: the kernel follows
        (other, sticky_priv, True),
    ]:
        assert _localfile.may_follow(me, _st(stat.S_IFLNK | 0o777, link), directory) == want, (link, directory)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to plant another user's links")


@pytest.fixture
def planted(d: bytes) -> Tuple[bytes, bytes]:
    """A sticky world-writable directory (like /tmp) owned by root, and a
    victim file beside it."""
    tmp = d + b"/tmp"
    os.mkdir(tmp)
    os.chmod(tmp, 0o1777)
    victim = d + b"/victim"
    write(victim, b"precious")
    return tmp, victim


def plant(path: bytes, target: bytes) -> bytes:
    os.symlink(target, path)
    os.lchown(path, ATTACKER, ATTACKER)
    return path


@needs_root
def test_planted_link(planted: Tuple[bytes, bytes]) -> None:
    # A link another user planted in a sticky world-writable directory is
    # followed neither to write nor to read, not as the last component and
    # not as a directory on the way; a link of one's own there is.
    tmp, victim = planted
    out = plant(tmp + b"/out", victim)
    evil = plant(tmp + b"/evil", os.path.dirname(victim))
    with pytest.raises(omst.UnsafePath) as ei:
        _localfile.create(out, 5)
    assert ei.value.errno == errno.EACCES and "symbolic link not followed" in str(ei.value)
    with pytest.raises(omst.UnsafePath):
        _localfile.create(evil + b"/victim", 5)
    with pytest.raises(omst.UnsafePath):
        _localfile.open_read(out, 5)
    with pytest.raises(omst.UnsafePath):
        _localfile.open_read(evil + b"/victim", 5)
    assert read(victim) == b"precious"
    assert os.path.islink(out)
    # One's own link in the same directory is followed.
    mine = tmp + b"/mine"
    os.symlink(victim, mine)
    dest = _localfile.create(mine, 5)
    write_fd(dest.fd, b"new")
    dest.commit()
    assert read(victim) == b"new" and os.path.islink(mine)
    # So is one of the directory's owner.
    os.chown(tmp, ATTACKER, ATTACKER)
    fd = _localfile.open_read(out, 5)
    assert os.read(fd, 10) == b"new"
    os.close(fd)


@needs_root
def test_planted_fifo(planted: Tuple[bytes, bytes]) -> None:
    # A FIFO another user made in a sticky world-writable directory is not
    # written into (it would not even be opened: no wait for a reader).
    tmp, _ = planted
    p = tmp + b"/out"
    os.mkfifo(p, 0o666)
    os.chown(p, ATTACKER, ATTACKER)
    start = time.monotonic()
    with pytest.raises(omst.UnsafePath) as ei:
        _localfile.create(p, 5)
    assert "FIFO not written" in str(ei.value) and time.monotonic() - start < 2


def tempfiles(d: bytes) -> List[bytes]:
    return [n for n in os.listdir(d) if b".omst-" in n]


def test_create_regular(d: bytes) -> None:
    old = os.umask(0o027)
    try:
        # A new file.
        p = d + b"/new"
        dest = _localfile.create(p, 5)
        assert dest.regular and dest.path == p
        assert not os.path.exists(p), "destination visible before commit"
        assert tempfiles(d) and tempfiles(d)[0].startswith(b".new.omst-")
        write_fd(dest.fd, b"hello")
        dest.commit()
        assert stat.S_IMODE(os.stat(p).st_mode) == 0o640, "0644 less the umask 027"
        assert read(p) == b"hello" and not tempfiles(d)
    finally:
        os.umask(old)
    # An existing one is replaced atomically (a new inode: a reader of the
    # old one keeps reading the old bytes).
    with open(p, "rb") as r:
        dest = _localfile.create(p, 5)
        write_fd(dest.fd, b"world!")
        assert read(p) == b"hello", "destination changed before commit"
        dest.commit()
        assert read(p) == b"world!"
        assert r.read() == b"hello"
    # The replacement keeps the replaced file's permission bits: a private
    # file stays private, one wider than the umask keeps them.
    old = os.umask(0o027)
    try:
        for perm in (0o600, 0o664):
            os.chmod(p, perm)
            dest = _localfile.create(p, 5)
            assert stat.S_IMODE(os.fstat(dest.fd).st_mode) == perm
            write_fd(dest.fd, b"world!")
            dest.commit()
            assert stat.S_IMODE(os.stat(p).st_mode) == perm
    finally:
        os.umask(old)
    # And its group where the caller may give it (root: any; else a
    # supplementary group), and as root its owner.
    other = 4242 if os.geteuid() == 0 else next((g for g in os.getgroups() if g != os.getegid()), None)
    if other is not None:
        owner = 4343 if os.geteuid() == 0 else os.geteuid()
        os.chown(p, owner, other)
        os.chmod(p, 0o640)
        dest = _localfile.create(p, 5)
        write_fd(dest.fd, b"world!")
        dest.commit()
        st = os.stat(p)
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o640, owner, other)
    # Where the group cannot be kept, its bits are cut to the others'.
    assert _localfile.kept_mode(0o100640, True) == 0o640
    assert _localfile.kept_mode(0o4755, True) == 0o755
    assert _localfile.kept_mode(0o640, False) == 0o600
    assert _localfile.kept_mode(0o674, False) == 0o644
    assert _localfile.kept_mode(0o661, False) == 0o601
    # Through a link: the target is replaced, the link stays.
    os.symlink(b"new", d + b"/link")
    dest = _localfile.create(d + b"/link", 5)
    assert dest.path == p
    write_fd(dest.fd, b"via link")
    dest.commit()
    assert read(p) == b"via link" and os.path.islink(d + b"/link")
    # abort leaves the destination and no temporary file; then commit and
    # abort do nothing.
    dest = _localfile.create(p, 5)
    write_fd(dest.fd, b"partial")
    dest.abort()
    dest.abort()
    dest.commit()
    assert read(p) == b"via link" and not tempfiles(d)
    # A directory is refused.
    with pytest.raises(omst.OmstIOError) as ei:
        _localfile.create(d, 5)
    assert ei.value.errno == errno.EISDIR
    with pytest.raises(omst.OmstIOError) as ei:
        _localfile.create(b"/", 5)
    assert ei.value.errno == errno.EISDIR
    # A directory that may not be written: the error names the destination.
    with pytest.raises(omst.OmstIOError) as ei:
        _localfile.create(d + b"/nodir/x", 5, op="get 'n'")
    assert ei.value.errno == errno.ENOENT and str(ei.value).startswith(f"get 'n' {os.fsdecode(d)}/nodir/x")


def test_commit_rename_fails(d: bytes) -> None:
    # The destination became a directory meanwhile: commit fails, the
    # temporary file is removed.
    p = d + b"/x"
    dest = _localfile.create(p, 5)
    os.mkdir(p)
    os.mkdir(p + b"/sub")
    with pytest.raises(omst.OmstIOError, match="rename into place"):
        dest.commit()
    assert os.path.isdir(p) and not tempfiles(d)


def test_create_in_place(d: bytes) -> None:
    dest = _localfile.create("/dev/null", 5)
    assert not dest.regular
    write_fd(dest.fd, b"gone")
    dest.commit()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    # A FIFO waits for its reader ...
    fifo = d + b"/fifo"
    os.mkfifo(fifo, 0o600)
    got: List[bytes] = []
    t = threading.Thread(target=lambda: got.append(read(fifo)))
    t.start()
    dest = _localfile.create(fifo, 5)
    assert not dest.regular
    write_fd(dest.fd, b"through")
    dest.commit()
    t.join(5)
    assert got == [b"through"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and not tempfiles(d)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("side", ["create", "open_read"])
def test_fifo_wait_bounded(d: bytes, side: str) -> None:
    # ... but no longer than the timeout, and the blocked open is released
    # (no thread stays blocked, no descriptor is left).
    fifo = d + b"/fifo"
    os.mkfifo(fifo, 0o600)
    before = open_fds()
    threads = threading.active_count()
    start = time.monotonic()
    with pytest.raises(omst.Timeout) as ei:
        if side == "create":
            _localfile.create(fifo, 0.2)
        else:
            _localfile.open_read(fifo, 0.2)
    assert time.monotonic() - start < 3
    assert ("no reader" if side == "create" else "no writer") in str(ei.value)
    deadline = time.monotonic() + 5
    while (threading.active_count() > threads or open_fds() > before) and time.monotonic() < deadline:
        time.sleep(0.01)
    # (<=: a thread of an earlier test may end meanwhile)
    assert threading.active_count() <= threads and open_fds() == before


@pytest.mark.parametrize("side", ["create", "open_read"])
def test_fifo_released_before_its_open(d: bytes, side: str) -> None:
    # A wait that ends before the thread's open has begun (timeout 0: at
    # once; under load, any timeout shorter than the thread's start): the
    # release must still end that open once it blocks, not open the other
    # end once, too early, and leave the thread blocked for good. Repeated,
    # since which comes first is the scheduler's choice.
    fifo = d + b"/fifo"
    os.mkfifo(fifo, 0o600)
    before = open_fds()
    threads = threading.active_count()
    for _ in range(20):
        start = time.monotonic()
        with pytest.raises(omst.Timeout):
            if side == "create":
                _localfile.create(fifo, 0)
            else:
                _localfile.open_read(fifo, 0)
        assert time.monotonic() - start < 1.5
    deadline = time.monotonic() + 5
    while (threading.active_count() > threads or open_fds() > before) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert threading.active_count() <= threads and open_fds() == before


def test_open_read(d: bytes) -> None:
    write(d + b"/f", b"data")
    os.symlink(b"f", d + b"/l")
    fd = _localfile.open_read(d + b"/l", 5)
    try:
        assert os.read(fd, 10) == b"data"
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)
    for path, code in [(d, errno.EISDIR), (b"/", errno.EISDIR), (d + b"/missing", errno.ENOENT)]:
        with pytest.raises(omst.OmstIOError) as ei:
            _localfile.open_read(path, 5)
        assert ei.value.errno == code


def test_open_read_unreadable(d: bytes) -> None:
    # The caller's rights, not anybody else's: a file it may not read is
    # refused by the kernel (as root, drop to another uid to see it).
    write(d + b"/secret", b"s")
    os.chmod(d + b"/secret", 0o600)
    if os.geteuid() != 0:
        with pytest.raises(omst.OmstIOError) as ei:
            _localfile.open_read(d + b"/secret", 5)
        assert ei.value.errno == errno.EACCES
        return
    r, w = os.pipe()
    pid = fork()
    if pid == 0:  # the child: uid 65534, then try
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                _localfile.open_read(d + b"/secret", 5)
                code = 2
            except omst.OmstIOError as e:
                os.write(w, str(e.errno).encode())
                code = 0
        finally:
            os._exit(code)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    got = os.read(r, 100)
    os.close(r)
    assert os.waitstatus_to_exitcode(status) == 0 and got == str(errno.EACCES).encode()


def test_check_fd(d: bytes) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _localfile._check_fd(fd, d, "open")
        with pytest.raises(omst.UnsafePath, match="the path changed while it was opened"):
            _localfile._check_fd(fd, d + b"x", "open")
    finally:
        os.close(fd)


@pytest.fixture
def pipe() -> Iterator[Tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def test_magic_links(d: bytes, pipe: Tuple[int, int]) -> None:
    # /dev/stdin and /dev/fd/N name open files through links in /proc: they
    # are opened as the kernel resolves them (this process's files).
    r, w = pipe
    real, magic = _localfile.resolve(f"/dev/fd/{r}")
    assert magic and real == b"/proc/self/fd/%d" % r
    write_fd(w, b"through the pipe")
    os.close(w)
    fd = _localfile.open_read(f"/dev/fd/{r}", 5)
    assert os.read(fd, 100) == b"through the pipe"
    os.close(fd)
    out = d + b"/out"
    with open(out, "wb") as f:
        dest = _localfile.create(f"/dev/fd/{f.fileno()}", 5)
        assert not dest.regular, "a file behind /dev/fd would be replaced, not written"
        write_fd(dest.fd, b"in place")
        dest.commit()
    assert read(out) == b"in place" and not tempfiles(d)
