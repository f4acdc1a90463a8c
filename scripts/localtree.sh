#!/usr/bin/env bash
# localtree.sh: a small tree of omst daemons on loopback, for the examples
# (examples/mpi, examples/taskfarm) and for trying omst by hand.
#
#   scripts/localtree.sh start DIR [SITES] [WORKERS_PER_SITE]
#       Starts a root, and per site (a, b, c, ...) a head node and
#       WORKERS_PER_SITE workers (defaults: 2 sites x 2 workers = 4 workers,
#       one per rank of `mpiexec -n 4`). Homes: DIR/root, DIR/a-head,
#       DIR/a-w1, DIR/a-w2, DIR/b-head, ...; logs DIR/<name>.log; pids
#       DIR/pids. Waits (at most $OMST_TREE_TIMEOUT seconds, default 30)
#       until every daemon answers on its socket and every non-root daemon
#       is connected to its parent, then writes DIR/env and prints it:
#         export OMST_TREE_DIR=...
#         export OMST_ROOT_HOME=DIR/root
#         export OMST_ROOT_SOCKET=DIR/root/omst.sock
#         export OMST_HEAD_SOCKETS=DIR/a-head/omst.sock:DIR/b-head/omst.sock
#         export OMST_WORKER_SOCKETS=DIR/a-w1/omst.sock:DIR/a-w2/omst.sock:...
#         export OMST_WORKER_HOMES=DIR/a-w1:DIR/a-w2:...
#       (workers in order: site a's first, then site b's, ...). `. DIR/env`
#       sets them in a shell. On any failure it stops what it started, shows
#       the tail of the logs and exits non-zero.
#   scripts/localtree.sh stop DIR
#       SIGTERM to every daemon in DIR/pids, SIGKILL after
#       $OMST_STOP_TIMEOUT seconds (default 10). Idempotent: a missing DIR,
#       pids file or process is fine.
#   scripts/localtree.sh counters DIR
#       One line per daemon: name, bytes_served, bytes_fetched, names.
#
# Uses $OMST_BIN (default: bin/omst of this repository). Loopback only
# (/ip4/127.0.0.1/tcp/0, random ports), no root needed. Each daemon's cache
# is capped at $OMST_TREE_CACHE (default 1G). DIR must be short enough for
# unix socket paths (about 100 bytes) and must not contain ':'.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OMST_BIN=${OMST_BIN:-$REPO/bin/omst}
TREE_TIMEOUT=${OMST_TREE_TIMEOUT:-30}
STOP_TIMEOUT=${OMST_STOP_TIMEOUT:-10}
TREE_CACHE=${OMST_TREE_CACHE:-1G}

die() { echo "localtree.sh: $*" >&2; exit 1; }
usage() {
	echo "usage: $0 start DIR [SITES] [WORKERS_PER_SITE] | stop DIR | counters DIR" >&2
	exit 2
}

# abs DIR: DIR as an absolute path (DIR need not exist).
abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }

# alive PID HOME: PID is running and is the omst daemon of HOME (guards
# against a recycled pid belonging to something else).
alive() {
	local pid=$1 home=$2 cmd
	[ -r "/proc/$pid/cmdline" ] || return 1
	cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
	case $cmd in *" daemon "*"--home $home "*) return 0 ;; *) return 1 ;; esac
}

stop_tree() {
	local dir=$1 pid name home left deadline
	[ -f "$dir/pids" ] || return 0
	local -a pids=() homes=()
	while read -r pid name; do
		[ -n "${pid:-}" ] || continue
		home=$dir/$name
		if alive "$pid" "$home"; then
			pids+=("$pid")
			homes+=("$home")
			kill -TERM "$pid" 2>/dev/null || true
		fi
	done <"$dir/pids"
	deadline=$((SECONDS + STOP_TIMEOUT))
	while :; do
		left=0
		for i in "${!pids[@]}"; do
			alive "${pids[$i]}" "${homes[$i]}" && left=$((left + 1))
		done
		[ "$left" -eq 0 ] && break
		if [ "$SECONDS" -ge "$deadline" ]; then
			for i in "${!pids[@]}"; do
				if alive "${pids[$i]}" "${homes[$i]}"; then
					echo "localtree.sh: ${homes[$i]} (pid ${pids[$i]}) ignored SIGTERM for ${STOP_TIMEOUT}s; SIGKILL" >&2
					kill -KILL "${pids[$i]}" 2>/dev/null || true
				fi
			done
			sleep 0.2
			break
		fi
		sleep 0.1
	done
	rm -f "$dir/pids" "$dir/env"
}

# answers HOME: the daemon of HOME answers on its socket.
answers() { timeout 5 "$OMST_BIN" --home "$1" status >/dev/null 2>&1; }

# wait_up NAME PID: until HOME answers (and, with a parent, is connected to
# it), or the start deadline passes, or the daemon exits.
wait_up() {
	local name=$1 pid=$2 want_parent=$3 home=$DIR/$1
	while :; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "localtree.sh: daemon $name (pid $pid) exited; log $DIR/$name.log:" >&2
			tail -n 20 "$DIR/$name.log" >&2 || true
			return 1
		fi
		if [ "$want_parent" = 0 ]; then
			answers "$home" && return 0
		elif timeout 5 "$OMST_BIN" --home "$home" status --json 2>/dev/null | grep -q '"parent_connected": *true'; then
			return 0
		fi
		if [ "$SECONDS" -ge "$DEADLINE" ]; then
			local what="its socket does not answer"
			[ "$want_parent" = 0 ] || what="not answering or not connected to its parent"
			echo "localtree.sh: daemon $name: $what after ${TREE_TIMEOUT}s; log $DIR/$name.log:" >&2
			tail -n 20 "$DIR/$name.log" >&2 || true
			return 1
		fi
		sleep 0.1
	done
}

# start_daemon NAME [daemon flags...]: start the daemon of DIR/NAME in the
# background; sets STARTED_PID.
start_daemon() {
	local name=$1
	shift
	mkdir -p "$DIR/$name"
	# stdin/stdout/stderr away from the caller's terminal or pipe, so a
	# caller piping our output does not wait for the daemons to exit.
	"$OMST_BIN" daemon --home "$DIR/$name" --listen /ip4/127.0.0.1/tcp/0 \
		--cache-size "$TREE_CACHE" "$@" </dev/null >"$DIR/$name.log" 2>&1 &
	STARTED_PID=$!
	echo "$STARTED_PID $name" >>"$DIR/pids"
}

# addr_of NAME: the loopback TCP multiaddr of a running daemon (for --parent).
addr_of() {
	local a
	a=$(timeout 5 "$OMST_BIN" --home "$DIR/$1" id | grep -m1 '^/ip4/127\.0\.0\.1/tcp/') || {
		echo "localtree.sh: no loopback TCP address in \`omst --home $DIR/$1 id\`" >&2
		return 1
	}
	printf '%s\n' "$a"
}

start_tree() {
	local sites=$1 per=$2 s w site head_pid root_addr head_addr
	[[ $sites =~ ^[1-9][0-9]*$ ]] && [ "$sites" -le 26 ] || die "SITES must be 1..26, got '$sites'"
	[[ $per =~ ^[1-9][0-9]*$ ]] && [ "$per" -le 64 ] || die "WORKERS_PER_SITE must be 1..64, got '$per'"
	[ -x "$OMST_BIN" ] || die "no omst binary at $OMST_BIN (build it: make build, or set OMST_BIN)"
	case $DIR in *:*) die "DIR must not contain ':' ($DIR)" ;; esac
	local longest="$DIR/x-w$per/omst.sock"
	[ "${#longest}" -le 100 ] || die "DIR too long for unix socket paths ($longest)"
	mkdir -p "$DIR"
	if [ -f "$DIR/pids" ]; then
		die "$DIR/pids exists: a tree may be running there (scripts/localtree.sh stop $DIR first)"
	fi
	: >"$DIR/pids"
	# Any failure (set -e) or signal from here on: stop what was started.
	trap 'echo "localtree.sh: start failed; stopping what was started" >&2; stop_tree "$DIR"' EXIT
	trap 'exit 130' INT TERM HUP
	DEADLINE=$((SECONDS + TREE_TIMEOUT))

	start_daemon root
	wait_up root "$STARTED_PID" 0
	root_addr=$(addr_of root)

	local -a heads=() workers=() wpids=() wnames=()
	local letters=abcdefghijklmnopqrstuvwxyz
	for ((s = 0; s < sites; s++)); do
		site=${letters:$s:1}
		start_daemon "$site-head" --parent "$root_addr" --site "$site"
		heads+=("$site-head:$STARTED_PID")
	done
	for h in "${heads[@]}"; do
		wait_up "${h%%:*}" "${h##*:}" 1
	done
	for ((s = 0; s < sites; s++)); do
		site=${letters:$s:1}
		head_addr=$(addr_of "$site-head")
		for ((w = 1; w <= per; w++)); do
			start_daemon "$site-w$w" --parent "$head_addr" --site "$site"
			wnames+=("$site-w$w")
			wpids+=("$STARTED_PID")
		done
	done
	for i in "${!wnames[@]}"; do
		wait_up "${wnames[$i]}" "${wpids[$i]}" 1
	done
	trap - EXIT INT TERM HUP

	local hs="" ws="" wh=""
	for h in "${heads[@]}"; do hs=${hs:+$hs:}$DIR/${h%%:*}/omst.sock; done
	for n in "${wnames[@]}"; do
		ws=${ws:+$ws:}$DIR/$n/omst.sock
		wh=${wh:+$wh:}$DIR/$n
	done
	{
		echo "export OMST_TREE_DIR='$DIR'"
		echo "export OMST_ROOT_HOME='$DIR/root'"
		echo "export OMST_ROOT_SOCKET='$DIR/root/omst.sock'"
		echo "export OMST_HEAD_SOCKETS='$hs'"
		echo "export OMST_WORKER_SOCKETS='$ws'"
		echo "export OMST_WORKER_HOMES='$wh'"
	} >"$DIR/env.tmp"
	mv "$DIR/env.tmp" "$DIR/env"
	echo "localtree.sh: tree up in $DIR: root, $sites site(s) x $per worker(s) ($((SECONDS - DEADLINE + TREE_TIMEOUT))s)" >&2
	cat "$DIR/env"
}

counters() {
	local pid name
	[ -f "$DIR/pids" ] || die "no tree in $DIR"
	printf '%-10s %14s %14s %6s\n' node bytes_served bytes_fetched names
	while read -r pid name; do
		timeout 5 "$OMST_BIN" --home "$DIR/$name" status 2>/dev/null | awk -v n="$name" '
			$1 == "bytes_served" { s = $2 } $1 == "bytes_fetched" { f = $2 } $1 == "names" { m = $2 }
			END { printf "%-10s %14s %14s %6s\n", n, (s == "" ? "?" : s), (f == "" ? "?" : f), (m == "" ? "?" : m) }'
	done <"$DIR/pids"
}

[ $# -ge 2 ] || usage
cmd=$1
DIR=$(abs "$2")
case $cmd in
start)
	[ $# -le 4 ] || usage
	start_tree "${3:-2}" "${4:-2}"
	;;
stop)
	[ $# -eq 2 ] || usage
	stop_tree "$DIR"
	;;
counters)
	[ $# -eq 2 ] || usage
	counters
	;;
*) usage ;;
esac
