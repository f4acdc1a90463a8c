#!/usr/bin/env bash
# Packet trace of one get over the emulated WAN (a benchmark aid, not a
# test): one site of one worker; the root puts SIZE, the worker gets it
# through its head (the plan's broadcast case), while tcpdump records the
# head's WAN interface and the worker's LAN interface. Then
# scripts/wan_trace.py prints where the time went (lookup, first byte,
# data per round trip, tail) and writes OUT/trace.csv.
#
#   scripts/wan-trace.sh OUT [SIZE=4MiB] [extra plan params, e.g. "|transport=quic"]
#
# OMST_BIN=path traces another omst binary (default: bin/omst, built here).
#
# Needs root, tcpdump (apt-get install tcpdump) and what bench-wan.sh needs.
# Timestamps on the WAN interface are taken before the receiving side's
# delay (the emulator delays in PREROUTING), so a packet from the root is
# seen there one one-way delay before the head's TCP gets it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/wan-trace.sh OUT [SIZE] [PARAMS]}
size=${2:-4MiB} extra=${3:-}
command -v tcpdump >/dev/null || { echo "wan-trace: tcpdump missing (apt-get install tcpdump)" >&2; exit 77; }
GO=$(scripts/ensure-go.sh)
make -s build
"$GO" build -o bin/omst-wan ./cmd/omst-wan
(cd testplans/omst && "$GO" build -o ../../bin/omst-plan .)
(cd testplans/sync && "$GO" build -o ../../bin/omst-sync .)
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/run" "$out"/*.pcap
capture() {
	set +e +o pipefail # a poll loop: no early exits on SIGPIPE
	local ns=""
	for _ in $(seq 1 300); do
		ns=$(ip netns list | awk '/-a-head/{print $1}' | sed 's/-a-head$//' | head -1)
		[ -n "$ns" ] && break
		sleep 0.05
	done
	[ -n "$ns" ] || return 0
	for _ in $(seq 1 300); do # the links come after the namespaces
		ip -n "$ns-a-head" link show wan >/dev/null 2>&1 && ip -n "$ns-a-w1" link show eth0 >/dev/null 2>&1 && break
		sleep 0.05
	done
	ip netns exec "$ns-a-head" timeout 120 tcpdump -U --immediate-mode -B 16384 -i wan -s 128 -w "$out/wan.pcap" 2>>"$out/tcpdump.err" &
	ip netns exec "$ns-a-w1" timeout 120 tcpdump -U --immediate-mode -B 16384 -i eth0 -s 128 -w "$out/lan.pcap" 2>>"$out/tcpdump.err" &
	wait # the harness kills what runs in its namespaces when the run ends
}
capture &
cap=$!
bin/omst-wan run -q -sites 1 -workers 1 -wan-bw 100mbit -wan-delay 20ms -lan-bw 1gbit -scratch /dev/shm \
	-timeout 5m -out "$out/run" -plan omst -case broadcast \
	-params "mode=tree|omst_bin=${OMST_BIN:-$PWD/bin/omst}|timeout=3m|blob_size=$size|log_level=debug$extra" \
	-sync "$PWD/bin/omst-sync" -- "$PWD/bin/omst-plan" >"$out/run.log" 2>&1
wait $cap || true
python3 scripts/wan_trace.py "$out"
