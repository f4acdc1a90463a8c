#!/usr/bin/env bash
# scripts/slurm-cluster.sh {start|stop|status|env} DIR: a whole Slurm cluster
# on this machine, for omst's Slurm tests (make slurm) and for trying
# `omst slurm` by hand. Everything lives under DIR: a munged with its own
# key and socket, a slurmctld and four slurmd (n1..n4, `slurmd -N nX`,
# NodeAddr=127.0.0.1), each on its own port, their state, spool, logs and
# pid files, and DIR/slurm.conf. Point clients at it with
#   export SLURM_CONF=DIR/slurm.conf      (`env` prints that line)
# then e.g. `srun -N 4 hostname`. Needs root (SlurmUser=root) and Debian's
# slurmctld, slurmd, slurm-client and munge.
#
# start waits until the four nodes are idle (or fails, printing the logs'
# tails); stop kills every daemon it started (by the pids in DIR) and
# removes DIR; both are idempotent. SLURM_NODES (default 4) and
# SLURM_BASE_PORT (default 16817: ctld, then one port per node) change the
# shape and the ports; SLURM_BB_LUA=FILE turns on the burst_buffer/lua
# plugin with FILE as DIR/burst_buffer.lua (Directive=BB_LUA).
set -euo pipefail

usage() { echo "usage: $0 {start|stop|status|env} DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
DIR=$2
case "$DIR" in /*) ;; *) DIR=$PWD/$DIR ;; esac
NODES=${SLURM_NODES:-4}
BASE=${SLURM_BASE_PORT:-16817}
CONF=$DIR/slurm.conf
export SLURM_CONF=$CONF

nodenames() { local i; for ((i = 1; i <= NODES; i++)); do echo "n$i"; done; }

# pids: every pid file of this cluster's daemons.
pidfiles() { ls "$DIR"/run/*.pid 2>/dev/null || true; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop() {
  [ -d "$DIR" ] || return 0
  local f p i
  # slurmd first (they tell the controller nothing on exit), then the
  # controller, then munge; each gets SIGTERM and, after 5 s, SIGKILL.
  for f in $(ls "$DIR"/run/slurmd.*.pid 2>/dev/null) "$DIR/run/slurmctld.pid" "$DIR/run/munged.pid"; do
    [ -f "$f" ] || continue
    p=$(cat "$f")
    # Only a process whose command line names this cluster's files.
    if kill -0 "$p" 2>/dev/null && tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qE "slurm|munge"; then
      kill -TERM "$p" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
      kill -KILL "$p" 2>/dev/null || true
    fi
    rm -f "$f"
  done
  # Job steps' slurmstepd (and what they run) outlive slurmd: end those of
  # this cluster (their command line names its spool directory).
  for p in $(pgrep -f "slurmstepd" || true); do
    if tr '\0' ' ' <"/proc/$p/environ" 2>/dev/null | grep -q "SLURM_CONF=$CONF"; then
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
  rm -rf "$DIR"
}

status() {
  if ! [ -f "$CONF" ]; then echo "no cluster in $DIR"; return 1; fi
  local f bad=0
  for f in "$DIR/run/munged.pid" "$DIR/run/slurmctld.pid" $(for n in $(nodenames); do echo "$DIR/run/slurmd.$n.pid"; done); do
    if alive "$f"; then echo "$(basename "$f" .pid): running (pid $(cat "$f"))"; else echo "$(basename "$f" .pid): not running"; bad=1; fi
  done
  sinfo -h -N -o '%N %t' 2>/dev/null || bad=1
  return $bad
}

tails() {
  local f
  for f in "$DIR"/log/*.log; do
    [ -f "$f" ] || continue
    echo "--- $f (last lines)" >&2
    tail -n 15 "$f" >&2
  done
}

start() {
  for c in munged slurmctld slurmd sinfo srun scontrol; do
    command -v "$c" >/dev/null || { echo "slurm-cluster: $c not found (Debian: apt-get install slurmctld slurmd slurm-client munge)" >&2; exit 3; }
  done
  [ "$(id -u)" = 0 ] || { echo "slurm-cluster: needs root (SlurmUser=root, munged's key)" >&2; exit 3; }
  if [ -f "$CONF" ]; then
    if status >/dev/null 2>&1; then echo "slurm-cluster: already running in $DIR"; return 0; fi
    stop
  fi
  mkdir -p "$DIR"/{run,log,state,spool,munge}
  chmod 0700 "$DIR/munge"
  # munged: its own key, socket and pid file; as root with --force (its
  # checks want the socket directory owned by the user it runs as).
  head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
  chmod 0400 "$DIR/munge/munge.key"
  munged --force --socket="$DIR/munge/munge.sock" --key-file="$DIR/munge/munge.key" \
    --pid-file="$DIR/run/munged.pid" --seed-file="$DIR/munge/seed" --log-file="$DIR/log/munged.log"
  local last=$((BASE + NODES))
  cat >"$CONF" <<EOF
# Written by scripts/slurm-cluster.sh: a $NODES-node cluster on one host.
ClusterName=omsttest
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmctldPort=$BASE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.sock
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SwitchType=switch/none
MpiDefault=none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
PlugStackConfig=$DIR/plugstack.conf
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=5
MessageTimeout=10
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=30
NodeName=n[1-$NODES] NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=[$((BASE + 1))-$last] CPUs=4 RealMemory=1024 State=UNKNOWN
PartitionName=debug Nodes=n[1-$NODES] Default=YES MaxTime=INFINITE State=UP
EOF
  : >"$DIR/plugstack.conf"
  if [ -n "${SLURM_BB_LUA:-}" ]; then
    cp "$SLURM_BB_LUA" "$DIR/burst_buffer.lua"
    printf "Directive=BB_LUA\n" >"$DIR/burst_buffer.conf"
    echo "BurstBufferType=burst_buffer/lua" >>"$CONF"
  fi
  slurmctld -f "$CONF" -i
  local n
  for n in $(nodenames); do
    slurmd -f "$CONF" -N "$n"
  done
  # Until every node is idle.
  local i idle
  for ((i = 0; i < 300; i++)); do
    idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle"' | sort -u | wc -l)
    [ "$idle" -eq "$NODES" ] && { echo "slurm-cluster: $NODES nodes idle; export SLURM_CONF=$CONF"; return 0; }
    sleep 0.1
  done
  echo "slurm-cluster: the nodes did not become idle within 30 s:" >&2
  sinfo -N >&2 || true
  tails
  stop
  exit 1
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) usage ;;
esac
