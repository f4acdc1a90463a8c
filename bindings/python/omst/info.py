"""The Info record: what the daemon knows about a named blob."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

__all__ = ["Info", "FLAG_LOCAL", "FLAG_PINNED"]

FLAG_LOCAL = 1 << 0
FLAG_PINNED = 1 << 1


@dataclass(frozen=True)
class Info:
    """A named blob (docs/rpcbridge.md section 5.1).

    Attributes:
        name: the blob's name.
        id: blob ID, a CIDv1 string (also available as ``cid``).
        size: size in bytes.
        chunk_size: chunk size in bytes (0 if unknown on this node).
        chunks: number of chunks.
        time: put time, an int: nanoseconds since the Unix epoch (UTC),
            as the daemon records it; 0 if unknown on this node (a blob
            got by its ID). ``put_time`` is the same as a datetime.
        origin: peer ID of the node where it was put.
        local: every chunk is in this node's store.
        pinned: the blob is pinned on this node.
    """

    name: str
    id: str
    size: int
    chunk_size: int
    chunks: int
    time: int
    origin: str
    local: bool
    pinned: bool

    @property
    def cid(self) -> str:
        """The blob ID (same as ``id``)."""
        return self.id

    @property
    def flags(self) -> int:
        """The wire form of ``local`` and ``pinned``."""
        return (FLAG_LOCAL if self.local else 0) | (FLAG_PINNED if self.pinned else 0)

    @property
    def put_time(self) -> datetime.datetime:
        """The put time as an aware UTC datetime (microsecond precision)."""
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return epoch + datetime.timedelta(microseconds=self.time // 1000)
