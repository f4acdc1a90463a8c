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
# into its site, the CPU seconds the run took (user+sys of the whole
# machine, from /proc/stat around it) and, from the plan's summary (its
# "waste" per site, summed over the sites), what the hedging cost: hedges
# the workers sent, held back (their budget), the heads served and declined
# for their backlog or budget, plain GET_DIRECTs sent and served, the
# verified bytes the workers received beyond one copy each (in blobs), and
# the CPU seconds per daemon (heads and workers: mean and most; then the
# mean of the root, of a head and of a worker: from /proc at the end, from
# each daemon's start, so the root's includes its put) (and, fetch 1.4.0, the GET_DIRECTs
# a head redirected to a complete holder and answered BUSY) go to OUT
# (default docs/bench/pieces/ab-end-3.csv) and the CPU per daemon by role to stdout.
# A binary that does not count one of these (1.2.1 and before: all but the
# hedges) shows 0 there. Cell idle (2x16, every daemon up and nothing
# asked of it for 60 s) has the idle CPU seconds per daemon by role in the
# cpu_root, cpu_head and cpu_worker columns and nothing else. PARAMS adds
# plan parameters to every run (e.g. PARAMS='trusted_lan=true'). The plan
# is built from this tree; either binary may be main's. Needs root and what
# bench-wan.sh needs.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bench-pieces.sh OLD_BIN NEW_BIN [RUNS]} new=${2:?} runs=${3:-3}
out=${OUT:-docs/bench/pieces/ab-end-3.csv}
cells=${CELLS:-"2x16q 2x8f 2x16f 2x32q 2x3d 1x1s idle"}
extra=${PARAMS:+|$PARAMS}
GO=$(scripts/ensure-go.sh)
"$GO" build -o bin/omst-wan ./cmd/omst-wan
(cd testplans/omst && "$GO" build -o ../../bin/omst-plan .)
(cd testplans/sync && "$GO" build -o ../../bin/omst-sync .)
header=cell,binary,run,time_to_last,first,head_copies,cpu_s,hedges,hedges_deferred,hedges_served,hedges_declined,hedges_busy,directs,directs_served,directs_redirected,directs_busy,dup_blobs,cpu_per_daemon,cpu_daemon_max,cpu_root,cpu_head,cpu_worker
[ -f "$out" ] || echo "$header" >"$out"
if [ "$(head -1 "$out")" != "$header" ]; then
	echo "bench-pieces: $out has other columns than $header: set OUT to a new file" >&2
	exit 2
fi
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
	idle) echo 2 16 100mbit 200mbit 0 ;;
	*) echo "bench-pieces: unknown cell $1" >&2; exit 2 ;;
	esac
}
for cell in $cells; do
	read -r s w wan lan size < <(params "$cell")
	for i in $(seq 1 "$runs"); do
		for which in old new; do
			bin=$old; [ $which = new ] && bin=$new
			dir=$scratch/$cell-$which-$i
			case_=broadcast params="mode=tree|omst_bin=$bin|blob_size=$size$extra"
			[ "$cell" = idle ] && case_=idle params="mode=tree|omst_bin=$bin|idle_for=60s$extra"
			c0=$(cpu)
			timeout 900 bin/omst-wan run -q -sites "$s" -workers "$w" -wan-bw "$wan" -wan-delay 20ms -lan-bw "$lan" \
				-scratch /dev/shm -out "$dir" -plan omst -case "$case_" -params "$params" \
				-sync "$PWD/bin/omst-sync" -- "$PWD/bin/omst-plan" >"$dir.log" 2>&1 || { echo "bench-pieces: $cell $which run $i failed (see $dir.log)" >&2; continue; }
			c1=$(cpu)
			python3 - "$dir/root/summary.json" "$cell" "$which" "$i" "$c0" "$c1" >>"$out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
role = lambda k, r: (d.get(k) or {}).get(r, {}).get('mean', 0)
if d['case'] == 'idle':
    print(f"{sys.argv[2]},{sys.argv[3]},{sys.argv[4]},0,0,0,{float(sys.argv[6])-float(sys.argv[5]):.1f},0,0,0,0,0,0,0,0,0,0,"
          f"{role('idle_cpu_by_role', 'root'):.3f},{role('idle_cpu_by_role', 'head'):.3f},{role('idle_cpu_by_role', 'worker'):.3f}")
    sys.exit()
heads = d.get('head_to_children_blobs') or [0]
w = d.get('waste') or []
tot = lambda k: sum(s.get(k, 0) for s in w)
n = sum(1 for r in d['records'] if r.get('role') in ('head', 'worker') and r.get('cpu_seconds'))
cpu = sum(r.get('cpu_seconds', 0) for r in d['records'] if r.get('role') in ('head', 'worker'))
cpumax = max([s.get('cpu_seconds_max', 0) for s in w] or [0])
print(f"{sys.argv[2]},{sys.argv[3]},{sys.argv[4]},{d['time_to_last']:.3f},{d['min']:.3f},{max(heads):.2f},{float(sys.argv[6])-float(sys.argv[5]):.1f},"
      f"{tot('hedges')},{tot('hedges_deferred')},{tot('hedges_served')},{tot('hedges_declined')},{tot('hedges_busy')},{tot('directs')},{tot('directs_served')},{tot('directs_redirected')},{tot('directs_busy')},"
      f"{tot('duplicate_blobs'):.2f},{cpu / n if n else 0:.2f},{cpumax:.2f},"
      f"{role('cpu_by_role', 'root'):.2f},{role('cpu_by_role', 'head'):.2f},{role('cpu_by_role', 'worker'):.2f}")
PY
			tail -1 "$out" | awk -F, -v c="$cell" -v b="$which" -v i="$i" '{print "bench-pieces: " c " " b " run " i ": CPU s per daemon root " $20 ", head " $21 ", worker " $22 (c == "idle" ? " (idle 60 s)" : "")}'
			tail -1 "$out"
		done
	done
done
