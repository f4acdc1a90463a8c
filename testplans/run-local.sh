#!/usr/bin/env bash
# run-local.sh: run the omst testground plan on this machine, without Docker.
#
#   ./run-local.sh small                        broadcast 32 MiB, 1 site x 2 workers, modes tree and star (direct)
#   ./run-local.sh direct COMPOSITION... [opts] launch the plan binary once per instance (no testground daemon)
#   ./run-local.sh testground COMPOSITION [opts] through testground v0.6.0: builder exec:go, runner local:exec
#   ./run-local.sh tools                        only fetch and build testground and the sync service
#   ./run-local.sh table DIR...                 print the result table of outputs (e.g. omst-wan's -out)
#
# Options (after the command):
#   --modes tree,star,store-forward   run each composition once per mode (default: the composition's mode)
#   -p KEY=VALUE                      override a test parameter (repeatable)
#   --out DIR                         where outputs go (default: testplans/.runs, or $OMST_TG_OUT)
#   --deadline SECONDS                hard bound per run (default 900)
#
# Environment: OMST_BIN (an omst binary to use; default: build ../bin/omst from this checkout),
# OMST_TG_CACHE (tools cache, default ~/.cache/omst-testground), GO (the go command),
# OMST_SYNC_PORT (direct mode: the sync service port; default a free port; testground mode needs 5050),
# OMST_REUSE_SYNC=1 (testground mode: use a sync service already listening on 5050).
#
# Nothing is started on 127.0.0.1:6379 (a Redis there makes testground's local:exec runner abort).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
PLAN_DIR=$HERE/omst
CACHE=${OMST_TG_CACHE:-$HOME/.cache/omst-testground}
TG_VERSION=v0.6.0
SYNC_VERSION=v0.1.0
SDK_VERSION=v0.3.0
export GOFLAGS=${GOFLAGS:--buildvcs=false}
GO=${GO:-$(command -v go || true)}
[ -n "$GO" ] || GO=/usr/local/go/bin/go
[ -x "$GO" ] || command -v "$GO" >/dev/null || { echo "run-local.sh: no go command (set GO=)" >&2; exit 1; }

MODES=""
OVERRIDES=()
OUT=${OMST_TG_OUT:-$HERE/.runs}
DEADLINE=900
PIDS_TO_KILL=()
TMPDIRS=()

log() { echo "run-local: $*" >&2; }
die() { log "$*"; exit 1; }

stop_procs() {
	local pid
	for pid in "${PIDS_TO_KILL[@]}"; do
		if kill -0 "$pid" 2>/dev/null; then
			kill -TERM "$pid" 2>/dev/null || true
			for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
			kill -KILL "$pid" 2>/dev/null || true
		fi
	done
	PIDS_TO_KILL=()
}
cleanup() {
	stop_procs
	local d
	for d in "${TMPDIRS[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # PORT PID SECONDS
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		port_open "$1" && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# ---- (1) tools: testground and the sync service, exact versions, built from a scratch module ----
ensure_tools() {
	TG_BIN=$CACHE/bin/testground-$TG_VERSION
	SYNC_BIN=$CACHE/bin/sync-service-$SYNC_VERSION
	if [ -x "$TG_BIN" ] && [ -x "$SYNC_BIN" ]; then return; fi
	log "building testground $TG_VERSION and sync-service $SYNC_VERSION into $CACHE (a few minutes, once)"
	local src=$CACHE/src
	mkdir -p "$src" "$CACHE/bin"
	[ -f "$src/go.mod" ] || printf 'module omst-testground-tools\n\ngo 1.26.0\n' >"$src/go.mod"
	cat >"$src/tools.go" <<-'EOF'
	//go:build tools

	package tools

	import (
		_ "github.com/testground/sync-service"
		_ "github.com/testground/testground"
	)
	EOF
	(
		cd "$src"
		"$GO" get "github.com/testground/testground@$TG_VERSION" "github.com/testground/sync-service@$SYNC_VERSION"
		"$GO" mod tidy
		"$GO" build -o "$TG_BIN" github.com/testground/testground
		"$GO" build -o "$SYNC_BIN" github.com/testground/sync-service/cmd
	) >&2 || die "building the testground tools failed"
}

# The stock sync service listens on :5050 only; testplans/sync (the same
# sync-service version, pinned in its go.mod) takes -port, so that direct
# runs do not collide with another sync service.
build_omst_sync() {
	OMST_SYNC_BIN=$WORK/omst-sync
	(cd "$REPO/testplans/sync" && "$GO" build -o "$OMST_SYNC_BIN" .) >&2 || die "building testplans/sync failed"
}

# ---- (2) the omst binary and the plan binary ----
ensure_omst() {
	if [ -n "${OMST_BIN:-}" ]; then
		[ -x "$OMST_BIN" ] || die "OMST_BIN=$OMST_BIN is not executable"
		OMST_BIN=$(cd "$(dirname "$OMST_BIN")" && pwd)/$(basename "$OMST_BIN")
	else
		log "building $REPO/bin/omst"
		(cd "$REPO" && "$GO" build -o bin/omst ./cmd/omst) || die "go build ./cmd/omst failed"
		OMST_BIN=$REPO/bin/omst
	fi
	export OMST_BIN
}

build_plan() {
	PLAN_BIN=$WORK/omst-plan
	log "building the plan ($PLAN_DIR)"
	(cd "$PLAN_DIR" && "$GO" build -o "$PLAN_BIN" .) || die "building the plan failed"
}

# ---- (3) the sync service, bounded: killed at exit ----
start_sync() { # PORT BINARY ARGS...
	local port=$1
	shift
	port_open "$port" && die "port $port is in use (another sync service?); set OMST_SYNC_PORT or stop it"
	"$@" >"$WORK/sync-service.log" 2>&1 &
	local pid=$!
	PIDS_TO_KILL+=("$pid")
	wait_port "$port" "$pid" 20 || die "the sync service did not come up on :$port (log: $WORK/sync-service.log)"
	log "sync service on :$port (pid $pid)"
}

# composition_groups FILE MODE: prints "case", then "group count params" lines
# (params packed k=v|k=v: global test_params, then the group's, then -p overrides).
composition_groups() {
	python3 - "$@" "${OVERRIDES[@]}" <<-'EOF'
	import sys, tomllib
	path, mode, overrides = sys.argv[1], sys.argv[2], sys.argv[3:]
	c = tomllib.load(open(path, "rb"))
	g = c["global"]
	base = dict(g.get("run", {}).get("test_params", {}))
	print(g["case"])
	for grp in c["groups"]:
	    p = dict(base)
	    p.update(grp.get("run", {}).get("test_params", {}))
	    for kv in overrides:
	        k, _, v = kv.partition("=")
	        p[k] = v
	    if mode:
	        p["mode"] = mode
	    for k, v in p.items():
	        if "|" in str(v) or "=" in str(v):
	            sys.exit(f"param {k}={v}: '|' and '=' cannot be passed")
	    print(grp["id"], grp["instances"]["count"], "|".join(f"{k}={v}" for k, v in p.items()))
	EOF
}

# ---- (4a) direct mode: one plan process per instance, TEST_* variables set by hand ----
run_direct() { # COMPOSITION MODE
	local comp=$1 mode=$2 lines case total=0 run_id rundir
	lines=$(composition_groups "$comp" "$mode") || die "cannot read $comp"
	case=$(head -n1 <<<"$lines")
	while read -r _ n _; do total=$((total + n)); done < <(tail -n +2 <<<"$lines")
	run_id=$(basename "$comp" .toml)-${mode:-default}-$(date +%Y%m%d-%H%M%S)-$$
	rundir=$OUT/$run_id
	mkdir -p "$rundir"
	log "direct run $run_id: case $case, $total instances, outputs in $rundir"
	local pids=() tags=() group n params i odir t0 t1
	t0=$(date +%s.%N)
	while read -r group n params; do
		for ((i = 0; i < n; i++)); do
			odir=$rundir/$group/$i
			mkdir -p "$odir" "$WORK/t/$group$i"
			env TEST_PLAN=omst TEST_CASE="$case" TEST_RUN="$run_id" TEST_INSTANCE_COUNT="$total" \
				TEST_GROUP_ID="$group" TEST_GROUP_INSTANCE_COUNT="$n" TEST_INSTANCE_PARAMS="$params" \
				TEST_OUTPUTS_PATH="$odir" TEST_TEMP_PATH="$WORK/t/$group$i" TEST_DISABLE_METRICS=true TEST_SIDECAR=false \
				SYNC_SERVICE_HOST=127.0.0.1 SYNC_SERVICE_PORT="$SYNC_PORT" OMST_BIN="$OMST_BIN" \
				timeout --kill-after=10 "$DEADLINE" "$PLAN_BIN" >"$odir/run.out" 2>&1 &
			pids+=("$!")
			tags+=("$group[$i]")
		done
	done < <(tail -n +2 <<<"$lines")
	local rc=0 k
	for k in "${!pids[@]}"; do
		if ! wait "${pids[$k]}"; then
			rc=1
			local f=$rundir/$(sed 's/\[/\//; s/\]//' <<<"${tags[$k]}")/run.out
			log "instance ${tags[$k]} failed: $( (grep -o '"\(failure\|crash\)_event":{[^}]*}' "$f" || tail -n 2 "$f") | tail -n 1)"
		fi
	done
	t1=$(date +%s.%N)
	log "run $run_id: $(python3 -c "print(f'{$t1-$t0:.1f}')")s wall, exit $rc"
	RESULT_DIRS+=("$rundir")
	return $rc
}

# ---- (4b) testground mode: testground daemon + local:exec runner ----
run_testground() { # COMPOSITION MODE
	local comp=$1 mode=$2 tghome port comp2 rc=0
	local reuse=""
	if port_open 5050; then
		[ "${OMST_REUSE_SYNC:-}" = 1 ] || die "port 5050 is in use: testground's local:exec runner needs a sync service there; set OMST_REUSE_SYNC=1 to use the one running (runs are isolated by run ID)"
		reuse=1
		log "using the sync service already on :5050"
	fi
	port_open 6379 && die "something listens on 127.0.0.1:6379; testground's local:exec runner aborts with a Redis there"
	tghome=$(mktemp -d /tmp/omst-tg.XXXXXX)
	TMPDIRS+=("$tghome")
	port=$(free_port)
	mkdir -p "$tghome/plans"
	printf '[daemon]\nlisten = "127.0.0.1:%s"\n\n[client]\nendpoint = "http://127.0.0.1:%s"\n' "$port" "$port" >"$tghome/.env.toml"
	# The plan's go.mod replaces the omst module with ../.. ; testground builds
	# a copy, so the copy gets an absolute replace.
	cp -r "$PLAN_DIR" "$tghome/plans/omst"
	(cd "$tghome/plans/omst" && "$GO" mod edit -replace="github.com/omst-project/omst=$REPO")
	comp2=$tghome/composition.toml
	python3 - "$comp" "$comp2" "$mode" "${OVERRIDES[@]}" <<-'EOF'
	import sys, tomllib, re
	src, dst, mode, overrides = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
	text = open(src).read()
	extra = dict(kv.partition("=")[::2] for kv in overrides)
	if mode:
	    extra["mode"] = mode
	if extra:
	    tomllib.loads(text)  # it must parse
	    lines, out, in_params = text.splitlines(), [], False
	    for line in lines:
	        s = line.strip()
	        if s.startswith("["):
	            in_params = s == "[global.run.test_params]"
	        elif in_params and re.match(r"^[A-Za-z_]+\s*=", s) and s.split("=")[0].strip() in extra:
	            continue
	        out.append(line)
	        if s == "[global.run.test_params]":
	            out += [f'{k} = "{v}"' for k, v in extra.items()]
	    text = "\n".join(out) + "\n"
	open(dst, "w").write(text)
	EOF
	[ -n "$reuse" ] || start_sync 5050 "$SYNC_BIN"
	log "testground daemon on 127.0.0.1:$port, TESTGROUND_HOME=$tghome"
	TESTGROUND_HOME=$tghome PATH="$(dirname "$OMST_BIN"):$PATH" "$TG_BIN" daemon >"$WORK/testground-daemon.log" 2>&1 &
	local tgpid=$!
	PIDS_TO_KILL+=("$tgpid")
	wait_port "$port" "$tgpid" 60 || die "testground daemon did not come up (log: $WORK/testground-daemon.log)"
	TESTGROUND_HOME=$tghome timeout --kill-after=10 "$DEADLINE" "$TG_BIN" --endpoint "http://127.0.0.1:$port" \
		run composition -f "$comp2" --wait 2>&1 | tee "$WORK/testground-run.log" >&2 || rc=1
	# testground v0.6.0 ends with "result <run>[<id>]: success" (or failure).
	grep -q ']: success' "$WORK/testground-run.log" || rc=1
	# Keep the outputs: copy them out of the temporary TESTGROUND_HOME.
	local run_out
	run_out=$(find "$tghome/data/outputs" -mindepth 3 -maxdepth 3 -type d 2>/dev/null | head -n1 || true)
	if [ -n "$run_out" ]; then
		mkdir -p "$OUT"
		cp -r "$run_out" "$OUT/" && RESULT_DIRS+=("$OUT/$(basename "$run_out")")
		log "outputs copied to $OUT/$(basename "$run_out")"
	fi
	stop_procs
	rm -rf "$tghome"
	return $rc
}

# ---- (5) the result table ----
print_table() {
	python3 - "$@" <<-'EOF'
	import sys, json, glob, os
	rows = []
	for d in sys.argv[1:]:
	    for f in sorted(glob.glob(os.path.join(d, "**", "summary.json"), recursive=True)):
	        s = json.load(open(f))
	        if isinstance(s, dict) and "case" in s and "records" in s:  # not omst-wan's own summary.json
	            rows.append(s)
	if not rows:
	    print("no summary.json found (the root instance did not finish)")
	    sys.exit(0)
	fmt = "{:<10} {:<14} {:>6} {:>10} {:>9} {:>13} {:>9} {:>9}  {}"
	print(fmt.format("case", "mode", "sites", "x workers", "MiB", "verified", "last (s)", "median", "result"))
	for s in rows:
	    print(fmt.format(s["case"], s["mode"], s["sites"], s["workers_per_site"], f'{s["bytes"]/2**20:.0f}',
	          f'{s["verified"]}/{s["expected"]}', f'{s["time_to_last"]:.3f}', f'{s["median"]:.3f}',
	          "PASS" if s["pass"] else "FAIL: " + "; ".join(s.get("failures") or [])[:200]))
	    for n in s.get("notes") or []:
	        print("    note:", n)
	EOF
}

# ---- main ----
cmd=${1:-}
[ $# -gt 0 ] && shift
COMPS=()
while [ $# -gt 0 ]; do
	case $1 in
	--modes) MODES=${2//,/ }; shift 2 ;;
	-p) OVERRIDES+=("$2"); shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	--deadline) DEADLINE=$2; shift 2 ;;
	-h | --help) sed -n '2,22p' "$0"; exit 0 ;;
	-*) die "unknown option $1" ;;
	*) COMPS+=("$1"); shift ;;
	esac
done
resolve_comp() {
	if [ -f "$1" ]; then echo "$1"; elif [ -f "$PLAN_DIR/_compositions/$1" ]; then echo "$PLAN_DIR/_compositions/$1";
	elif [ -f "$PLAN_DIR/_compositions/$1.toml" ]; then echo "$PLAN_DIR/_compositions/$1.toml"; else die "no composition $1"; fi
}

case $cmd in
tools) ensure_tools; log "tools: $TG_BIN $SYNC_BIN"; exit 0 ;;
table) print_table "${COMPS[@]}"; exit 0 ;;
small) cmd=direct; COMPS=("$PLAN_DIR/_compositions/broadcast-small.toml"); [ -n "$MODES" ] || MODES="tree star" ;;
direct | testground) [ ${#COMPS[@]} -gt 0 ] || die "usage: $0 $cmd COMPOSITION... [--modes m1,m2] [-p k=v]" ;;
*) sed -n '2,22p' "$0"; exit 2 ;;
esac

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d /tmp/omst-run-local.XXXXXX)
TMPDIRS+=("$WORK")
ensure_omst
RESULT_DIRS=()
status=0
if [ "$cmd" = direct ]; then
	build_plan
	build_omst_sync
	SYNC_PORT=${OMST_SYNC_PORT:-$(free_port)}
	start_sync "$SYNC_PORT" "$OMST_SYNC_BIN" -port "$SYNC_PORT"
	for c in "${COMPS[@]}"; do
		c=$(resolve_comp "$c")
		for m in $MODES; do run_direct "$c" "$m" || status=1; done
		[ -n "$MODES" ] || run_direct "$c" "" || status=1
	done
else
	ensure_tools
	for c in "${COMPS[@]}"; do
		c=$(resolve_comp "$c")
		for m in $MODES; do run_testground "$c" "$m" || status=1; done
		[ -n "$MODES" ] || run_testground "$c" "" || status=1
	done
fi
echo
print_table "${RESULT_DIRS[@]}"
exit $status
