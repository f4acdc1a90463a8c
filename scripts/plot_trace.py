#!/usr/bin/env python3
"""Plot packet traces of one 4 MiB get over the emulated WAN
(scripts/wan-trace.sh writes OUT/trace.csv) into one figure: the bytes
the root has sent the head (at the head's WAN interface) against the time
since the get started, one line per trace, with the link's rate for
reference.

    scripts/plot_trace.py OUT.png LABEL=trace.csv [LABEL=trace.csv ...]"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

out = sys.argv[1]
fig, ax = plt.subplots(figsize=(7, 4))
for arg in sys.argv[2:]:
    label, path = arg.split("=", 1)
    t, b = [0.0], [0.0]
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["link"] == "wan":
                t.append(float(row["t_ms"]))
                b.append(int(row["cum_bytes"]) / 2**20)
    ax.step(t, b, where="post", label=label)
# The link: 100 Mbit/s from the first possible byte (one lookup round trip).
ax.plot([41, 41 + 4 * 2**20 * 8 / 100e6 * 1000], [0, 4], "k:", label="100 Mbit/s from one round trip")
ax.set_xlabel("ms since the get started")
ax.set_ylabel("MiB sent by the root (head's WAN interface)")
ax.set_title("One 4 MiB get over a 100 Mbit/s, 40 ms WAN path")
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
fig.tight_layout()
fig.savefig(out, dpi=110)
print("plot_trace: wrote", out)
