#!/usr/bin/env python3
"""Turn the summary.json files of scripts/bench-wan.sh's runs into
docs/bench/wan-runs.csv (every run) and docs/bench/wan-summary.md (the
tables: medians, the limit S/B_wan, each row's ratio to it, the targets).

Usage: wan_report.py --runs DIR --out docs/bench --wan-bw 100mbit ... (see
scripts/bench-wan.sh, which calls it). Standard library only.
"""

import argparse
import csv
import glob
import json
import os
import re
import statistics
from collections import defaultdict

UNITS = {"k": 1e3, "m": 1e6, "g": 1e9}


def bits_per_s(s):
    m = re.fullmatch(r"([\d.]+)\s*([kmg]?)bit", s.strip().lower())
    if not m:
        raise SystemExit("wan_report: bandwidth %r: want e.g. 100mbit" % s)
    return float(m.group(1)) * UNITS.get(m.group(2), 1)


def size_bytes(s):
    m = re.fullmatch(r"([\d.]+)\s*([KMG]?)(i?B)?", s.strip(), re.I)
    if not m:
        raise SystemExit("wan_report: size %r" % s)
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()])


def seconds(s):
    """A duration like 20ms or 1.5s, in seconds."""
    m = re.fullmatch(r"([\d.]+)\s*(ms|s|us)", s.strip())
    if not m:
        raise SystemExit("wan_report: duration %r: want e.g. 20ms" % s)
    return float(m.group(1)) * {"ms": 1e-3, "s": 1, "us": 1e-6}[m.group(2)]


def human(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return ("%g %s" % (n / div, unit))
    return "%d B" % n


def limit_secs(case, workers, size, wan_bps):
    """The physical limit: every byte of a broadcast crosses each site's WAN
    link once; a gather brings workers x size through each link (in parallel)."""
    per_link = size if case == "broadcast" else workers * size
    return per_link * 8 / wan_bps


def fit_line(pts):
    """Least squares y = a + b x over (x, y) points; returns (a, b). For
    t(m) = t0 + m / r_inf over (bytes, seconds): t0 = a, r_inf = 1 / b."""
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


# The modes in table order: omst's baselines, omst, the BitTorrent peer.
MODES = ("star", "store-forward", "tree-alone", "tree", "bittorrent")


def mean_of(values):
    """The mean of a summary's per-site list, rounded; "" when absent."""
    return round(statistics.mean(values), 4) if values else ""


def to_siblings(s):
    """The chunk bytes the workers of a run sent their siblings (bytes_out
    "sibling" in their records, fetch 1.2.0), in blobs per site; "" when the
    records carry no such count (bittorrent; daemons before 1.2.0)."""
    outs = [r.get("bytes_out", {}).get("sibling") for r in s.get("records", []) if r.get("role") == "worker"]
    outs = [v for v in outs if v is not None]
    if not outs or not s.get("bytes") or not s.get("sites"):
        return ""
    return round(sum(outs) / s["bytes"] / s["sites"], 4)


def read_runs(runs_dir, wan, host="default"):
    """The runs' summaries (CASE-MODE-SxW-SIZE-REP.json) in runs_dir, made
    with WAN links of wan bit/s, as CSV rows. The site_* columns are means
    over the sites, in blobs: site_in_blobs as the daemons count chunk bytes
    (for bittorrent, which has no such count, the wire figure),
    site_in_wire_blobs and site_out_wire_blobs as each head's WAN interface
    counted bytes (headers included) from the start until every worker was
    done."""
    rows = []
    for path in sorted(glob.glob(os.path.join(runs_dir, "*.json"))):
        rep = int(os.path.basename(path).rsplit("-", 1)[1].split(".")[0])
        with open(path, encoding="utf-8") as f:
            s = json.load(f)
        rows.append({"case": s["case"], "mode": s["mode"], "sites": s["sites"], "workers": s["workers_per_site"],
                     "size_bytes": s["bytes"], "wan_bps": int(wan), "run": rep, "time_to_last": s["time_to_last"],
                     "verified": s["verified"], "expected": s["expected"], "pass": s["pass"],
                     "root_bytes_served": s.get("root_bytes_served", 0),
                     "limit_s": round(limit_secs(s["case"], s["workers_per_site"], s["bytes"], wan), 4),
                     "site_in_blobs": mean_of(s.get("site_in_blobs")),
                     "site_in_wire_blobs": mean_of(s.get("site_in_wire_blobs")),
                     "site_out_wire_blobs": mean_of(s.get("site_out_wire_blobs")),
                     "head_to_children_blobs": mean_of(s.get("head_to_children_blobs")),
                     "workers_to_siblings_blobs": to_siblings(s),
                     "host": host})
    return rows


def main():
    ap = argparse.ArgumentParser()
    for f in ("runs", "out", "wan-bw", "wan-delay", "lan-bw", "size", "gather-size", "start", "command"):
        ap.add_argument("--" + f, required=True)
    ap.add_argument("--sites", type=int, required=True)
    ap.add_argument("--workers", type=int, required=True)
    ap.add_argument("--light-runs", help="runs of the light-load scaling series (made at --light-wan-bw)")
    ap.add_argument("--light-wan-bw", help="the WAN bandwidth of the light-load runs")
    ap.add_argument("--scratch", default="/tmp", help="where the daemons' stores were (for the header)")
    ap.add_argument("--tuned-runs", help="runs made with --tuned set in every emulated host")
    ap.add_argument("--tuned", default="", help="the kernel setting of the tuned runs")
    ap.add_argument("--tree-slack", type=float, default=2.0,
                    help="the tree's target is 1.25 x limit + this many seconds")
    a = ap.parse_args()
    wan = bits_per_s(a.wan_bw)

    rows = read_runs(a.runs, wan)
    if a.light_runs:
        rows += read_runs(a.light_runs, bits_per_s(a.light_wan_bw))
    tuned_rows = read_runs(a.tuned_runs, wan, "tuned") if a.tuned_runs else []
    os.makedirs(a.out, exist_ok=True)
    fields = ["case", "mode", "sites", "workers", "size_bytes", "wan_bps", "run", "time_to_last", "verified",
              "expected", "pass", "root_bytes_served", "limit_s", "site_in_blobs", "site_in_wire_blobs",
              "site_out_wire_blobs", "head_to_children_blobs", "workers_to_siblings_blobs", "host"]
    with open(os.path.join(a.out, "wan-runs.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows + tuned_rows:
            w.writerow(r)

    groups = defaultdict(list)
    for r in rows:
        groups[(r["case"], r["mode"], r["sites"], r["workers"], r["size_bytes"], r["wan_bps"])].append(r)

    tuned_groups = defaultdict(list)
    for r in tuned_rows:
        tuned_groups[(r["case"], r["mode"], r["sites"], r["workers"], r["size_bytes"], r["wan_bps"])].append(r)

    def stat(case, mode, s, w, size, bw=wan, tuned=False):
        g = (tuned_groups if tuned else groups).get((case, mode, s, w, size, int(bw)), [])
        ok = [r["time_to_last"] for r in g if r["pass"]]
        return g, ok

    def site_in(g, col):
        """The median over g's passing runs of col (blobs into each site), as a cell."""
        v = [r[col] for r in g if r["pass"] and r[col] != ""]
        return "%.2f" % statistics.median(v) if v else "—"

    out = []
    out.append("# omst on emulated WAN clusters")
    out.append("")
    out.append("Command (from the repository root, as root): `%s`" % a.command)
    out.append("")
    out.append("- date: %s; topology: %d sites x %d workers; WAN %s with %s one way per site (htb + receive-side "
               "NFQUEUE delay), LAN %s; real `omst daemon` processes in network namespaces (cmd/omst-wan), "
               "driven by the testground plan testplans/omst; daemon stores under %s" % (
                   a.start, a.sites, a.workers, a.wan_bw, a.wan_delay, a.lan_bw, a.scratch))
    out.append("- every figure: the median over the runs of the time from the start signal to the last verified "
               "worker (min..max beside it); limit = S / B_wan (every byte must cross each site's WAN link once)")
    out.append("- modes: star (every worker fetches from the root, which serves each itself), store-forward (the head "
               "waits for the whole blob, then serves every worker itself), tree-alone (the head serves every "
               "worker itself: no sibling exchange), tree (omst), bittorrent (aria2c + opentracker from Debian, a "
               "seeder at the root, a leecher on every worker, heads only route: cmd/omst-btbase)")
    out.append("- into each site: the bytes that entered a site from outside, in blobs (1.00 = the blob once), "
               "the mean over the sites; daemon = the omst daemons' chunk counters, wire = what each head's WAN "
               "interface received from the start until every worker was done (TCP/IP headers, TLS, BitTorrent "
               "messages and retransmissions included): the same measure for every mode")
    out.append("")

    size = size_bytes(a.size)
    lim = limit_secs("broadcast", a.workers, size, wan)
    out.append("## broadcast: %s to %d workers (%d sites x %d)" % (human(size), a.sites * a.workers, a.sites,
                                                                   a.workers))
    out.append("")
    out.append("| mode | time to last verified worker (s) | min..max | runs ok | x limit | into each site, daemon "
               "(blobs) | into each site, wire (blobs) | head to its workers (blobs) | target | meets |")
    out.append("|---|---:|---|---|---:|---:|---:|---:|---|---|")
    slack = a.tree_slack
    targets = {"tree": ("<= 1.25 x limit + %g s" % slack, lambda t: t <= 1.25 * lim + slack),
               "star": ("about n = %d x limit" % a.workers, None),
               "store-forward": ("between tree and star", None),
               "tree-alone": ("baseline: the head serves all", None),
               "bittorrent": ("peer: tree beats it", None)}
    meds = {}
    for mode in MODES:
        g, ok = stat("broadcast", mode, a.sites, a.workers, size)
        if not g:
            continue
        med = statistics.median(ok) if ok else float("nan")
        meds[mode] = med
        tgt, fn = targets[mode]
        meets = "—" if fn is None or not ok else ("yes" if fn(med) else "**no**")
        daemon = "—" if mode == "bittorrent" else site_in(g, "site_in_blobs")
        head = "—" if mode in ("bittorrent", "star") else site_in(g, "head_to_children_blobs")
        out.append("| %s | %.2f | %s | %d/%d | %.2f | %s | %s | %s | %s | %s |" % (
            mode, med, "%.2f..%.2f" % (min(ok), max(ok)) if ok else "—", len(ok), len(g), med / lim, daemon,
            site_in(g, "site_in_wire_blobs"), head, tgt, meets))
    out.append("| limit S/B_wan | %.2f | | | 1.00 | 1.00 | 1.00 | | | |" % lim)
    lines = []
    if {"star", "store-forward", "tree"} <= meds.keys():
        between = meds["tree"] <= meds["store-forward"] <= meds["star"]
        lines.append("store-forward between tree and star: %s; star / tree = %.2f" % (
            "yes" if between else "**no**", meds["star"] / meds["tree"]))
    for base in ("tree-alone", "bittorrent"):
        if {base, "tree"} <= meds.keys():
            ratio = meds[base] / meds["tree"]
            line = "%s / tree = %.2f (time)" % (base, ratio)
            if base == "bittorrent":
                line += " (target >= 1.5: %s)" % ("yes" if ratio >= 1.5 else "**no**")
            lines.append(line)
    if lines:
        out.append("")
        out.append("; ".join(lines))
    out.append("")

    gsize = size_bytes(a.gather_size)
    glim = limit_secs("gather", a.workers, gsize, wan)
    if any(k[0] == "gather" for k in groups):
        out.append("## gather: the root collects %d x %s results through both WAN links" % (
            a.sites * a.workers, human(gsize)))
        out.append("")
        out.append("| mode | time to last verified result (s) | min..max | runs ok | x limit | target | meets |")
        out.append("|---|---:|---|---|---:|---|---|")
        for mode in ("star", "store-forward", "tree"):
            g, ok = stat("gather", mode, a.sites, a.workers, gsize)
            if not g:
                continue
            med = statistics.median(ok) if ok else float("nan")
            tgt = "<= 1.25 x limit" if mode == "tree" else "—"
            meets = ("yes" if med <= 1.25 * glim else "**no**") if mode == "tree" and ok else "—"
            out.append("| %s | %.2f | %s | %d/%d | %.2f | %s | %s |" % (
                mode, med, "%.2f..%.2f" % (min(ok), max(ok)) if ok else "—", len(ok), len(g), med / glim, tgt, meets))
        out.append("| limit (workers x R / B_wan per link) | %.2f | | | 1.00 | | |" % glim)
        out.append("")

    def scaling(title, bw):
        """Tables of broadcast time against workers per site, one per size,
        of the runs made at bw."""
        keys = [k for k in groups if k[0] == "broadcast" and k[2] == a.sites and k[5] == int(bw)]
        scale = sorted({k[3] for k in keys})
        sizes = sorted({k[4] for k in keys if k[3] != a.workers})
        for ssize in sizes:
            slim = limit_secs("broadcast", 0, ssize, bw)
            out.append("## %s: %s broadcast, workers per site" % (title, human(ssize)))
            out.append("")
            out.append("| mode | " + " | ".join("%d/site (s)" % w for w in scale) + " | growth first..last |")
            out.append("|---|" + "---:|" * len(scale) + "---|")
            for mode in MODES:
                vals = []
                for w in scale:
                    _, ok = stat("broadcast", mode, a.sites, w, ssize, bw)
                    vals.append(statistics.median(ok) if ok else None)
                if all(v is None for v in vals):
                    continue
                cells = ["%.2f" % v if v is not None else "—" for v in vals]
                growth = "—"
                if vals[0] and vals[-1]:
                    pct = (vals[-1] / vals[0] - 1) * 100
                    growth = "%+.0f%%" % pct + (" (target < +10%%: %s)" % ("yes" if pct < 10 else "**no**")
                                                if mode == "tree" else "")
                out.append("| %s | %s | %s |" % (mode, " | ".join(cells), growth))
            out.append("| limit S/B_wan | " + " | ".join("%.2f" % slim for _ in scale) + " | |")
            for col, what in (("head_to_children_blobs", "head to its workers, tree (blobs)"),
                              ("workers_to_siblings_blobs", "workers to siblings, tree (blobs per site)")):
                cells = [site_in(stat("broadcast", "tree", a.sites, w, ssize, bw)[0], col) for w in scale]
                if any(c != "—" for c in cells):
                    out.append("| %s | %s | |" % (what, " | ".join(cells)))
            out.append("")

    def single_table(title, gs, tuned):
        single = sorted({k[4] for k in gs if k[:4] == ("broadcast", "tree", 1, 1) and k[5] == int(wan)})
        if not single:
            return
        out.append("## %s" % title)
        out.append("")
        out.append("| size | time to the verified blob (s) | min..max | runs ok | limit S/B_wan (s) | x limit | "
                   "x (S/B_wan + 1 RTT) |")
        out.append("|---|---:|---|---|---:|---:|---:|")
        rtt = 2 * seconds(a.wan_delay)
        pts = []
        for z in single:
            g, ok = stat("broadcast", "tree", 1, 1, z, tuned=tuned)
            if not ok:
                out.append("| %s | — | — | 0/%d | | | |" % (human(z), len(g)))
                continue
            med = statistics.median(ok)
            pts.append((z, med))
            zl = limit_secs("broadcast", 1, z, wan)
            out.append("| %s | %.2f | %.2f..%.2f | %d/%d | %.2f | %.2f | %.2f |" % (
                human(z), med, min(ok), max(ok), len(ok), len(g), zl, med / zl, med / (zl + rtt)))
        if len(pts) >= 2:
            t0, slope = fit_line(pts)
            r_inf = 1 / slope
            out.append("")
            out.append("Fit t(m) = t0 + m / r_inf (least squares over the medians): t0 = %.3f s, r_inf = %.1f Mbit/s "
                       "(%.0f%% of the WAN's %s)" % (t0, r_inf * 8 / 1e6, 100 * r_inf * 8 / wan, a.wan_bw))
        out.append("")

    single_table("single fetches: one worker gets a blob through its head (1 site x 1 worker, tree; the hosts' "
                 "default TCP settings)", groups, False)
    if tuned_rows:
        single_table("single fetches with the hosts tuned (%s in every emulated host, as docs/operations.md "
                     "recommends)" % a.tuned, tuned_groups, True)

    scaling("scaling", wan)
    if a.light_runs:
        scaling("scaling at light load (WAN %s: the same limit for a quarter of the size, a quarter of the "
                "bytes per second for the emulating machine)" % a.light_wan_bw, bits_per_s(a.light_wan_bw))

    with open(os.path.join(a.out, "wan-summary.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
