// Command omst-dhtbench measures omst's private Kademlia DHT (pkg/dht:
// go-libp2p-kad-dht, prefix /omst, server mode) at scale, with every node in
// one process on go-libp2p's mocknet, each link with the same one-way
// latency and no bandwidth limit.
//
// Usage:
//
//	omst-dhtbench [-nodes 100,300,1000] [-latency 10ms] [-repeats 3]
//	              [-lookups 300] [-provides 30] [-out results.json]
//
// For each size and repeat it re-executes itself (-child) so that every run
// starts from a fresh heap; a run that exceeds -run-timeout is killed and
// reported as such. A run:
//
//  1. creates N mocknet hosts and links every pair (a link is the ability to
//     connect; connections are made on demand, as the DHT dials);
//  2. starts a dht.DHT on each, in order, each bootstrapping from -bootstrap
//     random earlier nodes (not all from one), in batches that wait until
//     the batch's nodes have a routing table;
//  3. refreshes every node's routing table (-refresh-par at a time) and
//     waits (at most -settle-max) until no routing table is empty and the
//     sum of their sizes has stopped changing;
//  4. measures, one operation at a time: -provides Provide calls, each by a
//     random node for a fresh random blob ID (time to provide); provider
//     lookups of those IDs from random other nodes (Providers with limit 1:
//     the time to the first provider); and closest-peers lookups, the
//     stand-in for a name lookup: Providers of a random ID nobody provides,
//     which runs kad's iterative lookup to the end exactly as
//     GetClosestPeers does (its stop condition never holds), contacting
//     the 20 nodes closest to the key;
//  5. records routing table sizes, connections, goroutines and memory
//     (HeapInuse after a GC, less the mocknet link table, divided by N), a
//     request/response calibration of the links (alone, and inside the
//     run's network), the CPU used and the machine's load average, and
//     closes everything.
//
// The figures of every run and their medians over repeats are written to
// -out as JSON; a markdown table goes to standard output, progress to
// standard error. A benchmark is not a test: it reports, it does not pass
// or fail.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/multiformats/go-multihash"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/dht"
)

type config struct {
	nodes        []int
	latency      time.Duration
	repeats      []int // per size (one value: the same for all)
	lookups      int
	provides     int
	bootstrap    int
	batch        int
	refreshPar   int
	settleMax    time.Duration
	opTimeout    time.Duration
	runTimeout   time.Duration
	seed         uint64
	out          string
	cmdline      string
	child        bool
	childN       int
	childRepeat  int
	calibrations int
	cpuprofile   string
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "omst-dhtbench: %v\n", err)
		os.Exit(2)
	}
	if cfg.child {
		if cfg.cpuprofile != "" {
			f, err := os.Create(cfg.cpuprofile)
			if err == nil && pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile()
			}
		}
		res, err := runOne(cfg, cfg.childN, cfg.childRepeat)
		if err != nil {
			fmt.Fprintf(os.Stderr, "omst-dhtbench: run: %v\n", err)
			os.Exit(1)
		}
		if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
			fmt.Fprintf(os.Stderr, "omst-dhtbench: %v\n", err)
		}
		return
	}
	if err := parent(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "omst-dhtbench: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("omst-dhtbench", flag.ContinueOnError)
	nodes := fs.String("nodes", "100,300,1000", "network sizes, comma-separated")
	repeats := fs.String("repeats", "3", "runs per size: one number, or one per size (e.g. 3,3,1)")
	fs.DurationVar(&cfg.latency, "latency", 10*time.Millisecond, "one-way latency of every link")
	fs.IntVar(&cfg.lookups, "lookups", 300, "provider lookups and closest-peers lookups per run (each)")
	fs.IntVar(&cfg.provides, "provides", 30, "Provide calls per run (distinct blob IDs, random providers)")
	fs.IntVar(&cfg.bootstrap, "bootstrap", 3, "bootstrap peers per node, chosen at random among the earlier nodes")
	fs.IntVar(&cfg.batch, "batch", 25, "nodes started before waiting for their routing tables")
	fs.IntVar(&cfg.refreshPar, "refresh-par", 32, "routing table refreshes in flight during the refresh round")
	fs.DurationVar(&cfg.settleMax, "settle-max", 4*time.Minute, "longest wait for the routing tables to settle")
	fs.DurationVar(&cfg.opTimeout, "op-timeout", 30*time.Second, "timeout of one Provide or lookup")
	fs.DurationVar(&cfg.runTimeout, "run-timeout", 25*time.Minute, "a run still going after this is killed and reported")
	fs.Uint64Var(&cfg.seed, "seed", 1, "random seed (peer choice, keys); run r of size n uses seed+n*1000+r")
	fs.StringVar(&cfg.out, "out", "dht-scale.json", "JSON results file")
	fs.IntVar(&cfg.calibrations, "calibrations", 20, "request/response samples of the link calibration")
	fs.StringVar(&cfg.cpuprofile, "cpuprofile", "", "write each run's CPU profile to this path + .N.R")
	fs.BoolVar(&cfg.child, "child", false, "internal: do one run and print its JSON")
	fs.IntVar(&cfg.childN, "child-n", 0, "internal: nodes of the child run")
	fs.IntVar(&cfg.childRepeat, "child-repeat", 0, "internal: repeat index of the child run")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	for _, s := range strings.Split(*nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 2 {
			return cfg, fmt.Errorf("-nodes: bad size %q", s)
		}
		cfg.nodes = append(cfg.nodes, n)
	}
	for _, s := range strings.Split(*repeats, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || r < 1 {
			return cfg, fmt.Errorf("-repeats: bad count %q", s)
		}
		cfg.repeats = append(cfg.repeats, r)
	}
	if len(cfg.repeats) != 1 && len(cfg.repeats) != len(cfg.nodes) {
		return cfg, errors.New("-repeats: give one count or one per size")
	}
	if cfg.latency <= 0 || cfg.lookups < 1 || cfg.provides < 1 || cfg.bootstrap < 1 || cfg.batch < 1 || cfg.refreshPar < 1 {
		return cfg, errors.New("-latency, -lookups, -provides, -bootstrap, -batch and -refresh-par must be positive")
	}
	cfg.cmdline = "omst-dhtbench " + strings.Join(args, " ")
	return cfg, nil
}

func (c config) repeatsFor(i int) int {
	if len(c.repeats) == 1 {
		return c.repeats[0]
	}
	return c.repeats[i]
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}

// ---- results ----

// Dist summarises samples (milliseconds) also in round trips of the link
// (a round trip = 2 x the one-way latency).
type Dist struct {
	N      int     `json:"n"`
	Failed int     `json:"failed"`
	P50ms  float64 `json:"p50_ms"`
	P90ms  float64 `json:"p90_ms"`
	P99ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	P50RT  float64 `json:"p50_rt"`
	P99RT  float64 `json:"p99_rt"`
	// RPCs sent per operation (kad query events), median and p99.
	RPCsP50 float64 `json:"rpcs_p50"`
	RPCsP99 float64 `json:"rpcs_p99"`
}

// Run is one run of one size.
type Run struct {
	Nodes     int     `json:"nodes"`
	Repeat    int     `json:"repeat"`
	LatencyMs float64 `json:"latency_one_way_ms"`
	Error     string  `json:"error,omitempty"`

	// Link calibration: one request/response of 64 bytes on a fresh
	// stream over an open connection, and on a first contact (new
	// connection and identify, then the stream).
	CalOpenMs  float64 `json:"cal_open_conn_ms"`
	CalFirstMs float64 `json:"cal_first_contact_ms"`
	// The open-connection figure measured inside the run's network just
	// before the measurements (its load and the machine's).
	CalLoadedMs float64 `json:"cal_open_conn_in_run_ms"`

	StartSec   float64 `json:"start_s"`   // starting the DHTs (bootstrap batches)
	RefreshSec float64 `json:"refresh_s"` // the refresh round
	SettleSec  float64 `json:"settle_s"`  // waiting for the tables to stop changing
	Settled    bool    `json:"settled"`
	RefreshErr int     `json:"refresh_errors"`

	RTMedian    float64 `json:"rt_size_median"`
	RTMin       int     `json:"rt_size_min"`
	RTMax       int     `json:"rt_size_max"`
	RTMedianEnd float64 `json:"rt_size_median_end"`
	// Nodes with an empty routing table after the start, after the
	// refresh round and at the end.
	RTEmptyStart int     `json:"rt_empty_after_start"`
	RTEmpty      int     `json:"rt_empty_settled"`
	RTEmptyEnd   int     `json:"rt_empty_end"`
	ConnsMedian  float64 `json:"conns_per_node_median"` // at the start of the measurements
	ConnsEnd     float64 `json:"conns_per_node_median_end"`

	Provide   Dist `json:"provide"`
	Providers Dist `json:"provider_lookup"`
	Closest   Dist `json:"closest_peers_lookup"`
	// Name records: a signed put (PutName) by a random node, and a lookup
	// (Name, kad's GetValue with omst's quorum) from another, which must
	// return the record put.
	NamePut    Dist `json:"name_put"`
	NameLookup Dist `json:"name_lookup"`
	// Provider lookups answered from the querying node's own store (it is
	// one of the nodes the record was put on): 0 round trips.
	ProvidersLocal int `json:"provider_lookups_local"`

	MeasureSec float64 `json:"measure_s"`
	// CPU used by the process over the measurements, as a share of all
	// cores, and at rest for 3 s before them (kad's background work).
	CPUMeasure float64 `json:"cpu_share_measure"`
	CPURest    float64 `json:"cpu_share_rest"`
	// The machine's 1-minute load average before and after the
	// measurements (/proc/loadavg): other processes share the cores.
	LoadBefore float64 `json:"loadavg1_before"`
	LoadAfter  float64 `json:"loadavg1_after"`

	// Memory, bytes: HeapInuse after runtime.GC, minus the baseline of an
	// empty process and minus the mocknet link table (N(N-1)/2 links that
	// a real network does not have), divided by N: hosts, DHTs,
	// connections and streams. Settled: before the measurements; End:
	// after them (more connections). DHTOnly: the increase from starting
	// the DHTs (hosts excluded). Sys: the process's Sys at the end / N
	// (everything the Go runtime got from the OS, link table included).
	HeapPerNode     float64 `json:"heap_inuse_per_node"`
	HeapPerNodeEnd  float64 `json:"heap_inuse_per_node_end"`
	DHTHeapPerNode  float64 `json:"dht_heap_inuse_per_node"`
	LinkTableHeap   float64 `json:"link_table_heap_inuse"`
	SysPerNodeEnd   float64 `json:"sys_per_node_end"`
	GoroutinesNode  float64 `json:"goroutines_per_node"`
	GoroutinesNodeE float64 `json:"goroutines_per_node_end"`
	TotalSec        float64 `json:"total_s"`
}

// ---- parent: one child process per run ----

func parent(cfg config) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	type sizeResult struct {
		Nodes  int            `json:"nodes"`
		Runs   []Run          `json:"runs"`
		Median map[string]any `json:"median_over_runs"`
	}
	out := struct {
		Command   string       `json:"command"`
		GoVersion string       `json:"go_version"`
		CPUs      int          `json:"cpus"`
		Started   string       `json:"started"`
		Sizes     []sizeResult `json:"sizes"`
	}{Command: cfg.cmdline, GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Started: time.Now().Format(time.RFC3339)}
	write := func() error {
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(cfg.out, append(b, '\n'), 0o644)
	}
	for i, n := range cfg.nodes {
		sr := sizeResult{Nodes: n}
		for r := 0; r < cfg.repeatsFor(i); r++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			logf("== %d nodes, run %d/%d", n, r+1, cfg.repeatsFor(i))
			run := runChild(ctx, cfg, self, n, r)
			if run.Error != "" {
				logf("   run failed: %s", run.Error)
			} else {
				logf("   provide p50 %.0f ms, provider lookup p50/p99 %.1f/%.1f RT, closest %.1f/%.1f RT, heap %.2f MB/node",
					run.Provide.P50ms, run.Providers.P50RT, run.Providers.P99RT, run.Closest.P50RT, run.Closest.P99RT, run.HeapPerNodeEnd/1e6)
			}
			sr.Runs = append(sr.Runs, run)
			sr.Median = medianOverRuns(sr.Runs)
			if len(out.Sizes) > i {
				out.Sizes[i] = sr
			} else {
				out.Sizes = append(out.Sizes, sr)
			}
			if err := write(); err != nil {
				return err
			}
		}
	}
	printTable(os.Stdout, cfg, out.Sizes, func(s sizeResult) (int, int, map[string]any) {
		ok := 0
		for _, r := range s.Runs {
			if r.Error == "" {
				ok++
			}
		}
		return s.Nodes, ok, s.Median
	})
	logf("results in %s", cfg.out)
	return nil
}

func runChild(ctx context.Context, cfg config, self string, n, r int) Run {
	ctx, cancel := context.WithTimeout(ctx, cfg.runTimeout)
	defer cancel()
	args := []string{"-child", "-child-n", strconv.Itoa(n), "-child-repeat", strconv.Itoa(r),
		"-latency", cfg.latency.String(), "-lookups", strconv.Itoa(cfg.lookups), "-provides", strconv.Itoa(cfg.provides),
		"-bootstrap", strconv.Itoa(cfg.bootstrap), "-batch", strconv.Itoa(cfg.batch), "-refresh-par", strconv.Itoa(cfg.refreshPar),
		"-settle-max", cfg.settleMax.String(), "-op-timeout", cfg.opTimeout.String(),
		"-seed", strconv.FormatUint(cfg.seed, 10), "-calibrations", strconv.Itoa(cfg.calibrations)}
	if cfg.cpuprofile != "" {
		args = append(args, "-cpuprofile", fmt.Sprintf("%s.%d.%d", cfg.cpuprofile, n, r))
	}
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.WaitDelay = 10 * time.Second
	var stdout bytes.Buffer
	tail := &tailWriter{w: os.Stderr}
	cmd.Stdout, cmd.Stderr = &stdout, tail
	start := time.Now()
	err := cmd.Run()
	fail := Run{Nodes: n, Repeat: r, LatencyMs: ms(cfg.latency), TotalSec: time.Since(start).Seconds()}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		fail.Error = fmt.Sprintf("killed after %s (-run-timeout %s); last progress: %s", time.Since(start).Round(time.Second), cfg.runTimeout, tail.last())
		return fail
	}
	if ctx.Err() != nil {
		fail.Error = fmt.Sprintf("interrupted after %s; last progress: %s", time.Since(start).Round(time.Second), tail.last())
		return fail
	}
	if err != nil {
		fail.Error = fmt.Sprintf("child: %v; last output: %s", err, tail.last())
		return fail
	}
	var run Run
	if err := json.Unmarshal(stdout.Bytes(), &run); err != nil {
		fail.Error = fmt.Sprintf("child output: %v", err)
		return fail
	}
	return run
}

// tailWriter passes a child's progress through and remembers its last line.
type tailWriter struct {
	w   io.Writer
	mu  sync.Mutex
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	t.mu.Unlock()
	return t.w.Write(p)
}

func (t *tailWriter) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	return lines[len(lines)-1]
}

// medianOverRuns takes the median of every numeric figure over the runs
// that completed.
func medianOverRuns(runs []Run) map[string]any {
	var ok []map[string]any
	for _, r := range runs {
		if r.Error != "" {
			continue
		}
		b, _ := json.Marshal(r)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		ok = append(ok, m)
	}
	if len(ok) == 0 {
		return nil
	}
	return medianMaps(ok)
}

func medianMaps(ms []map[string]any) map[string]any {
	out := map[string]any{"runs": len(ms)}
	for k, v := range ms[0] {
		switch v.(type) {
		case float64:
			var xs []float64
			for _, m := range ms {
				if f, ok := m[k].(float64); ok {
					xs = append(xs, f)
				}
			}
			out[k] = median(xs)
		case map[string]any:
			var sub []map[string]any
			for _, m := range ms {
				if s, ok := m[k].(map[string]any); ok {
					sub = append(sub, s)
				}
			}
			o := medianMaps(sub)
			delete(o, "runs")
			out[k] = o
		}
	}
	return out
}

func printTable[S any](w io.Writer, cfg config, sizes []S, get func(S) (int, int, map[string]any)) {
	f := func(m map[string]any, path ...string) float64 {
		for _, p := range path[:len(path)-1] {
			m, _ = m[p].(map[string]any)
		}
		v, _ := m[path[len(path)-1]].(float64)
		return v
	}
	fmt.Fprintf(w, "\nDHT at scale on mocknet, one-way link latency %s (1 RT = %s); medians over runs\n\n", cfg.latency, 2*cfg.latency)
	fmt.Fprintln(w, "| nodes | runs | RT size (median) | conns/node | provider lookup p50 / p99 | closest-peers lookup p50 / p99 | name lookup p50 / p99 | time to provide p50 / p99 | name put p50 / p99 | heap in use / node | goroutines / node |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range sizes {
		n, ok, m := get(s)
		if m == nil {
			fmt.Fprintf(w, "| %d | 0 | failed | | | | | | | | |\n", n)
			continue
		}
		rt := func(k string) string {
			return fmt.Sprintf("%.0f / %.0f ms (%.1f / %.1f RT)", f(m, k, "p50_ms"), f(m, k, "p99_ms"), f(m, k, "p50_rt"), f(m, k, "p99_rt"))
		}
		fmt.Fprintf(w, "| %d | %d | %.0f | %.0f | %s | %s | %s | %s | %s | %.2f MB | %.0f |\n",
			n, ok, f(m, "rt_size_median"), f(m, "conns_per_node_median_end"),
			rt("provider_lookup"), rt("closest_peers_lookup"), rt("name_lookup"), rt("provide"), rt("name_put"),
			f(m, "heap_inuse_per_node_end")/1e6, f(m, "goroutines_per_node_end"))
	}
}

// ---- child: one run ----

type memPoint struct {
	heap, sys uint64
	gor       int
}

func measureMem() memPoint {
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return memPoint{heap: m.HeapInuse, sys: m.Sys, gor: runtime.NumGoroutine()}
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func runOne(cfg config, n, repeat int) (res Run, err error) {
	t0 := time.Now()
	res = Run{Nodes: n, Repeat: repeat, LatencyMs: ms(cfg.latency)}
	seed := cfg.seed + uint64(n)*1000 + uint64(repeat)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ctx := context.Background()

	res.CalOpenMs, res.CalFirstMs, err = calibrate(ctx, cfg)
	if err != nil {
		return res, fmt.Errorf("calibration: %w", err)
	}
	logf("   calibration: request/response %.1f ms on an open connection, %.1f ms on a first contact (1 RT = %.0f ms)",
		res.CalOpenMs, res.CalFirstMs, 2*ms(cfg.latency))

	m0 := measureMem()
	mn := mocknet.New()
	mn.SetLinkDefaults(mocknet.LinkOptions{Latency: cfg.latency})
	hosts := make([]host.Host, n)
	for i := range hosts {
		if hosts[i], err = genPeer(mn, i); err != nil {
			mn.Close()
			return res, err
		}
		hosts[i].SetStreamHandler(echoProto, echo)
	}
	m1 := measureMem()
	if err := mn.LinkAll(); err != nil {
		mn.Close()
		return res, err
	}
	m2 := measureMem()
	res.LinkTableHeap = float64(m2.heap) - float64(m1.heap)
	logf("   %d hosts, %d links (link table %.0f MB of heap)", n, n*(n-1)/2, res.LinkTableHeap/1e6)

	dhts := make([]*dht.DHT, n)
	defer func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for _, d := range dhts {
			if d == nil {
				continue
			}
			sem <- struct{}{}
			wg.Go(func() { defer func() { <-sem }(); d.Close() })
		}
		wg.Wait()
		mn.Close()
		logf("   closed (%d goroutines left)", runtime.NumGoroutine())
	}()

	// Start the DHTs in order; each bootstraps from a few random earlier nodes.
	start := time.Now()
	for lo := 0; lo < n; lo += cfg.batch {
		hi := min(lo+cfg.batch, n)
		for i := lo; i < hi; i++ {
			var boot []peer.AddrInfo
			if i > 0 {
				for _, j := range rng.Perm(i)[:min(cfg.bootstrap, i)] {
					boot = append(boot, peer.AddrInfo{ID: hosts[j].ID(), Addrs: hosts[j].Addrs()})
				}
			}
			if dhts[i], err = dht.New(dht.Config{Host: hosts[i], Bootstrap: boot}); err != nil {
				return res, err
			}
		}
		// Wait (at most 10 s) until this batch's nodes have a routing table.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			empty := 0
			for i := max(lo, 1); i < hi; i++ {
				if dhts[i].RoutingTableSize() == 0 {
					empty++
				}
			}
			if empty == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if hi%100 == 0 || hi == n {
			logf("   %d/%d DHTs started (%.1f s)", hi, n, time.Since(start).Seconds())
		}
	}
	res.StartSec = time.Since(start).Seconds()
	st := rtStats(dhts)
	res.RTEmptyStart = st.empty
	logf("   %d DHTs started in %.1f s; routing table median %.0f, %d empty", n, res.StartSec, st.med, st.empty)

	// Refresh every routing table, then wait until they stop changing.
	start = time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	sem := make(chan struct{}, cfg.refreshPar)
	for _, i := range rng.Perm(n) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			if err := dhts[i].Refresh(rctx); err != nil {
				mu.Lock()
				res.RefreshErr++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.RefreshSec = time.Since(start).Seconds()
	st = rtStats(dhts)
	logf("   refresh round in %.1f s (%d errors); routing table median %.0f, %d empty", res.RefreshSec, res.RefreshErr, st.med, st.empty)
	start = time.Now()
	var sums []int
	for time.Since(start) < cfg.settleMax {
		time.Sleep(2 * time.Second)
		st := rtStats(dhts)
		sums = append(sums, st.sum)
		// Settled: no empty table (kad retries joining every 2 min) and
		// the sum of the sizes steady over the last 3 polls.
		if k := len(sums); k >= 3 && st.empty == 0 {
			lo, hi := slices.Min(sums[k-3:]), slices.Max(sums[k-3:])
			if float64(hi-lo) <= 0.005*float64(hi) {
				res.Settled = true
				break
			}
		}
	}
	res.SettleSec = time.Since(start).Seconds()
	st = rtStats(dhts)
	res.RTMedian, res.RTMin, res.RTMax, res.RTEmpty = st.med, st.min, st.max, st.empty
	res.ConnsMedian = connsMedian(hosts)
	logf("   settled=%v after %.1f s: routing table median %.0f (min %d, max %d, %d empty), %.0f connections per node",
		res.Settled, res.SettleSec, st.med, st.min, st.max, st.empty, res.ConnsMedian)

	m3 := measureMem()
	base := float64(m0.heap) + res.LinkTableHeap
	res.HeapPerNode = (float64(m3.heap) - base) / float64(n)
	res.DHTHeapPerNode = (float64(m3.heap) - float64(m2.heap)) / float64(n)
	res.GoroutinesNode = float64(m3.gor-m0.gor) / float64(n)

	// CPU at rest (kad's background work).
	c0, w0 := cpuSeconds(), time.Now()
	time.Sleep(3 * time.Second)
	res.CPURest = (cpuSeconds() - c0) / time.Since(w0).Seconds() / float64(runtime.NumCPU())

	// The link calibration again, inside this network: what one RPC on an
	// open connection costs with this process's and the machine's load.
	var cal []float64
	for range cfg.calibrations {
		a, b := hosts[rng.IntN(n)], hosts[rng.IntN(n)]
		if a == b {
			continue
		}
		if _, err := echoRPC(ctx, a, b); err == nil { // connects if needed
			if d, err := echoRPC(ctx, a, b); err == nil {
				cal = append(cal, d)
			}
		}
	}
	res.CalLoadedMs = median(cal)

	// The measurements, one operation at a time.
	res.LoadBefore = loadavg()
	c0, w0 = cpuSeconds(), time.Now()
	keys := make([]cid.Cid, cfg.provides)
	providerOf := make([]int, cfg.provides)
	var provide, provLookup, closest samples
	for k := range keys {
		keys[k] = randomCID(rng)
		providerOf[k] = rng.IntN(n)
		d, rpcs, err := timed(ctx, cfg.opTimeout, func(ctx context.Context) error {
			return dhts[providerOf[k]].Provide(ctx, keys[k])
		})
		provide.add(d, rpcs, err == nil)
	}
	logf("   %d provides: p50 %.0f ms", cfg.provides, provide.dist(cfg.latency).P50ms)
	for i := 0; i < cfg.lookups; i++ {
		k := i % cfg.provides
		q := rng.IntN(n - 1)
		if q >= providerOf[k] {
			q++
		}
		found := false
		d, rpcs, _ := timed(ctx, cfg.opTimeout, func(ctx context.Context) error {
			ps := dhts[q].Providers(ctx, keys[k], 1)
			found = len(ps) == 1 && ps[0].ID == hosts[providerOf[k]].ID()
			return nil
		})
		if found && rpcs == 0 {
			res.ProvidersLocal++
		}
		provLookup.add(d, rpcs, found)

		absent := randomCID(rng)
		q = rng.IntN(n)
		d, rpcs, err = timed(ctx, cfg.opTimeout, func(ctx context.Context) error {
			ps := dhts[q].Providers(ctx, absent, 1)
			if len(ps) != 0 {
				return errors.New("a provider for a key nobody provided")
			}
			return ctx.Err() // the lookup ran out of time
		})
		// No RPC sent: the node's routing table was empty (a failure).
		closest.add(d, rpcs, err == nil && rpcs > 0)
		if (i+1)%100 == 0 {
			logf("   %d/%d lookups of each kind", i+1, cfg.lookups)
		}
	}
	names := make([]blob.Record, cfg.provides)
	var namePut, nameLookup samples
	for k := range names {
		o := rng.IntN(n)
		names[k] = blob.Record{Name: fmt.Sprintf("bench/name-%d", k), ID: randomCID(rng), Size: 1, Time: int64(k + 1), Origin: hosts[o].ID().String()}
		d, rpcs, err := timed(ctx, cfg.opTimeout, func(ctx context.Context) error { return dhts[o].PutName(ctx, names[k]) })
		if err != nil && namePut.failed == 0 {
			logf("   name put failed: %v", err)
		}
		namePut.add(d, rpcs, err == nil)
	}
	for i := 0; i < cfg.lookups; i++ {
		k := i % len(names)
		q := rng.IntN(n)
		var got blob.Record
		d, rpcs, err := timed(ctx, cfg.opTimeout, func(ctx context.Context) (err error) {
			got, err = dhts[q].Name(ctx, names[k].Name)
			return err
		})
		nameLookup.add(d, rpcs, err == nil && got.Equal(names[k]))
	}
	res.NamePut, res.NameLookup = namePut.dist(cfg.latency), nameLookup.dist(cfg.latency)
	logf("   %d name puts p50 %.1f RT; %d name lookups p50/p99 %.1f/%.1f RT (%d failed)", len(names), res.NamePut.P50RT, cfg.lookups, res.NameLookup.P50RT, res.NameLookup.P99RT, nameLookup.failed)
	res.MeasureSec = time.Since(w0).Seconds()
	res.CPUMeasure = (cpuSeconds() - c0) / res.MeasureSec / float64(runtime.NumCPU())
	res.LoadAfter = loadavg()
	res.Provide, res.Providers, res.Closest = provide.dist(cfg.latency), provLookup.dist(cfg.latency), closest.dist(cfg.latency)
	st = rtStats(dhts)
	res.RTMedianEnd, res.RTEmptyEnd = st.med, st.empty
	res.ConnsEnd = connsMedian(hosts)

	m4 := measureMem()
	res.HeapPerNodeEnd = (float64(m4.heap) - base) / float64(n)
	res.SysPerNodeEnd = float64(m4.sys) / float64(n)
	res.GoroutinesNodeE = float64(m4.gor-m0.gor) / float64(n)
	res.TotalSec = time.Since(t0).Seconds()
	logf("   one RPC on an open connection in the run: %.1f ms", res.CalLoadedMs)
	logf("   measured in %.1f s (CPU %.0f%% of all cores; at rest %.0f%%; load average %.1f -> %.1f); heap in use %.2f MB/node, %.0f goroutines/node",
		res.MeasureSec, 100*res.CPUMeasure, 100*res.CPURest, res.LoadBefore, res.LoadAfter, res.HeapPerNodeEnd/1e6, res.GoroutinesNodeE)
	return res, nil
}

// genPeer adds a host with an ed25519 identity, as omst daemons have
// (mocknet's GenPeer makes ECDSA ones, whose peer IDs do not embed the
// public key that name records are checked against).
func genPeer(mn mocknet.Mocknet, i int) (host.Host, error) {
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return nil, err
	}
	a, err := ma.NewMultiaddr(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4040", (i>>16)&0xff, (i>>8)&0xff, i&0xff))
	if err != nil {
		return nil, err
	}
	return mn.AddPeer(sk, a)
}

// timed runs op with a timeout and counts the DHT RPCs it sends.
func timed(ctx context.Context, timeout time.Duration, op func(context.Context) error) (time.Duration, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ectx, events := routing.RegisterForQueryEvents(ctx)
	var rpcs int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range events {
			if ev.Type == routing.SendingQuery {
				rpcs++
			}
		}
	}()
	start := time.Now()
	err := op(ectx)
	d := time.Since(start)
	cancel()
	<-done
	return d, rpcs, err
}

type samples struct {
	ms     []float64
	rpcs   []float64
	failed int
}

func (s *samples) add(d time.Duration, rpcs int, ok bool) {
	if !ok {
		s.failed++
		return
	}
	s.ms = append(s.ms, ms(d))
	s.rpcs = append(s.rpcs, float64(rpcs))
}

func (s *samples) dist(latency time.Duration) Dist {
	rt := 2 * ms(latency)
	d := Dist{N: len(s.ms), Failed: s.failed}
	if len(s.ms) == 0 {
		return d
	}
	d.P50ms, d.P90ms, d.P99ms, d.MaxMs = pct(s.ms, 50), pct(s.ms, 90), pct(s.ms, 99), slices.Max(s.ms)
	d.P50RT, d.P99RT = d.P50ms/rt, d.P99ms/rt
	d.RPCsP50, d.RPCsP99 = pct(s.rpcs, 50), pct(s.rpcs, 99)
	return d
}

// pct is the nearest-rank percentile.
func pct(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// loadavg is the machine's 1-minute load average (0 where unknown).
func loadavg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

type rtStat struct {
	med      float64
	min, max int
	sum      int
	empty    int
}

func rtStats(dhts []*dht.DHT) rtStat {
	var xs []float64
	st := rtStat{min: math.MaxInt}
	for _, d := range dhts {
		s := d.RoutingTableSize()
		xs = append(xs, float64(s))
		st.sum += s
		if s == 0 {
			st.empty++
		}
		st.min, st.max = min(st.min, s), max(st.max, s)
	}
	st.med = median(xs)
	return st
}

func connsMedian(hosts []host.Host) float64 {
	var xs []float64
	for _, h := range hosts {
		xs = append(xs, float64(len(h.Network().Conns())))
	}
	return median(xs)
}

func randomCID(rng *rand.Rand) cid.Cid {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rng.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rng.Uint64())
	sum := sha256.Sum256(b[:])
	mh, _ := multihash.Encode(sum[:], multihash.SHA2_256)
	return cid.NewCidV1(cid.Raw, mh)
}

const echoProto = "/omst-dhtbench/echo/1.0.0"

// echo answers 64 bytes with the same 64 bytes.
func echo(s network.Stream) {
	defer s.Close()
	buf := make([]byte, 64)
	if _, err := io.ReadFull(s, buf); err == nil {
		_, _ = s.Write(buf)
	}
	// Close only once the client has: mocknet's Close sends what is
	// buffered at once, without the link's latency (kad's handler keeps
	// its streams open too).
	_, _ = io.Copy(io.Discard, s)
}

// echoRPC times one 64-byte request/response from a to b on a new stream.
func echoRPC(ctx context.Context, a, b host.Host) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	s, err := a.NewStream(ctx, b.ID(), echoProto)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if _, err := s.Write(make([]byte, 64)); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(s, make([]byte, 64)); err != nil {
		return 0, err
	}
	return ms(time.Since(start)), nil
}

// calibrate measures what one request/response costs on this mocknet with
// the configured latency: 64 bytes each way on a new stream over an open
// connection, and the same as the first contact between two peers (the
// connection, identify, then the stream), the two kinds of RPC a lookup
// makes.
func calibrate(ctx context.Context, cfg config) (open, first float64, err error) {
	mn := mocknet.New()
	defer mn.Close()
	mn.SetLinkDefaults(mocknet.LinkOptions{Latency: cfg.latency})
	var hs []host.Host
	for i := range 2 * cfg.calibrations {
		h, err := genPeer(mn, i)
		if err != nil {
			return 0, 0, err
		}
		h.SetStreamHandler(echoProto, echo)
		hs = append(hs, h)
	}
	if err := mn.LinkAll(); err != nil {
		return 0, 0, err
	}
	rpc := func(a, b host.Host) (float64, error) { return echoRPC(ctx, a, b) }
	var o, f []float64
	for i := 0; i < cfg.calibrations; i++ {
		a, b := hs[2*i], hs[2*i+1]
		d, err := rpc(a, b) // first contact: dial, identify, stream
		if err != nil {
			return 0, 0, err
		}
		f = append(f, d)
		if d, err = rpc(a, b); err != nil {
			return 0, 0, err
		}
		o = append(o, d)
	}
	return median(o), median(f), nil
}
