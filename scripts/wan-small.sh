#!/usr/bin/env bash
# The small emulated-WAN cases of the test command (make wan-small): the
# testground plan's broadcast of 32 MiB to 1 site x 2 workers, over a WAN
# link of 100 Mbit/s with 20 ms each way, in modes tree, store-forward and
# star, then failover and churn, each in real namespaces built by omst-wan;
# fails unless every worker verified its bytes and the tree broadcast
# finished within 1.25 x S/B_wan + 2 s.
# Needs root (network namespaces, tc, iptables): without it omst-wan says so
# and this script prints SKIPPED, adds the reason to $OMST_SKIPS (make test's
# last line shows it) and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-$(scripts/ensure-go.sh)}
export GOFLAGS=${GOFLAGS:--buildvcs=false}
# The omst under test is make build's (static, stamped with the commit:
# what omst version shows and omst grid up copies), built once by the
# Makefile's wan-small target and passed as OMST_BIN; never rebuilt here.
# Run alone, the script has make build it.
omst_bin=${OMST_BIN:-}
if [ -z "$omst_bin" ]; then
	make --no-print-directory build GO="$GO" >&2
	omst_bin=$PWD/bin/omst
fi
"$GO" build -o bin/omst-wan ./cmd/omst-wan
(cd testplans/omst && "$GO" build -o ../../bin/omst-plan .)

# testground's sync service v0.1.0 as a plain process (testplans/sync).
(cd testplans/sync && "$GO" build -o ../../bin/omst-sync .)
sync_bin=$PWD/bin/omst-sync

# skipped REASON records this part as skipped for make test's last line
# (OMST_SKIPS, set by the Makefile).
skipped() {
	echo "wan-small: ${1:-cannot emulate a WAN here}" >>"${OMST_SKIPS:-/dev/null}"
}

out=$(mktemp -d /tmp/omst-wansmall.XXXXXX)
trap 'rm -rf "$out"' EXIT
fail=0
# Runs: NAME CASE MODE WORKERS EXTRA-PARAMS. The broadcast in the three
# modes, then failover (the head dies at 30%: its workers finish through
# their fallback parent, the root) and churn (one worker leaves early, one
# joins late), on the same small topology; then the dht case on 2 sites x 2
# workers (a 16 MiB result put at each site, read by the other site's
# workers; tree topology, where the results must flow head to head: the
# root may serve at most 5% of what is read; then a flat cluster with no
# --parent).
runs=(
	"tree broadcast tree 2 "
	"store-forward broadcast store-forward 2 "
	"star broadcast star 2 "
	"failover failover tree 2 kill_at_fraction=0.3"
	"churn churn tree 3 churn_leave=1|churn_late=1"
	"dht-tree dht tree 2 topology=tree|result_size=16MiB|max_root_share=0.05"
	"dht-flat dht tree 2 topology=flat|result_size=16MiB"
)
for r in "${runs[@]}"; do
	read -r mode case m workers extra <<<"$r"
	params="mode=$m|blob_size=32MiB|omst_bin=$omst_bin${extra:+|$extra}"
	# The churn run keeps the daemons' stores in memory (omst-wan -scratch,
	# as bench-wan does), so that the test command exercises that too.
	scratch=/tmp
	[ "$mode" != churn ] || [ ! -d /dev/shm ] || scratch=/dev/shm
	sites=1
	[ "$case" != dht ] || sites=2 # dht reads the other sites' results
	rc=0
	timeout 300 bin/omst-wan run -q -sites "$sites" -workers "$workers" -wan-bw 100mbit -wan-delay 20ms -lan-bw 1gbit \
		-scratch "$scratch" -timeout 4m -out "$out/$mode" -plan omst -case "$case" \
		-params "$params" -sync "$sync_bin" -- "$PWD/bin/omst-plan" \
		>"$out/$mode.log" 2>&1 || rc=$?
	if [ "$rc" -eq 77 ]; then
		echo "wan-small: SKIPPED (omst-wan cannot emulate here):" >&2
		tail -n 3 "$out/$mode.log" >&2
		skipped "$(grep -o 'cannot emulate a WAN here: .*' "$out/$mode.log" | tail -n 1 | sed 's/^cannot emulate a WAN here: //')"
		exit 0
	fi
	if [ "$rc" -ne 0 ] || [ ! -f "$out/$mode/root/summary.json" ]; then
		echo "wan-small: $mode FAILED (exit $rc)" >&2
		tail -n 30 "$out/$mode.log" >&2
		for f in "$out/$mode"/*/stderr.log; do echo "== $f" >&2; tail -n 10 "$f" >&2; done
		fail=1
		continue
	fi
	python3 - "$out/$mode/root/summary.json" "$mode" <<'PY' || fail=1
import json, sys
s = json.load(open(sys.argv[1]))
mode = sys.argv[2]
limit = s["bytes"] * 8 / 100e6
ok = s["pass"] and s["verified"] == s["expected"] > 0
line = "wan-small: %-13s %d/%d transfers verified, last at %.2f s (limit S/B_wan %.2f s, x%.2f)" % (
    mode, s["verified"], s["expected"], s["time_to_last"], limit, s["time_to_last"] / limit)
if mode == "tree" and s["case"] == "broadcast" and s["time_to_last"] > 1.25 * limit + 2:
    ok = False
    line += ": over 1.25 x limit + 2 s"
for n in s.get("notes") or []:
    line += "\n    " + n
print(line + ("" if ok else "  FAILED"))
sys.exit(0 if ok else 1)
PY
done
exit $fail
