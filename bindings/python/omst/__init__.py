"""omst: pure-Python client of the omst daemon's local API.

Quick use::

    import omst
    cid = omst.put("shared/init", array)        # any bytes-like object
    data = omst.get("shared/init")              # bytes
    omst.get_into("shared/init", out_array)     # fill a buffer in place

    with omst.Client("/path/to/omst.sock") as c:
        c.stat("shared/init").size
        c.put_file("big/input", "input.bin")    # opened here, with this process's rights
        c.get_file("big/input", "copy.bin")     # atomically: temporary file, then rename

The module-level functions use a default :class:`Client` created on first
use from $OMST_SOCKET / $OMST_HOME (a forked child makes its own). The
protocol is specified in docs/rpcbridge.md of the omst repository.
"""

from __future__ import annotations

from ._default import (
    default_client,
    get,
    get_file,
    get_into,
    get_to_fd,
    ls,
    put,
    put_fd,
    put_file,
    rm,
    set_default_client,
    stat,
    status,
)
from ._many import ManyResult
from .client import DEFAULT_TIMEOUT, Client, default_socket, default_timeout
from .errors import (
    Aborted,
    BadRequest,
    ClientClosed,
    ConnectionLost,
    Corrupt,
    DaemonUnavailable,
    Forbidden,
    InternalError,
    InvalidName,
    NoSpace,
    NotFound,
    OmstError,
    OmstIOError,
    ProtocolError,
    SizeMismatch,
    Timeout,
    Unavailable,
    UnsafePath,
    Unreachable,
    UnsupportedVersion,
)
from .info import Info
from .names import validate_name, validate_prefix

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Info",
    "ManyResult",
    "DEFAULT_TIMEOUT",
    "default_socket",
    "default_timeout",
    "default_client",
    "set_default_client",
    "put",
    "get",
    "get_into",
    "put_file",
    "get_file",
    "put_fd",
    "get_to_fd",
    "stat",
    "ls",
    "rm",
    "status",
    "validate_name",
    "validate_prefix",
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
    "Forbidden",
    "DaemonUnavailable",
    "ConnectionLost",
    "ProtocolError",
    "ClientClosed",
]
