#!/usr/bin/env python3
"""Plot the DHT-at-scale figures (cmd/omst-dhtbench's JSON) into docs/dht-scale.png.

Usage: python3 scripts/plot_dht.py [--in docs/bench/dht-scale.json] [--names docs/bench/dht-scale-names.json]
                                   [--out docs/dht-scale.png]

--names (when the file exists) adds the name lookups (signed records, kad's GetValue with omst's
quorum) of a later run made with the same command.

Left: lookup latency in round trips of the link (p50 and p99, medians over
runs) against the number of nodes, with the 6-round-trip target. Right:
memory per node (heap in use after a GC, mocknet link table excluded) with
the 20 MB target, and goroutines per node. Sizes whose runs all failed are
left out. Needs matplotlib (installed with pip when missing, as
scripts/plot.py does).
"""

import argparse
import json
import os
import sys

from plot import ensure_matplotlib  # scripts/plot.py: matplotlib, files only


SERIES = [  # JSON key, label, colour
    ("provider_lookup", "provider lookup (first provider)", "tab:blue"),
    ("closest_peers_lookup", "closest-peers lookup (name-lookup stand-in)", "tab:orange"),
    ("provide", "time to provide", "tab:green"),
]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--in", dest="inp", default=os.path.join(root, "docs", "bench", "dht-scale.json"))
    ap.add_argument("--names", default=os.path.join(root, "docs", "bench", "dht-scale-names.json"))
    ap.add_argument("--out", default=os.path.join(root, "docs", "dht-scale.png"))
    args = ap.parse_args()
    with open(args.inp) as f:
        data = json.load(f)
    sizes = [s for s in data["sizes"] if s.get("median_over_runs")]
    if not sizes:
        print("plot_dht.py: no completed runs in %s" % args.inp)
        return 1
    ns = [s["nodes"] for s in sizes]
    med = [s["median_over_runs"] for s in sizes]
    lat = med[0]["latency_one_way_ms"]

    plt = ensure_matplotlib()
    fig, (ax, axm) = plt.subplots(1, 2, figsize=(11, 4.6))
    for key, label, col in SERIES:
        ax.plot(ns, [m[key]["p50_rt"] for m in med], "o-", color=col, label=label + ", p50")
        ax.plot(ns, [m[key]["p99_rt"] for m in med], "s--", color=col, label=label + ", p99")
    if os.path.exists(args.names):
        with open(args.names) as f:
            nsz = [x for x in json.load(f)["sizes"] if x.get("median_over_runs", {}).get("name_lookup")]
        nn = [x["nodes"] for x in nsz]
        nm = [x["median_over_runs"]["name_lookup"] for x in nsz]
        ax.plot(nn, [m["p50_rt"] for m in nm], "o-", color="tab:red", label="name lookup (signed record, quorum 3), p50")
        ax.plot(nn, [m["p99_rt"] for m in nm], "s--", color="tab:red", label="name lookup (signed record, quorum 3), p99")
    ax.axhline(6, color="k", ls=":", lw=1, label="target: lookup p99 <= 6 RT")
    ax.set_xscale("log")
    ax.set_xticks(ns)
    ax.set_xticklabels([str(n) for n in ns])
    ax.minorticks_off()
    ax.set_ylim(0, max(12, max(m[k]["p99_rt"] for m in med for k, _, _ in SERIES) * 1.3))
    ax.set_xlabel("nodes (one process, mocknet)")
    ax.set_ylabel("round trips (1 RT = %g ms)" % (2 * lat))
    ax.set_title("Latency, medians over runs (link %g ms one way)" % lat)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", ncol=2)

    axm.plot(ns, [m["heap_inuse_per_node_end"] / 1e6 for m in med], "o-", color="tab:purple",
             label="heap in use / node (hosts + DHTs + connections)")
    axm.plot(ns, [m["dht_heap_inuse_per_node"] / 1e6 for m in med], "^-", color="tab:red",
             label="of which the DHT, settled")
    axm.axhline(20, color="k", ls=":", lw=1, label="target: <= 20 MB per node")
    axm.set_xscale("log")
    axm.set_xticks(ns)
    axm.set_xticklabels([str(n) for n in ns])
    axm.minorticks_off()
    axm.set_ylim(0, 22)
    axm.set_xlabel("nodes (one process, mocknet)")
    axm.set_ylabel("MB per node (after GC)")
    axm.set_title("Memory per node")
    axm.grid(alpha=0.3)
    axg = axm.twinx()
    axg.plot(ns, [m["goroutines_per_node_end"] for m in med], "x:", color="gray", label="goroutines / node (right)")
    axg.set_ylabel("goroutines per node")
    axg.set_ylim(0, 1.2 * max(m["goroutines_per_node_end"] for m in med))
    h1, l1 = axm.get_legend_handles_labels()
    h2, l2 = axg.get_legend_handles_labels()
    axm.legend(h1 + h2, l1 + l2, fontsize=7, loc="center left")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print("plot_dht.py: wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
