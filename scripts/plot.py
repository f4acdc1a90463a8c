#!/usr/bin/env python3
"""Plot omst benchmark CSVs (docs/bench/*.csv) into PNGs under docs/.

Usage: python3 scripts/plot.py [--bench-dir docs/bench] [--out-dir docs]

Each plot names the CSV files it needs; a plot whose files are missing (a
figure not run yet) is skipped with a message, never an error. CSV files no
plot knows are listed, so that new benchmarks (e.g. WAN emulation) can add
their plotter to PLOTS below.

Needs matplotlib; when it is missing the script installs it with
`python3 -m pip install --quiet matplotlib` and says so.

Written by cmd/omst-bench:
  loopback-runs.csv  figure,size_bytes,run,seconds,mbps   (every single run)
  fit.csv            series,size_bytes,median_seconds     (t(m) fit series)
  fit-params.csv     series,t0_ms,r_inf_mbps,...          (fitted t0 and r_inf)
  parent-served.csv  run,size_bytes,root_bytes_served,child_bytes_fetched
Written by scripts/bench-bindings.sh:
  bindings-c.csv     test,unit,median,min,max,size,runs     (bindings/c/bench/omst_bench.c)
  bindings-py.csv    figure,unit,median,min,max             (bindings/python/bench_rtt.py)
Written by scripts/bench-wan.sh (scripts/wan_report.py):
  wan-runs.csv       case,mode,sites,workers,size_bytes,run,time_to_last,...,site_in_wire_blobs,...
                     (every emulated run; modes star, store-forward, tree-alone, tree, bittorrent)
"""

import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
from collections import defaultdict

from wan_report import fit_line  # scripts/wan_report.py: the one least-squares line fit


def ensure_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plot.py: matplotlib is missing: installing it with "
              "`python3 -m pip install --quiet matplotlib`", file=sys.stderr)
        rc = subprocess.call([sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"])
        if rc != 0:
            sys.exit("plot.py: pip could not install matplotlib (exit %d); install it and rerun" % rc)
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    return plt


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def human_bytes(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if n == int(n) else ("%.1f %s" % (n, unit))
        n /= 1024


def fit_relative(sizes, secs):
    """t(m) = t0 + m/r by least squares on relative residuals (as omst-bench)."""
    sw = sm = st = smm = smt = 0.0
    for m, t in zip(sizes, secs):
        if t <= 0:
            continue
        w = 1.0 / (t * t)
        sw += w
        sm += w * m
        st += w * t
        smm += w * m * m
        smt += w * m * t
    det = sw * smm - sm * sm
    if len(set(sizes)) < 2 or det == 0:
        return None
    b = (sw * smt - sm * st) / det
    a = (st - b * sm) / sw
    return a, (1.0 / b if b > 0 else math.inf)


SERIES_STYLE = {
    "parent-fetch": ("tab:blue", "o", "cold fetch from parent"),
    "local-get": ("tab:green", "s", "local get (cache hit)"),
    "child-hit-get": ("tab:olive", "^", "child cache hit"),
}


def plot_fit(plt, files, out_dir):
    """docs/fit-loopback.png: log-log time vs size with fitted t(m) lines."""
    fit_rows = read_csv(files["fit.csv"])
    params = {}
    if os.path.exists(files["fit-params.csv"]):
        for r in read_csv(files["fit-params.csv"]):
            t0 = float(r["t0_ms"]) / 1e3
            rinf = math.inf if r["r_inf_mbps"] in ("inf", "") else float(r["r_inf_mbps"]) * 1e6
            params[r["series"]] = (t0, rinf)
    runs = defaultdict(list)  # series -> [(size, seconds)]
    if os.path.exists(files["loopback-runs.csv"]):
        for r in read_csv(files["loopback-runs.csv"]):
            if r["figure"].startswith("fit-"):
                runs[r["figure"][4:]].append((int(r["size_bytes"]), float(r["seconds"])))
    med = defaultdict(list)
    for r in fit_rows:
        med[r["series"]].append((int(r["size_bytes"]), float(r["median_seconds"])))
    if not med:
        print("plot.py: fit.csv has no rows: fit-loopback.png skipped")
        return

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for series, pts in med.items():
        pts.sort()
        color, marker, label = SERIES_STYLE.get(series, (None, "o", series))
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        if runs.get(series):
            ax.scatter([p[0] for p in runs[series]], [p[1] for p in runs[series]],
                       s=10, color=color, alpha=0.25, linewidths=0)
        fit = params.get(series) or fit_relative(xs, ys)
        fit_label = ""
        if fit:
            t0, rinf = fit
            grid = [xs[0] * (xs[-1] / xs[0]) ** (i / 200) for i in range(201)]
            model = [t0 + (m / rinf if rinf != math.inf else 0) for m in grid]
            if all(v > 0 for v in model):
                ax.plot(grid, model, color=color, linewidth=1.2, alpha=0.8)
            rtxt = "inf" if rinf == math.inf else "%.0f MB/s" % (rinf / 1e6)
            fit_label = ": t0 = %.3g ms, r_inf = %s" % (t0 * 1e3, rtxt)
        ax.plot(xs, ys, linestyle="none", marker=marker, color=color, markersize=6,
                label=label + fit_label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = sorted({m for pts in med.values() for m, _ in pts})
    ax.set_xticks(ticks)
    ax.set_xticklabels([human_bytes(m) for m in ticks], rotation=30, ha="right")
    ax.set_xlabel("blob size")
    ax.set_ylabel("time of one get (s)")
    ax.set_title("Single gets on loopback: medians (dots: every run), lines: t(m) = t0 + m / r_inf")
    ax.title.set_fontsize(10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path = os.path.join(out_dir, "fit-loopback.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print("plot.py: wrote", path)


THROUGHPUT_BARS = [
    ("raw-tcp", "raw TCP\n(2 processes)", "tab:gray"),
    ("libp2p-stream", "libp2p stream\n(TCP+TLS+yamux)", "tab:purple"),
    ("chunk-files", "write 1 MiB\nfiles (disk)", "tab:brown"),
    ("parent-fetch", "parent fetch\n(cold, child)", "tab:blue"),
    ("put-mem", "put\n(client memory)", "tab:orange"),
    ("put-file", "put-file\n(page cache)", "tab:red"),
]


def plot_throughput(plt, files, out_dir):
    """docs/throughput-loopback.png: median MB/s with min/max whiskers."""
    by_fig = defaultdict(list)
    sizes = {}
    for r in read_csv(files["loopback-runs.csv"]):
        by_fig[r["figure"]].append(float(r["mbps"]))
        sizes[r["figure"]] = int(r["size_bytes"])
    bars = [b for b in THROUGHPUT_BARS if by_fig.get(b[0])]
    if not bars:
        print("plot.py: loopback-runs.csv has no raw-tcp, parent-fetch or put runs: "
              "throughput-loopback.png skipped")
        return
    meds = [statistics.median(by_fig[b[0]]) for b in bars]
    lo = [m - min(by_fig[b[0]]) for m, b in zip(meds, bars)]
    hi = [max(by_fig[b[0]]) - m for m, b in zip(meds, bars)]
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = range(len(bars))
    ax.bar(xs, meds, yerr=[lo, hi], capsize=6, color=[b[2] for b in bars], alpha=0.85)
    top = max(m + h for m, h in zip(meds, hi))
    for x, m, h in zip(xs, meds, hi):
        # Above the whisker, so that short bars keep their label readable.
        ax.text(x, m + h + top * 0.01, "%.0f MB/s" % m, ha="center", va="bottom", fontsize=9,
                fontweight="bold")
    ax.set_ylim(0, top * 1.1)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(["%s\n%s, n=%d" % (b[1], human_bytes(sizes[b[0]]), len(by_fig[b[0]])) for b in bars],
                       fontsize=8)
    if by_fig.get("raw-tcp"):
        half = statistics.median(by_fig["raw-tcp"]) / 2
        ax.axhline(half, color="tab:blue", linestyle="--", linewidth=1)
        ax.text(len(bars) - 0.5, half, "parent-fetch target: 0.5 x raw TCP", color="tab:blue",
                ha="right", va="bottom", fontsize=8)
    if by_fig.get("put-mem") or by_fig.get("put-file"):
        ax.axhline(500, color="tab:red", linestyle=":", linewidth=1)
        ax.text(-0.5, 500, "put target: 500 MB/s", color="tab:red", ha="left", va="bottom", fontsize=8)
    ax.set_ylabel("MB/s (10^6 bytes/s), median with min..max")
    ax.set_title("Loopback throughput, side by side in one run")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out_dir, "throughput-loopback.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print("plot.py: wrote", path)


# Each plot: (name, required CSVs, optional CSVs, function). New benchmarks
# add a line here; files of a plot that are missing make it skip.
def plot_bindings(plt, files, out_dir):
    """docs/bindings-local.png: client get throughput (left) and small-get round trip (right)."""
    c_rows = read_csv(files["bindings-c.csv"])
    py_path = files.get("bindings-py.csv", "")
    py_rows = read_csv(py_path) if py_path and os.path.exists(py_path) else []
    labels = {"get-copy": "C omst_get\n(caller buffer)", "zc-map+touch": "C zero-copy\n(mapped, touched)",
              "buf-copy": "C library buffer\n(copied)", "file-read": "read() of a\npage-cached file"}
    thr, rtt = [], []
    for r in c_rows:
        if r["unit"] == "MB/s" and r["test"] in labels:
            thr.append((labels[r["test"]], float(r["median"]), float(r["min"]), float(r["max"]),
                        "#7f7f7f" if r["test"] == "file-read" else "#1f77b4"))
        elif r["unit"] == "us":
            rtt.append(("C", float(r["median"]), float(r["min"]), float(r["max"]), 100))
    for r in py_rows:
        fig = r["figure"]
        if r["unit"] == "MB/s" and "get_into" in fig:
            thr.append(("Python get_into\n" + fig.split("(")[1].split(")")[0], float(r["median"]),
                        float(r["min"]), float(r["max"]), "#ff7f0e"))
        elif r["unit"] == "us" and "(get, GET)" in fig:
            rtt.append(("Python", float(r["median"]), float(r["min"]), float(r["max"]), 300))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [3, 1]})
    for i, (lab, med, lo, hi, col) in enumerate(thr):
        ax1.bar(i, med, color=col, yerr=[[med - lo], [hi - med]], capsize=5)
        ax1.text(i, hi, "%.0f" % med, ha="center", va="bottom", fontsize=9)
    ax1.set_xticks(range(len(thr)))
    ax1.set_xticklabels([t[0] for t in thr], fontsize=8)
    ax1.axhline(2000, color="#d62728", ls=":", lw=1)
    ax1.text(len(thr) - 0.5, 2000, "zero-copy target 2 GB/s", color="#d62728", fontsize=8, ha="right", va="bottom")
    ax1.set_ylabel("MB/s (10^6 B/s), median with min..max")
    ax1.set_title("Local cache-hit get, side by side in one run")
    for i, (lab, med, lo, hi, target) in enumerate(rtt):
        ax2.bar(i, med, color="#2ca02c", yerr=[[med - lo], [hi - med]], capsize=5)
        ax2.text(i, hi, "%.0f us" % med, ha="center", va="bottom", fontsize=9)
        ax2.plot([i - 0.4, i + 0.4], [target, target], color="#d62728", ls=":", lw=1)
    ax2.set_xticks(range(len(rtt)))
    ax2.set_xticklabels([r[0] for r in rtt])
    ax2.set_ylabel("us per 64-byte get (median; whisker: min..p99)")
    ax2.set_title("Small get round trip\n(dotted: targets)")
    fig.tight_layout()
    out = os.path.join(out_dir, "bindings-local.png")
    fig.savefig(out, dpi=110)
    print("plot.py: wrote", out)


MODE_COLORS = {"star": "#d62728", "store-forward": "#ff7f0e", "tree-alone": "#9467bd", "tree": "#1f77b4",
               "bittorrent": "#8c564b"}


def wan_bps_of(r):
    """A run's WAN rate (bit/s)."""
    return int(r["wan_bps"])


def wan_medians(files, wan_bps):
    """(case, mode, sites, workers, size) -> median time_to_last over the passing runs made at wan_bps."""
    by = defaultdict(list)
    for r in read_csv(files["wan-runs.csv"]):
        if r["pass"] == "True" and float(r["limit_s"]) > 0 and wan_bps_of(r) == wan_bps:
            by[(r["case"], r["mode"], int(r["sites"]), int(r["workers"]), int(r["size_bytes"]))].append(
                float(r["time_to_last"]))
    return {k: statistics.median(v) for k, v in by.items()}


def plot_wan(plt, files, out_dir):
    """docs/wan-scale.png (time vs workers per site) and docs/wan-sizes.png (time vs blob size), per mode;
    the scaling plot also shows the tree at light load (runs at another WAN rate), where there are such runs."""
    from matplotlib import ticker

    runs = [r for r in read_csv(files["wan-runs.csv"]) if r["case"] == "broadcast" and float(r["limit_s"]) > 0]
    if not runs:
        print("plot.py: wan plots skipped: no broadcast runs")
        return
    # The main WAN rate is the one most runs were made at.
    counts = defaultdict(int)
    for r in runs:
        counts[wan_bps_of(r)] += 1
    wan_bps = max(counts, key=counts.get)
    med = wan_medians(files, wan_bps)
    bc = [k for k in med if k[0] == "broadcast"]
    sites = max(set(k[2] for k in bc), key=lambda x: sum(1 for k in bc if k[2] == x))
    # Scaling: time / limit against workers per site, one line per mode and
    # size with at least two worker counts; the light-load runs dashed.
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    styles = ["o-", "s-", "^-", "D-"]
    all_ws = set()
    sizes_scaled = sorted({k[4] for k in bc if sum(1 for j in bc if j[1] == k[1] and j[4] == k[4]) >= 2})
    for mode, col in MODE_COLORS.items():
        for i, z in enumerate(sizes_scaled):
            pts = sorted((k[3], v) for k, v in med.items() if k[:3] == ("broadcast", mode, sites) and k[4] == z)
            if len(pts) >= 2:
                all_ws |= {p[0] for p in pts}
                lim = z * 8 / wan_bps
                ax.plot([p[0] for p in pts], [p[1] / lim for p in pts], styles[i % len(styles)], color=col,
                        label="%s, %d MiB" % (mode, z >> 20))
    for light in sorted(b for b in counts if b != wan_bps):
        lmed = wan_medians(files, light)
        for z in sorted({k[4] for k in lmed if k[:3] == ("broadcast", "tree", sites)}):
            pts = sorted((k[3], v) for k, v in lmed.items() if k[:3] == ("broadcast", "tree", sites) and k[4] == z)
            if len(pts) >= 2:
                all_ws |= {p[0] for p in pts}
                lim = z * 8 / light
                ax.plot([p[0] for p in pts], [p[1] / lim for p in pts], "v--", color=MODE_COLORS["tree"],
                        alpha=0.7, label="tree, %d MiB at light load (WAN %g Mbit/s)" % (z >> 20, light / 1e6))
    ax.axhline(1.0, color="k", ls=":", lw=1, label="limit S/B_wan")
    ax.set_xticks(sorted(all_ws))
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.set_yticks([t for t in (1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16) if t <= hi])
    ax.set_ylim(lo, hi)
    ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%gx"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel("workers per site (%d sites)" % sites)
    ax.set_ylabel("time to the last verified worker / limit, median")
    ax.set_title("Broadcast on emulated WAN clusters (WAN %g Mbit/s per site)" % (wan_bps / 1e6))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    out = os.path.join(out_dir, "wan-scale.png")
    fig.savefig(out, dpi=110)
    print("plot.py: wrote", out)
    # Sizes: the worker count with the most distinct sizes (at the main site count).
    by_w = defaultdict(set)
    for k in bc:
        if k[2] == sites:
            by_w[k[3]].add(k[4])
    w = max(by_w, key=lambda x: len(by_w[x]))
    sizes = sorted(by_w[w])
    single_sizes = {k[4] for k in med if k[:4] == ("broadcast", "tree", 1, 1)}
    if len(set(sizes) | single_sizes) < 2:
        print("plot.py: wan-sizes.png skipped: fewer than two blob sizes in the runs")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, col in MODE_COLORS.items():
        pts = [(z, med[("broadcast", mode, sites, w, z)]) for z in sizes if ("broadcast", mode, sites, w, z) in med]
        if pts:
            ax.plot([p[0] / (1 << 20) for p in pts], [p[1] for p in pts], "o-", color=col, label=mode)
    single = sorted((k[4], v) for k, v in med.items() if k[:4] == ("broadcast", "tree", 1, 1))
    all_sizes = sorted(set(sizes) | {p[0] for p in single})
    ax.plot([z / (1 << 20) for z in all_sizes], [z * 8 / wan_bps for z in all_sizes], "k:", label="limit S/B_wan")
    if len(single) >= 2:
        # Single fetches (1 site x 1 worker) and their fit t(m) = t0 + m / r_inf.
        t0, slope = fit_line(single)
        ax.plot([p[0] / (1 << 20) for p in single], [p[1] for p in single], "^", color="#2ca02c",
                label="single fetch (1 x 1), median")
        lo, hi = min(single[0][0], sizes[0]), max(single[-1][0], sizes[-1])
        grid = [lo * (hi / lo) ** (i / 40) for i in range(41)]
        ax.plot([g / (1 << 20) for g in grid], [t0 + slope * g for g in grid], "-", color="#2ca02c", alpha=0.5,
                lw=2, label="single-fetch fit: t0 = %.2f s, r_inf = %.1f Mbit/s" % (t0, 8 / slope / 1e6))
    tree = [(z, med[("broadcast", "tree", sites, w, z)]) for z in sizes if ("broadcast", "tree", sites, w, z) in med]
    if len(tree) >= 2:
        # t(m) = t0 + m / r_inf, least squares over the tree's medians.
        t0, slope = fit_line(tree)
        grid = [sizes[0] * (sizes[-1] / sizes[0]) ** (i / 40) for i in range(41)]
        ax.plot([g / (1 << 20) for g in grid], [t0 + slope * g for g in grid], "-", color=MODE_COLORS["tree"],
                alpha=0.4, lw=3, label="tree fit: t0 = %.2f s, r_inf = %.1f Mbit/s" % (t0, 8 / slope / 1e6))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("blob size (MiB)")
    ax.set_ylabel("time to the last verified worker (s), median")
    ax.set_title("Broadcast (%d sites x %d workers) and single-fetch time vs size" % (sites, w))
    ax.legend()
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    out = os.path.join(out_dir, "wan-sizes.png")
    fig.savefig(out, dpi=110)
    print("plot.py: wrote", out)


def plot_wan_site_in(plt, files, out_dir):
    """docs/wan-site-in.png: the bytes that entered each site (each head's WAN interface, headers included;
    mean over the sites, median over the runs), in blobs, against workers per site, one line per mode and
    size with at least two worker counts."""
    rows = [r for r in read_csv(files["wan-runs.csv"])
            if r["case"] == "broadcast" and r["pass"] == "True" and r.get("site_in_wire_blobs", "") != ""]
    if not rows:
        print("plot.py: wan-site-in.png skipped: no broadcast run with site_in_wire_blobs")
        return
    counts = defaultdict(int)
    for r in rows:
        counts[(wan_bps_of(r), int(r["sites"]))] += 1
    wan_bps, sites = max(counts, key=counts.get)
    by = defaultdict(list)
    for r in rows:
        if wan_bps_of(r) == wan_bps and int(r["sites"]) == sites:
            by[(r["mode"], int(r["size_bytes"]), int(r["workers"]))].append(float(r["site_in_wire_blobs"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = ["o-", "s-", "^-", "D-"]
    sizes = sorted({k[1] for k in by})
    ws = set()
    for mode, col in MODE_COLORS.items():
        for i, z in enumerate(sizes):
            pts = sorted((k[2], statistics.median(v)) for k, v in by.items() if k[:2] == (mode, z))
            if len(pts) >= 2:
                ws |= {p[0] for p in pts}
                ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[i % len(styles)], color=col,
                        label="%s, %s" % (mode, human_bytes(z)))
    if not ws:
        plt.close(fig)
        print("plot.py: wan-site-in.png skipped: no mode with two or more worker counts")
        return
    ax.axhline(1.0, color="k", ls=":", lw=1, label="the blob once")
    ax.set_xticks(sorted(ws))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("workers per site (%d sites)" % sites)
    ax.set_ylabel("bytes into each site / blob size (WAN interface)")
    ax.set_title("WAN bytes into each site during a broadcast (WAN %g Mbit/s)" % (wan_bps / 1e6))
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = os.path.join(out_dir, "wan-site-in.png")
    fig.savefig(out, dpi=110)
    print("plot.py: wrote", out)


PLOTS = [
    ("fit-loopback.png", ["fit.csv"], ["fit-params.csv", "loopback-runs.csv"], plot_fit),
    ("throughput-loopback.png", ["loopback-runs.csv"], [], plot_throughput),
    ("bindings-local.png", ["bindings-c.csv"], ["bindings-py.csv"], plot_bindings),
    ("wan-scale.png, wan-sizes.png", ["wan-runs.csv"], [], plot_wan),
    ("wan-site-in.png", ["wan-runs.csv"], [], plot_wan_site_in),
]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench-dir", default=os.path.join(root, "docs", "bench"))
    ap.add_argument("--out-dir", default=os.path.join(root, "docs"))
    args = ap.parse_args()

    present = set()
    if os.path.isdir(args.bench_dir):
        present = {f for f in os.listdir(args.bench_dir) if f.endswith(".csv")}
    else:
        print("plot.py: %s does not exist: nothing to plot (run scripts/bench.sh first)" % args.bench_dir)
        return 0
    todo = [p for p in PLOTS if all(f in present for f in p[1])]
    for name, req, _, _ in PLOTS:
        missing = [f for f in req if f not in present]
        if missing:
            print("plot.py: %s skipped: %s not in %s (figure not run yet)" % (name, ", ".join(missing), args.bench_dir))
    known = {f for p in PLOTS for f in p[1] + p[2]} | {"parent-served.csv", "wan-runs-disk.csv"}
    for f in sorted(present - known):
        print("plot.py: %s has no plot yet (add one to PLOTS in scripts/plot.py)" % f)
    if not todo:
        return 0
    plt = ensure_matplotlib()
    os.makedirs(args.out_dir, exist_ok=True)
    for name, req, opt, fn in todo:
        files = {f: os.path.join(args.bench_dir, f) for f in req + opt}
        try:
            fn(plt, files, args.out_dir)
        except (KeyError, ValueError) as e:
            # A CSV of another shape (older or newer omst-bench): say so, go on.
            print("plot.py: %s skipped: unexpected CSV content (%s: %s)" % (name, type(e).__name__, e))
    return 0


if __name__ == "__main__":
    sys.exit(main())
