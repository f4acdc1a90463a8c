#!/usr/bin/env python3
"""Plot scripts/bench-taskfarm.sh's runs.csv the way OmniStorage's paper
(seed 001) shows its Figures 7-9: one panel per compute time, the makespan
of 32 jobs against the size of the initial data, OmniRPC alone (star)
beside OmniRPC + OmniStorage (omst), and the speed-up star / omst above
each pair. Bars are medians, whiskers min..max. Also writes the table of
medians (markdown) to OUT_DIR/summary.md and prints it.

    scripts/plot-taskfarm.py docs/bench/taskfarm docs/taskfarm.png
"""
import csv
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

MODES = [("star", "OmniRPC alone (star: the master sends each worker its copy)", "#bbbbbb"),
         ("omst", "omst (put once, get by name at each job's top)", "#1f77b4")]


def load(path):
    runs = {}
    meta = {}
    for r in csv.DictReader(open(path)):
        if int(r["verified"]) != int(r["jobs"]):
            continue  # a run that did not verify every result is not a figure
        key = (float(r["size_mib"]), float(r["compute_s"]), r["mode"])
        runs.setdefault(key, []).append(r)
        meta = r
    return runs, meta


def fmt(x):
    return f"{x:g}"


def table(runs):
    sizes = sorted({k[0] for k in runs})
    computes = sorted({k[1] for k in runs})
    lines = ["| compute per job | initial data | star makespan (s) | min..max | omst makespan (s) | min..max | star / omst | "
             "first jobs' data, star / omst (s, max) | into each site, star / omst (MiB) | runs | load avg (1 min) |",
             "|---:|---:|---:|---|---:|---|---:|---|---|---:|---|"]
    for c in computes:
        for s in sizes:
            st, om = runs.get((s, c, "star"), []), runs.get((s, c, "omst"), [])
            if not st or not om:
                continue
            ms = [float(r["makespan"]) for r in st]
            mo = [float(r["makespan"]) for r in om]
            loads = [float(r["load1"]) for r in st + om]
            lines.append(
                f"| {fmt(c)} s | {fmt(s)} MiB | {statistics.median(ms):.2f} | {min(ms):.2f}..{max(ms):.2f} | "
                f"**{statistics.median(mo):.2f}** | {min(mo):.2f}..{max(mo):.2f} | **{statistics.median(ms) / statistics.median(mo):.2f}** | "
                f"{statistics.median(float(r['input_first_max']) for r in st):.2f} / {statistics.median(float(r['input_first_max']) for r in om):.2f} | "
                f"{statistics.median(float(r['site_wan_in_mib']) for r in st):.0f} / {statistics.median(float(r['site_wan_in_mib']) for r in om):.0f} | "
                f"{len(ms)} + {len(mo)} | {min(loads):.1f}..{max(loads):.1f} |")
    return "\n".join(lines)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    runs, meta = load(os.path.join(src, "runs.csv"))
    sizes = sorted({k[0] for k in runs})
    computes = sorted({k[1] for k in runs})
    fig, axes = plt.subplots(1, len(computes), figsize=(4.2 * len(computes), 4.2), squeeze=False)
    w = 0.38
    for ax, c in zip(axes[0], computes):
        tops = {}
        for k, (mode, label, color) in enumerate(MODES):
            xs, ys, lo, hi = [], [], [], []
            for i, s in enumerate(sizes):
                v = [float(r["makespan"]) for r in runs.get((s, c, mode), [])]
                if not v:
                    continue
                m = statistics.median(v)
                xs.append(i + (k - 0.5) * w)
                ys.append(m)
                lo.append(m - min(v))
                hi.append(max(v) - m)
                tops.setdefault(i, {})[mode] = (m, max(v))
            ax.bar(xs, ys, w, yerr=[lo, hi], capsize=2, label=label, color=color)
        for i, t in tops.items():
            if "star" in t and "omst" in t:
                ax.annotate(f"{t['star'][0] / t['omst'][0]:.1f}x", (i, max(t["star"][1], t["omst"][1])),
                            textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
        ax.set_xticks(range(len(sizes)), [f"{fmt(s)} MiB" for s in sizes])
        ax.set_xlabel("initial data")
        ax.set_title(f"compute {fmt(c)} s per job")
        ax.margins(y=0.12)
    axes[0][0].set_ylabel("makespan of 32 jobs (s)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=2, frameon=False)
    shape = (f"{meta.get('workers', '16')} workers in 2 sites, WAN {meta.get('wan_bw', '')} {meta.get('wan_delay', '')} one way "
             f"per site, LAN {meta.get('lan_bw', '')}; medians, min..max")
    fig.suptitle(f"OmniStorage's experiment (Figs. 7-9) on the emulated grid: {shape}", fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(dst, dpi=110)
    md = table(runs)
    with open(os.path.join(src, "summary.md"), "w") as f:
        f.write(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
