"""The data of a put, cut into DATA frame payloads.

A put takes a bytes-like object (sent from its own memory), a binary
file-like object, or an iterable of bytes-like chunks. A source yields the
payloads; an exception it raises (the input failed) makes the client abort
the upload instead of ending it, so that the daemon stores nothing.

A file object open on a regular file is read from its current position up
to the size the file has when the put starts; the source raises
:class:`~omst.errors.OmstIOError` ("file changed while it was read") if the
file ends early, has more bytes after that size, or if its size or
modification time differ at the end. Any other file (a pipe, a socket, a
terminal) and any iterable end where they end.
"""

from __future__ import annotations

import io
import os
import stat
from typing import Any, Iterable, Iterator, Optional

from ._wire import DATA_FRAME_SIZE
from .errors import OmstIOError

__all__ = ["PutSource", "put_source", "readable_view"]


def readable_view(data: Any) -> memoryview:
    """A flat byte view of data without copying (copies only non-contiguous
    buffers, in C order)."""
    if isinstance(data, str):
        raise TypeError("data must be bytes-like, not str (encode it first)")
    mv = memoryview(data)
    if mv.format == "B" and mv.ndim == 1 and mv.c_contiguous:
        return mv
    if not mv.c_contiguous:
        return memoryview(mv.tobytes())
    try:
        return mv.cast("B")
    except (TypeError, ValueError):
        return memoryview(mv.tobytes())


class PutSource:
    """What a put sends.

    Attributes:
        stream: the payloads are read from a stream (a file or an
            iterable): they can be produced once only.
    """

    def __init__(self, view: Optional[memoryview], stream: Any) -> None:
        self._view = view
        self._stream = stream
        self.stream = view is None

    def pieces(self) -> Iterator[memoryview]:
        """The payloads, in order: each 1 ..= DATA_FRAME_SIZE bytes, valid
        until the next one is asked for."""
        if self._view is not None:
            view = self._view
            return (view[off : off + DATA_FRAME_SIZE] for off in range(0, len(view), DATA_FRAME_SIZE))
        if hasattr(self._stream, "read"):
            return _file_pieces(self._stream)
        return _iter_pieces(self._stream)


def put_source(data: Any) -> PutSource:
    """Classify the data of a put.

    Raises:
        TypeError: data is a str, or neither bytes-like, a file-like object
            with ``read``, nor an iterable.
    """
    if isinstance(data, str):
        raise TypeError("data must be bytes-like, not str (encode it first)")
    try:
        return PutSource(readable_view(data), None)
    except TypeError:
        pass
    if hasattr(data, "read"):
        if isinstance(data, io.TextIOBase):
            raise TypeError("put needs a binary file (open it with 'rb'), not a text file")
        return PutSource(None, data)
    if hasattr(data, "__iter__"):
        return PutSource(None, data)
    raise TypeError(
        f"data must be bytes-like, a binary file or an iterable of bytes-like chunks, not {type(data).__name__}"
    )


def _iter_pieces(chunks: Iterable[Any]) -> Iterator[memoryview]:
    for chunk in chunks:
        view = readable_view(chunk)
        for off in range(0, len(view), DATA_FRAME_SIZE):
            yield view[off : off + DATA_FRAME_SIZE]


def _regular_fd(f: Any) -> Optional[int]:
    """The descriptor of f if it is open on a regular file, else None."""
    try:
        fd = f.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


def _file_pieces(f: Any) -> Iterator[memoryview]:
    name = getattr(f, "name", None)
    what = name if isinstance(name, str) else repr(f)
    fd = _regular_fd(f)
    left = -1  # bytes still expected; -1: a stream, read to its end
    size = mtime = 0
    if fd is not None:
        st = os.fstat(fd)
        size, mtime = st.st_size, st.st_mtime_ns
        left = max(size - f.tell(), 0)

    def changed(how: str) -> OmstIOError:
        return OmstIOError(f"read {what}: file changed while it was read: {how}")

    buf = bytearray(DATA_FRAME_SIZE)
    view = memoryview(buf)
    readinto = getattr(f, "readinto", None)
    while left != 0:
        want = len(buf) if left < 0 else min(len(buf), left)
        if readinto is not None:
            n = readinto(view[:want])
            piece = view[: n or 0]
        else:
            b = f.read(want)
            if isinstance(b, str):
                raise TypeError(f"{what}.read() returned str: put needs a binary file")
            n = None if b is None else len(b)
            piece = memoryview(b) if b else view[:0]
        if n is None:
            raise OmstIOError(f"read {what}: non-blocking file has no data ready")
        if n == 0:
            if left > 0:
                assert fd is not None
                raise changed(f"it shrank from {size} to {os.fstat(fd).st_size} bytes")
            return
        if left > 0:
            left -= n
        yield piece
    # A regular file, read to the size it had: nothing more, unchanged.
    assert fd is not None
    if f.read(1):
        raise changed(f"it grew beyond its {size} bytes")
    st = os.fstat(fd)
    if st.st_size != size or st.st_mtime_ns != mtime:
        raise changed(f"size {size} -> {st.st_size} bytes, modification time changed")
