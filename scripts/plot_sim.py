#!/usr/bin/env python3
"""Plot simulated broadcasts (cmd/omst-sim's JSON) into docs/sim-scale.png.

Usage: python3 scripts/plot_sim.py --in docs/bench/sim-scale-1g.json
                                   [--in docs/bench/sim-scale-64m.json ...]
                                   [--label before --label ...]
                                   [--out docs/sim-scale.png]

With --label (one per --in, in order), runs of different code are told apart:
a series per label, blob and piece size, the first label's lines thin and
dashed (e.g. before), the others solid.

Left: the time to the last worker over the limit S/B_wan against workers per
site, one line per piece size (whole chunks: today's protocol) and blob
size, medians over the runs; a cell whose workers did not all finish within
the run's -max-time is drawn at that bound with an open marker (the time is
more). Right: the copies each head sent into its site (mean over sites).
Needs matplotlib (installed with pip when missing, as scripts/plot.py does).
"""

import argparse
import json
import os
import sys

from plot import ensure_matplotlib  # scripts/plot.py: matplotlib, files only

COLOURS = {"chunk": "tab:red", "64KiB": "tab:blue", "16KiB": "tab:green"}
STYLES = ["-", "--", ":", "-."]


def label_of(piece):
    return "whole 1 MiB chunks (today)" if piece == "chunk" else piece + " pieces"


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--in", dest="inp", action="append", required=True)
    ap.add_argument("--label", action="append", default=[])
    ap.add_argument("--out", default=os.path.join(root, "docs", "sim-scale.png"))
    args = ap.parse_args()
    if args.label and len(args.label) != len(args.inp):
        print("plot_sim.py: %d --label for %d --in: give one per input or none" % (len(args.label), len(args.inp)), file=sys.stderr)
        return 2
    labels = args.label or [""] * len(args.inp)
    order = list(dict.fromkeys(labels))
    series = {}  # (label, blob, piece) -> [(workers, ratio, unfinished, head copies)]
    for path, label in zip(args.inp, labels):
        with open(path) as f:
            data = json.load(f)
        for row in data["rows"]:
            m = row["median"]
            key = (label, row["blob_bytes"], row["piece"])
            series.setdefault(key, []).append(
                (row["workers_per_site"], m["last_over_limit"], m["unfinished_workers"] > 0, m["head_copies"]))
    if not series:
        print("plot_sim.py: no rows in %s" % args.inp, file=sys.stderr)
        return 1
    blobs = sorted({b for _, b, _ in series})
    plt = ensure_matplotlib()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.8))
    for (label, blob, piece), pts in sorted(series.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1], list(COLOURS).index(kv[0][2]) if kv[0][2] in COLOURS else 9)):
        pts.sort()
        ws = [p[0] for p in pts]
        style = STYLES[blobs.index(blob) % len(STYLES)]
        width, alpha = 1.5, 1.0
        if len(order) > 1 and label == order[0]:
            width, alpha = 0.8, 0.45
        colour = COLOURS.get(piece, "tab:gray")
        name = "%s, %s" % (label_of(piece), "%d GiB" % (blob >> 30) if blob >= 1 << 30 else "%d MiB" % (blob >> 20))
        if label:
            name = "%s: %s" % (label, name)
        ax.plot(ws, [p[1] for p in pts], style, color=colour, label=name, lw=width, alpha=alpha)
        for w, r, unfinished, _ in pts:
            ax.plot([w], [r], "o", color=colour, mfc="white" if unfinished else colour, alpha=alpha)
        bx.plot(ws, [p[3] for p in pts], style, marker="o", color=colour, label=name, lw=width, alpha=alpha)
    ax.axhline(1.3, color="gray", lw=0.8, ls=":")
    ax.text(1000, 1.3, "target 1.3 × S/B ", ha="right", va="bottom", fontsize=8, color="gray")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("workers per site (10 sites)")
    ax.set_ylabel("time to the last worker / (S / B_wan)")
    ax.set_title("Broadcast time, simulated (open: unfinished at the bound)")
    ax.legend(fontsize=7)
    bx.axhline(1.1, color="gray", lw=0.8, ls=":")
    bx.set_xscale("log")
    bx.set_yscale("log")
    bx.set_xlabel("workers per site (10 sites)")
    bx.set_ylabel("copies the head sent into its site (blobs)")
    bx.set_title("Head's copies into its site (by the bound if unfinished)")
    for a in (ax, bx):
        a.set_xticks([8, 16, 64, 256, 1000])
        a.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
        a.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("plot_sim.py: wrote %s" % args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
