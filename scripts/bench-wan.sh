#!/usr/bin/env bash
# The benchmark that judges omst on emulated WAN clusters (not a test).
# Builds bin/omst, bin/omst-wan and the testground plan (testplans/omst),
# then runs the plan on network-namespace topologies (cmd/omst-wan: htb per
# link, NFQUEUE delay on WAN links) and writes docs/bench/wan-*.csv,
# docs/bench/wan-summary.md and the plots docs/wan-*.png.
#
# Sections (each run RUNS times; the median is reported):
#   broadcast  the root puts SIZE; every worker of every site gets it, in
#              each of MODES at SITES x WORKERS
#   scale      the scaling series: workers per site SCALE_WORKERS (2, 4, 8)
#              at SCALE_SIZE, each of MODES
#   scalebig, sizes  BIG_MODES (tree and store-forward) in the scaling
#              series at SIZE and the size series (SIZES at SITES x WORKERS)
#   gather     every worker puts GATHER_SIZE; the root fetches them all
#   single-tuned  the same with TUNED_SYSCTL set in every emulated host
#              (default net.ipv4.tcp_slow_start_after_idle=0, what
#              docs/operations.md recommends), runs in RUNS/tuned
#   single     single fetches: one site of one worker gets SINGLE_SIZES
#              through its head (tree), for the fit t(m) = t0 + m / r_inf
#   light      the tree's scaling series at a quarter of the load: WAN
#              LIGHT_WAN_BW (a quarter of WAN_BW) and LIGHT_SIZE (a quarter
#              of SIZE), so the same limit as SIZE at WAN_BW and a quarter
#              of the bytes per second for the one machine that emulates
#              every host
#
# Modes: omst's star (every worker fetches from the root), store-forward,
# tree-alone (tree without sibling exchange: the head serves every worker),
# tree (omst's default), all run by the testground plan (bin/omst-plan);
# and bittorrent, the peer baseline: aria2c + opentracker from Debian's
# packages (bin/omst-btbase; installed with apt-get when missing), broadcast
# only. Every summary has site_in_wire_blobs: the bytes each head's WAN
# interface received, the same measure for every mode.
#
# The daemons' stores are under SCRATCH (default /dev/shm: in memory, so
# that the emulated hosts do not contend for this machine's one disk, as
# real hosts with disks of their own do not; SCRATCH=/tmp puts them on disk).
#
# Needs root (network namespaces), ip, tc, iptables, the nfnetlink_queue
# module, Go; about 6 GiB free in SCRATCH. Takes ~45 min with the defaults.
# Environment knobs (defaults): SITES=2 WORKERS=4 SIZE=256MiB WAN_BW=100mbit
# WAN_DELAY=20ms LAN_BW=1gbit RUNS=3 GATHER_SIZE=32MiB SCALE_SIZE=64MiB
# SCALE_WORKERS="2 4 8" SIZES="16MiB 64MiB" LIGHT_WAN_BW=25mbit LIGHT_SIZE=64MiB
# SINGLE_SIZES="1MiB 4MiB 16MiB 64MiB" SCRATCH=/dev/shm
# SECTIONS="broadcast gather scale scalebig sizes single light"
# MODES="star store-forward tree-alone tree bittorrent" (broadcast, scale)
# BIG_MODES="store-forward tree" (scalebig, sizes)
# RUNS_DIR (default: a new /tmp dir)
# ORDER=interleaved (default: each repetition runs every mode in turn,
# the order rotated by one mode per repetition, so that no mode always
# follows the same one) or
# blocks (the broadcast section runs all repetitions of one mode, then the
# next mode's), with WARMUP=n (default 0) uncounted runs before each
# mode's block. On this VM a run right after a different, long one pays
# host page faults for the memory the previous run freed (docs/
# benchmarks.md: a tree run after tree-alone 32.4-33.0 s, the next 27 s);
# blocks with a warm-up compare the modes in a steady state.
# OUT_DIR (default docs/bench; the plots go to docs, or to OUT_DIR if set)
set -euo pipefail
cd "$(dirname "$0")/.."
SITES=${SITES:-2} WORKERS=${WORKERS:-4} SIZE=${SIZE:-256MiB}
WAN_BW=${WAN_BW:-100mbit} WAN_DELAY=${WAN_DELAY:-20ms} LAN_BW=${LAN_BW:-1gbit}
RUNS=${RUNS:-3} GATHER_SIZE=${GATHER_SIZE:-32MiB} SCALE_SIZE=${SCALE_SIZE:-64MiB}
SCALE_WORKERS=${SCALE_WORKERS:-"2 4 8"} SIZES=${SIZES:-"16MiB 64MiB"}
LIGHT_WAN_BW=${LIGHT_WAN_BW:-25mbit} LIGHT_SIZE=${LIGHT_SIZE:-64MiB} SCRATCH=${SCRATCH:-/dev/shm}
SINGLE_SIZES=${SINGLE_SIZES:-"1MiB 4MiB 16MiB 64MiB"}
TUNED_SYSCTL=${TUNED_SYSCTL:-net.ipv4.tcp_slow_start_after_idle=0}
TREE_SLACK=${TREE_SLACK:-2}
all_sections="broadcast gather scale scalebig sizes single single-tuned light"
SECTIONS=${SECTIONS:-$all_sections}
all_modes="star store-forward tree-alone tree bittorrent"
MODES=${MODES:-$all_modes} BIG_MODES=${BIG_MODES:-"store-forward tree"}
OUT_DIR=${OUT_DIR:-} report_dir=${OUT_DIR:-docs/bench} plot_dir=${OUT_DIR:-docs}
for m in $MODES $BIG_MODES; do
	case $m in star | store-forward | tree-alone | tree | bittorrent) ;;
	*) echo "bench-wan: mode $m: want star, store-forward, tree-alone, tree or bittorrent" >&2; exit 2 ;;
	esac
done

# The BitTorrent baseline needs Debian's aria2, opentracker and mktorrent.
bt=false
case " $SECTIONS " in *" broadcast "* | *" scale "*) case " $MODES " in *" bittorrent "*) bt=true ;; esac ;; esac
case " $SECTIONS " in *" scalebig "* | *" sizes "*) case " $BIG_MODES " in *" bittorrent "*) bt=true ;; esac ;; esac
if $bt; then
	need=()
	for c in aria2c:aria2 opentracker:opentracker mktorrent:mktorrent; do
		command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
	done
	if [ ${#need[@]} -gt 0 ]; then
		echo "bench-wan: mode bittorrent needs ${need[*]}: installing with apt-get" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq "${need[@]}"
	fi
fi

GO=${GO:-$(scripts/ensure-go.sh)}
export GOFLAGS=${GOFLAGS:--buildvcs=false}
"$GO" build -o bin/omst ./cmd/omst
"$GO" build -o bin/omst-wan ./cmd/omst-wan
(cd testplans/omst && "$GO" build -o ../../bin/omst-plan .)
(cd testplans/sync && "$GO" build -o ../../bin/omst-sync .)
"$GO" build -o bin/omst-btbase ./cmd/omst-btbase
sync_bin=$PWD/bin/omst-sync

# The runs' summaries stay in RUNS_DIR (kept, so that a report can be made
# again: python3 scripts/wan_report.py --runs RUNS_DIR ...).
runs_dir=${RUNS_DIR:-$(mktemp -d /tmp/omst-benchwan.XXXXXX)}
mkdir -p "$runs_dir" "$runs_dir/light" "$runs_dir/tuned"
echo "bench-wan: runs in $runs_dir (kept)" >&2

# one CASE MODE SITES WORKERS SIZE REP [extra params]: one emulated run at
# WAN_BW; its summary.json is kept as RUNS/CASE-MODE-SITESxWORKERS-SIZE-REP.json,
# RUNS being $runs_dir ($runs_dir/light when WAN_BW is LIGHT_WAN_BW).
one() {
	local case=$1 mode=$2 s=$3 w=$4 size=$5 rep=$6 extra=${7:-} dir=$runs_dir
	[ "$WAN_BW" = "$main_wan_bw" ] || dir=$runs_dir/light
	local tune=()
	if [ -n "${tuned:-}" ]; then
		dir=$runs_dir/tuned tune=(-sysctl "$TUNED_SYSCTL")
	fi
	local tag="$case-$mode-${s}x$w-$size-$rep" out="$dir/$case-$mode-${s}x$w-$size-$rep"
	local params="mode=$mode|omst_bin=$PWD/bin/omst|timeout=15m"
	# omst's modes run the testground plan with its sync service; the
	# BitTorrent baseline runs omst-btbase, which coordinates through files.
	local host=(-sync "$sync_bin" -- "$PWD/bin/omst-plan")
	if [ "$mode" = bittorrent ]; then
		if [ "$case" != broadcast ]; then
			echo "bench-wan: $tag: mode bittorrent has only the broadcast case; skipped" >&2
			return 0
		fi
		params="mode=bittorrent|timeout=15m"
		host=(-sync-addr "" -- "$PWD/bin/omst-btbase")
	fi
	if [ "$case" = gather ]; then params="$params|result_size=$size"; else params="$params|blob_size=$size"; fi
	[ -z "$extra" ] || params="$params|$extra"
	echo "bench-wan: $tag" >&2
	if ! bin/omst-wan run -q -sites "$s" -workers "$w" -wan-bw "$WAN_BW" -wan-delay "$WAN_DELAY" \
		-lan-bw "$LAN_BW" -scratch "$SCRATCH" "${tune[@]}" -timeout 20m -out "$out" -plan omst -case "$case" -params "$params" \
		"${host[@]}" >"$out.log" 2>&1; then
		echo "bench-wan: $tag FAILED (log below)" >&2
		tail -n 20 "$out.log" >&2
	fi
	# A warm-up run (rep warm*) is not counted: no summary for the report.
	case $rep in warm*) ;; *) [ -f "$out/root/summary.json" ] && cp "$out/root/summary.json" "$dir/$tag.json" ;; esac
	rm -rf "$out"
}

main_wan_bw=$WAN_BW
start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
ORDER=${ORDER:-interleaved} WARMUP=${WARMUP:-0}
case $ORDER in interleaved | blocks) ;; *) echo "bench-wan: ORDER=$ORDER: want interleaved or blocks" >&2; exit 2 ;; esac
if [ "$ORDER" = blocks ]; then
	for sec in $SECTIONS; do
		[ "$sec" = broadcast ] || continue
		for m in $MODES; do
			for rep in $(seq "$WARMUP" | sed 's/^/warm/') $(seq "$RUNS"); do
				one broadcast "$m" "$SITES" "$WORKERS" "$SIZE" "$rep"
			done
		done
	done
fi
# rotate N WORD...: the words rotated left by N.
rotate() {
	local n=$1
	shift
	local k=$((n % $#))
	echo "${@:k+1}" "${@:1:k}"
}
for rep in $(seq "$RUNS"); do
	modes=$(rotate $((rep - 1)) $MODES)
	for sec in $SECTIONS; do
		case $sec in
		broadcast) [ "$ORDER" = blocks ] || for m in $modes; do one broadcast "$m" "$SITES" "$WORKERS" "$SIZE" "$rep"; done ;;
		gather) for m in star tree; do one gather "$m" "$SITES" "$WORKERS" "$GATHER_SIZE" "$rep"; done ;;
		scale) for w in $SCALE_WORKERS; do for m in $modes; do one broadcast "$m" "$SITES" "$w" "$SCALE_SIZE" "$rep"; done; done ;;
		scalebig) for w in $SCALE_WORKERS; do [ "$w" = "$WORKERS" ] && continue; for m in $BIG_MODES; do one broadcast "$m" "$SITES" "$w" "$SIZE" "$rep"; done; done ;;
		sizes) for sz in $SIZES; do for m in $BIG_MODES; do one broadcast "$m" "$SITES" "$WORKERS" "$sz" "$rep"; done; done ;;
		single) for sz in $SINGLE_SIZES; do one broadcast tree 1 1 "$sz" "$rep"; done ;;
		single-tuned) tuned=1; for sz in $SINGLE_SIZES; do one broadcast tree 1 1 "$sz" "$rep"; done; tuned= ;;
		light) WAN_BW=$LIGHT_WAN_BW; for w in $SCALE_WORKERS; do one broadcast tree "$SITES" "$w" "$LIGHT_SIZE" "$rep"; done; WAN_BW=$main_wan_bw ;;
		esac
	done
done

knobs="SITES=$SITES WORKERS=$WORKERS SIZE=$SIZE WAN_BW=$WAN_BW WAN_DELAY=$WAN_DELAY LAN_BW=$LAN_BW RUNS=$RUNS SCRATCH=$SCRATCH"
[ "$ORDER" = interleaved ] || knobs="$knobs ORDER=$ORDER WARMUP=$WARMUP"
[ "$SECTIONS" = "$all_sections" ] || knobs="$knobs SECTIONS=\"$SECTIONS\""
[ "$MODES" = "$all_modes" ] || knobs="$knobs MODES=\"$MODES\""
python3 scripts/wan_report.py --runs "$runs_dir" --out "$report_dir" --wan-bw "$WAN_BW" --wan-delay "$WAN_DELAY" \
	--lan-bw "$LAN_BW" --sites "$SITES" --workers "$WORKERS" --size "$SIZE" --gather-size "$GATHER_SIZE" \
	--light-runs "$runs_dir/light" --light-wan-bw "$LIGHT_WAN_BW" --scratch "$SCRATCH" \
	--tuned-runs "$runs_dir/tuned" --tuned "$TUNED_SYSCTL" --tree-slack "$TREE_SLACK" \
	--start "$start" --command "scripts/bench-wan.sh ($knobs)"
cat "$report_dir/wan-summary.md"
python3 scripts/plot.py --bench-dir "$report_dir" --out-dir "$plot_dir"
