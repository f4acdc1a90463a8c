#!/usr/bin/env bash
# scripts/slurm-test.sh: omst under a real Slurm (make slurm, part of make
# test). Starts a 4-node cluster on this machine (scripts/slurm-cluster.sh)
# and checks, with sbatch jobs:
#   A. omst slurm up; an MPI program (examples/mpi/omst_mpi, srun
#      --mpi=pmi2, one rank per node) that gets its initial data with
#      OmstGetData and publishes results, each rank finding its node's
#      daemon of the job by itself, and the Python package likewise; omst slurm bcast (--preserve, refused
#      without --force, --force); omst slurm down, then no directory left;
#      then a node whose daemon cannot start (n3): named, the others up,
#      exit status non-zero, and down cleans up;
#   B. at the same time as A, on the same nodes: its own daemons (its own
#      site, ports, sockets), a put and a get on every node; it ends without
#      omst slurm down (the job's end stops its daemons);
#   C. scancel in the middle of a transfer: every daemon gone and every
#      directory removed within seconds;
#   E. with A and B: omst slurm up --parent ROOT --join TOKEN (one per node)
#      joins the job to a closed grid's root outside Slurm; the input from
#      the root on every node, the results read by name at the root;
#   D. stage-in and stage-out through dist/slurm/burst_buffer.lua (a job of
#      user nobody: the plugin refuses root's), and a malformed #BB_LUA omst
#      line rejected at submission;
# and `omst slurm up` outside an allocation (a clear error). After the
# jobs: no `omst slurm task` process and no job directory left. Bounded in
# time; the cluster is stopped on every exit path.
#
# Needs root and Debian's slurmctld, slurmd, slurm-client, munge, and mpich
# (mpicc); without the packages it records a skip in $OMST_SKIPS and exits 0.
# OMST_BIN (default bin/omst), KEEP=1 keeps the work directory.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OMST_BIN=${OMST_BIN:-$repo/bin/omst}
case "$OMST_BIN" in /*) ;; *) OMST_BIN=$repo/$OMST_BIN ;; esac

skip() {
	echo "slurm: SKIP: $1"
	[ -n "${OMST_SKIPS:-}" ] && echo "slurm: $1" >>"$OMST_SKIPS"
	exit 0
}
missing=()
for c in slurmctld slurmd srun sbatch scancel squeue scontrol munged mpicc pkg-config; do
	command -v "$c" >/dev/null || [ -x "/usr/sbin/$c" ] || missing+=("$c")
done
[ ${#missing[@]} -eq 0 ] || skip "no ${missing[*]} (apt-get install slurmctld slurmd slurm-client munge mpich)"
[ "$(id -u)" = 0 ] || skip "needs root (the test cluster runs with SlurmUser=root)"
[ -x "$OMST_BIN" ] || { echo "slurm: no $OMST_BIN (make build)" >&2; exit 1; }

work=$(mktemp -d /tmp/omst-slurmtest.XXXXXX)
say() { echo "slurm: $*"; }
die() {
	echo "slurm: FAIL: $*" >&2
	for f in "$work"/*.out; do
		[ -f "$f" ] && { echo "--- $f" >&2; tail -n 40 "$f" >&2; }
	done
	exit 1
}
cleanup() {
	local rc=$?
	[ -n "${SLURM_CONF:-}" ] && scancel --quiet --full --signal=KILL -u root 2>/dev/null || true
	"$repo/scripts/slurm-cluster.sh" stop "$work/cluster" || true
	[ -f "$work/bb/ctl/lock" ] && kill "$(cat "$work/bb/ctl/lock")" 2>/dev/null || true
	[ -f "$work/root/lock" ] && kill "$(cat "$work/root/lock")" 2>/dev/null || true
	# Tasks of the test's jobs that slurmstepd did not end (their binary is ours).
	for p in $(pgrep -f "$OMST_BIN slurm task" || true); do
		grep -qz "TMPDIR=$work/tmp" "/proc/$p/environ" 2>/dev/null && kill -KILL "$p" 2>/dev/null || true
	done
	if [ "${KEEP:-}" = 1 ]; then echo "slurm: kept $work"; else rm -rf "$work"; fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
start=$SECONDS

# The MPI program, against libomst installed into the work directory.
say "building libomst and examples/mpi/omst_mpi"
timeout 300 make -s -C "$repo/bindings/c" install PREFIX="$work/prefix" B="$work/libomst-build" >"$work/build.log" 2>&1 ||
	{ tail -n 30 "$work/build.log" >&2; die "building libomst"; }
PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig" timeout 120 make -s -C "$repo/examples/mpi" BUILD="$work/build" >>"$work/build.log" 2>&1 ||
	{ tail -n 30 "$work/build.log" >&2; die "building omst_mpi"; }

# Stage-in and stage-out (dist/slurm/burst_buffer.lua): a daemon on the
# "controller host" running as nobody (the plugin refuses root's jobs), the
# omst binary where nobody can run it.
chmod 0711 "$work"
mkdir -p "$work/bb/job"
install -m 0755 "$OMST_BIN" "$work/bb/omst"
chown 65534:65534 "$work/bb" "$work/bb/job"
asnobody() { setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$work/bb" "$@"; }
asnobody "$work/bb/omst" --home "$work/bb/ctl" daemon --detach --listen /ip4/127.0.0.1/tcp/0 >/dev/null ||
	die "the stage daemon (as nobody) did not start"
head -c $((4 << 20)) /dev/urandom >"$work/bb/in.src"
chmod 0644 "$work/bb/in.src"
asnobody "$work/bb/omst" --home "$work/bb/ctl" put bb/in "$work/bb/in.src" >/dev/null || die "put bb/in"
export OMST_BB_BIN=$work/bb/omst OMST_BB_SOCKET=$work/bb/ctl/omst.sock

# The cluster, on ports of its own (another base if those are taken).
for try in 1 2 3; do
	export SLURM_BASE_PORT=$((21000 + RANDOM % 8000))
	SLURM_BB_LUA=$repo/dist/slurm/burst_buffer.lua "$repo/scripts/slurm-cluster.sh" start "$work/cluster" >"$work/cluster-start.log" 2>&1 && break
	[ "$try" = 3 ] && { cat "$work/cluster-start.log" >&2; die "the Slurm cluster did not start"; }
done
cat "$work/cluster-start.log"
export SLURM_CONF=$work/cluster/slurm.conf
export TMPDIR=$work/tmp # the nodes' local disk, as far as the jobs know
mkdir -p "$TMPDIR"
# The Python package (bindings/python) in the repository's .venv.
PYTHON=${PYTHON:-$("$repo/scripts/pyenv.sh")} || die "no Python with the omst package (scripts/pyenv.sh)"
export OMST_BIN WORK=$work MPI_BIN=$work/build/omst_mpi PYTHON
unset OMST_SOCKET OMST_HOME

# Outside an allocation: a clear error.
if out=$(env -u SLURM_JOB_ID "$OMST_BIN" slurm up 2>&1); then die "omst slurm up outside an allocation exited 0"; fi
grep -q "not inside a Slurm allocation" <<<"$out" || die "outside an allocation, omst slurm up said: $out"
say "ok: outside an allocation: $out"

# waitjobs ID... waits (at most $1 s) until the jobs have left the queue.
waitjobs() {
	local limit=$1 i
	shift
	for ((i = 0; i < limit * 5; i++)); do
		[ -z "$(squeue -h -j "$(
			IFS=,
			echo "$*"
		)" 2>/dev/null)" ] && return 0
		sleep 0.2
	done
	die "jobs $* still queued or running after ${limit}s"
}

# job_procs JOB: the pids of job JOB's `omst slurm task` processes (the
# daemons; not the srun that started them).
job_procs() {
	local p
	for p in $(pgrep -f "^$OMST_BIN slurm task" || true); do
		grep -qz "^SLURM_JOB_ID=$1\$" "/proc/$p/environ" 2>/dev/null && echo "$p"
	done
	return 0
}

cat >"$work/jobA.sh" <<'EOF'
#!/bin/bash
set -uo pipefail
say() { echo "A: $*"; }
fail() { echo "A: FAIL: $*"; exit 1; }
J=$SLURM_JOB_ID
all=(--overlap -N4 --ntasks-per-node=1)
head=$("$OMST_BIN" slurm up) || fail "omst slurm up"
say "up, head $head"
touch "$WORK/up.A"
for i in $(seq 300); do [ -e "$WORK/up.B" ] && break; sleep 0.2; done
[ -e "$WORK/up.B" ] || fail "job B never came up"
[ -d "$TMPDIR/omst-slurm-$J" ] || fail "no $TMPDIR/omst-slurm-$J"
# The MPI program: no OMST_SOCKET, no OMST_HOME; each rank finds its node's daemon.
timeout 90 srun --mpi=pmi2 -N4 --ntasks-per-node=1 "$MPI_BIN" -s 8 "mpi/$J" || fail "the MPI program"
say "MPI program passed"
# The Python package in a job step: no variable, its node's daemon of the job.
py=$(srun "${all[@]}" "$PYTHON" -c 'import omst, os; print(len(omst.get("mpi/'"$J"'/init")), omst.default_socket() == os.path.join(os.environ["TMPDIR"], "omst-slurm-" + os.environ["SLURM_JOB_ID"], os.environ["SLURMD_NODENAME"], "omst.sock"))' 2>&1)
[ "$(grep -c "^$((8 << 20)) True\$" <<<"$py")" = 4 ] || fail "Python in a job step: $py"
say "Python: 4 nodes got the initial data from their own daemon of the job"
# Each node's daemon of this job got the initial data itself.
n=$(srun "${all[@]}" "$OMST_BIN" stat "mpi/$J/init" 2>&1 | grep -c '^size') || true
[ "$n" = 4 ] || fail "the initial data on $n of 4 daemons"
# bcast of a file, preserving its mode and time.
head -c $((16 << 20)) /dev/urandom >"$WORK/bc.dat"
chmod 0640 "$WORK/bc.dat"
touch -d '2020-01-02 03:04:05' "$WORK/bc.dat"
"$OMST_BIN" slurm bcast --preserve "$WORK/bc.dat" "$WORK/dest-%N.dat" || fail "bcast"
for x in n1 n2 n3 n4; do
	cmp -s "$WORK/bc.dat" "$WORK/dest-$x.dat" || fail "bcast: $x's copy differs"
	[ "$(stat -c '%a %Y' "$WORK/dest-$x.dat")" = "$(stat -c '%a %Y' "$WORK/bc.dat")" ] || fail "bcast --preserve: $x's mode or time"
done
say "bcast: 4 copies, mode and time preserved"
if "$OMST_BIN" slurm bcast "slurm/$J/bcast/bc.dat" "$WORK/dest-%N.dat" >"$WORK/A.nof" 2>&1; then fail "bcast over existing files without --force"; fi
grep -q "exists (--force replaces it)" "$WORK/A.nof" || fail "bcast without --force said: $(cat "$WORK/A.nof")"
"$OMST_BIN" slurm bcast --force "slurm/$J/bcast/bc.dat" "$WORK/dest-%N.dat" || fail "bcast --force"
say "bcast refused without --force, replaced with it"
"$OMST_BIN" slurm down || fail "omst slurm down"
[ -e "$TMPDIR/omst-slurm-$J" ] && fail "$TMPDIR/omst-slurm-$J left after down"
say "down: nothing left"
# A node whose daemon cannot start: its home's place is taken by a file.
mkdir -p "$TMPDIR/omst-slurm-$J"
: >"$TMPDIR/omst-slurm-$J/n3"
if "$OMST_BIN" slurm up >"$WORK/A.up2" 2>&1; then fail "up with n3 broken exited 0"; fi
grep -q "n3: no daemon" "$WORK/A.up2" || fail "n3 not named: $(cat "$WORK/A.up2")"
[ "$(grep -c 'no daemon:' "$WORK/A.up2")" = 1 ] || fail "more nodes than n3 failed: $(cat "$WORK/A.up2")"
n=$(srun --overlap -N3 -w n1,n2,n4 --ntasks-per-node=1 "$OMST_BIN" status 2>&1 | grep -c '(connected)\|^site') || true
[ "$n" -ge 3 ] || fail "n1, n2, n4 not up after a failure on n3"
say "n3's daemon failed and was named, the others up: $(grep 'n3: no daemon' "$WORK/A.up2")"
"$OMST_BIN" slurm down || fail "omst slurm down after the failure"
[ -e "$TMPDIR/omst-slurm-$J" ] && fail "$TMPDIR/omst-slurm-$J left after the second down"
say OK
EOF

cat >"$work/jobB.sh" <<'EOF'
#!/bin/bash
set -uo pipefail
say() { echo "B: $*"; }
fail() { echo "B: FAIL: $*"; exit 1; }
J=$SLURM_JOB_ID
all=(--overlap -N4 --ntasks-per-node=1)
"$OMST_BIN" slurm up >/dev/null || fail "omst slurm up"
touch "$WORK/up.B"
sites=$(srun "${all[@]}" "$OMST_BIN" status | awk '$1 == "site" { print $2 }' | sort | uniq -c | awk '{ print $1, $2 }')
[ "$sites" = "4 omsttest-$J" ] || fail "the daemons' sites: $sites"
echo "hello from $J" | "$OMST_BIN" put "b/$J" - >/dev/null || fail put
n=$(srun "${all[@]}" "$OMST_BIN" get "b/$J" | grep -c "hello from $J") || true
[ "$n" = 4 ] || fail "got b/$J on $n of 4 nodes"
for i in $(seq 300); do [ -e "$WORK/up.A" ] && break; sleep 0.2; done
[ -e "$WORK/up.A" ] || fail "job A never came up"
[ "$(ls -d "$TMPDIR"/omst-slurm-* | wc -l)" -ge 2 ] || fail "not both jobs' directories at once"
say "up beside job A: 4 daemons of site omsttest-$J, a put and 4 gets; ends without omst slurm down"
say OK
EOF

cat >"$work/jobC.sh" <<'EOF'
#!/bin/bash
set -uo pipefail
fail() { echo "C: FAIL: $*"; exit 1; }
"$OMST_BIN" slurm up -- --max-upload-rate 8M >/dev/null || fail "omst slurm up"
head -c $((96 << 20)) /dev/urandom | "$OMST_BIN" put big - >/dev/null || fail put
srun --overlap -N3 -w n2,n3,n4 --ntasks-per-node=1 "$OMST_BIN" get -q big -o /dev/null &
sleep 2
touch "$WORK/transfer.C"
wait
echo "C: the transfer ended before scancel"
EOF
chmod +x "$work"/job?.sh

cat >"$work/bb/job/jobD.sh" <<EOF
#!/bin/bash
#SBATCH -N 1
#BB_LUA omst get bb/in $work/bb/job/in.dat
#BB_LUA omst put bb/out $work/bb/job/out.dat
cmp "$work/bb/in.src" "$work/bb/job/in.dat" || { echo "D: FAIL: in.dat not staged in"; exit 1; }
sha256sum <"$work/bb/job/in.dat" >"$work/bb/job/out.dat"
echo "D: OK"
EOF
printf '#!/bin/bash\n#BB_LUA omst fetch bb/in /tmp/x\ntrue\n' >"$work/bb/job/bad.sh"
if out=$(sbatch --uid=65534 --gid=65534 -D "$work/bb/job" -o /dev/null "$work/bb/job/bad.sh" 2>&1); then die "a job with a malformed #BB_LUA omst line was accepted"; fi
grep -q "want .omst get NAME PATH" <<<"$out" || die "a malformed #BB_LUA omst line: $out"
say "ok: a malformed #BB_LUA omst line rejects the job: $out"
say "job D (as nobody): stage-in with #BB_LUA omst get, stage-out with #BB_LUA omst put"
D=$(sbatch --parsable --uid=65534 --gid=65534 -D "$work/bb/job" -o "$work/bb/job/D.out" "$work/bb/job/jobD.sh") || die "sbatch D"

# Job E joins the allocation to a closed grid's root on "the master's
# machine" (this host, outside Slurm) with a token per node.
"$OMST_BIN" --home "$work/root" grid init >/dev/null 2>&1 || die "grid init"
"$OMST_BIN" --home "$work/root" daemon --detach --listen /ip4/0.0.0.0/tcp/0 >/dev/null 2>&1 || die "the root did not start"
ROOT=$("$OMST_BIN" --home "$work/root" id | grep -v /127.0.0.1/ | head -n 1)
echo "input for every node" | "$OMST_BIN" --home "$work/root" put input/e - >/dev/null || die "put input/e at the root"
: >"$work/tokens-e"
chmod 0600 "$work/tokens-e"
for role in head worker worker worker; do
	t=$("$OMST_BIN" --home "$work/root" grid token --role "$role" --prefix results/e/ --ttl 10m 2>/dev/null | tail -n 1) || die "grid token"
	printf -- '--join\n%s\n' "$t" >>"$work/tokens-e"
done
export ROOT
cat >"$work/jobE.sh" <<'EOF'
#!/bin/bash
set -uo pipefail
fail() { echo "E: FAIL: $*"; exit 1; }
all=(--overlap -N4 --ntasks-per-node=1)
mapfile -t toks <"$WORK/tokens-e"
"$OMST_BIN" slurm up --parent "$ROOT" "${toks[@]}" >/dev/null || fail "omst slurm up --parent --join"
n=$(srun "${all[@]}" "$OMST_BIN" get input/e | grep -c "input for every node") || true
[ "$n" = 4 ] || fail "input/e from the root on $n of 4 nodes"
srun "${all[@]}" sh -c 'echo "result of $SLURMD_NODENAME" | "$OMST_BIN" put "results/e/$SLURMD_NODENAME" -' >/dev/null || fail "results"
for i in $(seq 300); do "$OMST_BIN" stat "collected/$SLURM_JOB_ID" >/dev/null 2>&1 && break; sleep 0.2; done
"$OMST_BIN" stat "collected/$SLURM_JOB_ID" >/dev/null 2>&1 || fail "the master never said it collected the results"
"$OMST_BIN" slurm down >/dev/null || fail down
echo "E: OK"
EOF
chmod +x "$work/jobE.sh"

say "jobs A and B at once on the 4 nodes, and E joined to a closed root"
A=$(sbatch --parsable -N4 -J omst-A -o "$work/A.out" "$work/jobA.sh") || die "sbatch A"
B=$(sbatch --parsable -N4 -J omst-B -o "$work/B.out" "$work/jobB.sh") || die "sbatch B"
E=$(sbatch --parsable -N4 -J omst-E -o "$work/E.out" "$work/jobE.sh") || die "sbatch E"
# The master: job E's results by name through the root, then the handshake.
# All four names: the nodes put at once, and each name reaches the root on
# its own (waiting for n4's alone failed once: n1's had not arrived yet).
for ((i = 0; i < 600; i++)); do
	missing=0
	for n in n1 n2 n3 n4; do
		"$OMST_BIN" --home "$work/root" stat "results/e/$n" >/dev/null 2>&1 || missing=$((missing + 1))
	done
	[ "$missing" = 0 ] && break
	grep -q FAIL "$work/E.out" 2>/dev/null && die "job E"
	sleep 0.2
done
[ "$missing" = 0 ] || die "$missing of job E's 4 results not at the root after 120 s"
for n in n1 n2 n3 n4; do
	got=$("$OMST_BIN" --home "$work/root" get "results/e/$n" 2>&1) || die "the root cannot get results/e/$n: $got"
	[ "$got" = "result of $n" ] || die "results/e/$n at the root: $got"
done
"$OMST_BIN" --home "$work/root" put "collected/$E" /dev/null >/dev/null || die "put collected/$E"
waitjobs 150 "$A" "$B" "$E"
grep -q '^A: OK' "$work/A.out" || die "job A"
grep -q '^B: OK' "$work/B.out" || die "job B"
grep -q '^E: OK' "$work/E.out" || die "job E"
say "ok: job E joined the closed root's grid with a token per node: the input from the root on 4 nodes, 4 results read by name at the root"
sed 's/^/    /' "$work/A.out" "$work/B.out"
for j in "$A" "$B" "$E"; do
	[ -z "$(job_procs "$j")" ] || die "job $j's daemons still run: $(job_procs "$j")"
	[ ! -e "$TMPDIR/omst-slurm-$j" ] || die "job $j's directory left: $(ls -R "$TMPDIR/omst-slurm-$j")"
done
say "ok: jobs A and B ran at once; no daemon or directory left"

say "job C: scancel in the middle of a transfer"
C=$(sbatch --parsable -N4 -J omst-C -o "$work/C.out" "$work/jobC.sh") || die "sbatch C"
for ((i = 0; i < 300; i++)); do [ -e "$work/transfer.C" ] && break; sleep 0.2; done
[ -e "$work/transfer.C" ] || die "job C's transfer did not start"
procs=$(job_procs "$C" | wc -l)
[ "$procs" = 4 ] || die "job C runs $procs daemons, not 4"
grep -q "ended before" "$work/C.out" && die "job C's transfer ended before scancel"
t0=$SECONDS
scancel "$C"
for ((i = 0; i < 150; i++)); do
	[ -z "$(job_procs "$C")" ] && [ ! -e "$TMPDIR/omst-slurm-$C" ] && break
	sleep 0.1
done
[ -z "$(job_procs "$C")" ] || die "job C's daemons still run 15 s after scancel"
[ ! -e "$TMPDIR/omst-slurm-$C" ] || die "job C's directory left 15 s after scancel: $(ls -R "$TMPDIR/omst-slurm-$C")"
say "ok: scancel mid-transfer: 4 daemons gone and directories removed within $((SECONDS - t0)) s"
waitjobs 30 "$C"

waitjobs 120 "$D"
grep -q '^D: OK' "$work/bb/job/D.out" 2>/dev/null || { cat "$work/bb/job/D.out" >&2 || true; scontrol show job "$D" >&2 || true; die "job D"; }
want=$(sha256sum <"$work/bb/in.src")
got=$(asnobody "$work/bb/omst" --home "$work/bb/ctl" get bb/out) || die "bb/out was not staged out"
[ "$got" = "$want" ] || die "bb/out: $got, want $want"
say "ok: job D's input staged in before it ran, its output staged out after"

[ -z "$(ls "$TMPDIR")" ] || die "left in TMPDIR: $(ls "$TMPDIR")"
say "passed in $((SECONDS - start)) s"
