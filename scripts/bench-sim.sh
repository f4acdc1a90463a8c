#!/usr/bin/env bash
# Simulated broadcasts (not a test; `make bench-sim`): cmd/omst-sim runs
# pkg/transfer/sim, a discrete-event simulation that drives omst's own
# decision code (each head's serve/redirect decisions, each worker's chunk
# schedule and hedging policy) over modelled links. Writes
# OUT_DIR/sim-*.json (default docs/bench) and the plot docs/sim-scale.png;
# docs/benchmarks.md ("Simulated sites of 64 to 1,000 workers") reads them.
#
#   calibration  the emulated grid's cells (docs/benchmarks.md): single
#                fetches; 2 sites x 2..16 workers at WAN 100 / LAN 200
#                Mbit/s, 64 MiB (also with the WAN at the 80 Mbit/s it
#                delivered under the emulation's load); 2 x 16 at a quarter
#                of the rates, 16 MiB, in 1 MiB and 256 KiB chunks
#   scale        10 sites of 8 to 1,000 workers, WAN 100 / LAN 200 Mbit/s,
#                whole chunks (today) and 64 KiB and 16 KiB pieces, for a
#                64 MiB blob (RUNS seeds) and a 1 GiB one (1024 chunks;
#                SCALE_RUNS seeds, stopped at 10 x S/B_wan)
#   sched        the scheduler's cells (issue 25, item 2; the Distributor's
#                chains capped at 32 hops): 10 sites of 64 to 1,000
#                workers, 64 MiB, 64 KiB and 16 KiB pieces and whole chunks
#                (3 seeds), and 1 GiB at 1,000 workers in 16 KiB pieces (1
#                seed), into sim-sched-*.json; not in the default SECTIONS
#                (sim-scale-*.json hold the same cells before it)
#
# SECTIONS="calibration scale" selects; RUNS (default 5) and SCALE_RUNS
# (default 3) the seeds per cell. Takes about 40 minutes on 2 cores, most
# of it the 1,000-worker rows of the 1 GiB blob, where today's decisions
# collapse and every chunk crawls (see docs/benchmarks.md).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
OUT_DIR=${OUT_DIR:-docs/bench}
SECTIONS=${SECTIONS:-calibration scale}
RUNS=${RUNS:-5}
SCALE_RUNS=${SCALE_RUNS:-3}
SIM=bin/omst-sim
mkdir -p bin "$OUT_DIR"
$GO build -o "$SIM" ./cmd/omst-sim

sim() {
	local out=$1
	shift
	echo "+ omst-sim $* -out $OUT_DIR/$out" >&2
	"$SIM" "$@" -out "$OUT_DIR/$out"
}

for section in $SECTIONS; do
	case $section in
	calibration)
		sim sim-calibration-single.json -sites 1 -workers 1 -blob 1MiB,4MiB,16MiB,64MiB -lan-rate 1gbit -runs "$RUNS"
		sim sim-calibration-full.json -sites 2 -workers 2,4,8,16 -blob 64MiB -runs "$RUNS"
		sim sim-calibration-full-loaded.json -sites 2 -workers 8,16 -blob 64MiB,256MiB -wan-goodput 0.8 -runs "$RUNS"
		sim sim-calibration-quarter.json -sites 2 -workers 16 -blob 16MiB -wan-rate 25mbit -lan-rate 50mbit -runs "$RUNS"
		sim sim-calibration-quarter-256k.json -sites 2 -workers 16 -blob 16MiB -chunk 256KiB -wan-rate 25mbit -lan-rate 50mbit -runs "$RUNS"
		;;
	sched)
		sim sim-sched-64m.json -sites 10 -workers 64,256,1000 -blob 64MiB -piece 64KiB,16KiB -runs 3
		sim sim-sched-chunk-64m.json -sites 10 -workers 64,256,1000 -blob 64MiB -piece chunk -runs 3
		sim sim-sched-1g.json -sites 10 -workers 1000 -blob 1GiB -piece 16KiB -runs 1 -max-time 859s
		;;
	scale)
		sim sim-scale-64m.json -sites 10 -workers 8,16,64,256,1000 -blob 64MiB -piece chunk,64KiB,16KiB -runs "$RUNS"
		sim sim-scale-1g.json -sites 10 -workers 8,16,64,256,1000 -blob 1GiB -piece chunk,64KiB,16KiB -runs "$SCALE_RUNS" -max-time 859s
		;;
	*)
		echo "bench-sim: unknown section $section (calibration, scale, sched)" >&2
		exit 2
		;;
	esac
done
if [ -f "$OUT_DIR/sim-sched-64m.json" ] && [ -f "$OUT_DIR/sim-sched-chunk-64m.json" ] && [ -f "$OUT_DIR/sim-scale-64m.json" ]; then
	# Before (chains as long as the site: sim-scale-*) and the rule that
	# landed (chains capped at 32 hops: sim-sched-*, pieces and whole chunks).
	python3 scripts/plot_sim.py --in "$OUT_DIR/sim-scale-64m.json" --label "before: chains as long as the site (c62add1)" \
		--in "$OUT_DIR/sim-sched-64m.json" --label "chains capped at 32 hops" \
		--in "$OUT_DIR/sim-sched-chunk-64m.json" --label "chains capped at 32 hops" --out docs/sim-scale.png
elif [ -f "$OUT_DIR/sim-scale-1g.json" ] && [ -f "$OUT_DIR/sim-scale-64m.json" ]; then
	python3 scripts/plot_sim.py --in "$OUT_DIR/sim-scale-1g.json" --in "$OUT_DIR/sim-scale-64m.json" --out docs/sim-scale.png
fi
