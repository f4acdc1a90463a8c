# examples/lib.sh: the common part of the C examples' run.sh scripts,
# sourced after they set EXAMPLE (a short name), here (the example's
# directory), repo, EXTRA_TOOLS (commands needed beyond cc, make and
# pkg-config) and TOOLS_HINT. It defines say, die and bounded, a temporary
# directory $work removed on every exit path (with the tree stopped), and
# then builds bin/omst if missing, installs libomst into $work/prefix
# (PKG_CONFIG_PATH set) and builds the example into $work/build. The
# caller then uses start_tree and runs its job.
localtree=$repo/scripts/localtree.sh
export OMST_BIN=${OMST_BIN:-$repo/bin/omst}

say() { echo "run.sh [$EXAMPLE]: $*"; }
die() { echo "run.sh [$EXAMPLE]: FAIL: $*" >&2; exit 1; }

for tool in cc make pkg-config "${EXTRA_TOOLS[@]}"; do
	command -v "$tool" >/dev/null || die "$tool not found${TOOLS_HINT:+ ($TOOLS_HINT)}"
done

# Short base directory: unix socket paths are limited to ~108 bytes.
base=${TMPDIR:-/tmp}
[ "${#base}" -le 40 ] || base=/tmp
work=$(mktemp -d "$base/omst-$EXAMPLE.XXXXXX")
cleanup() {
	local rc=$?
	set +e
	if [ -n "$child" ]; then
		kill -TERM "$child" 2>/dev/null
		wait "$child" 2>/dev/null
	fi
	if [ -f "$work/tree/pids" ]; then
		"$localtree" stop "$work/tree" && say "tree stopped"
	fi
	if [ "${KEEP:-0}" = 1 ]; then
		say "kept $work"
	else
		rm -rf "$work"
	fi
	[ "$rc" -eq 0 ] && say "PASS" || echo "run.sh [$EXAMPLE]: FAIL (exit $rc)" >&2
	exit "$rc"
}
child="" # the running step of bounded(), if any
trap cleanup EXIT
# A signal (Ctrl-C, timeout(1) around us): stop the running step, then the
# EXIT trap cleans up.
on_signal() {
	[ -z "$child" ] || kill -TERM "$child" 2>/dev/null || true
	exit 130
}
trap on_signal INT TERM HUP

# bounded SECONDS CMD...: run CMD with a time limit, in the background so a
# signal to this script is handled at once (not after CMD ends).
bounded() {
	local secs=$1 rc=0
	shift
	timeout "$secs" "$@" &
	child=$!
	wait "$child" || rc=$?
	child=""
	return "$rc"
}

# 1. The daemon binary.
if [ ! -x "$OMST_BIN" ]; then
	say "no $OMST_BIN: building it (make build)"
	bounded 600 make -C "$repo" build >"$work/build-omst.log" 2>&1 || {
		tail -n 30 "$work/build-omst.log" >&2
		die "building bin/omst failed"
	}
	[ -x "$OMST_BIN" ] || die "still no $OMST_BIN after make build (OMST_BIN set to another path?)"
fi

# 2. libomst, installed into a private prefix.
say "building and installing libomst into $work/prefix"
# B= puts the objects in our temporary directory too (bindings/c's build
# directory variable): nothing is written in the checkout, and two runs in
# parallel do not share object files.
bounded 300 make -C "$repo/bindings/c" install PREFIX="$work/prefix" B="$work/libomst-build" >"$work/build-libomst.log" 2>&1 || {
	tail -n 30 "$work/build-libomst.log" >&2
	die "make -C bindings/c install failed"
}
export PKG_CONFIG_PATH=$work/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}

# 3. The example (its Makefile builds into $BUILD).
say "building the $EXAMPLE example"
bounded 120 make -C "$here" BUILD="$work/build" >"$work/build-example.log" 2>&1 || {
	cat "$work/build-example.log" >&2
	die "building the $EXAMPLE example failed"
}

# start_tree SITES WORKERS_PER_SITE: a local tree of daemons in $work/tree;
# its env file (sockets of the root and the workers) is sourced.
start_tree() {
	say "starting a local tree in $work/tree (root, $1 sites x $2 workers)"
	bounded 60 "$localtree" start "$work/tree" "$1" "$2" >/dev/null
	# shellcheck disable=SC1091
	. "$work/tree/env"
}

