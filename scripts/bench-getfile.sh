#!/usr/bin/env bash
# bench-getfile.sh: the get into a file (issue 26 item 1), binaries side by
# side. A root and a child daemon on 127.0.0.1 per binary; each run puts
# SIZE fresh random bytes at the root, then times, alternating the binaries:
#   cold   `omst get NAME -o FILE` at the child (every chunk fetched)
#   hit    the same get again at the child (its cache, same filesystem)
# and the child daemon's CPU seconds (utime+stime) per GiB of each get.
# Prints one CSV line per measurement and the medians per binary.
#
# CHILD_ARGS="--cpuprofile /tmp/p" gives child k the flag with "-k" appended.
# usage: scripts/bench-getfile.sh [-runs N] [-size 1G] BIN... (e.g. bin/omst-before bin/omst)
set -euo pipefail
runs=3
size=1G
while [[ $# -gt 0 && $1 == -* ]]; do
	case $1 in
	-runs) runs=$2; shift 2 ;;
	-size) size=$2; shift 2 ;;
	*) echo "unknown flag $1" >&2; exit 2 ;;
	esac
done
[[ $# -ge 1 ]] || { echo "usage: $0 [-runs N] [-size 1G] BIN..." >&2; exit 2; }
bins=("$@")
work=$(mktemp -d "${TMPDIR:-/tmp}/omst-getfile.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done
	rm -rf "$work"
}
trap cleanup EXIT

addr_of() { # home -> the loopback multiaddr of its daemon
	local home=$1 i
	for i in $(seq 100); do
		a=$("$bin" --home "$home" -q id 2>/dev/null | grep '/ip4/127.0.0.1/tcp/' | head -1 || true)
		[[ -n $a ]] && { echo "$a"; return; }
		sleep 0.1
	done
	echo "daemon at $home did not start" >&2
	exit 1
}

start() { # k bin -> homes root$k child$k
	local k=$1 bin=$2
	mkdir -p "$work/root$k" "$work/child$k"
	"$bin" daemon --home "$work/root$k" --listen /ip4/127.0.0.1/tcp/0 --cache-size 8G --log-level warn >"$work/root$k.log" 2>&1 &
	pids+=($!)
	local ra
	ra=$(bin=$bin addr_of "$work/root$k")
	"$bin" daemon --home "$work/child$k" --listen /ip4/127.0.0.1/tcp/0 --cache-size 8G --log-level warn --parent "$ra" ${CHILD_ARGS:+$CHILD_ARGS-$k} >"$work/child$k.log" 2>&1 &
	pids+=($!)
	childpid[$k]=$!
	bin=$bin addr_of "$work/child$k" >/dev/null
}

cpu() { # pid -> utime+stime in clock ticks
	awk '{print $14+$15}' "/proc/$1/stat"
}

declare -A childpid
for k in "${!bins[@]}"; do start "$k" "${bins[$k]}"; done
bytes=$(numfmt --from=iec "$size")
tck=$(getconf CLK_TCK)
echo "binary,run,what,seconds,MB/s,child_cpu_s_per_GiB,load1"
for r in $(seq "$runs"); do
	order=("${!bins[@]}")
	if (( r % 2 == 0 )); then order=($(printf '%s\n' "${order[@]}" | tac)); fi
	for k in "${order[@]}"; do
		bin=${bins[$k]}
		head -c "$bytes" /dev/urandom >"$work/src"
		name="bench/getfile/$r-$k"
		"$bin" --home "$work/root$k" -q put "$name" "$work/src" >/dev/null
		for what in cold hit; do
			rm -f "$work/dst"
			sync
			c0=$(cpu "${childpid[$k]}")
			t0=$(date +%s.%N)
			"$bin" --home "$work/child$k" -q get "$name" -o "$work/dst"
			t1=$(date +%s.%N)
			c1=$(cpu "${childpid[$k]}")
			cmp -s "$work/src" "$work/dst" || { echo "$bin: $what get of $name: wrong bytes" >&2; exit 1; }
			awk -v b="$bin" -v r="$r" -v w="$what" -v t0="$t0" -v t1="$t1" -v c0="$c0" -v c1="$c1" -v n="$bytes" -v tck="$tck" \
				-v l="$(cut -d' ' -f1 /proc/loadavg)" \
				'BEGIN{s=t1-t0; printf "%s,%d,%s,%.3f,%.0f,%.2f,%s\n", b, r, w, s, n/s/1e6, (c1-c0)/tck/(n/2^30), l}'
		done
		"$bin" --home "$work/root$k" -q rm "$name" >/dev/null 2>&1 || true
	done
done | tee "$work/out.csv"
echo
echo "medians (MB/s; child CPU s/GiB):"
for k in "${!bins[@]}"; do
	for what in cold hit; do
		med() { sort -g | awk '{ v[NR]=$1 } END { print v[int((NR+1)/2)] }'; }
		rows=$(grep "^${bins[$k]},[0-9]*,$what," "$work/out.csv")
		echo "${bins[$k]} $what: $(cut -d, -f5 <<<"$rows" | med) MB/s, $(cut -d, -f6 <<<"$rows" | med) CPU s/GiB (n=$(wc -l <<<"$rows"))"
	done
done
