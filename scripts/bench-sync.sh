#!/usr/bin/env bash
# The cost of durable puts (omst daemon --sync), a benchmark (not a test):
# for each run, a fresh daemon with and without --sync (alternating) takes
# `omst put` of SIZE bytes from a page-cached file of random bytes, then of
# 64 KiB from standard input; prints each time and the medians.
# Knobs: RUNS=3 SIZE=1073741824 TMPDIR (needs 2 x SIZE free there).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3} SIZE=${SIZE:-1073741824}
GO=${GO:-$(scripts/ensure-go.sh)}
GOFLAGS=${GOFLAGS:--buildvcs=false} "$GO" build -o bin/omst ./cmd/omst
omst=$PWD/bin/omst
work=$(mktemp -d "${TMPDIR:-/tmp}/omst-benchsync.XXXXXX")
pid=
cleanup() { [ -z "$pid" ] || kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
head -c "$SIZE" /dev/urandom >"$work/src.bin"
cat "$work/src.bin" >/dev/null # page-cached
now() { date +%s.%N; }
for rep in $(seq "$RUNS"); do
	for mode in default sync; do
		home=$work/h-$mode-$rep
		mkdir -p "$home"
		flags=()
		[ "$mode" = default ] || flags=(--sync)
		"$omst" daemon --home "$home" --listen /ip4/127.0.0.1/tcp/0 "${flags[@]}" >"$home/daemon.log" 2>&1 &
		pid=$!
		for _ in $(seq 100); do [ -S "$home/omst.sock" ] && break; sleep 0.1; done
		sync
		t0=$(now); "$omst" --home "$home" -q put big "$work/src.bin" >/dev/null; t1=$(now)
		head -c 65536 /dev/urandom >"$work/small"
		t2=$(now); "$omst" --home "$home" -q put small - <"$work/small" >/dev/null; t3=$(now)
		kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
		rm -rf "$home"
		echo "$mode $rep $(echo "$t1 - $t0" | bc) $(echo "$t3 - $t2" | bc)"
	done
done | tee "$work/times"
python3 - "$work/times" "$SIZE" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
size = int(sys.argv[2])
for mode in ("default", "sync"):
    big = [float(r[2]) for r in rows if r[0] == mode]
    small = [float(r[3]) for r in rows if r[0] == mode]
    print("%-8s put %d MiB: median %.2f s (%.2f..%.2f), %.0f MB/s; put 64 KiB: median %.1f ms (%.1f..%.1f)" % (
        mode, size >> 20, statistics.median(big), min(big), max(big), size / statistics.median(big) / 1e6,
        1e3 * statistics.median(small), 1e3 * min(small), 1e3 * max(small)))
PY
