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

With --gets N (no perf unless --perf): one pair of daemons, N fresh blobs
fetched in a row, each removed at both ends (`omst rm`) after its get, as
scripts/bench-http.py does, and per get the child daemon's user and system
CPU s/GiB (counted until 3 s after the get), its minor/major faults, RSS
and Go heap (its --metrics), the machine's free and page cache (MiB), the
child's descriptors of deleted files, and the du of both stores. Between
gets: --drop-caches (sync; drop_caches=3, root; the whole machine's page
cache), --evict-own (fadvise DONTNEED of the benchmark's own files only:
the source, both daemons' homes), --restart-child (same home). --perf
records each get's child profile to OUT.child.getN.data.

    scripts/profile-fetch.py bin/omst [FLAGS] --gets 4 [--drop-caches | --evict-own | --restart-child] [--perf]
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


def proc_stat(pid):
    """utime and stime (s), minflt and majflt of pid (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        st = f.read().rsplit(")", 1)[1].split()
    clk = os.sysconf("SC_CLK_TCK")
    return int(st[11]) / clk, int(st[12]) / clk, int(st[7]), int(st[9])


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


def meminfo():
    """MemFree and page cache (Cached), MiB."""
    m = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            m[k] = int(v.split()[0]) / 1024
    return m["MemFree"], m["Cached"]


def deleted_fds(pid):
    """The paths of pid's descriptors that point at deleted files."""
    out = []
    d = f"/proc/{pid}/fd"
    for fd in os.listdir(d):
        try:
            t = os.readlink(os.path.join(d, fd))
        except OSError:
            continue
        if t.endswith(" (deleted)"):
            out.append(t)
    return out


def du_mib(path):
    return int(subprocess.run(["du", "-sk", path], capture_output=True, text=True).stdout.split()[0]) / 1024


def go_heap_mib(port):
    """The daemon's Go heap in use (go_memstats_heap_inuse_bytes), MiB."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("go_memstats_heap_inuse_bytes "):
                return float(line.split()[1]) / (1 << 20)
    return 0


def evict(paths):
    """posix_fadvise(DONTNEED) on every regular file under paths: their
    clean pages leave the page cache (after a sync of the files)."""
    for top in paths:
        for dirpath, _, files in os.walk(top):
            for n in files:
                try:
                    fd = os.open(os.path.join(dirpath, n), os.O_RDONLY)
                except OSError:
                    continue
                try:
                    os.fdatasync(fd)
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                except OSError:
                    pass
                finally:
                    os.close(fd)


def series(a):
    """--gets: N gets in a row at one pair of daemons, rm between."""
    size = bh.size_of(a.size)
    gib = size / (1 << 30)
    tmp = tempfile.mkdtemp(prefix="omst-grow-", dir=os.environ.get("TMPDIR", "/tmp"))
    port = 19000 + os.getpid() % 1000
    daemons = []
    try:
        base = os.path.join(tmp, "base")
        bh.random_file(base, size)
        src = os.path.join(tmp, "src")
        parent = bh.Daemon(a.binary, os.path.join(tmp, "parent"), None, a.flags.split())
        daemons.append(parent)
        cflags = a.flags.split() + ["--metrics", f"127.0.0.1:{port}"]
        child = bh.Daemon(a.binary, os.path.join(tmp, "child"), parent.addr, cflags)
        daemons.append(child)
        print("get | MB/s | user s/GiB | sys s/GiB | (+ after) | minflt/GiB | majflt | RSS MiB | heap MiB | free MiB | cache MiB | deleted fds | du child MiB | du parent MiB | load")
        for k in range(1, a.gets + 1):
            if k > 1:
                if a.restart_child:
                    child.stop()
                    daemons.remove(child)
                    child = bh.Daemon(a.binary, child.home, parent.addr, cflags)
                    daemons.append(child)
                if a.drop_caches:
                    subprocess.run(["sync"], check=True)
                    with open("/proc/sys/vm/drop_caches", "w") as f:
                        f.write("3\n")
                if a.evict_own:
                    evict([tmp])
            with open(src, "wb") as f:
                f.write(b"%016d" % k * k)  # as bench-http.py: every chunk new
            with open(src, "ab") as f, open(base, "rb") as b:
                shutil.copyfileobj(b, f, 16 << 20)
            name = f"grow/{k}"
            parent.omst("put", name, src)
            time.sleep(2)
            perf = None
            if a.perf:
                perf = subprocess.Popen(["perf", "record", "-F", "499", "-g", "-o", f"{a.out}.child.get{k}.data", "-p", str(child.p.pid)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
            load = os.getloadavg()[0]
            c0 = proc_stat(child.p.pid)
            t0 = time.monotonic()
            subprocess.run([a.binary, "--home", child.home, "-q", "get", name, "-o", a.target], check=True, capture_output=True)
            secs = time.monotonic() - t0
            c1 = proc_stat(child.p.pid)
            time.sleep(3)
            c2 = proc_stat(child.p.pid)
            if perf:
                perf.send_signal(signal.SIGINT)
                perf.wait()
            free, cache = meminfo()
            dels = deleted_fds(child.p.pid)
            row = [k, size / secs / 1e6, (c2[0] - c0[0]) / gib, (c2[1] - c0[1]) / gib,
                   ((c2[0] + c2[1]) - (c1[0] + c1[1])) / gib, (c2[2] - c0[2]) / gib, c2[3] - c0[3],
                   rss_mib(child.p.pid), go_heap_mib(port), free, cache, len(dels),
                   du_mib(child.home), du_mib(parent.home), load]
            print(" | ".join(f"{v:.2f}" if isinstance(v, float) and v < 100 else f"{v:.0f}" if isinstance(v, float) else str(v) for v in row), flush=True)
            for d in dels[:5]:
                print("   deleted:", d)
            if a.target != "/dev/null":
                os.unlink(a.target)
            child.omst("rm", name)
            parent.omst("rm", name)
        free, cache = meminfo()
        print(f"end: free {free:.0f} MiB, cache {cache:.0f} MiB, deleted fds {len(deleted_fds(child.p.pid))}, du child {du_mib(child.home):.0f} MiB, parent {du_mib(parent.home):.0f} MiB")
    finally:
        for d in reversed(daemons):
            d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("flags", nargs="?", default="")
    ap.add_argument("--out", default="/tmp/omst-prof")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--target", default="/dev/null")
    ap.add_argument("--gets", type=int, default=0, help="N gets in a row at one pair, rm between (see above)")
    ap.add_argument("--drop-caches", action="store_true")
    ap.add_argument("--evict-own", action="store_true")
    ap.add_argument("--restart-child", action="store_true")
    ap.add_argument("--perf", action="store_true")
    a = ap.parse_args()
    if a.gets:
        return series(a)
    size = bh.size_of(a.size)
    gib = size / (1 << 30)
    tmp = tempfile.mkdtemp(prefix="omst-prof-")
    daemons = []
    try:
        src = os.path.join(tmp, "src")
        bh.random_file(src, size)
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
