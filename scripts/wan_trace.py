#!/usr/bin/env python3
"""Where one get over the emulated WAN spends its time (scripts/wan-trace.sh).

Reads OUT/wan.pcap (the head's WAN interface), OUT/lan.pcap (the worker's
LAN interface) and the worker's daemon log (OUT/run/a-w1/daemon.log, debug
level: "get: resolved" and "get: done" with took=), prints the get's
timeline and the data from the root per round trip, and writes
OUT/trace.csv (t_ms from the get's start, link, cumulative data bytes).
Data packets are those of 1000 bytes or more from the root to the head
(WAN) or from the head to the worker (LAN); with GSO one captured packet
may hold many segments. The capture must run with --immediate-mode: the
harness kills it (SIGKILL) when the run ends, and packets libpcap has not
handed over by then are lost."""
import csv
import datetime
import re
import subprocess
import sys

RTT_MS = 41.0  # the emulated path's TCP round trip (docs/benchmarks.md)
LINE_BYTES_PER_RTT = 100e6 / 8 * RTT_MS / 1000


def packets(path, link):
    out = subprocess.run(["tcpdump", "-r", path, "-nn", "-tt"], capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"(\d+\.\d+) IP (\S+) > (\S+): .*length (\d+)", line)
        if m:
            rows.append((float(m.group(1)), link, m.group(2), m.group(3), int(m.group(4))))
    return rows


def log_times(path):
    start = resolved = done = None
    for line in open(path):
        m = re.match(r"time=(\S+) .*msg=\"get: (resolved|done)\".* took=([0-9.]+)(ms|s|µs)", line)
        if not m:
            continue
        t = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
        took = float(m.group(3)) * {"ms": 1e-3, "s": 1.0, "µs": 1e-6}[m.group(4)]
        if m.group(2) == "resolved":
            resolved, start = t, t - took
        else:
            done, start = t, t - took
    return start, resolved, done


def main():
    out = sys.argv[1]
    start, resolved, done = log_times(out + "/run/a-w1/daemon.log")
    if start is None or done is None:
        sys.exit("wan_trace: no 'get: done' in the worker's log (log_level=debug?)")
    rows = sorted(packets(out + "/wan.pcap", "wan") + packets(out + "/lan.pcap", "lan"))
    data = [r for r in rows if r[4] >= 1000 and r[0] >= start and
            ((r[1] == "wan" and r[2].startswith("10.0.0.1.") and r[3].startswith("10.1.0.1.")) or
             (r[1] == "lan" and r[2].startswith("10.1.0.1.") and r[3].startswith("10.1.0.2.")))]
    if not data:
        sys.exit("wan_trace: no data packets captured")
    ms = lambda t: (t - start) * 1000
    cum = {"wan": 0, "lan": 0}
    with open(out + "/trace.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_ms", "link", "cum_bytes"])
        for t, link, _, _, n in data:
            cum[link] += n
            w.writerow([f"{ms(t):.2f}", link, cum[link]])
    wan = [r for r in data if r[1] == "wan"]
    lan = [r for r in data if r[1] == "lan"]
    first = wan[0][0]
    print(f"get started                  0.0 ms")
    print(f"name resolved (lookup)   {ms(resolved):7.1f} ms")
    print(f"first data from the root {ms(first):7.1f} ms  (at the head's WAN interface, before the 20 ms delay)")
    bins = {}
    for t, _, _, _, n in wan:
        bins.setdefault(int((t - first) * 1000 // RTT_MS), 0)
        bins[int((t - first) * 1000 // RTT_MS)] += n
    full = None
    print(f"data from the root per round trip of {RTT_MS:.0f} ms (line rate: {LINE_BYTES_PER_RTT / 1000:.0f} KB):")
    for b in range(max(bins) + 1):
        kb = bins.get(b, 0)
        if full is None and kb >= 0.9 * LINE_BYTES_PER_RTT:
            full = b
        print(f"  round trip {b + 1:2d}: {kb / 1000:6.0f} KB")
    print(f"last data from the root  {ms(wan[-1][0]):7.1f} ms; at line rate from round trip {full + 1 if full is not None else '-'}")
    if lan:
        print(f"last data to the worker  {ms(lan[-1][0]):7.1f} ms")
    print(f"get done                 {ms(done):7.1f} ms")
    print(f"bytes from the root: {cum['wan']}, to the worker: {cum['lan']} (headers included)")


if __name__ == "__main__":
    main()
