#!/usr/bin/env bash
# OmniStorage's experiment (seed 001, Figures 7-9) on the emulated grid, a
# benchmark, not a test: the testground plan's taskfarm case (32 jobs on
# 2 sites x 8 workers, each job getting the master's initial data, sleeping
# its compute time and putting a 1 MiB result the master gets and
# verifies) in mode star (OmniRPC alone: the master sends every worker its
# copy) and mode tree (omst: put once at the root, got by name at the top
# of each job), side by side in every cell, the order alternating run by run.
#
#   scripts/bench-taskfarm.sh
#
# Knobs (environment): SIZES (MiB of initial data, default "1 16 64"),
# COMPUTES (seconds per job, default "0.5 2 5"), RUNS (per cell and mode,
# default 2), JOBS (32), RESULT (1MiB), SITES (2), WORKERS (8), WAN_BW
# (100mbit), WAN_DELAY (20ms one way), LAN_BW (1gbit), OUT_DIR
# (docs/bench/taskfarm). Every run's makespan and phases go to
# OUT_DIR/runs.csv (with the load average when it started), every job's
# phases to OUT_DIR/jobs.csv; both are appended to, so that a series can be
# resumed. Then: scripts/plot-taskfarm.py OUT_DIR docs/taskfarm.png. Needs
# root (network namespaces), as omst-wan does.
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${SIZES:-"1 16 64"}
computes=${COMPUTES:-"0.5 2 5"}
runs=${RUNS:-2}
jobs=${JOBS:-32}
result=${RESULT:-1MiB}
sites=${SITES:-2}
workers=${WORKERS:-8}
wan_bw=${WAN_BW:-100mbit}
wan_delay=${WAN_DELAY:-20ms}
lan_bw=${LAN_BW:-1gbit}
out=${OUT_DIR:-docs/bench/taskfarm}
GO=$(scripts/ensure-go.sh)
"$GO" build -o bin/omst ./cmd/omst
"$GO" build -o bin/omst-wan ./cmd/omst-wan
(cd testplans/omst && "$GO" build -o ../../bin/omst-plan .)
(cd testplans/sync && "$GO" build -o ../../bin/omst-sync .)
mkdir -p "$out"
[ -f "$out/runs.csv" ] || echo "size_mib,compute_s,mode,run,makespan,input_first_median,input_first_max,last_put,site_wan_in_mib,verified,jobs,workers,wan_bw,wan_delay,lan_bw,load1,started" >"$out/runs.csv"
[ -f "$out/jobs.csv" ] || echo "size_mib,compute_s,mode,run,job,site,index,start,input,computed,put,verified,input_attempts" >"$out/jobs.csv"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
for size in $sizes; do
	for compute in $computes; do
		for i in $(seq 1 "$runs"); do
			order="star tree"
			[ $((i % 2)) -eq 0 ] && order="tree star"
			for mode in $order; do
				dir=$scratch/$size-$compute-$mode-$i
				load=$(cut -d' ' -f1 /proc/loadavg)
				started=$(date -u +%FT%TZ)
				if ! timeout 900 bin/omst-wan run -q -sites "$sites" -workers "$workers" -wan-bw "$wan_bw" \
					-wan-delay "$wan_delay" -lan-bw "$lan_bw" -scratch /dev/shm -timeout 14m -out "$dir" \
					-plan omst -case taskfarm \
					-params "mode=$mode|blob_size=${size}MiB|result_size=$result|jobs=$jobs|compute=${compute}s|omst_bin=$PWD/bin/omst|timeout=12m" \
					-sync "$PWD/bin/omst-sync" -- "$PWD/bin/omst-plan" >"$dir.log" 2>&1; then
					echo "bench-taskfarm: ${size} MiB ${compute} s $mode run $i failed:" >&2
					tail -20 "$dir.log" >&2
					continue
				fi
				python3 - "$dir/root/taskfarm.json" "$out" "$size" "$compute" "$mode" "$i" "$wan_bw" "$wan_delay" "$lan_bw" "$load" "$started" <<'PY'
import json, statistics, sys
path, out, size, compute, mode, run, wan_bw, wan_delay, lan_bw, load, started = sys.argv[1:]
a = json.load(open(path))
mode = "omst" if mode == "tree" else mode
wan = a.get("site_wan_in_mib") or []
last_put = max((d["put"] for d in a["jobs_done"]), default=0)
row = (f"{size},{compute},{mode},{run},{a['makespan']:.3f},{a['input_first_median']:.3f},{a['input_first_max']:.3f},"
       f"{last_put:.3f},{statistics.mean(wan) if wan else 0:.1f},{a['verified']},{a['jobs']},{a['sites'] * a['workers_per_site']},"
       f"{wan_bw},{wan_delay},{lan_bw},{load},{started}")
with open(f"{out}/runs.csv", "a") as f:
    print(row, file=f)
with open(f"{out}/jobs.csv", "a") as f:
    for d in a["jobs_done"]:
        print(f"{size},{compute},{mode},{run},{d['job']},{d['site']},{d['index']},{d['start']:.3f},{d['input']:.3f},"
              f"{d['computed']:.3f},{d['put']:.3f},{d.get('verified', 0):.3f},{d['input_attempts']}", file=f)
print(row)
PY
			done
		done
	done
done
