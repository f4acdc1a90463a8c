package faults

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"
)

// Case is one named fault-injection case.
type Case struct {
	Name string
	Doc  string
	Run  func(e *Env) error
}

// Cases lists every case, in the order a round runs them.
var Cases = []Case{
	{"put-kill", "SIGKILL a daemon during a put; restart it on the same home", casePutKill},
	{"relay-kill", "SIGKILL a daemon during a local get, and a head while it relays a get to its worker; restart them", caseRelayKill},
	{"shared-get-kill", "kill -9 a daemon mid-get into a file it shares with its store; restart it: no partial file, no orphan, exact bytes again", caseSharedGetKill},
	{"stream-get-kill", "kill -9 a worker mid stream-get (its fetch into one blob file of its store); restart it: the chunks written whole served, only the rest fetched", caseStreamGetKill},
	{"client-kill", "SIGKILL a client mid-upload and mid-download; the daemon survives without leaking", caseClientKill},
	{"chunk-damage", "flip, truncate, delete chunk files at the root, a head and a worker while they run; get there and below", caseChunkDamage},
	{"index-damage", "delete or flip bytes of a stopped daemon's index, restart it", caseIndexDamage},
	{"full-disk", "a daemon home on a small tmpfs: puts larger than the free space (root only)", caseFullDisk},
	{"full-disk-get", "a get into a file on a full disk: its home and destination on a small tmpfs (root only)", caseFullDiskGet},
	{"cache-cap", "puts and gets of blobs larger than a daemon's --cache-size", caseCacheCap},
	{"handed-kill", "a GET_FD client keeps a blob file mapped while the daemon evicts the blob, is kill -9ed and restarted: never punched, the cap back once unmapped", caseHandedKill},
	{"parent-restart", "kill -9 the root while workers hold sessions, restart it with the same identity", caseParentRestart},
	{"rmprefix-kill", "kill -9 a node while the root removes a prefix everywhere; on restart it forgets the names too", caseRemovePrefixKill},
	{"gather-kill", "kill -9 a head while the root gathers its site's small results with get -r: exact files or none, the rest come", caseGatherKill},
	{"push-kill", "kill -9 the root while it pushes a blob's first chunks to a head, then the head while it takes them", casePushKill},
	{"sibling-kill", "kill -9 a worker while its siblings fetch chunks from it during a broadcast", caseSiblingKill},
	{"bulk-kill", "kill -9 a head serving plain bulk connections mid-broadcast, then a worker receiving over them", caseBulkKill},
	{"slow-disk-relay", "a head's disk frozen (fsfreeze of its own loop-mounted ext4) for 6 s mid-broadcast while its 3 workers wait (root only)", caseSlowDiskRelay},
	{"worker-stop", "SIGSTOP a worker for 10 s mid-broadcast while its siblings fetch chunks from it, then SIGCONT", caseWorkerStop},
	{"worker-kill-mid-chunk", "kill -9 a worker while it sends chunks to its siblings (its bytes_out rising) during a broadcast", caseWorkerKillMidChunk},
	{"worker-corrupt", "a worker (fault-injection build) flips a byte of every chunk it sends its siblings during a broadcast", caseWorkerCorrupt},
	{"worker-liar", "a worker (fault-injection build) asks for every chunk but answers its siblings NOT_FOUND during a broadcast", caseWorkerLiar},
	{"worker-silent", "a worker (fault-injection build) takes its siblings' chunk requests and never answers them", caseWorkerSilent},
	{"relay-busy", "a head (fault-injection build) answers its workers' GET_DIRECTs BUSY forever: bounded, the blob from the fallback", caseRelayBusy},
	{"relay-redirect", "a head (fault-injection build) redirects its workers' GET_DIRECTs to peers that cannot serve: bounded, the blob from the fallback", caseRelayRedirect},
	{"provider-kill", "kill -9 another site's head while it serves a result found in the DHT", caseProviderKill},
	{"revoke", "revoke a worker's membership mid-broadcast in a closed grid, an outsider trying to read", caseRevoke},
	{"many-gets", "1,000 concurrent local gets of one blob against one daemon: exact bytes, fds and RSS", caseManyGets},
	{"socket-rights", "a real unprivileged user on a root daemon's group socket: root's files, a planted link, root's names (root only)", caseSocketRights},
}

// CaseNames lists the case names.
func CaseNames() []string {
	var out []string
	for _, c := range Cases {
		out = append(out, c.Name)
	}
	return out
}

// SkipError marks a case that could not run here (it counts as skipped,
// not passed).
type SkipError struct{ Reason string }

func (s *SkipError) Error() string { return "SKIP: " + s.Reason }

// Config configures a run.
type Config struct {
	Bin string
	// FaultBin is omst built with -tags omstfault (internal/faultinject),
	// run by the daemons a case makes lie; cases that need none do not
	// look at it.
	FaultBin string
	Seed     uint64
	Duration time.Duration // 0: each case once; else rounds until it has passed
	Cases    []string      // empty: all
	Keep     bool          // keep the temp directories (homes, daemon logs) of failed cases
	Verbose  bool
	Out      io.Writer
	TempRoot string // where the run's temp directory goes ("" = os.TempDir)
}

// Summary is what a run found.
type Summary struct {
	Passed, Failed, Skipped int
	Rounds                  int
	Failures                []string // one line each: case, seed, replay command
	Took                    time.Duration
}

// SelectCases resolves names (empty: all) to cases, in suite order.
func SelectCases(names []string) ([]Case, error) {
	if len(names) == 0 {
		return Cases, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		found := false
		for _, c := range Cases {
			if c.Name == n {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown case %q (cases: %s)", n, strings.Join(CaseNames(), ", "))
		}
		want[n] = true
	}
	var out []Case
	for _, c := range Cases {
		if want[c.Name] {
			out = append(out, c)
		}
	}
	return out, nil
}

// NextSeed derives the seed of the next round from a round's seed
// (splitmix64), so a failing round replays alone with -seed.
func NextSeed(s uint64) uint64 {
	s += 0x9e3779b97f4a7c15
	z := s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// caseRNG is the RNG of case name in a round with this seed: independent
// of which other cases run.
func caseRNG(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// Run runs the selected cases once (Duration 0), or in rounds until
// Duration has passed, each round with its own seed (printed). It stops
// early when ctx ends. Processes, mounts and temp directories of a case
// are undone when the case ends (directories are kept with Keep or when
// the case failed and Keep is set).
func Run(ctx context.Context, cfg Config) (Summary, error) {
	var sum Summary
	start := time.Now()
	cases, err := SelectCases(cfg.Cases)
	if err != nil {
		return sum, err
	}
	if _, err := os.Stat(cfg.Bin); err != nil {
		return sum, fmt.Errorf("omst binary: %w (build it with make build)", err)
	}
	root, err := os.MkdirTemp(cfg.TempRoot, "omf-")
	if err != nil {
		return sum, err
	}
	addDir(root)
	defer func() {
		if !cfg.Keep {
			os.RemoveAll(root)
		} else {
			os.Remove(root) // only if empty: nothing failed
		}
		removeDir(root)
	}()
	out := cfg.Out
	fmt.Fprintf(out, "omst-faults: seed %d (replay: -seed %d); cases %s; temp %s\n", cfg.Seed, cfg.Seed, names(cases), root)
	seed := cfg.Seed
	deadline := start.Add(cfg.Duration)
	for round := 0; ; round++ {
		if cfg.Duration > 0 {
			fmt.Fprintf(out, "round %d: seed %d\n", round+1, seed)
		}
		for _, c := range cases {
			if ctx.Err() != nil {
				sum.Took = time.Since(start)
				return sum, ctx.Err()
			}
			if cfg.Duration > 0 && round > 0 && time.Now().After(deadline) {
				break
			}
			runOne(ctx, cfg, root, round, seed, c, &sum)
		}
		sum.Rounds = round + 1
		if cfg.Duration == 0 || !time.Now().Before(deadline) {
			break
		}
		seed = NextSeed(seed)
	}
	sum.Took = time.Since(start)
	return sum, nil
}

func names(cs []Case) string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return strings.Join(n, ",")
}

func runOne(ctx context.Context, cfg Config, root string, round int, seed uint64, c Case, sum *Summary) {
	out := cfg.Out
	dir := filepath.Join(root, fmt.Sprintf("r%d-%s", round+1, c.Name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(out, "FAIL %s: %v\n", c.Name, err)
		sum.Failed++
		return
	}
	e := &Env{Ctx: ctx, Bin: cfg.Bin, FaultBin: cfg.FaultBin, Dir: dir, Case: c.Name, Seed: seed, Rng: caseRNG(seed, c.Name),
		Ledger: NewLedger(), Verbose: cfg.Verbose, out: out, start: time.Now()}
	t0 := time.Now()
	if cfg.Verbose {
		fmt.Fprintf(out, "RUN  %s (seed %d)\n", c.Name, seed)
	}
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("harness panic: %v\n%s", r, debug.Stack())
			}
		}()
		err = c.Run(e)
		if err == nil {
			e.Step("final check of every daemon's log")
			err = e.ScanAll()
		}
		return err
	}()
	took := time.Since(t0).Round(100 * time.Millisecond)
	var skip *SkipError
	switch {
	case err == nil:
		sum.Passed++
		fmt.Fprintf(out, "PASS %s (%v)\n", c.Name, took)
	case errors.As(err, &skip):
		sum.Skipped++
		fmt.Fprintf(out, "SKIP %s (%s)\n", c.Name, skip.Reason)
		noteSkip(c.Name, skip.Reason)
	default:
		sum.Failed++
		kind := "ERROR (harness or setup)"
		var v *Violation
		if errors.As(err, &v) {
			kind = "VIOLATION"
		}
		if ctx.Err() != nil {
			kind = "INTERRUPTED"
		}
		fmt.Fprintf(out, "FAIL %s (%v): %s\n  seed: %d\n  case: %s\n  step: %s\n  %v\n", c.Name, took, kind, seed, c.Name, e.step, err)
		replay := fmt.Sprintf("make faults SEED=%d CASES=%s (or bin/omst-faults -seed %d -cases %s -keep -v)", seed, c.Name, seed, c.Name)
		fmt.Fprintf(out, "  replay: %s\n", replay)
		if cfg.Keep {
			fmt.Fprintf(out, "  kept: %s (daemon logs: %s/*.log)\n", dir, dir)
		} else if ctx.Err() == nil {
			for _, d := range e.daemons {
				fmt.Fprintf(out, "  --- log tail of %s (%s):\n%s\n", d.Name, d.LogPath, d.LogTail(12))
			}
		}
		sum.Failures = append(sum.Failures, fmt.Sprintf("%s seed %d: %s: %s (replay: %s)", c.Name, seed, kind, firstLine(err.Error()), replay))
	}
	// Undo what the case left: its daemons, its mounts, its directory.
	e.KillAll()
	for _, m := range mountsUnder(dir) {
		if err := Unmount(m); err != nil {
			fmt.Fprintf(out, "  cleanup: %v\n", err)
		}
	}
	if !cfg.Keep || err == nil {
		os.RemoveAll(dir)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
