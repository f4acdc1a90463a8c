"""Open the files of put_file and get_file with the caller's own rights.

The client opens (or creates) the file itself and passes the descriptor to
the daemon (PUT_FD, GET_TO_FD: docs/rpcbridge.md section 6.12); the daemon
never learns a path. These are the rules of the Go package pkg/localfile,
ported:

* A path is resolved here, component by component (``lstat``). A symbolic
  link is followed only where Linux's ``fs.protected_symlinks = 1`` would
  follow it, whatever that setting is on the host: a link in a sticky,
  world-writable directory (such as /tmp) only if the caller (effective
  uid) or the directory's owner owns it. Every component is checked, not
  only the last. At most 40 links are followed (ELOOP). ``..`` is lexical
  on the part already resolved (which has no links). The last component
  may be missing (a get creates it).
* A link in /proc (``/dev/stdin -> /proc/self/fd/0``: the target is an open
  file, not a path) is not resolved: the path through it is opened as the
  kernel resolves it. procfs is recognised by its path (/proc and below):
  ``os.statvfs`` does not give a file system's type.
* The resolved directory is opened with ``O_PATH | O_DIRECTORY |
  O_NOFOLLOW``, checked through ``/proc/self/fd`` to be the directory that
  was resolved (a link swapped in meanwhile fails the call), and the file
  is opened, created, renamed and removed relative to it with
  ``O_NOFOLLOW``.
* Read (put): a directory is refused (EISDIR). A FIFO's open waits for a
  writer, at most ``timeout`` seconds.
* Write (get): an existing directory is refused; an existing FIFO or device
  is opened for writing in place (a FIFO waits for a reader, at most
  ``timeout``), except a FIFO of another user in a sticky world-writable
  directory (refused: the rule of ``fs.protected_fifos``); a regular file
  or a missing one gets a new temporary file ``.BASE.omst-RANDOM`` beside
  it (the replaced file's permission bits, group where the caller is in it and, as root, owner: kept_mode; new, 0644 less the umask), renamed onto it by :meth:`Dest.commit`
  and removed by :meth:`Dest.abort`, so the destination is unchanged on
  error.

Errors are :class:`~omst.errors.OmstIOError` (with ``errno``) naming the
path, :class:`~omst.errors.UnsafePath` for a refused link or FIFO, and
:class:`~omst.errors.Timeout` for a FIFO whose other end never came.
"""

from __future__ import annotations

import errno as _errno
import os
import stat
import threading
import time
from typing import Dict, List, Optional, Tuple

from .errors import OmstIOError, Timeout, UnsafePath
from .names import PathLike

__all__ = ["MAX_LINKS", "may_follow", "resolve", "open_read", "create", "Dest"]

#: Links one resolution follows at most (Linux's limit).
MAX_LINKS = 40

# O_PATH opens a directory only to name it in *at calls (no read right
# needed); where the platform lacks it, O_RDONLY does the same with the
# read right.
_O_PATH = getattr(os, "O_PATH", 0) or os.O_RDONLY
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_PROC = b"/proc"


def may_follow(follower: int, link: os.stat_result, directory: os.stat_result) -> bool:
    """Whether a process of effective uid follower may follow the link whose
    lstat is link, found in the directory whose stat is directory: true
    unless the directory is sticky and world-writable and neither the
    follower nor the directory's owner owns the link (Linux's
    fs.protected_symlinks = 1; the same rule protects FIFOs,
    fs.protected_fifos)."""
    sticky = directory.st_mode & stat.S_ISVTX != 0
    world_writable = directory.st_mode & 0o002 != 0
    if not (sticky and world_writable):
        return True
    return link.st_uid == follower or link.st_uid == directory.st_uid


def _show(path: bytes) -> str:
    return os.fsdecode(path)


def _strerror(e: OSError) -> str:
    if e.errno:
        return e.strerror or os.strerror(e.errno)
    return str(e)


def _io_error(op: str, path: bytes, e: OSError, where: Optional[bytes] = None) -> OmstIOError:
    """op PATH[: WHERE]: strerror, with e's errno."""
    detail = _strerror(e)
    if where is not None and where != path:
        detail = f"{_show(where)}: {detail}"
    return OmstIOError(f"{op} {_show(path)}: {detail}", errno=e.errno or 0)


def _errno_error(op: str, path: bytes, code: int, where: Optional[bytes] = None) -> OmstIOError:
    return _io_error(op, path, OSError(code, os.strerror(code)), where)


def _is_last(rest: List[bytes]) -> bool:
    """Whether rest (the components still to resolve) names nothing more."""
    return all(c in (b"", b".") for c in rest)


def _on_procfs(directory: bytes) -> bool:
    return directory == _PROC or directory.startswith(_PROC + b"/")


def resolve(path: PathLike, uid: Optional[int] = None, op: str = "resolve") -> Tuple[bytes, bool]:
    """Return (the absolute path that path names without symbolic links,
    magic). Each link on the way is followed if :func:`may_follow` allows it
    for uid (default: this process's effective uid), else UnsafePath is
    raised. A relative path is taken against the working directory. Every
    component but the last must exist; the last need not (the result then
    names where it would be created, after following a dangling link if the
    last component is one).

    magic is True when the path goes through a link in /proc: the result is
    then the path up to and through that link (cleaned lexically), for the
    caller to let the kernel open it.

    Raises:
        OmstIOError: a component is missing (ENOENT), not a directory
            (ENOTDIR), or too many links (ELOOP); errors start with op.
        UnsafePath: a link that may not be followed.
    """
    raw = os.fsencode(path)
    if uid is None:
        uid = os.geteuid()
    if raw == b"":
        raise _errno_error(op, raw, _errno.ENOENT)
    if b"\0" in raw:
        raise OmstIOError(f"{op} {raw!r}: the path contains a NUL byte", errno=_errno.EINVAL)
    full = raw if raw.startswith(b"/") else os.getcwdb() + b"/" + raw
    rest = full.split(b"/")
    rest.reverse()  # a stack: the next component is rest[-1]
    cur = b"/"
    links = 0
    while rest:
        c = rest.pop()
        if c in (b"", b"."):
            continue
        if c == b"..":
            cur = os.path.dirname(cur)  # cur has no links: ".." is lexical
            continue
        nxt = os.path.join(cur, c)
        try:
            st = os.lstat(nxt)
        except OSError as e:
            if e.errno == _errno.ENOENT and _is_last(rest):
                return nxt, False
            raise _io_error(op, raw, e, nxt) from None
        if not stat.S_ISLNK(st.st_mode):
            if not _is_last(rest) and not stat.S_ISDIR(st.st_mode):
                raise _errno_error(op, raw, _errno.ENOTDIR, nxt)
            cur = nxt
            continue
        links += 1
        if links > MAX_LINKS:
            raise _errno_error(op, raw, _errno.ELOOP)
        if _on_procfs(cur):
            rest.reverse()
            return os.path.normpath(b"/".join([nxt, *rest])), True
        try:
            dst = os.stat(cur)
        except OSError as e:
            raise _io_error(op, raw, e, cur) from None
        if not may_follow(uid, st, dst):
            raise UnsafePath(
                f"{op} {_show(raw)}: symbolic link not followed: {_show(nxt)} (owner uid {st.st_uid}) is in "
                f"{_show(cur)} (uid {dst.st_uid}), a sticky world-writable directory, and owned by another user",
                errno=_errno.EACCES,
            )
        try:
            target = os.readlink(nxt)
        except OSError as e:
            raise _io_error(op, raw, e, nxt) from None
        if target.startswith(b"/"):
            cur = b"/"
        parts = target.split(b"/")
        parts.reverse()
        rest.extend(parts)
    return cur, False


def _check_fd(fd: int, path: bytes, op: str) -> None:
    """Where /proc shows it, check that the open fd is the file at path (no
    link was swapped into the path since it was resolved)."""
    try:
        got = os.readlink(b"/proc/self/fd/%d" % fd)
    except OSError:
        return  # no /proc: nothing to check against
    if got != path:
        raise UnsafePath(f"{op} {_show(path)}: the path changed while it was opened: it is now {_show(got)}")


def _open_dir(directory: bytes, op: str, shown: bytes) -> int:
    """Open directory (a path without links, from resolve) for the *at
    calls, and check that it is the directory that was resolved."""
    try:
        fd = os.open(directory, _O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise _io_error(op, shown, e, directory) from None
    try:
        _check_fd(fd, directory, op)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_at(
    dfd: int, name: bytes, flags: int, fifo: bool, timeout: Optional[float], op: str, shown: bytes, follow: bool = False
) -> int:
    """Open name in the directory dfd with flags (O_RDONLY or O_WRONLY),
    never following a link unless follow. For a FIFO (fifo true) the open,
    which blocks until the other end is opened, runs in a thread; if it
    has not returned within timeout seconds (or the wait is interrupted),
    the FIFO's other end is opened for a moment (non-blocking) to release
    it, and the call raises Timeout (or the interruption)."""
    flags |= os.O_CLOEXEC | _O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    if not fifo or timeout is None:
        try:
            return os.open(name, flags, dir_fd=dfd)
        except OSError as e:
            raise _io_error(op, shown, e) from None
    # The thread needs its own descriptor of the directory: the caller's
    # is closed when this returns.
    own = os.dup(dfd)
    result: Dict[str, object] = {}

    def run() -> None:
        try:
            result["fd"] = os.open(name, flags, dir_fd=own)
        except OSError as e:
            result["err"] = e

    t = threading.Thread(target=run, name="omst-fifo-open", daemon=True)
    t.start()
    alive = True
    try:
        t.join(timeout)
        alive = t.is_alive()
    finally:
        if alive:  # timed out, or interrupted: t and own are the reaper's now
            _release_fifo(t, own, name, flags, result)
    if alive:
        reading = flags & os.O_ACCMODE == os.O_RDONLY
        raise Timeout(f"{op} {_show(shown)}: no {'writer' if reading else 'reader'} opened the FIFO within {timeout} s")
    os.close(own)
    err = result.get("err")
    if isinstance(err, OSError):
        raise _io_error(op, shown, err) from None
    fd = result["fd"]
    assert isinstance(fd, int)
    return fd


def _release_fifo(t: threading.Thread, own: int, name: bytes, flags: int, result: Dict[str, object]) -> None:
    """End the blocked open of thread t: open the FIFO's other end for a
    moment, again every 10 ms until t has returned (at most 2 s), and close
    what t opened, and own; a thread does that if t has not returned by
    then."""
    other = os.O_RDONLY if flags & os.O_ACCMODE == os.O_WRONLY else os.O_WRONLY

    def reap() -> None:
        t.join()
        fd = result.get("fd")
        if isinstance(fd, int):
            os.close(fd)
        os.close(own)

    # t's open may not have begun yet (the wait was shorter than the
    # thread's start, as under load): an other end opened and closed before
    # it blocks releases nothing (a writer's end fails with ENXIO while no
    # reader waits; a reader's end comes and goes unseen). So once more
    # until it has returned. Released, the open returns at once: its end is
    # closed before returning, so that the caller's next open of the FIFO
    # never meets it. Only an open still blocked after 2 s is left to a
    # reaper.
    deadline = time.monotonic() + 2.0
    while True:
        try:
            fd = os.open(name, other | os.O_NONBLOCK | os.O_CLOEXEC | (flags & os.O_NOFOLLOW), dir_fd=own)
            os.close(fd)
        except OSError:
            pass
        t.join(0.01)
        if not t.is_alive():
            reap()
            return
        if time.monotonic() >= deadline:
            break
    threading.Thread(target=reap, name="omst-fifo-reap", daemon=True).start()


def open_read(path: PathLike, timeout: Optional[float], op: str = "open") -> int:
    """Open the file path names for reading, with this process's rights,
    following links as :func:`resolve` does; return the descriptor
    (close-on-exec; the caller closes it). A directory is refused (EISDIR).
    A FIFO's open waits for a writer, at most timeout seconds (None: no
    bound). Errors start with op and name path."""
    raw = os.fsencode(path)
    real, magic = resolve(raw, op=op)
    if magic:
        return _open_magic(raw, real, os.O_RDONLY, timeout, op)
    directory, base = os.path.split(real)
    if base == b"":  # "/"
        raise _errno_error(op, raw, _errno.EISDIR)
    dfd = _open_dir(directory, op, raw)
    try:
        try:
            st = os.stat(base, dir_fd=dfd, follow_symlinks=False)
        except OSError as e:
            raise _io_error(op, raw, e) from None
        if stat.S_ISDIR(st.st_mode):
            raise _errno_error(op, raw, _errno.EISDIR)
        return _open_at(dfd, base, os.O_RDONLY, stat.S_ISFIFO(st.st_mode), timeout, op, raw)
    finally:
        os.close(dfd)


def _open_magic(path: bytes, real: bytes, flags: int, timeout: Optional[float], op: str) -> int:
    """Open real, a path through a link in /proc, as the kernel resolves it
    (its own rules apply there); a directory is refused, a FIFO's open is
    bounded by timeout."""
    try:
        st = os.stat(real)
    except OSError as e:
        raise _io_error(op, path, e, real) from None
    if stat.S_ISDIR(st.st_mode):
        raise _errno_error(op, path, _errno.EISDIR)
    directory, base = os.path.split(real)
    try:
        dfd = os.open(directory or b"/", _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise _io_error(op, path, e, directory) from None
    try:
        # Following: the last component is the magic link itself.
        return _open_at(dfd, base, flags, stat.S_ISFIFO(st.st_mode), timeout, op, path, follow=True)
    finally:
        os.close(dfd)


def kept_mode(old: int, same_group: bool) -> int:
    """The permission bits of a file that replaces one of mode old: old's
    (not its set-id or sticky bits); where the new file could not be given
    old's group (same_group False: the caller is not in it), the group's
    bits cut to the others' (the new group's users were others of the old
    file). The Go client's localfile.KeptMode."""
    m = old & 0o777
    if not same_group:
        m = m & ~0o070 | m & ((m & 0o007) << 3)
    return m


def _keep_owner(fd: int, old: os.stat_result) -> None:
    """Give the new file fd the owner (as root), group (where the caller is
    in it) and permission bits (kept_mode) of the file it replaces."""
    now = os.fstat(fd)
    if now.st_uid != old.st_uid and os.geteuid() == 0:
        try:
            os.fchown(fd, old.st_uid, -1)
        except OSError:
            pass  # root squashed on NFS: the caller's, with the old owner's bits
    same_group = now.st_gid == old.st_gid
    if not same_group:
        try:
            os.fchown(fd, -1, old.st_gid)
            same_group = True
        except OSError:
            pass
    os.fchmod(fd, kept_mode(old.st_mode, same_group))


class Dest:
    """The destination of a get (see :func:`create`): write the blob into
    ``fd``, then :meth:`commit` it (or :meth:`abort`).

    Attributes:
        fd: receives the blob's bytes: a new temporary file (regular True),
            or the existing FIFO or device itself, open for writing.
        regular: fd is a temporary file that commit renames onto path.
        path: the destination, resolved (links followed, absolute).
    """

    def __init__(self, fd: int, regular: bool, path: bytes, dfd: int = -1, temp: bytes = b"", op: str = "") -> None:
        self.fd = fd
        self.regular = regular
        self.path = path
        self._dfd = dfd
        self._temp = temp
        self._op = op
        self._done = False

    def commit(self) -> None:
        """Make the bytes written to fd the destination's: for a temporary
        file, close it and rename it onto the destination (atomically
        replacing what was there); else close fd. On error the temporary
        file is removed. commit and abort may each be called more than
        once; only the first call of either acts.

        Raises:
            OmstIOError: closing or renaming failed (the destination is
                then unchanged).
        """
        if self._done:
            return
        self._done = True
        if not self.regular:
            try:
                os.close(self.fd)
            except OSError as e:
                raise _io_error(self._op + ": close", self.path, e) from None
            return
        try:
            try:
                os.close(self.fd)
            except OSError as e:
                self._unlink()
                raise _io_error(self._op + ": close", self.path, e) from None
            try:
                os.rename(self._temp, os.path.basename(self.path), src_dir_fd=self._dfd, dst_dir_fd=self._dfd)
            except OSError as e:
                self._unlink()
                raise _io_error(self._op + ": rename into place", self.path, e) from None
        finally:
            os.close(self._dfd)

    def abort(self) -> None:
        """Give up: close fd and remove the temporary file, leaving the
        destination as it was (a FIFO or device keeps what was written)."""
        if self._done:
            return
        self._done = True
        try:
            os.close(self.fd)
        except OSError:
            pass
        if self.regular:
            self._unlink()
            os.close(self._dfd)

    def _unlink(self) -> None:
        try:
            os.unlink(self._temp, dir_fd=self._dfd)
        except OSError:
            pass


def _temp_name(base: bytes) -> bytes:
    """A new name for the temporary file of a get of base: hidden, and
    saying whose it is (.BASE.omst-RANDOM)."""
    return b"." + base[:200] + b".omst-" + os.urandom(6).hex().encode()


def create(path: PathLike, timeout: Optional[float], op: str = "create") -> Dest:
    """Prepare path as the destination of a get, with this process's
    rights: a regular file, or a path where nothing exists yet, gets a new
    temporary file beside it (with the replaced file's permission bits, group where the caller is in it and, as root, owner; new, mode 0644 less the umask), renamed onto it by
    :meth:`Dest.commit`; a link is followed as :func:`resolve` does, and
    its target is replaced, not the link. An existing FIFO, device or
    socket is opened for writing in place (a FIFO waits for a reader, at
    most timeout seconds), except a FIFO of another user in a sticky
    world-writable directory (UnsafePath). A directory is refused (EISDIR).
    Errors start with op and name path."""
    raw = os.fsencode(path)
    real, magic = resolve(raw, op=op)
    if magic:
        # /dev/stdout and the like: the open file behind the link, written
        # in place.
        return Dest(_open_magic(raw, real, os.O_WRONLY, timeout, op), False, real, op=op)
    directory, base = os.path.split(real)
    if base == b"":  # "/"
        raise _errno_error(op, raw, _errno.EISDIR)
    dfd = _open_dir(directory, op, raw)
    try:
        try:
            st: Optional[os.stat_result] = os.stat(base, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise _io_error(op, raw, e) from None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise _errno_error(op, raw, _errno.EISDIR)
        if st is not None and not stat.S_ISREG(st.st_mode):
            # A FIFO, a device, a socket: written in place. A FIFO of
            # another user in a sticky world-writable directory is not
            # (the rule of fs.protected_fifos: it may be a trap).
            fifo = stat.S_ISFIFO(st.st_mode)
            if fifo:
                dst = os.fstat(dfd)
                if not may_follow(os.geteuid(), st, dst):
                    raise UnsafePath(
                        f"{op} {_show(raw)}: FIFO not written: it (uid {st.st_uid}) is in a sticky "
                        f"world-writable directory (uid {dst.st_uid}) and owned by another user",
                        errno=_errno.EACCES,
                    )
            fd = _open_at(dfd, base, os.O_WRONLY, fifo, timeout, op, raw)
            return Dest(fd, False, real, op=op)
        # A replaced file's permission bits are kept (created under the
        # umask, never more open than it, then set exactly), with its group
        # where the caller is in it (else the group's bits cut to the
        # others': kept_mode) and as root its owner.
        mode = stat.S_IMODE(st.st_mode) & 0o777 if st is not None else 0o644
        for _ in range(10):
            temp = _temp_name(base)
            try:
                fd = os.open(
                    temp,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC | _O_NOCTTY,
                    mode,
                    dir_fd=dfd,
                )
                if st is not None:
                    try:
                        _keep_owner(fd, st)
                    except OSError:
                        os.close(fd)
                        os.unlink(temp, dir_fd=dfd)
                        raise
            except FileExistsError:
                continue
            except OSError as e:
                # The temporary file is an internal: the error names the
                # destination.
                raise _io_error(op, raw, e) from None
            d = Dest(fd, True, real, dfd, temp, op)
            dfd = -1  # the Dest owns it now
            return d
        raise _errno_error(op, raw, _errno.EEXIST)
    finally:
        if dfd >= 0:
            os.close(dfd)
