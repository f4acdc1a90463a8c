"""Many names in one request: GET_MANY and PUT_MANY (protocol version 7,
docs/rpcbridge.md section 6.14). The Client's get_many, iter_many,
get_many_into and put_many run the exchanges here on a connection; on a
daemon of version 6 or less they fall back to one GET or PUT per name."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _wire
from ._conn import Buffer, Connection
from .errors import OmstError, ProtocolError, SizeMismatch, error_for_code
from .info import Info

#: The protocol version that brings GET_MANY and PUT_MANY.
MANY_VERSION = 7


class ManyResult(Dict[str, Any]):
    """The answer to a many-names call: a dict of the entries that
    succeeded, name -> value (get_many: the bytes; get_many_into: the size
    written; put_many: the Info), with ``errors`` (name -> the OmstError of
    each entry that failed) and ``summary`` (entries, ok, failed, bytes)."""

    def __init__(self) -> None:
        super().__init__()
        self.errors: Dict[str, OmstError] = {}
        self.summary: Tuple[int, int, int, int] = (0, 0, 0, 0)

    @property
    def all_ok(self) -> bool:
        """Every entry succeeded."""
        return not self.errors

    def _tally(self) -> None:
        ok, failed = len(self), len(self.errors)
        nbytes = sum(v.size if isinstance(v, Info) else (v if isinstance(v, int) else len(v)) for v in self.values())
        self.summary = (ok + failed, ok, failed, nbytes)


#: One entry as iter_many yields it: (name, bytes) or (name, the entry's error).
Entry = Tuple[str, Union[bytes, OmstError]]


def batches(raws: Sequence[bytes]) -> Iterator[Tuple[int, Sequence[bytes]]]:
    """Split names into GET_MANYs within the body and count limits:
    (index of the first, names)."""
    start = 0
    while start < len(raws):
        end, size = start, 12
        while end < len(raws) and end - start < _wire.MAX_MANY_NAMES and size + 4 + len(raws[end]) <= _wire.MAX_MANY_BODY:
            size += 4 + len(raws[end])
            end += 1
        yield start, raws[start:end]
        start = end


def read_entries(
    conn: Connection, base: int, dest_for: Callable[[int, Info], Optional[memoryview]]
) -> Iterator[Tuple[int, str, Union[Info, OmstError], Optional[memoryview]]]:
    """Read a GET_MANY reply after the request was sent, yielding each
    entry as (index, name, info or error, the buffer its bytes went to).
    dest_for(index, info) gives the buffer for an entry's bytes (None: read
    into a new one); if it raises an OmstError, the entry's bytes are
    skipped and the error is the entry's. A failure in the middle of an
    entry's bytes makes the entry that ENTRY_ERROR. Ends after SUMMARY
    (the connection in step) or raises (ERROR for the whole request, a
    protocol error)."""
    first = True
    while True:
        ftype, n = conn.read_header()
        if ftype == _wire.SUMMARY:
            _wire.decode_summary(conn.read_body(n))
            conn.finish()
            return
        body = conn.read_body(n)
        if ftype == _wire.FrameType.ERROR and first:
            conn.finish()
            code, msg = _wire.decode_error(body)
            raise error_for_code(code, msg)
        first = False
        if ftype == _wire.ENTRY_ERROR:
            i, name, code, msg = _wire.decode_entry_error(body)
            yield base + i, name, error_for_code(code, msg), None
            continue
        if ftype != _wire.ENTRY:
            raise ProtocolError(f"get many: daemon sent {_wire.type_name(ftype)}, expected ENTRY, ENTRY_ERROR or SUMMARY")
        i, info = _wire.decode_entry(body)
        dest: Optional[memoryview]
        err: Optional[OmstError] = None
        try:
            dest = dest_for(base + i, info)
            if dest is None:
                dest = memoryview(bytearray(info.size))
        except OmstError as e:
            dest, err = None, e
        got = 0
        failed: Optional[OmstError] = None
        while got < info.size:
            ftype, n = conn.read_header()
            if ftype == _wire.FrameType.DATA and 0 < n <= info.size - got:
                if dest is None:
                    conn.skip(n)
                else:
                    conn.read_into(dest[got : got + n])
                got += n
            elif ftype == _wire.ENTRY_ERROR:
                j, _, code, msg = _wire.decode_entry_error(conn.read_body(n))
                if j != i:
                    raise ProtocolError(f"get many: ENTRY_ERROR of entry {j} in the bytes of entry {i}")
                failed = error_for_code(code, msg)
                break
            else:
                raise ProtocolError(
                    f"get many: {_wire.type_name(ftype)} ({n} bytes) in entry {i} after {got} of its {info.size} bytes"
                )
        yield base + i, info.name, failed or err or info, dest


def put_many_exchange(conn: Connection, items: Sequence[Tuple[bytes, memoryview]], chunk_size: int) -> List[Union[Info, OmstError]]:
    """Send one PUT_MANY of items (name, bytes) and return an Info or an
    error per item, in order."""
    conn.begin()
    parts: List[Buffer] = [_wire.encode_put_many(chunk_size)]
    pending = 0
    for raw, view in items:
        parts.append(_wire.encode_put_item(raw, len(view)))
        for off in range(0, len(view), _wire.DATA_FRAME_SIZE):
            piece = view[off : off + _wire.DATA_FRAME_SIZE]
            parts += [_wire.data_header(len(piece)), piece]
            pending += len(piece)
        if pending >= 1 << 20 or len(parts) > 512:
            conn.send(parts)
            parts, pending = [], 0
    parts.append(_wire.encode_empty(_wire.FrameType.DATA))
    conn.send(parts)
    out: List[Union[Info, OmstError, None]] = [None] * len(items)
    first = True
    while True:
        ftype, n = conn.read_header()
        body = conn.read_body(n)
        if ftype == _wire.FrameType.ERROR and first:
            conn.finish()
            code, msg = _wire.decode_error(body)
            raise error_for_code(code, msg)
        first = False
        if ftype == _wire.SUMMARY:
            _wire.decode_summary(body)
            conn.finish()
            break
        if ftype == _wire.ENTRY:
            i, info = _wire.decode_entry(body)
            val: Union[Info, OmstError] = info
        elif ftype == _wire.ENTRY_ERROR:
            i, _, code, msg = _wire.decode_entry_error(body)
            val = error_for_code(code, msg)
        else:
            raise ProtocolError(f"put many: daemon sent {_wire.type_name(ftype)}, expected ENTRY, ENTRY_ERROR or SUMMARY")
        if not 0 <= i < len(items):
            raise ProtocolError(f"put many: entry {i} of {len(items)} items")
        out[i] = val
    return [v if v is not None else ProtocolError(f"put many: no answer for {items[k][0]!r}") for k, v in enumerate(out)]


def size_error(name: str, size: int, have: int) -> SizeMismatch:
    return SizeMismatch(f"get {name!r}: the blob has {size} bytes, the buffer {have} bytes")
