#!/usr/bin/env bash
# The C and Python clients' gets (zero-copy omst_get_buf, get_into by
# GET_FD and by GET, omst_get, the small-get round trips) against two
# daemon binaries side by side: one daemon of each, started in the order
# given, and ROUNDS rounds that run libomst's omst_bench and
# bindings/python/bench_rtt.py against each, the binaries alternating (the
# first one first in even rounds, the other in odd ones), so that a loaded
# machine's drift falls on both. The client libraries are this checkout's.
# Not a test. Usage:
#
#   scripts/bench-bindings-ab.sh LABEL_A=BIN_A LABEL_B=BIN_B [ROUNDS] [SIZE_MIB] [OUT.csv]
#
# e.g. scripts/bench-bindings-ab.sh old=/tmp/old/bin/omst new=bin/omst 6 256
# Prints each figure's median per binary over the rounds (each round's
# figure the median of 3 runs) and the median of the per-round ratios
# B / A; OUT.csv (default: a temporary file) gets every round's figures.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { sed -n '2,17p' "$0" >&2; exit 2; }
la=${1%%=*} ba=${1#*=} lb=${2%%=*} bb=${2#*=}
rounds=${3:-6}
size_mib=${4:-256}
base=${TMPDIR:-/tmp}
[ "${#base}" -le 40 ] || base=/tmp
work=$(mktemp -d "$base/omst-bab.XXXXXX")
out=${5:-$work/ab.csv}
make -s --no-print-directory -C bindings/c bench
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$work/a" "$work/b"
}
trap cleanup EXIT

start() { # home binary
	mkdir -p "$1"
	"$2" daemon --home "$1" --listen /ip4/127.0.0.1/tcp/0 --log-level warn >"$1/daemon.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 200); do [ -S "$1/omst.sock" ] && return 0; sleep 0.1; done
	cat "$1/daemon.log" >&2
	echo "bench-bindings-ab: daemon $2 did not start" >&2
	exit 1
}
start "$work/a" "$ba"
start "$work/b" "$bb"

mkdir -p "$work/rounds"
one() { # round label home
	local r=$1 l=$2 h=$3
	bindings/c/build/omst_bench -size "${size_mib}M" -runs 3 -calls 500 -dir "$h" \
		-csv "$work/rounds/$r,$l,c.csv" "$h/omst.sock" >/dev/null
	PYTHONPATH=bindings/python python3 bindings/python/bench_rtt.py --socket "$h/omst.sock" --calls 500 \
		--mib "$size_mib" --rounds 3 --csv "$work/rounds/$r,$l,py.csv" >/dev/null || true # exit 1 flags a missed target
}
for r in $(seq 0 $((rounds - 1))); do
	echo "round $r of $rounds ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))" >&2
	if [ $((r % 2)) -eq 0 ]; then
		one "$r" "$la" "$work/a"
		one "$r" "$lb" "$work/b"
	else
		one "$r" "$lb" "$work/b"
		one "$r" "$la" "$work/a"
	fi
done

python3 - "$work/rounds" "$out" "$la" "$lb" <<'EOF'
import csv, glob, os, statistics, sys
d, out, a, b = sys.argv[1:]
rows = []
for p in sorted(glob.glob(os.path.join(d, "*.csv"))):
    rnd, label, lang = os.path.basename(p)[:-4].split(",")
    for r in csv.DictReader(open(p)):
        fig = ("C " + r["test"]) if lang == "c" else r["figure"]
        rows.append({"round": rnd, "binary": label, "figure": fig, "unit": r["unit"], "median": r["median"]})
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, ["round", "binary", "figure", "unit", "median"])
    w.writeheader()
    w.writerows(sorted(rows, key=lambda r: (int(r["round"]), r["binary"])))
figs = []
for r in rows:
    if r["figure"] not in figs:
        figs.append(r["figure"])
val = {(r["round"], r["binary"], r["figure"]): float(r["median"]) for r in rows}
rounds = sorted({r["round"] for r in rows}, key=int)
print(f"| figure | {a}: median (min..max) | {b}: median (min..max) | {b} / {a}, per round | median ratio |")
print("|---|---|---|---|---|")
for f in figs:
    unit = next(r["unit"] for r in rows if r["figure"] == f)
    xa = [val[(k, a, f)] for k in rounds if (k, a, f) in val]
    xb = [val[(k, b, f)] for k in rounds if (k, b, f) in val]
    ratios = [val[(k, b, f)] / val[(k, a, f)] for k in rounds if (k, a, f) in val and (k, b, f) in val and val[(k, a, f)]]
    fmt = lambda xs: f"{statistics.median(xs):.0f} ({min(xs):.0f}..{max(xs):.0f})" if xs else "-"
    rs = ", ".join(f"{x:.2f}" for x in ratios)
    print(f"| {f} ({unit}) | {fmt(xa)} | {fmt(xb)} | {rs} | {statistics.median(ratios):.2f} |" if ratios else f"| {f} | - | - | - | - |")
EOF
echo "rounds: $out" >&2
