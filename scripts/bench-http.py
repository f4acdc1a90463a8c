#!/usr/bin/env python3
"""Loopback fetch against plain HTTP, side by side in one run (issue 26).

For each omst binary given (e.g. main's, then this checkout's), a parent
daemon and a child daemon on 127.0.0.1; nginx (sendfile) serves the same
bytes. Each run puts a fresh blob at the parent (a prefix of 16 x k bytes in
front of the base file: every chunk new), then, alternating:
`omst get NAME -o /dev/null` at the child, `curl -o /dev/null`,
`omst get NAME -o FILE` (a second fresh blob), `curl -o FILE`; with --put
also `omst put NAME FILE` of a third fresh file at the parent, then `cp FILE
NEW` (the put's CPU: the parent daemon and the client). Each figure
gets the CPU seconds per GiB of the sender (the parent daemon; nginx's
workers) and the receiver (the child daemon; curl) beside it, and the load
average at its start; for an omst get also the child daemon's CPU in the
3 s after the get returned (receiver_after_cpu_s_gib: work a get left
behind). The binaries' order rotates from run to run (on this VM whichever
runs first after an eviction pays for fresh pages). Medians of -runs;
every run to the CSV.

    scripts/bench-http.py --omst before=bin/omst-main --omst after=bin/omst \\
        --omst 'plain=bin/omst:--trusted-lan --site a' \\
        [--size 1G] [--runs 3] [--daemon-args '--bulk-conns 4'] [--out docs/bench/http-loopback.csv]

Needs nginx (apt-get install nginx-light) and curl. A benchmark, not a test.
"""
import argparse
import csv
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

CLK = os.sysconf("SC_CLK_TCK")
AFTER = 3  # seconds after an omst get in which the child daemon's CPU is counted apart


def cpu(pid):
    """CPU seconds (user + system) of pid so far."""
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def nginx_workers(master):
    out = subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out] + [master]


def size_of(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def random_file(path, size):
    """Writes size fresh random bytes to path, 64 MiB at a time."""
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 64 << 20)
            f.write(os.urandom(n))
            left -= n


class Daemon:
    def __init__(self, bin, home, parent, extra):
        self.bin, self.home = bin, home
        os.makedirs(home, exist_ok=True)
        args = [bin, "daemon", "--home", home, "--listen", "/ip4/127.0.0.1/tcp/0", "--log-level", "warn",
                "--cache-size", str(3 << 30)] + extra
        if parent:
            args += ["--parent", parent]
        self.log = open(os.path.join(home, "daemon.out"), "w")
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        subprocess.run([bin, "--home", home, "wait"], check=True, capture_output=True, timeout=60)
        ids = subprocess.run([bin, "--home", home, "id"], check=True, capture_output=True, text=True).stdout.split()
        self.addr = next(a for a in ids if a.startswith("/ip4/127.0.0.1/tcp/"))

    def omst(self, *args):
        return subprocess.run([self.bin, "--home", self.home, "-q"] + list(args), check=True, capture_output=True, text=True)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()


def timed(cmd, senders, receivers):
    """Runs cmd; returns seconds and the CPU seconds of senders and
    receivers (pids; None: cmd itself, from its rusage)."""
    s0 = sum(cpu(p) for p in senders)
    r0 = sum(cpu(p) for p in receivers if p)
    ru0 = os.times()
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True)
    secs = time.monotonic() - t0
    ru1 = os.times()
    s = sum(cpu(p) for p in senders) - s0
    r = sum(cpu(p) for p in receivers if p) - r0
    if None in receivers:
        r += (ru1.children_user - ru0.children_user) + (ru1.children_system - ru0.children_system)
    return secs, s, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--omst", action="append", required=True, help="LABEL=BINARY[:DAEMON FLAGS], repeatable")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--daemon-args", default="", help="extra daemon flags (every binary)")
    ap.add_argument("--after-args", default="", help="extra daemon flags for binaries but the first")
    ap.add_argument("--out", default="")
    ap.add_argument("--put", action="store_true", help="also omst put of a fresh file against cp, alternating")
    a = ap.parse_args()
    size = size_of(a.size)
    gib = size / (1 << 30)
    tmp = tempfile.mkdtemp(prefix="omst-http-", dir=os.environ.get("TMPDIR", "/tmp"))
    procs = []
    rows = []
    try:
        www = os.path.join(tmp, "www")
        os.makedirs(www)
        base = os.path.join(tmp, "base")
        random_file(base, size)
        os.link(base, os.path.join(www, "blob"))
        conf = os.path.join(tmp, "nginx.conf")
        port = 18000 + os.getpid() % 1000
        with open(conf, "w") as f:
            f.write(f"""user root; worker_processes 1; daemon off; error_log {tmp}/nginx.err; pid {tmp}/nginx.pid;
events {{ worker_connections 64; }}
http {{ access_log off; sendfile on; tcp_nopush on;
  server {{ listen 127.0.0.1:{port}; root {www}; }} }}
""")
        ng = subprocess.Popen(["nginx", "-c", conf, "-p", tmp])
        procs.append(ng)
        time.sleep(0.5)
        url = f"http://127.0.0.1:{port}/blob"
        subprocess.run(["curl", "-sf", "-o", "/dev/null", url], check=True)  # warm the page cache
        daemons = {}
        for i, spec in enumerate(a.omst):
            label, bin = spec.split("=", 1)
            bin, _, own = bin.partition(":")
            extra = a.daemon_args.split() + (a.after_args.split() if i > 0 else []) + own.split()
            root = Daemon(bin, os.path.join(tmp, label, "root"), None, extra)
            procs.append(root)
            child = Daemon(bin, os.path.join(tmp, label, "child"), root.addr, extra)
            procs.append(child)
            daemons[label] = (root, child)
        dest = os.path.join(tmp, "out")
        src = os.path.join(tmp, "src")
        k = 0
        def fresh(k):
            with open(src, "wb") as f:
                # A prefix of its own length per blob: every chunk
                # boundary falls elsewhere in the base bytes, so no
                # chunk of one blob is a chunk of another.
                f.write(b"%016d" % k * k)
            with open(src, "ab") as f, open(base, "rb") as b:
                shutil.copyfileobj(b, f, 16 << 20)

        labels = list(daemons.items())
        for run in range(a.runs):
            # Rotate the binaries' order from run to run: whichever runs
            # first after an eviction pays for fresh pages (this VM hands
            # freed memory back to its host), so a fixed order biases.
            for label, (root, child) in labels[run % len(labels):] + labels[:run % len(labels)]:
                if a.put:
                    k += 1
                    fresh(k)
                    name = f"bench/put-{k}"
                    load = os.getloadavg()[0]
                    secs, s, r = timed([root.bin, "--home", root.home, "-q", "put", name, src], [root.p.pid], [None])
                    rows.append(dict(run=run, peer=f"omst {label}", mode="put", secs=secs, mbps=size / secs / 1e6,
                                     sender_cpu_s_gib=r / gib, receiver_cpu_s_gib=s / gib, load=load,
                                     receiver_after_cpu_s_gib=0.0))
                    print(f"run {run} omst {label} put: {size/secs/1e6:.0f} MB/s, CPU s/GiB client {r/gib:.2f} daemon {s/gib:.2f} (load {load:.1f})", file=sys.stderr)
                    time.sleep(2)
                    root.omst("rm", name)
                    load = os.getloadavg()[0]
                    secs, s, r = timed(["cp", src, dest], [], [None])
                    rows.append(dict(run=run, peer=f"cp ({label})", mode="put", secs=secs, mbps=size / secs / 1e6,
                                     sender_cpu_s_gib=r / gib, receiver_cpu_s_gib=0, load=load,
                                     receiver_after_cpu_s_gib=0.0))
                    print(f"run {run} cp: {size/secs/1e6:.0f} MB/s, CPU s/GiB {r/gib:.2f} (load {load:.1f})", file=sys.stderr)
                    os.unlink(dest)
                for mode, target in (("devnull", "/dev/null"), ("file", dest)):
                    k += 1
                    fresh(k)
                    name = f"bench/http-{k}"
                    root.omst("put", name, src)
                    time.sleep(2)  # the put's background work (announce, provide) done
                    load = os.getloadavg()[0]
                    secs, s, r = timed([child.bin, "--home", child.home, "-q", "get", name, "-o", target],
                                       [root.p.pid], [child.p.pid, None])
                    # Work the child daemon still does once the get has
                    # returned (a store behind the reader) counts too.
                    c0 = cpu(child.p.pid)
                    time.sleep(AFTER)
                    after = cpu(child.p.pid) - c0
                    rows.append(dict(run=run, peer=f"omst {label}", mode=mode, secs=secs, mbps=size / secs / 1e6,
                                     sender_cpu_s_gib=s / gib, receiver_cpu_s_gib=r / gib, load=load,
                                     receiver_after_cpu_s_gib=after / gib))
                    print(f"run {run} omst {label} {mode}: {size/secs/1e6:.0f} MB/s, CPU s/GiB sender {s/gib:.2f} receiver {r/gib:.2f} (+{after/gib:.2f} in the {AFTER} s after) (load {load:.1f})", file=sys.stderr)
                    if target != "/dev/null":
                        os.unlink(target)
                    child.omst("rm", name)
                    root.omst("rm", name)
                    load = os.getloadavg()[0]
                    secs, s, r = timed(["curl", "-sf", "-o", target, url], nginx_workers(ng.pid), [None])
                    rows.append(dict(run=run, peer=f"curl ({label})", mode=mode, secs=secs, mbps=size / secs / 1e6,
                                     sender_cpu_s_gib=s / gib, receiver_cpu_s_gib=r / gib, load=load,
                                     receiver_after_cpu_s_gib=0.0))
                    print(f"run {run} curl {mode}: {size/secs/1e6:.0f} MB/s, CPU s/GiB sender {s/gib:.2f} receiver {r/gib:.2f} (load {load:.1f})", file=sys.stderr)
                    if target != "/dev/null":
                        os.unlink(target)
        if a.out:
            with open(a.out, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
                w.writeheader()
                w.writerows(rows)
        print("| peer | fetch to | MB/s (median) | runs | sender CPU s/GiB | receiver CPU s/GiB (+ after) | load |")
        print("|---|---|---:|---|---:|---:|---|")
        for peer in dict.fromkeys(r["peer"] for r in rows):
            for mode in ("devnull", "file", "put"):
                rs = [r for r in rows if r["peer"] == peer and r["mode"] == mode]
                if not rs:
                    continue
                med = lambda key: statistics.median(r[key] for r in rs)
                print(f"| {peer} | {dict(devnull='/dev/null', file='a new file', put='put (sender: client; receiver: daemon)')[mode]} | {med('mbps'):.0f} | "
                      f"{', '.join('%.0f' % r['mbps'] for r in rs)} | {med('sender_cpu_s_gib'):.2f} | "
                      f"{med('receiver_cpu_s_gib'):.2f} (+{med('receiver_after_cpu_s_gib'):.2f}) | {min(r['load'] for r in rs):.0f}-{max(r['load'] for r in rs):.0f} |")
    finally:
        for p in reversed(procs):
            if isinstance(p, Daemon):
                p.stop()
            else:
                p.terminate()
                p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
