//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/omst-project/omst/internal/wanemu"
)

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1   // a host's command failed, or a check was out of bounds
	exitUsage       = 2   // bad flags
	exitTimeout     = 124 // -timeout expired (as timeout(1))
	exitInterrupted = 130 // SIGINT or SIGTERM
	exitUnsupported = 77  // not root, tools or kernel features missing (automake's "skip")
)

const usage = `omst-wan emulates a WAN grid on this machine and runs a command on every host.

Each host is a network namespace: a root (the master), and per site a head
node and workers behind a switch. Links are veth pairs shaped with htb (both
directions); WAN latency is added by an NFQUEUE delayer on the receiving side.
Needs root, ip, tc, iptables and the kernel's nfnetlink_queue; otherwise it
says why and exits 77.

  root ──WAN── a-head ──LAN── a-sw ──LAN── a-w1 .. a-wN     (site a = 0)
       ──WAN── b-head ──LAN── b-sw ──LAN── b-w1 .. b-wN     (site b = 1)

Usage:
  omst-wan run   [topology flags] [run flags] -- CMD ARGS...
  omst-wan run   [topology flags] -keep        (build, wait for SIGINT: to explore)
  omst-wan check [topology flags] [-duration 5s] [-tolerance 0.3]
  omst-wan cleanup [-prefix omstw] [-scratch DIR] [-force]

run: builds the topology, runs CMD ARGS once per host inside the host's
namespace, waits for all (bounded by -timeout; the first failure ends the run
unless -fail-fast=false), prints a per-host summary (also OUT/summary.json)
and tears everything down, killing every process it started (also on failure,
timeout, SIGINT and SIGTERM). Exit 0 only if every host's command exited 0.
Each host's stdout and stderr go to OUT/<host>/stdout.log and stderr.log; CMD
runs in OUT/<host>. Its environment:
  OMST_WAN_HOST      root, a-head, a-w1, ...
  OMST_WAN_ROLE      root | head | worker
  OMST_WAN_SITE      site index 0.. ("" for the root)
  OMST_WAN_IP        this host's data IP, in 10.0.0.0/8: listen on it (the
                     root and heads also hold 172.16.s.x on WAN links)
  OMST_WAN_ROOT_IP   the root's data IP (10.0.0.1)
  OMST_WAN_HEAD_IP   the site head's data IP (heads and workers)
  OMST_WAN_OUT       OUT/<host> (also TEST_OUTPUTS_PATH)
  OMST_WAN_TMP       SCRATCH/<run>/<host> (-scratch, default /tmp): short
                     scratch dir for daemon homes
                     (unix socket paths), removed at teardown
  OMST_WAN_SHARED    SCRATCH/<run>/shared: one directory for all hosts
                     (they share this machine's file system), e.g. to
                     coordinate through files; removed at teardown
  OMST_WAN_WAN_IFACE heads: the interface of the site's WAN link; its
                     received bytes (/proc/net/dev, internal/wanemu/ifstat) are
                     what entered the site, headers included. "" elsewhere
  OMST_WAN_SITES, OMST_WAN_WORKERS, OMST_WAN_WAN_BW (bit/s),
  OMST_WAN_WAN_DELAY (one way), OMST_WAN_LAN_BW (bit/s)
  SYNC_SERVICE_HOST=127.0.0.1 SYNC_SERVICE_PORT=5050: inside every namespace
                     a relay forwards this port, off the shaped links, to the
                     sync service (see -sync, -sync-addr)
  TEST_PLAN TEST_CASE TEST_RUN TEST_INSTANCE_COUNT TEST_GROUP_ID (root|heads|
  workers) TEST_GROUP_INSTANCE_COUNT TEST_INSTANCE_PARAMS TEST_OUTPUTS_PATH
  TEST_TEMP_PATH TEST_SUBNET TEST_SIDECAR=false TEST_DISABLE_METRICS=true:
                     a testground plan binary runs as one instance per host.

check: builds the topology and measures, with a TCP tester built in, the
round trip root<->worker and head<->worker, and the throughput over the WAN
link (both ways) and a LAN link, against the configured values. Exit 1 if a
figure is off by more than -tolerance.

cleanup: removes namespaces and scratch directories that crashed runs left
(names starting with -prefix), killing the processes inside them. Runs whose
omst-wan process is still alive are kept unless -force.

Example: 2 sites of 4 workers, 100 Mbit/s and 20 ms one way to each site,
a testground plan binary as one instance per host, with its sync service:
  omst-wan run -sites 2 -workers 4 -wan-bw 100mbit -wan-delay 20ms \
      -sync ~/.cache/omst-testground/bin/sync-service -case fanout \
      -params "size=256MiB" -out /tmp/fanout -- ./plan-binary

Exit statuses: 0 ok, 1 a host failed or a check was off, 2 bad usage,
77 cannot emulate here, 124 -timeout expired, 130 interrupted.
`

func main() {
	os.Exit(mainCode(os.Args[1:]))
}

func mainCode(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:])
	case "check":
		return cmdCheck(args[1:])
	case "cleanup":
		return cmdCleanup(args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return exitOK
	}
	fmt.Fprintf(os.Stderr, "omst-wan: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

// failCode is the exit status for err from building a topology.
func failCode(err error) int {
	if errors.Is(err, wanemu.ErrUnsupported) {
		return exitUnsupported
	}
	return exitFailed
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "omst-wan: "+format+"\n", args...)
}
