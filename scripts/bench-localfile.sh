#!/usr/bin/env bash
# Local put and get of a file, as a user runs them (`omst put NAME FILE`,
# `omst get NAME -o FILE`), with this checkout's omst (the client opens the
# file and passes its descriptor: PUT_FD, GET_TO_FD) beside an older omst
# given as OMST_OLD (e.g. one built before protocol version 5, whose daemon
# opened the path itself: PUT_FILE, GET_FILE), each with a daemon of its
# own on loopback, alternating which goes first, RUNS rounds of SIZE bytes
# of fresh random data each (an even RUNS lets each go first as often).
# Before every measurement the dirty pages are written back (sync) and SIZE
# bytes of page cache are freed (a scratch file written and removed): on
# this kind of VM, writing into memory the guest never touched runs at a
# fraction of the speed of reusing freed pages (design/MACHINE.md), and
# without it whichever variant wrote first in a round paid for both.
# Prints one CSV line per measurement and the medians.
#
# Usage: OMST_OLD=/path/to/old/omst scripts/bench-localfile.sh [SIZE] [RUNS]
#   SIZE: bytes (head -c syntax, default 1G); RUNS: rounds (default 6).
# Needs: bin/omst (make build), about 6 x SIZE free under $TMPDIR, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${OMST_OLD:?set OMST_OLD to an older omst binary to compare with}
new=$PWD/bin/omst
size=${1:-1G}
runs=${2:-6}
dir=$(mktemp -d)
cleanup() {
	for h in "$dir/old" "$dir/new"; do
		[ -S "$h/omst.sock" ] && kill "$(cat "$h/daemon.pid" 2>/dev/null)" 2>/dev/null || true
	done
	pkill -f "omst daemon --home $dir/" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT
start() { # bin home
	"$1" daemon --home "$2" --listen /ip4/127.0.0.1/tcp/0 --no-dht --detach >/dev/null
	pgrep -f "omst daemon --home $2" | head -1 >"$2/daemon.pid" || true
}
start "$old" "$dir/old"
start "$new" "$dir/new"
now() { date +%s.%N; }
timed() { # what bin home args...
	local what=$1 bin=$2 home=$3
	shift 3
	local t0 t1
	head -c "$size" /dev/zero >"$dir/scratch"
	rm -f "$dir/scratch"
	sync
	t0=$(now)
	"$bin" --home "$home" -q "$@" >/dev/null
	t1=$(now)
	echo "$what,$(python3 -c "print(f'{$t1 - $t0:.4f}')")"
}
echo "op,version,round,seconds" >"$dir/out.csv"
for i in $(seq 1 "$runs"); do
	head -c "$size" /dev/urandom >"$dir/in"
	order="old new"
	[ $((i % 2)) -eq 0 ] && order="new old"
	for v in $order; do
		bin=$old
		[ "$v" = new ] && bin=$new
		timed "put,$v,$i" "$bin" "$dir/$v" put "bench/$i" "$dir/in" >>"$dir/out.csv"
	done
	for v in $order; do
		bin=$old
		[ "$v" = new ] && bin=$new
		timed "get,$v,$i" "$bin" "$dir/$v" get "bench/$i" -o "$dir/out-$v" >>"$dir/out.csv"
		cmp -s "$dir/in" "$dir/out-$v" || { echo "bench-localfile: $v's get wrote other bytes" >&2; exit 1; }
		rm -f "$dir/out-$v"
	done
	for v in old new; do
		bin=$old
		[ "$v" = new ] && bin=$new
		"$bin" --home "$dir/$v" -q rm "bench/$i"
	done
done
cat "$dir/out.csv"
python3 - "$dir/out.csv" "$size" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
size = sys.argv[2]
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
n = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
for op in ("put", "get"):
    t = {(r["version"], r["round"]): float(r["seconds"]) for r in rows if r["op"] == op}
    med = {v: statistics.median(s for (w, _), s in t.items() if w == v) for v in ("old", "new")}
    ratio = statistics.median(t[("new", i)] / t[("old", i)] for (w, i) in t if w == "old")
    print(f"{op}: old {med['old']:.3f} s ({n / med['old'] / 1e6:.0f} MB/s), new {med['new']:.3f} s "
          f"({n / med['new'] / 1e6:.0f} MB/s); new/old time, median of the rounds' ratios: {ratio:.2f}")
EOF
