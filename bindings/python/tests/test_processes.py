"""Use from multiprocessing, ProcessPoolExecutor and os.fork children."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Optional, Tuple

import pytest

import omst

# Set in the parent before forking; children inherit it (and its connection).
_inherited: Optional[omst.Client] = None


def _square_task(args: Tuple[str, str, int]) -> Tuple[int, str]:
    """Worker: read the shared blob, put a result, return its name."""
    sock, ns, i = args
    c = _inherited if _inherited is not None else omst.Client(sock)
    data = c.get(f"{ns}/shared")
    name = f"{ns}/result/{i}"
    c.put(name, bytes(b * i & 0xFF for b in data))
    return os.getpid(), name


def _default_client_task(args: Tuple[str, int]) -> Tuple[int, bytes]:
    ns, i = args
    omst.put(f"{ns}/d/{i}", str(i).encode())
    return os.getpid(), omst.get(f"{ns}/shared")


def _check_results(c: omst.Client, ns: str, names: list) -> None:
    data = c.get(f"{ns}/shared")
    for i, name in enumerate(names):
        assert name == f"{ns}/result/{i}"
        assert c.get(name) == bytes(b * i & 0xFF for b in data)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_multiprocessing_pool(daemon: object, ns: str, method: str) -> None:
    global _inherited
    c = omst.Client(daemon.sock)  # type: ignore[attr-defined]
    c.put(f"{ns}/shared", bytes(range(256)) * 64)
    _inherited = c  # connected: the forked children inherit the socket
    try:
        ctx = multiprocessing.get_context(method)
        with ctx.Pool(3) as pool:
            out = pool.map(_square_task, [(c.socket, ns, i) for i in range(12)])
    finally:
        _inherited = None
    assert len({pid for pid, _ in out}) >= 1
    assert all(pid != os.getpid() for pid, _ in out)
    # The parent's connection is intact after the children used theirs.
    _check_results(c, ns, [n for _, n in out])
    c.close()


def test_process_pool_executor_default_client(daemon: object, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMST_SOCKET", daemon.sock)  # type: ignore[attr-defined]
    omst.set_default_client(None)
    try:
        omst.put(f"{ns}/shared", b"shared bytes")  # parent's default client is connected
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as ex:
            out = list(ex.map(_default_client_task, [(ns, i) for i in range(10)]))
        assert all(b == b"shared bytes" for _, b in out)
        assert len(omst.ls(f"{ns}/d/")) == 10
        # The parent's default client still works on its own connection.
        assert omst.get(f"{ns}/shared") == b"shared bytes"
    finally:
        omst.set_default_client(None)


def test_process_pool_executor_forkserver(daemon: object, ns: str) -> None:
    c = omst.Client(daemon.sock)  # type: ignore[attr-defined]
    c.put(f"{ns}/shared", bytes(range(100)))
    ctx = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as ex:
        names = [n for _, n in ex.map(_square_task, [(c.socket, ns, i) for i in range(6)])]
    _check_results(c, ns, names)
    c.close()


def _wait_child(pid: int, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise AssertionError("forked child did not finish in time")


@pytest.mark.parametrize("hook", [True, False])
def test_os_fork_child(daemon: object, ns: str, hook: bool) -> None:
    c = omst.Client(daemon.sock)  # type: ignore[attr-defined]
    c.put(f"{ns}/p", b"parent data")
    parent_conn = c._conn
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            if not hook:
                # Simulate a fork the at-fork hook did not see: restore the
                # inherited connection object; the pid check must catch it.
                c._conn = parent_conn
            assert c.get(f"{ns}/p") == b"parent data"
            assert c._conn is not parent_conn
            c.put(f"{ns}/child", b"from child")
            code = 0
        finally:
            os._exit(code)
    assert _wait_child(pid) == 0
    # The parent still uses its original connection, undisturbed.
    assert c._conn is parent_conn
    assert c.get(f"{ns}/child") == b"from child"
    assert c.get(f"{ns}/p") == b"parent data"
    c.close()
