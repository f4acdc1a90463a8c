"""Client against a real daemon: round trips, numpy, errors, listing, files,
status, threads."""

from __future__ import annotations

import os
import pickle
import threading

import pytest

import omst

MiB = 1 << 20


def pattern(n: int, seed: int = 0) -> bytes:
    """n deterministic, non-repeating-looking bytes."""
    block = bytes((i * 131 + seed * 17 + (i >> 8)) & 0xFF for i in range(4093))
    reps = n // len(block) + 1
    return (block * reps)[:n]


@pytest.mark.parametrize("size", [0, 1, 4096, MiB - 1, MiB, MiB + 1, 5 * MiB])
def test_round_trip_sizes(client: omst.Client, ns: str, size: int) -> None:
    data = pattern(size, size)
    name = f"{ns}/blob"
    cid = client.put(name, data)
    assert cid.startswith("baf")
    assert client.get(name) == data
    buf = bytearray(size)
    assert client.get_into(name, buf) == size
    assert buf == data
    info = client.stat(name)
    assert (info.name, info.id, info.size, info.local, info.pinned) == (name, cid, size, True, True)


def test_put_bytes_like_kinds(client: omst.Client, ns: str) -> None:
    data = pattern(100_000)
    for i, obj in enumerate([data, bytearray(data), memoryview(data), memoryview(data)[10:5000]]):
        client.put(f"{ns}/{i}", obj)
        assert client.get(f"{ns}/{i}") == bytes(obj)
    with pytest.raises(TypeError):
        client.put(f"{ns}/s", "text")  # type: ignore[arg-type]


def test_chunk_size(plain_client: omst.Client, ns: str) -> None:
    client = plain_client
    data = pattern(100_000)
    client.put(f"{ns}/c", data, chunk_size=4096)
    info = client.stat(f"{ns}/c")
    assert info.chunk_size == 4096 and info.chunks == 25
    assert client.get(f"{ns}/c") == data
    # 25 extents through GET_FD (if spoken), one per chunk file.
    fd = omst.Client(client.socket)
    fd.get_fd_min_size = 0
    buf = bytearray(len(data))
    fd.get_into(f"{ns}/c", buf)
    assert buf == data
    fd.close()
    with pytest.raises(omst.BadRequest):
        client.put(f"{ns}/c2", data, chunk_size=100)


def test_numpy_put_and_get_into(client: omst.Client, ns: str) -> None:
    np = pytest.importorskip("numpy")
    a = np.random.default_rng(1).standard_normal((512, 1024))  # 4 MiB float64
    client.put(f"{ns}/a", a)
    out = np.empty_like(a)
    assert client.get_into(f"{ns}/a", out) == a.nbytes
    assert np.array_equal(a, out)
    # Non-native and structured dtypes, 0-d, and a non-contiguous source.
    for i, arr in enumerate([a.astype(">f4"), np.zeros(7, dtype="i4,f8"), np.array(3.5), a[:, ::2]]):
        client.put(f"{ns}/x{i}", arr)
        back = np.empty(arr.shape, arr.dtype)
        client.get_into(f"{ns}/x{i}", back)
        assert np.array_equal(back, arr)
    # get() returns the same bytes as tobytes().
    assert client.get(f"{ns}/x3") == a[:, ::2].tobytes()


def test_get_into_rejects_bad_buffers(client: omst.Client, ns: str) -> None:
    np = pytest.importorskip("numpy")
    client.put(f"{ns}/b", b"x" * 16)
    with pytest.raises(TypeError):
        client.get_into(f"{ns}/b", b"y" * 16)  # read-only
    with pytest.raises(TypeError):
        client.get_into(f"{ns}/b", np.zeros((4, 4), "u1")[:, :2])  # not contiguous


@pytest.mark.parametrize("size", [10, 6 * MiB])
def test_get_into_size_mismatch(client: omst.Client, ns: str, size: int) -> None:
    client.put(f"{ns}/m", pattern(size))
    for n in (size - 1, size + 1):
        buf = bytearray(b"\xaa" * n)
        with pytest.raises(omst.SizeMismatch) as ei:
            client.get_into(f"{ns}/m", buf)
        assert ei.value.code == 8
        assert buf == b"\xaa" * n, "buffer written despite the size mismatch"
    # The client still works (connection drained or reconnected).
    assert client.get(f"{ns}/m") == pattern(size)


def test_not_found(client: omst.Client, ns: str) -> None:
    for call in (client.get, client.stat, client.rm, lambda n: client.get_into(n, bytearray(1))):
        with pytest.raises(omst.NotFound) as ei:
            call(f"{ns}/missing")
        assert ei.value.code == 1 and "not found" in str(ei.value)
        assert isinstance(ei.value, omst.OmstError) and isinstance(ei.value, LookupError)
    # The connection stays usable after an ERROR reply.
    assert client.status()["version"]


BAD_NAMES = [
    "",
    "a" * 1025,
    "é" * 513,  # 1026 bytes
    "a\nb",
    "a\x00b",
    "a\x7fb",
    "a\u0085b",
    "..",
    "a/../b",
    "a/./b",
    "/abs",
    "a//b",
    "a/",
    "\udcff",  # lone surrogate: not encodable as UTF-8
    b"\xff\xfe",  # non-UTF-8 bytes
    b"",
]


@pytest.mark.parametrize("name", BAD_NAMES, ids=[repr(n)[:20] for n in BAD_NAMES])
def test_invalid_names_rejected_locally(name: object) -> None:
    # No daemon there: an InvalidName proves the check happens before connecting.
    c = omst.Client("/nonexistent/omst.sock", connect=False)
    for call in (c.get, c.stat, c.rm, lambda n: c.put(n, b"x"), lambda n: c.get_into(n, bytearray(1))):
        with pytest.raises(omst.InvalidName) as ei:
            call(name)
        assert ei.value.code == 2
    with pytest.raises(omst.DaemonUnavailable):
        c.get("fine/name")


def test_valid_names(plain_client: omst.Client, ns: str) -> None:
    client = plain_client
    for i, name in enumerate(["a", "日本語/データ", "x" * 900, "sp ace/…/~!@#$%^&*()", "a.b/.c/..d"]):
        full = f"{ns}/{i}/{name}"
        client.put(full, b"v")
        assert client.stat(full).name == full
    client.put(f"{ns}/bytes".encode(), b"b")
    assert client.get(f"{ns}/bytes") == b"b"


def test_ls_stat_rm(plain_client: omst.Client, ns: str) -> None:
    client = plain_client
    names = [f"{ns}/d/{i}" for i in range(5)] + [f"{ns}/e"]
    for i, n in enumerate(names):
        client.put(n, pattern(i * 100))
    got = {i.name: i for i in client.ls(f"{ns}/d/")}
    assert sorted(got) == sorted(names[:5])
    assert got[f"{ns}/d/3"].size == 300
    assert {i.name for i in client.ls(ns)} == set(names)
    assert {i.name for i in client.ls(ns + "/")} == set(names)
    assert {i.name for i in client.ls("")} >= set(names)
    with pytest.raises(omst.InvalidName):
        client.ls("/x")
    with pytest.raises(omst.InvalidName):
        client.ls("a//")
    client.rm(f"{ns}/d/0")
    with pytest.raises(omst.NotFound):
        client.stat(f"{ns}/d/0")
    assert len(client.ls(f"{ns}/d")) == 4
    info = client.stat(f"{ns}/e")
    assert info.cid == info.id and info.put_time.year >= 2024 and info.origin


def test_many_names_listing(plain_client: omst.Client, ns: str) -> None:
    client = plain_client
    # Enough entries for the daemon to split the listing into several frames.
    long = "n" * 1000
    for i in range(1200):
        client.put(f"{ns}/{long}/{i}", b"")
    infos = client.ls(f"{ns}/")
    assert len(infos) == 1200 and all(i.size == 0 for i in infos)


def test_put_file_get_file(client: omst.Client, ns: str, tmp_path: "os.PathLike[str]") -> None:
    src = os.path.join(tmp_path, "src.bin")
    data = pattern(3 * MiB + 7)
    with open(src, "wb") as f:
        f.write(data)
    cid = client.put_file(f"{ns}/f", src)
    assert client.stat(f"{ns}/f").id == cid
    assert client.get(f"{ns}/f") == data
    # Relative path, made absolute against our working directory.
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        info = client.get_file(f"{ns}/f", "out.bin")
    finally:
        os.chdir(old)
    assert info.size == len(data)
    with open(os.path.join(tmp_path, "out.bin"), "rb") as f:
        assert f.read() == data
    with pytest.raises(omst.OmstIOError):
        client.put_file(f"{ns}/g", os.path.join(tmp_path, "missing"))
    with pytest.raises(omst.NotFound):
        client.get_file(f"{ns}/nope", os.path.join(tmp_path, "x"))


def test_status(plain_client: omst.Client) -> None:
    client = plain_client
    st = client.status()
    assert isinstance(st, dict)
    assert st["peer_id"].startswith("12D3KooW") and "cache_used" in st


def test_threads_share_a_client(client: omst.Client, ns: str) -> None:
    errors: list = []

    def work(k: int) -> None:
        try:
            for i in range(20):
                data = pattern(1000 + 37 * i, k)
                client.put(f"{ns}/{k}/{i}", data)
                assert client.get(f"{ns}/{k}/{i}") == data
                buf = bytearray(len(data))
                client.get_into(f"{ns}/{k}/{i}", buf)
                assert buf == data
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert len(client.ls(ns)) == 160


def test_module_level_functions(daemon: object, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMST_SOCKET", daemon.sock)  # type: ignore[attr-defined]
    omst.set_default_client(None)
    try:
        omst.put(f"{ns}/m", b"module")
        assert omst.get(f"{ns}/m") == b"module"
        buf = bytearray(6)
        assert omst.get_into(f"{ns}/m", buf) == 6 and buf == b"module"
        assert omst.stat(f"{ns}/m").size == 6
        assert [i.name for i in omst.ls(ns)] == [f"{ns}/m"]
        omst.rm(f"{ns}/m")
        assert omst.ls(ns) == []
        assert omst.default_client().socket == daemon.sock  # type: ignore[attr-defined]
    finally:
        omst.set_default_client(None)


def test_slurm_socket(monkeypatch: pytest.MonkeyPatch, tmp_path: "os.PathLike[str]", daemon: object) -> None:
    """Inside a Slurm job, this node's daemon of the job without OMST_SOCKET
    or OMST_HOME (omst._slurm); those still win."""
    import os as _os

    base = str(tmp_path)
    node = _os.path.join(base, "omst-slurm-4242", "n3")
    _os.makedirs(node, mode=0o700)
    for k in ("OMST_SOCKET", "OMST_HOME"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", _os.path.join(base, "nohome"))
    monkeypatch.setenv("TMPDIR", base)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURMD_NODENAME", "n3")
    assert omst.default_socket() == _os.path.join(base, "nohome", ".omst", "omst.sock")  # no socket yet
    sock = _os.path.join(node, "omst.sock")
    _os.symlink(daemon.sock, sock)  # type: ignore[attr-defined]
    assert omst.default_socket() == sock
    with omst.Client() as c:
        c.put("default/slurm", b"slurm")
        assert c.get("default/slurm") == b"slurm"
    monkeypatch.setenv("SLURMD_NODENAME", "n4")
    assert omst.default_socket() != sock
    monkeypatch.setenv("SLURMD_NODENAME", "n3")
    monkeypatch.setenv("SLURM_JOB_ID", "../omst-slurm-4242")
    assert omst.default_socket() != sock
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("OMST_HOME", "/h")
    assert omst.default_socket() == "/h/omst.sock"
    monkeypatch.delenv("OMST_HOME")
    monkeypatch.setenv("OMST_SOCKET", "/a/b.sock")
    assert omst.default_socket() == "/a/b.sock"


def test_default_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMST_SOCKET", "/a/b.sock")
    assert omst.default_socket() == "/a/b.sock"
    monkeypatch.delenv("OMST_SOCKET")
    monkeypatch.setenv("OMST_HOME", "/h")
    assert omst.default_socket() == "/h/omst.sock"
    monkeypatch.delenv("OMST_HOME")
    monkeypatch.setenv("HOME", "/home/u")
    assert omst.default_socket() == "/home/u/.omst/omst.sock"
    monkeypatch.setenv("OMST_TIMEOUT_MS", "1500")
    assert omst.default_timeout() == 1.5
    assert omst.Client("/x", connect=False).timeout == 1.5
    monkeypatch.delenv("OMST_TIMEOUT_MS")
    assert omst.default_timeout() == omst.DEFAULT_TIMEOUT


def test_close_and_context_manager(daemon: object, ns: str) -> None:
    with omst.Client(daemon.sock) as c:  # type: ignore[attr-defined]
        c.put(f"{ns}/x", b"1")
    with pytest.raises(omst.ClientClosed):
        c.get(f"{ns}/x")
    c.close()  # idempotent


def test_package_is_typed() -> None:
    from pathlib import Path

    assert (Path(omst.__file__).parent / "py.typed").is_file()


def test_exceptions_pickle() -> None:
    for e in (omst.NotFound("gone", 1), omst.ConnectionLost("cut"), omst.OmstError("odd", 99)):
        e2 = pickle.loads(pickle.dumps(e))
        assert type(e2) is type(e) and e2.code == e.code and str(e2) == str(e)
    for io in (omst.OmstIOError("open /x: denied", errno=13), omst.UnsafePath("link", errno=13), omst.OmstIOError("d", 4)):
        io2 = pickle.loads(pickle.dumps(io))
        assert type(io2) is type(io) and (io2.code, io2.errno, str(io2)) == (4, io.errno, str(io))


def test_client_pickles(daemon: object, ns: str) -> None:
    c = omst.Client(daemon.sock, timeout=7)  # type: ignore[attr-defined]
    c.put(f"{ns}/p", b"pickled")
    c2 = pickle.loads(pickle.dumps(c))
    assert (c2.socket, c2.timeout) == (c.socket, 7.0)
    assert c2.get(f"{ns}/p") == b"pickled"
    c.close()
    c2.close()
