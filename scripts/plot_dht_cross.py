#!/usr/bin/env python3
"""Plot docs/bench/dht/cross-site.csv (the testground `dht` case on the
emulated WAN) into docs/dht-cross-site.png: time for every worker to have
the other site's 64 MiB result, and the root's bytes served while they read
it, per variant (median and each run)."""
import csv
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = sys.argv[1] if len(sys.argv) > 1 else "docs/bench/dht/cross-site.csv"
out = sys.argv[2] if len(sys.argv) > 2 else "docs/dht-cross-site.png"
runs = {}
for r in csv.DictReader(open(src)):
    runs.setdefault(r["variant"], []).append(r)
labels = {"dht": "tree + DHT\n(head to head)", "tree": "tree, --no-dht\n(through the root)", "flat": "flat, DHT only\n(no tree)"}
order = [v for v in ("dht", "tree", "flat") if v in runs]
fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
for i, v in enumerate(order):
    ts = [float(r["time_to_last_s"]) for r in runs[v]]
    a.bar(i, statistics.median(ts), color="C%d" % i, alpha=0.7)
    a.plot([i] * len(ts), ts, "k.", ms=5)
    rs = [float(r["root_served_read_mib"]) for r in runs[v]]
    b.bar(i, statistics.median(rs), color="C%d" % i, alpha=0.7)
a.axhline(64 * 2**20 * 8 / 100e6, color="k", ls="--", lw=1)
a.text(len(order) - 0.5, 64 * 2**20 * 8 / 100e6, " S/B_wan", va="bottom", ha="right", fontsize=8)
for ax in (a, b):
    ax.set_xticks(range(len(order)), [labels[v] for v in order], fontsize=8)
a.set_ylabel("time to the last worker (s)")
a.set_title("2 sites x 4 workers read the other site's 64 MiB", fontsize=9)
b.set_ylabel("root's bytes served while read (MiB)")
b.set_title("the root's uplink", fontsize=9)
fig.tight_layout()
fig.savefig(out, dpi=110)
print("wrote", out)
