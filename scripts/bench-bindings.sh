#!/usr/bin/env bash
# Benchmarks of the C and Python clients against one local daemon (not
# tests): libomst's copy and zero-copy gets of a cached blob against a plain
# read() of the same bytes from a page-cached file, and the small-get round
# trip of both clients. Writes docs/bench/bindings-c.csv,
# docs/bench/bindings-py.csv and docs/bench/bindings-summary.md, then the
# plot docs/bindings-local.png (scripts/plot.py).
#
# Needs: Go (builds bin/omst), cc and make (bindings/c), python3 (a .venv
# is made by scripts/pyenv.sh), about 3 GiB free under $TMPDIR for the
# default 1 GiB blob. Usage: scripts/bench-bindings.sh [SIZE_MIB] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-1024}
runs=${2:-5}
GO=${GO:-$(scripts/ensure-go.sh)}
"$GO" build -o bin/omst ./cmd/omst
make -s --no-print-directory -C bindings/c bench
py=$(scripts/pyenv.sh)
mkdir -p docs/bench

base=${TMPDIR:-/tmp}
[ "${#base}" -le 40 ] || base=/tmp
home=$(mktemp -d "$base/omst-bb.XXXXXX")
pid=""
cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$home"
}
trap cleanup EXIT
bin/omst daemon --home "$home" --listen /ip4/127.0.0.1/tcp/0 --log-level warn >"$home/daemon.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$home/omst.sock" ] && break; sleep 0.1; done
[ -S "$home/omst.sock" ] || { cat "$home/daemon.log" >&2; echo "bench-bindings: daemon did not start" >&2; exit 1; }
sock=$home/omst.sock

start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
echo "== C (libomst): ${size_mib} MiB, $runs runs" >&2
c_out=$(bindings/c/build/omst_bench -size "${size_mib}M" -runs "$runs" -calls 5000 -dir "$home" \
	-csv docs/bench/bindings-c.csv "$sock")
echo "$c_out" >&2
echo "== Python: 256 MiB, $runs runs" >&2
py_out=$("$py" bindings/python/bench_rtt.py --socket "$sock" --calls 5000 --mib 256 --rounds "$runs" \
	--csv docs/bench/bindings-py.csv) || true # exit 1 only flags a missed target; the figures stand
py_out=${py_out//$sock/<socket>}
c_out=${c_out//$sock/<socket>}
echo "$py_out" >&2

{
	echo "# omst client benchmarks (C and Python), one local daemon"
	echo
	echo "Command (from the repository root): \`scripts/bench-bindings.sh $size_mib $runs\`"
	echo
	echo "- date: $start; machine: $(nproc) CPUs, $(uname -sr); $("$GO" version | cut -d' ' -f3); $("$py" -V)"
	echo "- one daemon (a root, no parent) on a unix socket; every blob is local (a cache hit)"
	echo
	echo "## C (libomst, bindings/c/bench/omst_bench.c)"
	echo
	echo '```'
	echo "$c_out"
	echo '```'
	echo
	echo "## Python (bindings/python/bench_rtt.py)"
	echo
	echo '```'
	echo "$py_out"
	echo '```'
} >docs/bench/bindings-summary.md
cat docs/bench/bindings-summary.md
python3 scripts/plot.py
