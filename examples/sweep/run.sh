#!/usr/bin/env bash
# Run the sweep against a throwaway omst daemon, then clean up.
#
#   examples/sweep/run.sh [sweep.py options]
#
# OMST_BIN: the omst binary (default: bin/omst of this checkout).
# PYTHON:   the Python with numpy (default: python3).
# Exit status: the sweep's (0 = every result matched).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
omst_bin=${OMST_BIN:-$root/bin/omst}
python=${PYTHON:-python3}

if [ ! -x "$omst_bin" ]; then
	echo "run.sh: no omst binary at $omst_bin (build it with 'make' or set OMST_BIN)" >&2
	exit 2
fi

home=$(mktemp -d "${TMPDIR:-/tmp}/omst-sweep.XXXXXX")
pid=""
cleanup() {
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$home"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$omst_bin" daemon --home "$home" --listen /ip4/127.0.0.1/tcp/0 --log-level warn >"$home/daemon.log" 2>&1 &
pid=$!

# The daemon renames its socket into place once it listens: wait for it (bounded).
for _ in $(seq 150); do
	[ -S "$home/omst.sock" ] && break
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "run.sh: the omst daemon exited at start:" >&2
		cat "$home/daemon.log" >&2
		exit 1
	fi
	sleep 0.1
done
if [ ! -S "$home/omst.sock" ]; then
	echo "run.sh: the omst daemon did not open $home/omst.sock within 15 s" >&2
	exit 1
fi

export OMST_SOCKET="$home/omst.sock"
export PYTHONPATH="$root/bindings/python${PYTHONPATH:+:$PYTHONPATH}"

status=0
timeout 600 "$python" "$here/sweep.py" "$@" || status=$?
if [ "$status" -eq 0 ]; then
	echo "run.sh: sweep OK"
else
	echo "run.sh: sweep FAILED (exit status $status); daemon log:" >&2
	tail -n 20 "$home/daemon.log" >&2
fi
exit "$status"
