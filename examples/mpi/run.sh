#!/usr/bin/env bash
# examples/mpi/run.sh: build libomst and omst_mpi, start a local tree of
# daemons (root, 2 sites x 2 workers on loopback), run
# `mpiexec -n 4 omst_mpi` with each rank on its own worker daemon, check the
# result, and stop the tree. Exit status 0 only if everything passed.
# Everything (libomst install, build, daemon homes) lives in one temporary
# directory that is removed on every exit path.
#
# Needs: mpicc and mpiexec (MPICH or Open MPI), cc, make, pkg-config; Go to
# build bin/omst if it is missing (or set OMST_BIN). No root, loopback only.
# Knobs: OMST_BIN, MPIEXEC (default mpiexec), NP (ranks, default 4),
# INIT_MIB (default 32), KEEP=1 (keep the temporary directory for a look).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
MPIEXEC=${MPIEXEC:-mpiexec}
NP=${NP:-4}
INIT_MIB=${INIT_MIB:-32}

EXAMPLE=mpi
EXTRA_TOOLS=(mpicc "$MPIEXEC")
TOOLS_HINT="the MPI example needs MPICH or Open MPI: apt-get install mpich"
# shellcheck source=../lib.sh
. "$repo/examples/lib.sh"

# 4. A tree: root, sites a and b with a head and NP/2 workers each; rank r
#    uses worker r (a-w1, a-w2, b-w1, b-w2 for NP=4).
start_tree 2 $(((NP + 1) / 2))

# 5. The MPI job.
mpiflags=(-n "$NP")
if "$MPIEXEC" --version 2>&1 | grep -qi 'open mpi\|open-rte'; then
	mpiflags+=(--oversubscribe -x OMST_WORKER_SOCKETS)
	[ "$(id -u)" = 0 ] && mpiflags+=(--allow-run-as-root)
elif "$MPIEXEC" --version 2>&1 | grep -qi hydra; then
	mpiflags+=(-launcher fork) # MPICH: all ranks on this host, no ssh
fi
prefix=mpi/run-$$
say "$MPIEXEC ${mpiflags[*]} omst_mpi -s $INIT_MIB $prefix"
rc=0
bounded 60 "$MPIEXEC" "${mpiflags[@]}" "$work/build/omst_mpi" -s "$INIT_MIB" "$prefix" || rc=$?
[ "$rc" -eq 0 ] || die "mpiexec exited with $rc"

# 6. Where the bytes went: rank 0's daemon (a-w1) sent the initial data
#    once (to its head, which replicates what its children put); the other
#    ranks got it from their heads and the root, not from rank 0.
say "byte counters of the daemons:"
"$localtree" counters "$work/tree" | tee "$work/counters" | sed 's/^/    /'
init=$((INIT_MIB << 20))
served0=$(awk '$1 == "a-w1" { print $2 }' "$work/counters")
# One copy of the initial data plus rank 0's 1 MiB result (and manifests);
# a second copy would be 1.5 x over the bound.
[ -n "$served0" ] && [ "$served0" -lt $((init + init / 2)) ] ||
	die "rank 0's daemon a-w1 served ${served0:-?} bytes: the initial data left it more than once"
say "rank 0's daemon served $served0 bytes (< 1.5 x $init, one copy): the $((NP - 1)) other ranks did not fetch from it"
IFS=: read -r -a homes <<<"$OMST_WORKER_HOMES"
for ((r = 1; r < NP && r < ${#homes[@]}; r++)); do
	w=${homes[$r]##*/}
	f=$(awk -v n="$w" '$1 == n { print $3 }' "$work/counters")
	[ -n "$f" ] && [ "$f" -ge "$init" ] || die "rank $r's daemon $w fetched only ${f:-?} bytes (< $init)"
done
