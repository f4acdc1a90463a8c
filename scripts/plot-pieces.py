#!/usr/bin/env python3
"""Plot scripts/bench-pieces.sh's CSV: per cell, the median time to the last
verified worker over the limit S/B_wan, for the two binaries, and beside
them BitTorrent's medians when given (cell=seconds arguments, from
bench-wan.sh's summaries).

    scripts/plot-pieces.py docs/bench/pieces/ab.csv docs/pieces.png [2x16q=24.1 ...]
"""
import csv
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

LIMIT = {"2x16q": 5.37, "2x8f": 5.37, "2x16f": 5.37, "2x32q": 5.37, "2x3d": 5.37, "1x1s": 0.336}
LABEL = {
    "2x16q": "2 x 16\n25/50 Mbit/s\n16 MiB",
    "2x8f": "2 x 8\n100/200 Mbit/s\n64 MiB",
    "2x16f": "2 x 16\n100/200 Mbit/s\n64 MiB",
    "2x32q": "2 x 32\n25/50 Mbit/s\n16 MiB",
    "2x3d": "2 x 3\n100 Mbit/s/1 Gbit/s\n64 MiB",
    "1x1s": "1 x 1\n4 MiB get\n",
}


def main():
    src, dst = sys.argv[1], sys.argv[2]
    bt = dict(a.split("=") for a in sys.argv[3:])
    runs = {}
    for r in csv.DictReader(open(src)):
        runs.setdefault((r["cell"], r["binary"]), []).append(float(r["time_to_last"]))
    cells = [c for c in LIMIT if (c, "new") in runs]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    w = 0.27
    for k, (which, name, color) in enumerate([("old", "before (f37c362: whole chunks)", "#bbbbbb"), ("new", "pieces (fetch 1.3.0)", "#1f77b4")]):
        ys = [statistics.median(runs.get((c, which), [float("nan")])) / LIMIT[c] for c in cells]
        ax.bar([i + (k - 1) * w for i in range(len(cells))], ys, w, label=name, color=color)
    ys = [float(bt[c]) / LIMIT[c] if c in bt else float("nan") for c in cells]
    ax.bar([i + w for i in range(len(cells))], ys, w, label="BitTorrent (aria2c)", color="#ff7f0e")
    ax.axhline(1.0, color="k", lw=0.8, ls="--")
    ax.set_xticks(range(len(cells)), [LABEL[c] for c in cells], fontsize=8)
    ax.set_ylabel("time to last worker / (S / B_wan)")
    ax.set_title("Broadcast on the emulated WAN, medians of 3, side by side")
    ax.legend(fontsize=8, loc="upper center")
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main()
