"""The lazily created default client behind the module-level functions."""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional

from .client import Client, FileArg, Progress
from .info import Info
from .names import NameLike, PathLike

_lock = threading.Lock()
_client: Optional[Client] = None


def default_client() -> Client:
    """Return the process's default Client (socket from the environment),
    creating it on first use. A forked child gets a fresh one."""
    global _client
    with _lock:
        if _client is None:
            _client = Client()
        return _client


def set_default_client(client: Optional[Client]) -> None:
    """Replace the default client (None: create it again on next use). The
    previous one is not closed."""
    global _client
    with _lock:
        _client = client


def _after_fork_in_child() -> None:
    global _lock, _client
    _lock = threading.Lock()
    _client = None


os.register_at_fork(after_in_child=_after_fork_in_child)


def put(name: NameLike, data: Any, chunk_size: int = 0) -> str:
    """:meth:`Client.put` on the default client."""
    return default_client().put(name, data, chunk_size)


def get(name: NameLike) -> bytes:
    """:meth:`Client.get` on the default client."""
    return default_client().get(name)


def get_into(name: NameLike, buffer: Any) -> int:
    """:meth:`Client.get_into` on the default client."""
    return default_client().get_into(name, buffer)


def put_file(name: NameLike, path: PathLike, chunk_size: int = 0) -> str:
    """:meth:`Client.put_file` on the default client."""
    return default_client().put_file(name, path, chunk_size)


def get_file(name: NameLike, path: PathLike, progress: Optional[Progress] = None) -> Info:
    """:meth:`Client.get_file` on the default client."""
    return default_client().get_file(name, path, progress)


def put_fd(name: NameLike, file: FileArg, chunk_size: int = 0) -> Info:
    """:meth:`Client.put_fd` on the default client."""
    return default_client().put_fd(name, file, chunk_size)


def get_to_fd(name: NameLike, file: FileArg, progress: Optional[Progress] = None) -> Info:
    """:meth:`Client.get_to_fd` on the default client."""
    return default_client().get_to_fd(name, file, progress)


def stat(name: NameLike) -> Info:
    """:meth:`Client.stat` on the default client."""
    return default_client().stat(name)


def ls(prefix: NameLike = "") -> List[Info]:
    """:meth:`Client.ls` on the default client."""
    return default_client().ls(prefix)


def rm(name: NameLike) -> None:
    """:meth:`Client.rm` on the default client."""
    default_client().rm(name)


def status() -> Dict[str, Any]:
    """:meth:`Client.status` on the default client."""
    return default_client().status()
