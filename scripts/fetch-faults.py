#!/usr/bin/env python3
"""The receiver's memory during fetches on loopback (issue 26).

A parent and a child daemon of BINARY on 127.0.0.1 (DAEMON FLAGS to both,
default '--trusted-lan --site a'); two fresh random blobs of --size are put
at the parent, then the child runs `omst get NAME -o TARGET` of the first
(a cold daemon) and then of the second (the same daemon, warm). For each
get, one CSV line to standard output: label, which get (1 or 2), MB/s, the
sender's and the receiver's CPU seconds per GiB (as scripts/bench-http.py
counts them), the child daemon's minor page faults per GiB during the get
and its peak resident set so far (VmHWM, kB), and the load average.
--env sets variables for the child daemon only (e.g. GOGC=50,
GODEBUG=gctrace=1), --log keeps its output.

    scripts/fetch-faults.py BINARY ['--trusted-lan --site a'] [--size 1G] [--env 'GOGC=50'] [--label L] [--log FILE]

A measurement, not a test.
"""
import argparse
import importlib.util
import os
import shutil
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_http", os.path.join(here, "bench-http.py"))
bh = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bh)


def faults(pid):
    """Minor page faults of pid so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[7])


def peak_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("flags", nargs="?", default="--trusted-lan --site a")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--target", default="")
    ap.add_argument("--env", default="", help="VAR=VALUE ... for the child daemon")
    ap.add_argument("--label", default="")
    ap.add_argument("--log", default="", help="copy the child daemon's output here")
    a = ap.parse_args()
    size = bh.size_of(a.size)
    gib = size / (1 << 30)
    tmp = tempfile.mkdtemp(prefix="omst-faults-")
    target = a.target or os.path.join(tmp, "target")
    daemons = []
    try:
        src = os.path.join(tmp, "src")
        parent = bh.Daemon(a.binary, os.path.join(tmp, "parent"), None, a.flags.split())
        daemons.append(parent)
        env = dict(os.environ)
        os.environ.update(kv.split("=", 1) for kv in a.env.split())
        try:
            child = bh.Daemon(a.binary, os.path.join(tmp, "child"), parent.addr, a.flags.split())
        finally:
            os.environ.clear()
            os.environ.update(env)
        daemons.append(child)
        for name in ("faults/1", "faults/2"):
            bh.random_file(src, size)
            parent.omst("put", name, src)
        os.unlink(src)
        time.sleep(2)  # the puts' background work done
        for k, name in enumerate(("faults/1", "faults/2")):
            f0 = faults(child.p.pid)
            secs, s, r = bh.timed([a.binary, "--home", child.home, "-q", "get", name, "-o", target],
                                  [parent.p.pid], [child.p.pid, None])
            f1 = faults(child.p.pid)
            print(f"{a.label},{k + 1},{size / secs / 1e6:.0f},{s / gib:.2f},{r / gib:.2f},{(f1 - f0) / gib:.0f},"
                  f"{peak_rss_kb(child.p.pid)},{os.getloadavg()[0]:.1f}", flush=True)
            os.unlink(target)
            time.sleep(1)
    finally:
        for d in reversed(daemons):
            d.stop()
        if a.log and len(daemons) > 1:
            shutil.copy(os.path.join(tmp, "child", "daemon.out"), a.log)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
