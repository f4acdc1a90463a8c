#!/usr/bin/env bash
# Loopback benchmark of omst: builds bin/omst and bin/omst-bench, measures
# raw TCP vs a cold fetch from a parent daemon vs puts, side by side in one
# run, and the t(m) = t0 + m/r_inf fits (cmd/omst-bench); writes
# docs/bench/*.csv and docs/bench/summary.md, then the plots docs/*.png
# (scripts/plot.py).
#
# Needs:
#   - Go 1.26 on PATH (the module's toolchain); builds from this checkout.
#   - python3; matplotlib (plot.py installs it with pip if it is missing;
#     PyPI must then be reachable).
#   - Linux, loopback only (127.0.0.1); free TCP ports; no root.
#   - Disk: with the defaults (-size 1G, -runs 5, fit up to 1 GiB) about
#     16 GiB free under $TMPDIR (the daemons' homes, deleted at the end);
#     omst-bench checks and refuses to start with less.
#   - Memory: about 1.5 GiB for the payload buffer plus the daemons.
#   - A quiet machine: figures are medians of 5 runs, compared by ratio
#     within this one run, but other load on the CPUs still skews them.
#     With the defaults a run takes a few minutes on 2 cores.
#
# Usage: scripts/bench.sh [omst-bench flags...]
#   e.g. scripts/bench.sh -runs 3 -max-fit 256M    (flags are passed through)
set -euo pipefail
cd "$(dirname "$0")/.."

mkdir -p bin docs/bench
echo "bench.sh: building bin/omst and bin/omst-bench" >&2
go build -o bin/omst ./cmd/omst
go build -o bin/omst-bench ./cmd/omst-bench

# Write the summary only when the run succeeded (keep the previous one otherwise).
tmp=$(mktemp docs/bench/.summary.XXXXXX)
trap 'rm -f "$tmp"' EXIT
bin/omst-bench -omst bin/omst -out docs/bench "$@" >"$tmp"
chmod 644 "$tmp"
mv "$tmp" docs/bench/summary.md
cat docs/bench/summary.md

python3 scripts/plot.py
