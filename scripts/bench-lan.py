#!/usr/bin/env python3
"""One parent and 4 children on an emulated LAN, against nginx + 4 curls (issue 26).

Builds 6 network namespaces: a switch (a bridge in its own namespace, so the
parent's port is one link, as on a real switch), the parent and 4 children,
each joined to the switch by a veth pair with no shaping (10.9.0.1 the
parent, .2-.5 the children). Then, per round, alternating:

  nginx   nginx (sendfile) in the parent serves a file of --size random
          bytes; the 4 children run `curl -o FILE` at once.
  omst    for each variant (LABEL=BINARY[:DAEMON FLAGS]; by default plain:
          --trusted-lan --site lan, sealed: --site lan, plain-nosib: plain
          with --no-sibling-exchange, plain-nosib-nosendfile: that with
          --bulk-sendfile=false), a parent daemon
          holds a fresh blob of --size (put there; no chunk seen before) and
          its 4 child daemons (--parent the parent) each run
          `omst get NAME -o FILE` at once.

For each: the wall time until the last child is done, each child's
completion time, the bytes that left the parent's port (its veth's tx
counter, so sibling exchange between the children does not count) and the
aggregate MB/s leaving it (those bytes / wall time), the bytes the children
received (4 x size / wall time), and the CPU seconds of the parent (daemon;
nginx) per GiB that left its port and of each child (daemon + client; curl)
per GiB it received, and the bytes that left each child's port (in blobs:
what it served its siblings), each child's minor page faults per GiB
received (daemon + client) and its daemon's peak resident set. Medians over
--runs rounds; every round to the CSV (default docs/bench/lan.csv) and a
table to standard output.

    scripts/bench-lan.py [--size 1G] [--runs 3] \\
        [--omst 'plain=bin/omst:--trusted-lan --site lan' --omst 'sealed=bin/omst:--site lan' ...] \\
        [--scratch /dev/shm] [--timeout 3600] [--out docs/bench/lan.csv] [--perf DIR]

--perf DIR samples the parent and the first child daemon of each omst round
with `perf record -g` (DIR/LABEL-RUN.parent.data, .c1.data).

Namespaces and the scratch directory are named omstw<pid>-lan...: every one
is removed on exit, on Ctrl-C and SIGTERM, and when --timeout passes; the
processes it starts die with it even when it is SIGKILLed, and after that
`omst-wan cleanup` (bin/omst-wan) removes the namespaces and the directory. Needs root (network namespaces),
ip, nginx (apt-get install nginx-light), curl; about 7 x size free in
--scratch. A benchmark, not a test; exits 77 when it cannot
run here.
"""
import argparse
import csv
import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

CLK = os.sysconf("SC_CLK_TCK")
CHILDREN = 4
NET = "10.9.0"
PORT_HTTP = 8080
PORT_OMST = 4040


class Timeout(Exception):
    pass


_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def die_with_parent():
    """In a child before exec: SIGKILL when this script dies, even of
    SIGKILL (kept across nsenter's execve)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def log(msg):
    print(f"bench-lan: {msg}", file=sys.stderr, flush=True)


def size_of(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().removesuffix("IB").removesuffix("B")
    try:
        return int(s[:-1]) * units[s[-1]] if s and s[-1] in units else int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"size {s!r}: want bytes or a number with K, M or G")


def cpu(pid):
    """CPU seconds (user + system) of pid so far; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return 0.0
    fields = s[s.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def faults(pid):
    """Minor page faults of pid so far (all its threads); 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return 0
    return int(s[s.rindex(")") + 2:].split()[7])


def peak_rss_mb(pid):
    """The peak resident set of pid so far (VmHWM), MB; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return 0.0


def sh(*argv, timeout=30, check=True):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


class Lan:
    """The namespaces: sw (the bridge), p (the parent), c1..c4."""

    def __init__(self, run_id):
        self.run_id = run_id
        self.made = []

    def ns(self, host):
        return f"{self.run_id}-{host}"

    def ip(self, host):
        return f"{NET}.1" if host == "p" else f"{NET}.{int(host[1:]) + 1}"

    def build(self):
        sw = self.ns("sw")
        for host in ["sw", "p"] + [f"c{i}" for i in range(1, CHILDREN + 1)]:
            sh("ip", "netns", "add", self.ns(host))
            self.made.append(self.ns(host))
            sh("ip", "-n", self.ns(host), "link", "set", "lo", "up")
        sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", sw, "link", "set", "br0", "up")
        for host in ["p"] + [f"c{i}" for i in range(1, CHILDREN + 1)]:
            n = self.ns(host)
            # Made in the namespaces directly: no name in the host's namespace.
            sh("ip", "link", "add", "eth0", "netns", n, "type", "veth", "peer", "name", host, "netns", sw)
            sh("ip", "-n", sw, "link", "set", host, "master", "br0", "up")
            sh("ip", "-n", n, "addr", "add", f"{self.ip(host)}/24", "dev", "eth0")
            sh("ip", "-n", n, "link", "set", "eth0", "up")

    def tx_bytes(self, host):
        """Bytes host has sent on its port (its eth0's tx counter)."""
        out = json.loads(sh("ip", "-n", self.ns(host), "-j", "-s", "link", "show", "eth0"))
        return out[0]["stats64"]["tx"]["bytes"]

    def argv(self, host, argv):
        # nsenter --net, not ip netns exec: that also unshares the mount
        # namespace, and link(2) refuses a file opened in another mount
        # namespace (EXDEV), so a child daemon could not share the file
        # `omst get -o FILE` opened with its store and wrote every byte
        # twice (a measurement artefact: on a host the client and the
        # daemon share their mounts).
        return ["nsenter", f"--net=/run/netns/{self.ns(host)}", "--"] + argv

    def teardown(self):
        for n in reversed(self.made):
            # Whatever still runs inside (all started by this run) goes first.
            pids = subprocess.run(["ip", "netns", "pids", n], capture_output=True, text=True).stdout.split()
            for p in pids:
                try:
                    os.kill(int(p), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            r = subprocess.run(["ip", "netns", "del", n], capture_output=True, text=True)
            if r.returncode != 0:
                log(f"ip netns del {n}: {r.stderr.strip()}")
        self.made = []


class Proc:
    """A process started in a namespace (nsenter execs it: same pid)."""

    def __init__(self, argv, logpath):
        self.log = open(logpath, "w")
        self.p = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  preexec_fn=die_with_parent)
        self.pid = self.p.pid

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        self.log.close()


class Daemon(Proc):
    def __init__(self, lan, host, bin, home, port, parent, extra, cache):
        os.makedirs(home)
        self.bin, self.home, self.host = bin, home, host
        args = [bin, "daemon", "--home", home, "--listen", f"/ip4/{lan.ip(host)}/tcp/{port}",
                "--log-level", "warn", "--cache-size", str(cache)] + extra
        if parent:
            args += ["--parent", parent]
        super().__init__(lan.argv(host, args), os.path.join(home, "daemon.out"))
        try:
            sh(bin, "--home", home, "wait", timeout=60)
        except Exception:
            raise RuntimeError(f"daemon {host} ({home}) did not start: {open(os.path.join(home, 'daemon.out')).read()[-2000:]}")
        ids = sh(bin, "--home", home, "id").split()
        self.addr = next(a for a in ids if a.startswith(f"/ip4/{lan.ip(host)}/tcp/"))

    def omst(self, *args, timeout=120):
        return sh(self.bin, "--home", self.home, "-q", *args, timeout=timeout)

    def has_parent(self):
        out = sh(self.bin, "--home", self.home, "peers", check=False)
        return any("parent" in line for line in out.splitlines())


def fetch_all(lan, cmds, senders, receivers, timeout, perf=None):
    """Runs one command per child at once. Returns the wall seconds until
    the last is done, each child's seconds, the bytes that left the parent's
    port, the senders' CPU seconds, each child's receiver CPU seconds (its
    daemon's pid, if any, plus the command's own rusage), the bytes that
    left each child's port (what it served its siblings, and its requests),
    each child's minor page faults (daemon and command, as the CPU) and its
    daemon's peak resident set in MB (0 without one).
    perf: (pid, path) pairs sampled with `perf record -g` meanwhile."""
    tx0 = lan.tx_bytes("p")
    ctx0 = [lan.tx_bytes(f"c{c}") for c in range(1, CHILDREN + 1)]
    recs = [subprocess.Popen(["perf", "record", "-g", "-q", "-p", str(pid), "-o", path], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, preexec_fn=die_with_parent) for pid, path in (perf or [])]
    if recs:
        time.sleep(0.5)  # perf attached
    s0 = sum(cpu(p) for p in senders)
    r0 = [cpu(p) if p else 0.0 for p in receivers]
    f0 = [faults(p) if p else 0 for p in receivers]
    t0 = time.monotonic()
    ps = []
    for c in cmds:
        ps.append(subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=die_with_parent))
    done = [None] * len(ps)
    own = [0.0] * len(ps)
    ownf = [0] * len(ps)
    errs = []
    while None in done:
        for i, p in enumerate(ps):
            if done[i] is not None:
                continue
            try:
                # wait4 for this child's own rusage.
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status, ru = p.pid, 0, None
            if pid == 0:
                continue
            done[i] = time.monotonic() - t0
            p.returncode = os.waitstatus_to_exitcode(status)
            if ru:
                own[i] = ru.ru_utime + ru.ru_stime
                ownf[i] = ru.ru_minflt
            if p.returncode != 0:
                errs.append(f"{' '.join(cmds[i][-6:])}: exit {p.returncode}: {p.stderr.read().decode(errors='replace').strip()}")
        if time.monotonic() - t0 > timeout:
            for p in ps:
                if p.poll() is None:
                    p.kill()
            raise Timeout(f"the {len(cmds)} fetches took more than {timeout} s")
        time.sleep(0.01)
    wall = time.monotonic() - t0
    for rec in recs:
        rec.send_signal(signal.SIGINT)
    for rec in recs:
        rec.wait(60)
    tx = lan.tx_bytes("p") - tx0
    ctx = [lan.tx_bytes(f"c{c}") - ctx0[c - 1] for c in range(1, CHILDREN + 1)]
    s = sum(cpu(p) for p in senders) - s0
    r = [(cpu(p) - r0[i] if p else 0.0) + own[i] for i, p in enumerate(receivers)]
    flt = [(faults(p) - f0[i] if p else 0) + ownf[i] for i, p in enumerate(receivers)]
    hwm = [peak_rss_mb(p) if p else 0.0 for p in receivers]
    for p in ps:
        p.stderr.close()
    if errs:
        raise RuntimeError("; ".join(errs))
    return wall, done, tx, s, r, ctx, flt, hwm


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--omst", action="append", help="LABEL=BINARY[:DAEMON FLAGS], repeatable "
                    "(default: plain=bin/omst:--trusted-lan --site lan, sealed=bin/omst:--site lan, "
                    "plain-nosib=bin/omst:--trusted-lan --site lan --no-sibling-exchange, "
                    "plain-nosib-nosendfile=bin/omst:--trusted-lan --site lan --no-sibling-exchange --bulk-sendfile=false)")
    ap.add_argument("--size", type=size_of, default=size_of("1G"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scratch", default="/dev/shm", help="where the files and the daemons' stores go (default /dev/shm: "
                    "in memory, so that 5 emulated hosts do not contend for this machine's one disk)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds the whole run may take")
    ap.add_argument("--out", default="docs/bench/lan.csv")
    ap.add_argument("--perf", metavar="DIR", help="sample the parent and the first child daemon of every omst round with "
                    "`perf record -g` into DIR/LABEL-RUN.{parent,c1}.data (for `perf report --children`)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        log("needs root (network namespaces)")
        sys.exit(77)
    for tool in ("ip", "nsenter", "nginx", "curl") + (("perf",) if a.perf else ()):
        if not shutil.which(tool):
            log(f"{tool} not found in PATH (Debian: apt-get install iproute2 util-linux nginx-light curl)")
            sys.exit(77)
    specs = a.omst or ["plain=bin/omst:--trusted-lan --site lan", "sealed=bin/omst:--site lan",
                       "plain-nosib=bin/omst:--trusted-lan --site lan --no-sibling-exchange",
                       # the parent sends from memory, not with sendfile:
                       # does sendfile help its port, or move CPU to the children?
                       "plain-nosib-nosendfile=bin/omst:--trusted-lan --site lan --no-sibling-exchange --bulk-sendfile=false"]
    variants = []
    for spec in specs:
        label, sep, rest = spec.partition("=")
        bin, _, flags = rest.partition(":")
        if not sep or not label or not bin:
            ap.error(f"--omst {spec!r}: want LABEL=BINARY[:DAEMON FLAGS]")
        if not os.access(bin, os.X_OK):
            ap.error(f"--omst {spec!r}: {bin} is not an executable (make build)")
        variants.append((label, os.path.abspath(bin), flags.split()))
    if a.runs < 1:
        ap.error("--runs: want at least 1")
    size = a.size
    gib = size / (1 << 30)
    # The base file, the put's source and the parent's copy, and each
    # child's file (shared with its store); one variant's daemons at a time.
    need = size * (3 + CHILDREN) + (256 << 20)
    st = os.statvfs(a.scratch)
    if st.f_bavail * st.f_frsize < need:
        log(f"{a.scratch} has {st.f_bavail * st.f_frsize >> 20} MiB free, the run needs about {need >> 20} MiB: "
            "a smaller --size or another --scratch")
        sys.exit(2)

    run_id = f"omstw{os.getpid()}-lan"
    tmp = os.path.join(a.scratch, run_id)
    lan = Lan(run_id)
    procs = []
    rows = []

    def on_signal(sig, _):
        raise KeyboardInterrupt(f"signal {sig}")

    def on_alarm(*_):
        raise Timeout(f"the run took more than --timeout {a.timeout} s")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(a.timeout)
    status = 0
    try:
        os.makedirs(tmp, mode=0o700)
        lan.build()
        www = os.path.join(tmp, "www")
        os.makedirs(www)
        base = os.path.join(www, "blob")
        log(f"writing {size >> 20} MiB of random bytes")
        with open(base, "wb") as f:
            left = size
            while left:
                n = min(left, 64 << 20)
                f.write(os.urandom(n))
                left -= n
        conf = os.path.join(tmp, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""user root; worker_processes 1; daemon off; error_log {tmp}/nginx.err; pid {tmp}/nginx.pid;
events {{ worker_connections 64; }}
http {{ access_log off; sendfile on; tcp_nopush on;
  server {{ listen {lan.ip('p')}:{PORT_HTTP}; root {www}; }} }}
""")
        ng = Proc(lan.argv("p", ["nginx", "-c", conf, "-p", tmp]), os.path.join(tmp, "nginx.out"))
        procs.append(ng)
        url = f"http://{lan.ip('p')}:{PORT_HTTP}/blob"
        for _ in range(100):
            if subprocess.run(lan.argv("c1", ["curl", "-sf", "-o", "/dev/null", url]), capture_output=True).returncode == 0:
                break  # the page cache is warm too
            time.sleep(0.1)
        else:
            raise RuntimeError(f"nginx does not serve {url}: {open(os.path.join(tmp, 'nginx.err')).read()[-1000:]}")

        def start_variant(label, bin, flags, port, home):
            """The parent and its 4 children, the children in session."""
            started = []
            try:
                parent = Daemon(lan, "p", bin, os.path.join(home, "p"), port, None, flags, 2 * size + (1 << 30))
                started.append(parent)
                for c in range(1, CHILDREN + 1):
                    started.append(Daemon(lan, f"c{c}", bin, os.path.join(home, f"c{c}"), port, parent.addr, flags,
                                          2 * size + (1 << 30)))
                kids = started[1:]
                deadline = time.monotonic() + 30
                while not all(d.has_parent() for d in kids):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{label}: the children did not connect to the parent in 30 s")
                    time.sleep(0.2)
                return parent, kids
            finally:
                procs.extend(started)

        def stop_variant(ds, home):
            """Stops ds and removes their homes: a removed name's bytes
            stay in a store until evicted, so that daemons kept for every
            round would hold runs x size each."""
            for d in ds:
                d.stop()
                procs.remove(d)
            shutil.rmtree(home, ignore_errors=True)

        step = max(120, int(size / 5e6))  # no step slower than 5 MB/s
        src = os.path.join(tmp, "src")
        dests = [os.path.join(tmp, f"out-c{c}") for c in range(1, CHILDREN + 1)]
        nginx_pids = lambda: [int(p) for p in sh("pgrep", "-P", str(ng.pid), check=False).split()] + [ng.pid]
        k = 0
        for run in range(a.runs):
            for label in ["nginx"] + [v[0] for v in variants]:
                load = os.getloadavg()[0]
                if label == "nginx":
                    cmds = [lan.argv(f"c{c}", ["curl", "-sf", "-o", dests[c - 1], url]) for c in range(1, CHILDREN + 1)]
                    wall, each, tx, s, r, ctx, flt, hwm = fetch_all(lan, cmds, nginx_pids(), [None] * CHILDREN, step)
                    peer = "nginx + 4 curl"
                else:
                    i = [v[0] for v in variants].index(label)
                    home = os.path.join(tmp, f"{label}-{run}")
                    parent, kids = start_variant(label, variants[i][1], variants[i][2], PORT_OMST + i, home)
                    load = os.getloadavg()[0]
                    k += 1
                    with open(src, "wb") as f:
                        # A prefix of its own length per blob: every chunk
                        # boundary falls elsewhere in the base bytes, so no
                        # chunk of one blob is a chunk of another.
                        f.write(b"%016d" % k * k)
                        with open(base, "rb") as b:
                            shutil.copyfileobj(b, f, 16 << 20)
                    name = f"bench/lan-{k}"
                    parent.omst("put", name, src, timeout=step)
                    os.unlink(src)
                    time.sleep(2)  # the put's background work (announce, provide) done
                    cmds = [[d.bin, "--home", d.home, "-q", "get", name, "-o", dests[i]] for i, d in enumerate(kids)]
                    perf = None
                    if a.perf:
                        os.makedirs(a.perf, exist_ok=True)
                        perf = [(parent.pid, os.path.join(a.perf, f"{label}-{run}.parent.data")),
                                (kids[0].pid, os.path.join(a.perf, f"{label}-{run}.c1.data"))]
                    wall, each, tx, s, r, ctx, flt, hwm = fetch_all(lan, cmds, [parent.pid], [d.pid for d in kids], step, perf)
                    peer = f"omst {label}"
                    stop_variant([parent] + kids, home)
                for d in dests:
                    if os.path.getsize(d) < size:
                        raise RuntimeError(f"{peer}: {d} has {os.path.getsize(d)} bytes, want at least {size}")
                    os.unlink(d)
                row = dict(run=run, peer=peer, size=size, wall_s=round(wall, 3),
                           child_s=" ".join(f"{x:.3f}" for x in each),
                           port_bytes=tx, port_blobs=round(tx / size, 3), port_mbps=round(tx / wall / 1e6, 1),
                           delivered_mbps=round(CHILDREN * size / wall / 1e6, 1),
                           parent_cpu_s_gib_sent=round(s / (tx / (1 << 30)), 3),
                           child_cpu_s_gib=" ".join(f"{x / gib:.3f}" for x in r),
                           child_sent_blobs=" ".join(f"{x / size:.3f}" for x in ctx),
                           child_faults_gib=" ".join(f"{x / gib:.0f}" for x in flt),
                           child_peak_rss_mb=" ".join(f"{x:.0f}" for x in hwm), load=round(load, 1))
                rows.append(row)
                log(f"run {run} {peer}: {wall:.2f} s, port {tx / size:.2f} blobs at {tx / wall / 1e6:.0f} MB/s, "
                    f"delivered {CHILDREN * size / wall / 1e6:.0f} MB/s, CPU s/GiB parent {s / (tx / (1 << 30)):.2f} (sent) "
                    f"children {' '.join('%.2f' % (x / gib) for x in r)}, sent {' '.join('%.2f' % (x / size) for x in ctx)} "
                    f"blobs, minor faults/GiB {' '.join('%.0f' % (x / gib) for x in flt)} (load {load:.1f})")
        signal.alarm(0)
        write_csv(a.out, rows)
        print(table(rows))
    except (KeyboardInterrupt, Timeout, RuntimeError, subprocess.SubprocessError, OSError) as e:
        log(f"stopped: {e}")
        status = 130 if isinstance(e, KeyboardInterrupt) else 1
        if rows and a.out:
            write_csv(a.out, rows)
            log(f"the {len(rows)} rounds done are in {a.out}")
    finally:
        signal.alarm(0)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # cleanup is not interrupted
        for p in reversed(procs):
            try:
                p.stop()
            except Exception as e:
                log(f"stopping {p.pid}: {e}")
        lan.teardown()
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(status)


def write_csv(path, rows):
    """Every round to path (nothing if path or rows are empty)."""
    if not path or not rows:
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)


def table(rows):
    """The medians of each peer, the ratios against nginx."""
    med = lambda rs, key: statistics.median(float(r[key]) for r in rs)
    peers = list(dict.fromkeys(r["peer"] for r in rows))
    ng = [r for r in rows if r["peer"].startswith("nginx")]
    out = ["| peer | last child done (s) | each child (s, median) | parent port (blobs) | parent port MB/s | "
           "delivered MB/s | / nginx (port, delivered) | parent CPU s/GiB sent | child CPU s/GiB received | child port (blobs) | "
           "child minor faults/GiB | runs (delivered MB/s) | load |",
           "|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---|---|"]
    for peer in peers:
        rs = [r for r in rows if r["peer"] == peer]
        each = [statistics.median(float(r["child_s"].split()[i]) for r in rs) for i in range(CHILDREN)]
        child_cpu = statistics.median(float(x) for r in rs for x in r["child_cpu_s_gib"].split())
        child_sent = statistics.median(float(x) for r in rs for x in r.get("child_sent_blobs", "0").split())
        child_flt = statistics.median(float(x) for r in rs for x in r.get("child_faults_gib", "0").split())
        ratio = ""
        if ng and not peer.startswith("nginx"):
            ratio = f"{med(rs, 'port_mbps') / med(ng, 'port_mbps'):.2f}, {med(rs, 'delivered_mbps') / med(ng, 'delivered_mbps'):.2f}"
        out.append(f"| {peer} | {med(rs, 'wall_s'):.2f} | {' '.join('%.2f' % x for x in each)} | {med(rs, 'port_blobs'):.2f} | "
                   f"{med(rs, 'port_mbps'):.0f} | {med(rs, 'delivered_mbps'):.0f} | {ratio} | {med(rs, 'parent_cpu_s_gib_sent'):.2f} | "
                   f"{child_cpu:.2f} | {child_sent:.2f} | {child_flt:.0f} | {', '.join('%.0f' % float(r['delivered_mbps']) for r in rs)} | "
                   f"{min(float(r['load']) for r in rs):.0f}-{max(float(r['load']) for r in rs):.0f} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
