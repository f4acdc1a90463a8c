#!/usr/bin/env python3
"""CPU profile of both daemons during one fetch (issue 26, item 3).

A parent and a child daemon of BINARY on 127.0.0.1 (DAEMON FLAGS to both,
e.g. '--trusted-lan --site a' for plain bulk connections); a fresh random
blob of --size is put at the parent, then `perf record -g` samples both
daemons while the child runs `omst get NAME -o TARGET` (default
/dev/null). Prints the get's rate and the CPU seconds per GiB of the
sender (the parent daemon) and the receiver (the child daemon and the
client), and leaves OUT.parent.data and OUT.child.data for `perf report`
(CPU seconds of a stage = its share of the samples x the profile's event
count, cpu-clock nanoseconds: `perf report --children --sort symbol`).

    scripts/profile-fetch.py bin/omst ['--trusted-lan --site a'] [--out /tmp/prof] [--size 1G] [--target FILE]

Needs perf. A measurement, not a test.
"""
import argparse
import importlib.util
import os
import signal
import subprocess
import tempfile
import time
import shutil

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_http", os.path.join(here, "bench-http.py"))
bh = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bh)


def faults(pid):
    """The minor and major page faults of process pid so far (all its
    threads: /proc/PID/stat's minflt and majflt)."""
    with open(f"/proc/{pid}/stat") as f:
        st = f.read().rsplit(")", 1)[1].split()
    return int(st[7]), int(st[9])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("flags", nargs="?", default="")
    ap.add_argument("--out", default="/tmp/omst-prof")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--target", default="/dev/null")
    a = ap.parse_args()
    size = bh.size_of(a.size)
    gib = size / (1 << 30)
    tmp = tempfile.mkdtemp(prefix="omst-prof-")
    daemons = []
    try:
        src = os.path.join(tmp, "src")
        with open(src, "wb") as f:
            left = size
            while left:
                n = min(left, 64 << 20)
                f.write(os.urandom(n))
                left -= n
        parent = bh.Daemon(a.binary, os.path.join(tmp, "parent"), None, a.flags.split())
        daemons.append(parent)
        child = bh.Daemon(a.binary, os.path.join(tmp, "child"), parent.addr, a.flags.split())
        daemons.append(child)
        parent.omst("put", "prof/blob", src)
        time.sleep(2)  # the put's background work done
        perfs = [subprocess.Popen(["perf", "record", "-F", "499", "-g", "-o", f"{a.out}.{n}.data", "-p", str(d.p.pid)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for n, d in (("parent", parent), ("child", child))]
        time.sleep(1)
        f0 = [faults(d.p.pid) for d in daemons]
        secs, s, r = bh.timed([a.binary, "--home", child.home, "-q", "get", "prof/blob", "-o", a.target],
                              [parent.p.pid], [child.p.pid, None])
        f1 = [faults(d.p.pid) for d in daemons]
        for p in perfs:
            p.send_signal(signal.SIGINT)
        for p in perfs:
            p.wait()
        print(f"get: {size / secs / 1e6:.0f} MB/s; CPU s/GiB: sender {s / gib:.2f}, receiver {r / gib:.2f}; "
              f"profiles {a.out}.parent.data, {a.out}.child.data")
        print(f"page faults per GiB (minor, major): sender {(f1[0][0] - f0[0][0]) / gib:.0f}, {(f1[0][1] - f0[0][1]) / gib:.0f}; "
              f"receiver daemon {(f1[1][0] - f0[1][0]) / gib:.0f}, {(f1[1][1] - f0[1][1]) / gib:.0f}")
    finally:
        for d in reversed(daemons):
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
