#!/usr/bin/env bash
# examples/taskfarm/run.sh: build libomst and the task farm, start a local
# tree of daemons (root, 2 sites x 2 workers on loopback), run the master on
# the root's daemon with its tasks spread over the 4 worker daemons, check
# the result, and stop the tree. Exit status 0 only if everything passed.
# Everything (libomst install, build, daemon homes) lives in one temporary
# directory that is removed on every exit path.
#
# Needs: cc, make, pkg-config; Go to build bin/omst if it is missing (or set
# OMST_BIN). No root, loopback only.
# Knobs: OMST_BIN, TASKS (default 8 = 2 per worker daemon), INIT_MIB
# (default 32), KEEP=1 (keep the temporary directory for a look).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
TASKS=${TASKS:-8}
INIT_MIB=${INIT_MIB:-32}
SITES=2

EXAMPLE=taskfarm
EXTRA_TOOLS=()
TOOLS_HINT=""
# shellcheck source=../lib.sh
. "$repo/examples/lib.sh"

# 4. A tree: root (the master's host), sites a and b with a head and 2
#    workers each.
start_tree "$SITES" 2

# 5. The task farm: the master on the root's daemon, the workers on the
#    worker daemons (OMST_WORKER_SOCKETS, in the env file).
prefix=taskfarm/run-$$
say "OMST_SOCKET=\$OMST_ROOT_SOCKET taskfarm_master -t $TASKS -s $INIT_MIB $prefix"
rc=0
OMST_SOCKET=$OMST_ROOT_SOCKET bounded 60 "$work/build/taskfarm_master" -t "$TASKS" -s "$INIT_MIB" -T 50 "$prefix" || rc=$?
[ "$rc" -eq 0 ] || die "taskfarm_master exited with $rc"

# 6. Where the bytes went: the master's daemon (the root) sent the initial
#    data once per site, not once per task: the tasks got it from their
#    heads' caches (or their own host's cache, for the second task there).
say "byte counters of the daemons:"
"$localtree" counters "$work/tree" | tee "$work/counters" | sed 's/^/    /'
init=$((INIT_MIB << 20))
served=$(awk '$1 == "root" { print $2 }' "$work/counters")
# One copy per site (plus manifests); the results came up to the root (its
# bytes_fetched) but never went down through it.
[ -n "$served" ] && [ "$served" -lt $((SITES * init + init / 2)) ] ||
	die "the master's daemon served ${served:-?} bytes: the initial data left it more than once per site"
say "the master's daemon served $served bytes for $TASKS tasks: one copy of the initial data per site ($SITES sites), not one per task"
