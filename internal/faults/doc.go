// Package faults is omst's fault-injection harness: it runs real
// `omst daemon` processes (the bin/omst binary) on loopback, injects faults
// at points chosen by a seeded RNG, and checks invariants after each.
//
// What it holds:
//
//   - proc.go: process control. Every process the harness starts (daemons,
//     clients) is in one registry, so that every path out of a run,
//     including SIGINT and the global timeout, kills them all, unmounts what
//     was mounted and removes the temp directories. Daemon wraps one
//     `omst daemon` with its home, fixed loopback port (a restart keeps the
//     identity and the address), log file and the probes Pid, FDs (open
//     descriptors by kind, from /proc/PID/fd) and RSS (/proc/PID/status).
//   - cli.go: bounded runs of the omst CLI.
//   - topo.go: a tree (root, heads, workers with the root as fallback
//     parent) on ports picked up front.
//   - ledger.go: the ledger of puts (name -> SHA-256 of the bytes of the
//     last completed put, plus attempts that did not complete) and the
//     judgement of a read against it. Pure.
//   - damage.go: on-disk damage (byte flips, truncation, deletion) of chunk
//     and index files, and the store layout (HOME/cache/chunks/xx/<hash>,
//     HOME/cache/index). Pure apart from the files it is pointed at.
//   - env.go: what a case works with: the RNG, the ledger, put/get helpers
//     that feed the ledger and judge every read, and the per-daemon checks
//     (alive, answers status, no panic in its log, descriptors back to
//     their baseline).
//   - faulty.go: daemons that lie to their siblings, run from the
//     fault-injection build of omst (-tags omstfault, internal/faultinject)
//     with OMST_FAULT set (TreeSpec.Faults), and the check that the omst
//     binary under test holds no fault code.
//   - broadcast.go: one get started at several daemons at once, with the
//     time each ended.
//   - metrics.go, gctrace.go: a daemon's Go heap, from its metrics
//     endpoint or from its runtime's GC trace in its log.
//   - freeze.go: a filesystem of a daemon's own (a loop-mounted ext4)
//     frozen and thawed: a stalled disk.
//   - run.go: the case registry, rounds, seeds, failure reports.
//   - case_*.go: the cases, one file each.
//
// Decisions (which fault, when in bytes or time, where, which blob sizes)
// come from an RNG seeded per case from the run's seed and the case's name,
// so `-seed N -cases C` replays the same choices; the timing of the
// processes themselves still varies from run to run, so a replay reaches
// the same fault point in the same way but not always with the same
// interleaving inside the daemons.
package faults
