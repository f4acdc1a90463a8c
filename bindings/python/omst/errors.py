"""Exceptions raised by the omst client.

Every exception the package raises on purpose is an :class:`OmstError`.
``code`` is the daemon's numeric error code (docs/rpcbridge.md section 7)
when the daemon reported the failure, or when the client detected a failure
of the same kind itself (an invalid name: 2, a size mismatch: 8, a client
timeout: 12). Failures only the client can see (no daemon, connection lost,
protocol violation, closed client) have ``code`` 0.

Exceptions survive pickling (so they cross ``multiprocessing`` boundaries
with their class, code and message).
"""

from __future__ import annotations

from typing import Any, Dict, Tuple, Type

__all__ = [
    "OmstError",
    "NotFound",
    "InvalidName",
    "BadRequest",
    "OmstIOError",
    "UnsafePath",
    "NoSpace",
    "Unreachable",
    "Corrupt",
    "SizeMismatch",
    "UnsupportedVersion",
    "InternalError",
    "Aborted",
    "Timeout",
    "Unavailable",
    "DaemonUnavailable",
    "ConnectionLost",
    "ProtocolError",
    "ClientClosed",
    "error_for_code",
]

# Protocol error codes (docs/rpcbridge.md section 7).
NOT_FOUND = 1
INVALID_NAME = 2
BAD_REQUEST = 3
IO = 4
NO_SPACE = 5
UNREACHABLE = 6
CORRUPT = 7
SIZE_MISMATCH = 8
UNSUPPORTED_VERSION = 9
INTERNAL = 10
ABORTED = 11
TIMEOUT = 12
UNAVAILABLE = 13
FORBIDDEN = 14

CODE_NAMES: Dict[int, str] = {
    NOT_FOUND: "NOT_FOUND",
    INVALID_NAME: "INVALID_NAME",
    BAD_REQUEST: "BAD_REQUEST",
    IO: "IO",
    NO_SPACE: "NO_SPACE",
    UNREACHABLE: "UNREACHABLE",
    CORRUPT: "CORRUPT",
    SIZE_MISMATCH: "SIZE_MISMATCH",
    UNSUPPORTED_VERSION: "UNSUPPORTED_VERSION",
    INTERNAL: "INTERNAL",
    ABORTED: "ABORTED",
    TIMEOUT: "TIMEOUT",
    UNAVAILABLE: "UNAVAILABLE",
    FORBIDDEN: "FORBIDDEN",
}


class OmstError(Exception):
    """Base class: a failed omst operation.

    Attributes:
        code: the protocol error code (0 for client-side failures).
        message: human-readable text (the daemon's message if it sent one).
    """

    default_code = 0

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = self.default_code if code is None else code

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code})"

    def __reduce__(self) -> Tuple[Type["OmstError"], Tuple[str, int]]:
        return (type(self), (self.message, self.code))

    @property
    def code_name(self) -> str:
        """The symbolic name of ``code`` (e.g. ``"NOT_FOUND"``)."""
        if self.code == 0:
            return "CLIENT"
        return CODE_NAMES.get(self.code, f"CODE_{self.code}")


class NotFound(OmstError, LookupError):
    """No blob has that name (code 1)."""

    default_code = NOT_FOUND


class InvalidName(OmstError, ValueError):
    """A name or prefix breaks the naming rules (code 2)."""

    default_code = INVALID_NAME


class BadRequest(OmstError, ValueError):
    """An invalid field, e.g. a chunk size or path (code 3)."""

    default_code = BAD_REQUEST


class OmstIOError(OmstError):
    """A file system or stream IO error (code 4): in the daemon, or in the
    client, which opens and creates the files of put_file and get_file
    itself and raises this when it cannot (the message names the path); also
    raised by put when the file object it reads changes meanwhile.

    Attributes:
        errno: the error number of the failed system call when the client
            saw it (e.g. ``errno.ENOENT``, ``errno.EACCES``), else 0.
    """

    default_code = IO

    def __init__(self, message: str, code: int | None = None, errno: int = 0) -> None:
        super().__init__(message, code)
        self.errno = errno

    def __reduce__(self) -> Tuple[Type["OmstError"], Tuple[Any, ...]]:
        return (type(self), (self.message, self.code, self.errno))


class UnsafePath(OmstIOError):
    """put_file or get_file refused a path whose use could be a trap (code 4,
    errno EACCES): a symbolic link in a sticky world-writable directory
    (such as /tmp) that neither the caller nor the directory's owner owns,
    on any component of the path (the rule of Linux's
    ``fs.protected_symlinks``, applied whatever the host's setting); a FIFO
    of another user in such a directory as a get's destination (the rule of
    ``fs.protected_fifos``); or a directory of the path replaced while it
    was opened (errno 0)."""


class NoSpace(OmstError):
    """The daemon's disk or cache is full (code 5)."""

    default_code = NO_SPACE


class Unreachable(OmstError):
    """A peer needed for the request cannot be reached (code 6)."""

    default_code = UNREACHABLE


class Corrupt(OmstError):
    """Content or manifest does not match its hash (code 7)."""

    default_code = CORRUPT


class SizeMismatch(OmstError, ValueError):
    """The blob's size differs from the expected one (code 8)."""

    default_code = SIZE_MISMATCH


class UnsupportedVersion(OmstError):
    """The daemon does not speak a protocol version the client offered (code 9)."""

    default_code = UNSUPPORTED_VERSION


class InternalError(OmstError):
    """A daemon bug (code 10)."""

    default_code = INTERNAL


class Aborted(OmstError):
    """The request was aborted, e.g. the daemon is shutting down (code 11)."""

    default_code = ABORTED


class Timeout(OmstError):
    """A deadline expired, in the daemon or in the client (code 12).

    A client-side timeout drops the connection (the next call reconnects).
    """

    default_code = TIMEOUT


class Unavailable(OmstError):
    """The name exists but its bytes are missing here and no source has them
    (code 13)."""

    default_code = UNAVAILABLE


class Forbidden(OmstError):
    """This node's grid role or name prefixes do not allow the operation,
    e.g. a worker putting a name outside its prefixes, or the caller's
    local rights do not: a user other than the daemon's replacing or
    removing a name it did not put (code 14)."""

    default_code = FORBIDDEN


class DaemonUnavailable(OmstError):
    """Nothing listens on the socket: no omst daemon there (client-side)."""


class ConnectionLost(OmstError):
    """The connection to the daemon broke during a request (client-side)."""


class ProtocolError(OmstError):
    """The daemon sent bytes that break the protocol (client-side)."""


class ClientClosed(OmstError):
    """The client was closed."""


_BY_CODE: Dict[int, Type[OmstError]] = {
    NOT_FOUND: NotFound,
    INVALID_NAME: InvalidName,
    BAD_REQUEST: BadRequest,
    IO: OmstIOError,
    NO_SPACE: NoSpace,
    UNREACHABLE: Unreachable,
    CORRUPT: Corrupt,
    SIZE_MISMATCH: SizeMismatch,
    UNSUPPORTED_VERSION: UnsupportedVersion,
    INTERNAL: InternalError,
    ABORTED: Aborted,
    TIMEOUT: Timeout,
    UNAVAILABLE: Unavailable,
    FORBIDDEN: Forbidden,
}


def error_for_code(code: int, message: str) -> OmstError:
    """Return the exception for an ERROR reply; unknown codes give OmstError."""
    cls = _BY_CODE.get(code, OmstError)
    if not message:
        message = f"omst daemon: {CODE_NAMES.get(code, f'CODE_{code}')}"
    return cls(message, code)
