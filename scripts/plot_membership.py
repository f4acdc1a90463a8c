#!/usr/bin/env python3
"""Plot what membership costs (docs/bench/membership) into
docs/membership.png: connection set-up to a first answer, open and closed
grid, TCP and QUIC, on loopback and the emulated WAN (median, quartiles);
the parent fetch on loopback and the 2 x 4 WAN broadcast with membership
off and on (median and every run)."""
import csv
import glob
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src = sys.argv[1] if len(sys.argv) > 1 else "docs/bench/membership"
out = sys.argv[2] if len(sys.argv) > 2 else "docs/membership.png"
fig, axes = plt.subplots(1, 4, figsize=(14, 3.6))
for ax, where in zip(axes[:2], ("loopback", "wan")):
    d = json.load(open(f"{src}/setup-{where}.json"))
    xs, labels = 0, []
    for r in d["results"]:
        q1, med, q3 = r["setup_ms"]
        c = "C0" if r["mode"] == "open" else "C1"
        ax.bar(xs, med, color=c, alpha=0.7, label=r["mode"] if xs < 2 else None)
        ax.errorbar(xs, med, yerr=[[med - q1], [q3 - med]], color="k", capsize=3)
        labels.append(f"{r['transport']}\n{r['mode']}")
        xs += 1
    ax.set_xticks(range(xs), labels, fontsize=8)
    ax.set_ylabel("dial to first answer (ms)")
    ax.set_title({"loopback": "set-up, loopback", "wan": "set-up, WAN 40 ms RTT"}[where], fontsize=10)
    ax.legend(fontsize=8)
ax = axes[2]
for i, m in enumerate(("open", "grid")):
    v = [float(r["mbps"]) for r in csv.DictReader(open(f"{src}/parent-fetch-{m}.csv"))]
    ax.bar(i, statistics.median(v), color="C%d" % i, alpha=0.7)
    ax.plot([i] * len(v), v, "k.", ms=4)
ax.set_xticks([0, 1], ["open", "membership"])
ax.set_ylabel("MB/s")
ax.set_title("parent fetch, loopback, 512 MiB", fontsize=10)
ax = axes[3]
for i, g in enumerate(("false", "true")):
    v = [json.load(open(f))["time_to_last"] for f in sorted(glob.glob(f"{src}/broadcast-tree-2x4-256MiB-grid{g}-*.json"))]
    if v:
        ax.bar(i, statistics.median(v), color="C%d" % i, alpha=0.7)
        ax.plot([i] * len(v), v, "k.", ms=4)
ax.axhline(256 * 2**20 * 8 / 100e6, color="k", ls="--", lw=1)
ax.text(1.4, 256 * 2**20 * 8 / 100e6, "S/B_wan", va="bottom", ha="right", fontsize=8)
ax.set_xticks([0, 1], ["open", "membership"])
ax.set_ylabel("time to last worker (s)")
ax.set_title("WAN broadcast 2 x 4, 256 MiB", fontsize=10)
fig.tight_layout()
fig.savefig(out, dpi=110)
print("wrote", out)
