"""Name, prefix, chunk size and path rules (docs/rpcbridge.md section 6.2).

Pure functions: each checks one argument and returns its wire form (bytes)
or raises, before anything is sent to the daemon.
"""

from __future__ import annotations

import os
from typing import Union

from .errors import BadRequest, InvalidName

__all__ = [
    "MAX_NAME_LEN",
    "MAX_PATH_LEN",
    "MIN_CHUNK_SIZE",
    "MAX_CHUNK_SIZE",
    "NameLike",
    "PathLike",
    "validate_name",
    "validate_prefix",
    "validate_chunk_size",
    "absolute_path",
]

MAX_NAME_LEN = 1024
MAX_PATH_LEN = 4096
MIN_CHUNK_SIZE = 4096
MAX_CHUNK_SIZE = 64 << 20

NameLike = Union[str, bytes]
PathLike = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]


def _shown(name: NameLike) -> str:
    s = name if isinstance(name, str) else name.decode("utf-8", "backslashreplace")
    if len(s) > 64:
        s = s[:64] + "..."
    return repr(s)


def validate_name(name: NameLike) -> bytes:
    """Check a blob name and return its UTF-8 bytes.

    A name is 1..1024 bytes of UTF-8 without control characters (C0, DEL,
    C1), made of '/'-separated segments that are neither empty, '.' nor '..'
    (so no leading or trailing '/'). ``bytes`` names must be valid UTF-8.

    Raises:
        InvalidName: the name breaks a rule.
        TypeError: name is neither str nor bytes.
    """
    if isinstance(name, str):
        if name == "":
            raise InvalidName("invalid name: empty name")
        try:
            raw = name.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidName(f"invalid name {_shown(name)}: not valid UTF-8") from None
        text = name
    elif isinstance(name, (bytes, bytearray)):
        raw = bytes(name)
        if raw == b"":
            raise InvalidName("invalid name: empty name")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidName(f"invalid name {_shown(raw)}: not valid UTF-8") from None
    else:
        raise TypeError(f"a name must be str or bytes, not {type(name).__name__}")
    if len(raw) > MAX_NAME_LEN:
        raise InvalidName(f"invalid name {_shown(text)}: {len(raw)} bytes, more than {MAX_NAME_LEN}")
    if text[0] == "/":
        raise InvalidName(f"invalid name {_shown(text)}: starts with '/'")
    for ch in text:
        o = ord(ch)
        if o < 0x20 or 0x7F <= o <= 0x9F:
            raise InvalidName(f"invalid name {_shown(text)}: contains control character U+{o:04X}")
    for seg in text.split("/"):
        if seg == "":
            raise InvalidName(f"invalid name {_shown(text)}: has an empty segment ('//' or a trailing '/')")
        if seg in (".", ".."):
            raise InvalidName(f"invalid name {_shown(text)}: has a {seg!r} segment")
    return raw


def validate_prefix(prefix: NameLike) -> bytes:
    """Check a listing prefix and return its UTF-8 bytes.

    A prefix is empty, or a valid name optionally followed by one '/'.

    Raises:
        InvalidName: the prefix breaks a rule.
    """
    if isinstance(prefix, str):
        sep: NameLike = "/"
    elif isinstance(prefix, (bytes, bytearray)):
        sep = b"/"
    else:
        raise TypeError(f"a prefix must be str or bytes, not {type(prefix).__name__}")
    if len(prefix) == 0:
        return b""
    stem = prefix[:-1] if prefix[-1:] == sep else prefix
    if len(stem) == 0:
        raise InvalidName(f"invalid prefix {_shown(prefix)}: starts with '/'")
    try:
        raw = validate_name(stem)
    except InvalidName as e:
        raise InvalidName(f"prefix: {e.message}") from None
    return raw + b"/" if stem is not prefix else raw


def validate_chunk_size(chunk_size: int) -> int:
    """Check a chunk size: 0 (the daemon's default) or 4 KiB ..= 64 MiB.

    Raises:
        BadRequest: out of range.
        TypeError: not an int.
    """
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool):
        raise TypeError(f"chunk_size must be an int, not {type(chunk_size).__name__}")
    if chunk_size != 0 and not MIN_CHUNK_SIZE <= chunk_size <= MAX_CHUNK_SIZE:
        raise BadRequest(f"chunk size {chunk_size} outside [{MIN_CHUNK_SIZE}, {MAX_CHUNK_SIZE}] (or 0 for the default)")
    return chunk_size


def absolute_path(path: PathLike) -> bytes:
    """Return path made absolute against the working directory, as bytes.

    Raises:
        BadRequest: the path contains NUL or exceeds 4096 bytes.
    """
    raw = os.fsencode(path)
    if b"\x00" in raw:
        raise BadRequest(f"path {raw!r} contains a NUL byte")
    raw = os.path.abspath(raw)
    if len(raw) > MAX_PATH_LEN:
        raise BadRequest(f"path of {len(raw)} bytes exceeds {MAX_PATH_LEN}")
    return raw


def validate_rm_prefix(prefix: NameLike) -> bytes:
    """Check a prefix to remove (or give a TTL) and return it as UTF-8
    bytes ending in '/': "job1" and "job1/" both mean the names under
    "job1/".

    Raises:
        InvalidName: empty, "/", or a prefix that breaks a name rule.
    """
    raw = validate_prefix(prefix)
    if raw == b"":
        raise InvalidName("invalid prefix: empty (name one such as job1/)")
    return raw if raw.endswith(b"/") else raw + b"/"
