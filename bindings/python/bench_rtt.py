#!/usr/bin/env python3
"""Benchmark the omst Python client against a running daemon.

Measures:
  * the median round trip of get() of a 64-byte blob over N calls (default
    2000), in microseconds (target: <= 300 us), with plain GET and, if the
    daemon speaks protocol version 2, with GET_FD (descriptor passing);
  * put() throughput of a 256 MiB buffer of random bytes and get_into()
    throughput of it into a preallocated buffer, both ways.

Exit status 1 if the plain GET median misses the target.

Usage:
    OMST_SOCKET=/path/omst.sock python3 bench_rtt.py [--calls 2000] [--mib 256] [--rounds 5] [--csv FILE]

Throughputs are the median of --rounds runs (min..max beside it), in MB/s
(10^6 bytes per second); --csv FILE also writes every figure as CSV rows
(figure,unit,median,min,max).

Without OMST_SOCKET/--socket it uses the default socket ($OMST_HOME or
~/.omst). It writes the names bench/rtt and bench/big and removes them at
the end.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run from a checkout

import omst  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", default=None, help="daemon socket (default: $OMST_SOCKET, $OMST_HOME/omst.sock, ~/.omst/omst.sock)")
    ap.add_argument("--calls", type=int, default=2000, help="small gets to time (default 2000)")
    ap.add_argument("--mib", type=int, default=256, help="size of the big blob in MiB (default 256)")
    ap.add_argument("--rounds", type=int, default=5, help="big put/get_into rounds; the median is reported (default 5)")
    ap.add_argument("--csv", default=None, help="also write the figures to this CSV file")
    args = ap.parse_args()
    rows: list[tuple[str, str, float, float, float]] = []

    c = omst.Client(args.socket)
    plain = omst.Client(args.socket, get_fd=False)
    fd_ok = c.protocol_version >= 2
    print(f"daemon at {c.socket}, protocol version {c.protocol_version}")
    small = os.urandom(64)
    c.put("bench/rtt", small)
    med = 0.0
    small_buf = bytearray(64)
    fd_small = omst.Client(args.socket)
    fd_small.get_fd_min_size = 0  # force GET_FD even for 64 bytes (get_into's default: >= 1 MiB)
    calls = [("get, GET", lambda: plain.get("bench/rtt"))]
    if fd_ok:
        calls.append(("get_into, GET_FD", lambda: fd_small.get_into("bench/rtt", small_buf)))
    for label, call in calls:
        for _ in range(100):  # warm up
            call()
        samples = []
        clock = time.perf_counter_ns
        for _ in range(args.calls):
            t0 = clock()
            call()
            samples.append(clock() - t0)
        samples.sort()
        m = statistics.median(samples) / 1000
        p99 = samples[int(len(samples) * 0.99)] / 1000
        print(f"get 64 B ({label}): median {m:.1f} us, p99 {p99:.1f} us over {args.calls} calls (target <= 300 us)")
        rows.append((f"python small get 64 B ({label}) round trip", "us", m, samples[0] / 1000, p99))
        if label == "get, GET":
            med = m

    size = args.mib << 20
    # Random bytes: a blob of mostly zero bytes (as this once was, one byte
    # set per 4 KiB) gets and puts much faster than data does.
    buf = bytearray(os.urandom(size))
    def report(label: str, secs: list[float]) -> None:
        rates = sorted(size / s / 1e6 for s in secs)
        med_rate = statistics.median(rates)
        print(f"{label} {args.mib} MiB: median {med_rate:.0f} MB/s ({rates[0]:.0f}..{rates[-1]:.0f}) over {len(secs)} runs")
        rows.append((f"python {label} {args.mib} MiB", "MB/s", med_rate, rates[0], rates[-1]))

    put_secs = []
    for i in range(args.rounds):
        for off in range(1, size, 1 << 20):  # a new blob each round: no chunk is already stored
            buf[off] = (i + 1) & 0xFF
        t0 = time.perf_counter()
        c.put("bench/big", buf)
        put_secs.append(time.perf_counter() - t0)
    report("put", put_secs)
    out = bytearray(size)
    for label, cl in [("get_into (GET)", plain)] + ([("get_into (GET_FD)", c)] if fd_ok else []):
        out[:] = bytes(size)
        secs = []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            cl.get_into("bench/big", out)
            secs.append(time.perf_counter() - t0)
        assert out == buf, "get_into returned different bytes"
        report(label, secs)
    if args.csv:
        with open(args.csv, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(["figure", "unit", "median", "min", "max"])
            for fig, unit, m, lo, hi in rows:
                w.writerow([fig, unit, f"{m:.3f}", f"{lo:.3f}", f"{hi:.3f}"])

    c.rm("bench/rtt")
    c.rm("bench/big")
    c.close()
    plain.close()
    fd_small.close()
    return 0 if med <= 300 else 1


if __name__ == "__main__":
    sys.exit(main())
