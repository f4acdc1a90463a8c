#!/usr/bin/env bash
# Side by side on the emulated WAN (a benchmark, not a test): omst's tree
# broadcast with two omst binaries, alternating run by run, in the cells
# issue 25 names; the BitTorrent rows come from scripts/bench-wan.sh.
#
#   scripts/bench-pieces.sh OLD_BIN NEW_BIN [RUNS=3]
#
# Cells (SITES x WORKERS, WAN/LAN rate, blob): 2x16 at a quarter of the
# rates (25/50 Mbit/s, 16 MiB), 2x8 at full rates (100/200 Mbit/s, 64 MiB),
# 2x16 at full rates, 2x32 at a quarter, 2x3 on the default grid (100 Mbit/s
# WAN, 1 Gbit/s LAN, 64 MiB), and a single 4 MiB get over the WAN (1x1).
# Every run's time to the last verified worker, the first, the head's copies
# into its site and the CPU seconds the run took (user+sys of every process
# it started, from /proc/stat around it) go to OUT (default
# docs/bench/pieces/ab.csv). Needs root and what bench-wan.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench-pieces.sh OLD_BIN NEW_BIN [RUNS]} new=${2:?} runs=${3:-3}
out=${OUT:-docs/bench/pieces/ab.csv}
cells=${CELLS:-"2x16q 2x8f 2x16f 2x32q 2x3d 1x1s"}
GO=$(scripts/ensure-go.sh)
"$GO" build -o bin/omst-wan ./cmd/omst-wan
(cd testplans/omst && "$GO" build -o ../../bin/omst-plan .)
(cd testplans/sync && "$GO" build -o ../../bin/omst-sync .)
[ -f "$out" ] || echo "cell,binary,run,time_to_last,first,head_copies,cpu_s" >"$out"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cpu() { awk '/^cpu /{print ($2+$3+$4+$7+$8)/100}' /proc/stat; }
params() { # cell -> sites workers wan lan size
	case $1 in
	2x16q) echo 2 16 25mbit 50mbit 16MiB ;;
	2x8f) echo 2 8 100mbit 200mbit 64MiB ;;
	2x16f) echo 2 16 100mbit 200mbit 64MiB ;;
	2x32q) echo 2 32 25mbit 50mbit 16MiB ;;
	2x3d) echo 2 3 100mbit 1gbit 64MiB ;;
	1x1s) echo 1 1 100mbit 1gbit 4MiB ;;
	*) echo "bench-pieces: unknown cell $1" >&2; exit 2 ;;
	esac
}
for cell in $cells; do
	read -r s w wan lan size < <(params "$cell")
	for i in $(seq 1 "$runs"); do
		for which in old new; do
			bin=$old; [ $which = new ] && bin=$new
			dir=$scratch/$cell-$which-$i
			c0=$(cpu)
			timeout 900 bin/omst-wan run -q -sites "$s" -workers "$w" -wan-bw "$wan" -wan-delay 20ms -lan-bw "$lan" \
				-scratch /dev/shm -out "$dir" -plan omst -case broadcast \
				-params "mode=tree|omst_bin=$bin|blob_size=$size" \
				-sync "$PWD/bin/omst-sync" -- "$PWD/bin/omst-plan" >"$dir.log" 2>&1 || { echo "bench-pieces: $cell $which run $i failed (see $dir.log)" >&2; continue; }
			c1=$(cpu)
			python3 - "$dir/root/summary.json" "$cell" "$which" "$i" "$c0" "$c1" >>"$out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
heads = d.get('head_to_children_blobs') or [0]
print(f"{sys.argv[2]},{sys.argv[3]},{sys.argv[4]},{d['time_to_last']:.3f},{d['min']:.3f},{max(heads):.2f},{float(sys.argv[6])-float(sys.argv[5]):.1f}")
PY
			tail -1 "$out"
		done
	done
done
