"""Job namespaces against a real daemon: remove(prefix, everywhere=True),
set_ttl, du (docs/rpcbridge.md section 6.13)."""

from __future__ import annotations

import time

import pytest

import omst


def test_remove_prefix_everywhere_and_du(plain_client: omst.Client, ns: str) -> None:
    c = plain_client
    for i in range(20):
        c.put(f"{ns}/job/{i:03d}", b"x" * (100 + i))
    c.put(f"{ns}/jobs", b"kept")
    before = c.du(f"{ns}/job/")
    assert before["names"] == 20 and before["pinned"] > 0 and before["unpinned"] == 0
    res = c.remove(f"{ns}/job", everywhere=True)
    assert res is not None
    assert res["scope"] == f"{ns}/job/" and res["removed"] == 20 and res["reached"] == 1
    assert c.ls(f"{ns}/job/") == []
    with pytest.raises(omst.NotFound):
        c.stat(f"{ns}/job/007")
    assert c.stat(f"{ns}/jobs").size == 4
    after = c.du(f"{ns}/job/")
    assert after["names"] == 0
    assert any(r["scope"] == f"{ns}/job/" and r["kind"] == "remove" for r in c.du(ns + "/")["rules"])
    # A put after the removal lives.
    c.put(f"{ns}/job/new", b"y")
    assert [i.name for i in c.ls(f"{ns}/job/")] == [f"{ns}/job/new"]


def test_remove_prefix_here(plain_client: omst.Client, ns: str) -> None:
    c = plain_client
    c.put(f"{ns}/a/1", b"1")
    c.put(f"{ns}/a/2", b"2")
    assert c.remove(f"{ns}/a", recursive=True)["removed"] == 2
    with pytest.raises(omst.NotFound):
        c.remove(f"{ns}/a", recursive=True)


@pytest.mark.parametrize("bad", ["", "/", "..", "a/../b", "a//b"])
def test_bad_prefixes(plain_client: omst.Client, bad: str) -> None:
    with pytest.raises(omst.InvalidName):
        plain_client.remove(bad, everywhere=True)


def test_ttl(plain_client: omst.Client, ns: str) -> None:
    c = plain_client
    res = c.set_ttl(f"{ns}/tmp/", 1)
    assert res["kind"] == "ttl" and res["ttl_seconds"] == 1
    c.put(f"{ns}/tmp/x", b"short-lived")
    c.put(f"{ns}/one", b"one")
    c.set_ttl(f"{ns}/one", 1)
    deadline = time.monotonic() + 10
    while c.ls(f"{ns}/tmp/") or c.ls(f"{ns}/one"):
        assert time.monotonic() < deadline, "names past their TTL still listed"
        time.sleep(0.1)
    with pytest.raises(ValueError):
        c.set_ttl(f"{ns}/tmp/", -1)
