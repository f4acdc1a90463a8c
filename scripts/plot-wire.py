#!/usr/bin/env python3
"""Plots docs/bench/wire-targets.png: issue 26's targets side by side, omst
against its peer (curl, cp, nginx + 4 curls) per run pair, before and after,
from the CSVs of scripts/bench-http.py (--put) and scripts/bench-lan.py
(docs/benchmarks.md, "Issue 26 at the end of the session"). Each bar is the
median of the per-pair ratios, each dot one pair; the dashed line the target.

    scripts/plot-wire.py HTTP.csv LAN.csv OUT.png [HTTP_LABELS]

HTTP_LABELS: the bench-http.py labels to plot, comma-separated (default
before,after,plain-before,plain); a label with "before" in it is grey.

Needs matplotlib."""
import csv
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def http_ratios(rows, label, mode):
    peer = "cp" if mode == "put" else "curl"
    peers = {r["run"]: float(r["mbps"]) for r in rows if r["peer"] == f"{peer} ({label})" and r["mode"] == mode}
    return [float(r["mbps"]) / peers[r["run"]] for r in rows
            if r["peer"] == f"omst {label}" and r["mode"] == mode and r["run"] in peers]


def lan_ratios(rows, label):
    nginx = {r["run"]: float(r["port_mbps"]) for r in rows if r["peer"].startswith("nginx")}
    return [float(r["port_mbps"]) / nginx[r["run"]] for r in rows
            if r["peer"] == f"omst {label}" and r["run"] in nginx]


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    labels = tuple((sys.argv[4] if len(sys.argv) == 5 else "before,after,plain-before,plain").split(","))
    http = list(csv.DictReader(open(sys.argv[1])))
    lan = list(csv.DictReader(open(sys.argv[2])))
    panels = [  # title, target, [(bar label, ratios)]
        ("fetch into a new file / curl", 0.8, [(lab, http_ratios(http, lab, "file")) for lab in labels]),
        ("fetch to /dev/null / curl", 0.8, [(lab, http_ratios(http, lab, "devnull")) for lab in labels]),
        ("put / cp", 0.9, [(lab, http_ratios(http, lab, "put")) for lab in labels]),
        ("LAN: parent's port / nginx", 0.8, [(lab, lan_ratios(lan, lab)) for lab in ("plain-before", "plain", "plain-nosib", "sealed")]),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(13, 3.6), sharey=True)
    for ax, (title, target, bars) in zip(axes, panels):
        for k, (lab, ys) in enumerate(bars):
            if not ys:
                continue
            ax.bar(k, statistics.median(ys), color="#1f77b4" if "before" not in lab else "#999999", alpha=0.6)
            ax.scatter([k] * len(ys), ys, color="k", s=10, zorder=3)
        ax.axhline(target, color="r", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(bars)))
        ax.set_xticklabels([b[0] for b in bars], rotation=30, ha="right", fontsize=8)
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel("omst / peer (per pair)")
    fig.tight_layout()
    fig.savefig(sys.argv[3], dpi=110)


if __name__ == "__main__":
    main()
