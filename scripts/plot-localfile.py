#!/usr/bin/env python3
"""Plots docs/localfile.png from docs/bench/localfile-go.txt, the output of
`go test ./pkg/node -run '^$' -bench LocalFile -benchtime 10x -count 3`
(docs/benchmarks.md, "Files by descriptor"). Needs matplotlib."""
import re
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

root = Path(__file__).resolve().parent.parent
src = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "docs/bench/localfile-go.txt"
data = {"put": {"path": [], "fd": []}, "get": {"path": [], "fd": []}}
for line in src.read_text().splitlines():
    if not line.startswith("BenchmarkLocalFile/"):
        continue
    op = "put" if "op=put" in line else "get"
    for how in ("path", "fd"):
        m = re.search(r"([\d.]+) " + how + r"-MB/s", line)
        data[op][how].append(float(m.group(1)))
fig, axes = plt.subplots(1, 2, figsize=(8, 3.4))
for ax, op in zip(axes, ("put", "get")):
    for k, how in enumerate(("path", "fd")):
        ys = sorted(data[op][how])
        ax.bar(k, ys[len(ys) // 2], color=["#999999", "#1f77b4"][k], alpha=0.6)
        ax.scatter([k] * len(ys), ys, color="k", s=12, zorder=3)
    ax.set_xticks([0, 1])
    ax.set_xticklabels(["by path\n(PUT_FILE / GET_FILE)", "by descriptor\n(PUT_FD / GET_TO_FD)"], fontsize=8)
    ax.set_title(f"{op} 256 MiB, one daemon, alternating", fontsize=9)
    ax.set_ylabel("MB/s (median of 10; dots: the runs)", fontsize=8)
    ax.set_ylim(0, max(max(v) for v in data[op].values()) * 1.2)
fig.tight_layout()
fig.savefig(root / "docs/localfile.png", dpi=110)
print("wrote", root / "docs/localfile.png")
