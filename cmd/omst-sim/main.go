// Command omst-sim simulates a broadcast on a grid of sites at any size:
// a discrete-event simulation (pkg/transfer/sim) that drives omst's own
// decision code (the head's serve/redirect decisions, each worker's chunk
// schedule and hedging policy) over modelled links: a WAN link per site
// from the root, a LAN port per host, each shared max-min fairly, with
// latency.
//
// Usage:
//
//	omst-sim [-sites 2] [-workers 8,16] [-blob 64MiB] [-chunk 1MiB]
//	         [-piece chunk,64KiB,16KiB] [-wan-rate 100mbit] [-lan-rate 200mbit]
//	         [-wan-latency 20ms] [-lan-latency 0.1ms] [-window 16]
//	         [-seed 1] [-runs 3] [-json] [-out FILE]
//
// -blob, -workers and -piece take comma lists: every combination is simulated
// -runs times (seeds -seed, -seed+1, ...). A table goes to standard output
// (or the JSON with -json); -out also writes the JSON to a file. Times are
// seconds from the common start to the first and the last worker with
// every chunk, medians over the runs with min..max; × limit is the last
// over S/B_wan; head copies are the bytes a head sent its workers over the
// blob's size; depth is how many hops from its head a worker's copy of a
// chunk came through as the head's redirects chained them (mean/max);
// hedges, those the heads declined (HedgeGrace) and served; sibling
// requests given up at the sibling timeout; workers unfinished at
// -max-time (their time counts as -max-time). A simulation is not a
// measurement: docs/benchmarks.md says how it was calibrated against the
// emulated grid.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/omst-project/omst/pkg/transfer/sim"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// options are the parsed flags.
type options struct {
	base    sim.Config
	blobs   []int64
	workers []int
	pieces  []int64 // 0: whole chunks
	runs    int
	json    bool
	out     string
	cpuProf string // write a CPU profile of the whole run here
}

func parse(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("omst-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var workers, pieces, blob, chunk, wanRate, lanRate, push string
	fs.IntVar(&o.base.Sites, "sites", 2, "sites, each a head and its workers behind a WAN link")
	fs.StringVar(&workers, "workers", "8", "workers per site (a comma list runs each)")
	fs.StringVar(&blob, "blob", "64MiB", "blob size (B, KiB, MiB, GiB; a comma list runs each)")
	fs.StringVar(&chunk, "chunk", "1MiB", "chunk size")
	fs.StringVar(&pieces, "piece", "chunk", `piece a hop forwards as soon as it is in; "chunk": whole chunks, stored and verified first (today); a comma list runs each`)
	fs.StringVar(&wanRate, "wan-rate", "100mbit", "WAN link rate per site, each direction (kbit, mbit, gbit)")
	fs.StringVar(&lanRate, "lan-rate", "200mbit", "LAN port rate per host, each direction")
	fs.DurationVar(&o.base.WANLatency, "wan-latency", 20*time.Millisecond, "WAN one-way latency")
	fs.DurationVar(&o.base.LANLatency, "lan-latency", 100*time.Microsecond, "LAN one-way latency, host to host")
	fs.Float64Var(&o.base.WANGoodput, "wan-goodput", sim.DefaultGoodput, "share of the WAN link's rate that TCP delivers")
	fs.Float64Var(&o.base.LANGoodput, "lan-goodput", sim.DefaultGoodput, "share of a LAN port's rate that TCP delivers")
	fs.IntVar(&o.base.Window, "window", sim.DefaultWindow, "chunks in flight per worker's get")
	fs.IntVar(&o.base.StreamsPerPeer, "streams", sim.DefaultStreamsPerPeer, "fetch streams per peer")
	fs.DurationVar(&o.base.SiblingTimeout, "sibling-timeout", sim.DefaultSiblingTimeout, "bound on a request to a sibling")
	fs.IntVar(&o.base.Fanout, "fanout", 0, "siblings one holder is sent per chunk (0: the Distributor's default, 2)")
	fs.BoolVar(&o.base.ConstantTimers, "constant-timers", false, "workers hedge on the constant timers, not the rates they measure")
	fs.BoolVar(&o.base.Budgets, "budgets", false, "the workers' hedges and give-ups are budgeted (exchange.NewBudget(HedgeShare, HedgeBurst); the daemon does not)")
	fs.BoolVar(&o.base.NoDeflect, "no-deflect", false, "the workers' GET_DIRECTs carry no deflect flag (fetch 1.3.0): the heads serve every one, never redirect one to a complete holder nor answer BUSY")
	fs.Int64Var(&o.base.HedgeBacklog, "hedge-backlog", 0, "bytes a head may have to write to its workers for it to serve a hedge (0: the default, one chunk; -1: no bound)")
	fs.StringVar(&push, "push", "4MiB", `bytes the root pushes after the FOUND ("0": none)`)
	fs.DurationVar(&o.base.StartJitter, "start-jitter", 2*time.Millisecond, "workers start uniformly within this")
	fs.DurationVar(&o.base.MessageJitter, "jitter", 200*time.Microsecond, "extra delay of each message, uniform in [0, jitter): a loaded host's scheduling, which varies the order a head sees requests in")
	fs.Int64Var(&o.base.InitWindow, "init-window", sim.DefaultInitWindow, "bytes a new WAN connection carries in its first round trip, doubling each round trip (-1: no slow start)")
	seed := fs.Uint64("seed", 1, "seed of the first run")
	fs.IntVar(&o.runs, "runs", 3, "runs per combination (seeds seed, seed+1, ...)")
	fs.IntVar(&o.base.Parallel, "parallel", 0, "sites simulated at once (0: GOMAXPROCS)")
	fs.DurationVar(&o.base.MaxTime, "max-time", 0, "simulated time after which unfinished workers are counted as such (0: 100 × limit + 1h)")
	fs.BoolVar(&o.json, "json", false, "write JSON to standard output instead of the table")
	fs.StringVar(&o.out, "out", "", "also write the JSON to this file")
	fs.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	o.base.Seed = *seed
	var err error
	for _, b := range strings.Split(blob, ",") {
		n, err := parseSize(strings.TrimSpace(b))
		if err != nil {
			return o, fmt.Errorf("-blob: %w", err)
		}
		o.blobs = append(o.blobs, n)
	}
	o.base.BlobSize = o.blobs[0]
	if o.base.ChunkSize, err = parseSize(chunk); err != nil {
		return o, fmt.Errorf("-chunk: %w", err)
	}
	if push == "0" {
		o.base.PushBytes = -1
	} else if o.base.PushBytes, err = parseSize(push); err != nil {
		return o, fmt.Errorf("-push: %w", err)
	}
	if o.base.WANRate, err = parseRate(wanRate); err != nil {
		return o, fmt.Errorf("-wan-rate: %w", err)
	}
	if o.base.LANRate, err = parseRate(lanRate); err != nil {
		return o, fmt.Errorf("-lan-rate: %w", err)
	}
	for _, w := range strings.Split(workers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 {
			return o, fmt.Errorf("-workers: %q is not a number of workers (at least 1)", w)
		}
		o.workers = append(o.workers, n)
	}
	for _, p := range strings.Split(pieces, ",") {
		p = strings.TrimSpace(p)
		if p == "chunk" {
			o.pieces = append(o.pieces, 0)
			continue
		}
		n, err := parseSize(p)
		if err != nil {
			return o, fmt.Errorf("-piece: %w", err)
		}
		o.pieces = append(o.pieces, n)
	}
	if o.runs < 1 {
		return o, fmt.Errorf("-runs %d: want at least 1", o.runs)
	}
	return o, nil
}

// parseSize reads a size such as 64MiB, 16KiB, 1GiB or 4096.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
			if err != nil || n < 1 || n > (1<<50)/u.mult {
				return 0, fmt.Errorf("%q is not a size (e.g. 64MiB, 16KiB, 4096)", s)
			}
			return n * u.mult, nil
		}
	}
	return 0, fmt.Errorf("%q is not a size", s)
}

// parseRate reads a rate in bits per second, with tc's units (kbit, mbit,
// gbit) or none.
func parseRate(s string) (float64, error) {
	units := []struct {
		suffix string
		mult   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}, {"", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(strings.ToLower(s), u.suffix); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || !(v > 0) || v > 1e15 {
				return 0, fmt.Errorf("%q is not a rate (e.g. 100mbit, 1gbit)", s)
			}
			return v * u.mult, nil
		}
	}
	return 0, fmt.Errorf("%q is not a rate", s)
}

// row is one combination's runs.
type row struct {
	BlobSize  int64     `json:"blob_bytes"`
	Limit     float64   `json:"limit_s"`
	Workers   int       `json:"workers_per_site"`
	Piece     int64     `json:"piece_bytes"` // 0: whole chunks
	PieceName string    `json:"piece"`
	Runs      []runOut  `json:"runs"`
	Median    runOut    `json:"median"`
	MinLast   float64   `json:"min_last_s"`
	MaxLast   float64   `json:"max_last_s"`
	Wall      []float64 `json:"wall_s"`
}

// runOut is one run's figures.
type runOut struct {
	Seed           uint64    `json:"seed"`
	First          float64   `json:"first_s"`
	Median         float64   `json:"median_s"`
	Last           float64   `json:"last_s"`
	Ratio          float64   `json:"last_over_limit"`
	Unfinished     int       `json:"unfinished_workers"`
	SiteLast       []float64 `json:"site_last_s,omitempty"`
	FirstRatio     float64   `json:"first_over_limit"`
	HeadCopies     float64   `json:"head_copies"`
	HeadCopiesMax  float64   `json:"head_copies_max"`
	SiteIn         float64   `json:"site_in_blobs"`
	SiblingCopies  float64   `json:"sibling_copies"`
	Redirects      int64     `json:"redirects"`
	Hedges         int64     `json:"hedges"`
	HedgesDeclined int64     `json:"hedges_declined"`
	HedgesBusy     int64     `json:"hedges_declined_busy"`
	HedgesServed   int64     `json:"hedges_served"`
	FirstServed    float64   `json:"first_hedge_served_s"`
	HedgesNotHere  int64     `json:"hedges_not_here"`
	Timeouts       int64     `json:"sibling_timeouts"`
	Directs        int64     `json:"directs"`
	DirectsRedir   int64     `json:"directs_redirected"`
	DirectsBusy    int64     `json:"directs_busy"`
	DirectsServed  int64     `json:"directs_served"`
	Deferred       int64     `json:"deferred,omitempty"`
	MaxDepth       int       `json:"max_depth"`
	MeanDepth      float64   `json:"mean_depth"`
	Events         int64     `json:"events"`
}

// report is the JSON written.
type report struct {
	Command string     `json:"command"`
	Date    string     `json:"date"`
	Config  sim.Config `json:"config"` // the first row's; rows say blob, workers, piece
	Rows    []row      `json:"rows"`
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "omst-sim: %v\n", err)
		return 2
	}
	if o.cpuProf != "" {
		f, err := os.Create(o.cpuProf)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "omst-sim: cpu profile: %v\n", err)
			return 1
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}
	rep := report{Command: "omst-sim " + strings.Join(args, " "), Date: time.Now().UTC().Format(time.RFC3339), Config: o.base}
	for _, b := range o.blobs {
		for _, w := range o.workers {
			for _, p := range o.pieces {
				if err := runRow(&rep, o, b, w, p, stderr); err != nil {
					fmt.Fprintf(stderr, "omst-sim: %v\n", err)
					return 1
				}
			}
		}
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "omst-sim: %v\n", err)
		return 1
	}
	js = append(js, '\n')
	if o.out != "" {
		if err := os.WriteFile(o.out, js, 0o644); err != nil {
			fmt.Fprintf(stderr, "omst-sim: %v\n", err)
			return 1
		}
	}
	if o.json {
		_, _ = stdout.Write(js)
		return 0
	}
	writeTable(stdout, rep)
	return 0
}

// runRow simulates blob b to w workers per site with pieces of p bytes
// (0: whole chunks), o.runs times, and adds the row to rep.
func runRow(rep *report, o options, b int64, w int, p int64, stderr io.Writer) error {
	r := row{BlobSize: b, Workers: w, Piece: p, PieceName: pieceName(p)}
	for k := range o.runs {
		cfg := o.base
		cfg.BlobSize, cfg.Workers, cfg.PieceSize, cfg.Seed = b, w, p, o.base.Seed+uint64(k)
		t0 := time.Now()
		res, err := sim.Run(cfg)
		if err != nil {
			return err
		}
		r.Limit = res.Limit
		r.Wall = append(r.Wall, time.Since(t0).Seconds())
		r.Runs = append(r.Runs, runOut{Seed: cfg.Seed, First: res.First, Median: res.Median, Last: res.Last, Ratio: res.Ratio(), Unfinished: res.Unfinished, SiteLast: res.SiteLast, FirstRatio: res.First / res.Limit,
			HeadCopies: res.HeadCopies, HeadCopiesMax: res.HeadCopiesMax, SiteIn: res.SiteIn, SiblingCopies: res.SiblingCopies,
			Redirects: res.Redirects, Hedges: res.Hedges, HedgesDeclined: res.HedgesDeclined, HedgesBusy: res.HedgesBusy, HedgesServed: res.HedgesServed, FirstServed: res.FirstHedgeServed, HedgesNotHere: res.HedgesNotHere,
			Timeouts: res.SiblingTimeouts, Directs: res.Directs, DirectsRedir: res.DirectsRedirected, DirectsBusy: res.DirectsBusy, DirectsServed: res.DirectsServed, Deferred: res.Deferred, MaxDepth: res.MaxDepth, MeanDepth: res.MeanDepth, Events: res.Events})
		fmt.Fprintf(stderr, "omst-sim: %s, %d × %d, piece %s, seed %d: last %.2f s (%.2f × limit), head %.2f copies, GET_DIRECTs %d (redirected %d, busy %d, served %d), %.1f s wall\n",
			pieceName(b), cfg.Sites, w, r.PieceName, cfg.Seed, res.Last, res.Ratio(), res.HeadCopies, res.Directs, res.DirectsRedirected, res.DirectsBusy, res.DirectsServed, time.Since(t0).Seconds())
	}
	r.Median = medianRun(r.Runs)
	r.MinLast = slices.MinFunc(r.Runs, func(a, b runOut) int { return cmpF(a.Last, b.Last) }).Last
	r.MaxLast = slices.MaxFunc(r.Runs, func(a, b runOut) int { return cmpF(a.Last, b.Last) }).Last
	rep.Rows = append(rep.Rows, r)
	return nil
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func pieceName(p int64) string {
	switch {
	case p == 0:
		return "chunk"
	case p%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", p>>20)
	case p%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", p>>10)
	}
	return fmt.Sprintf("%dB", p)
}

// medianRun is each figure's median over runs (figure by figure).
func medianRun(rs []runOut) runOut {
	med := func(get func(runOut) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = get(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	medI := func(get func(runOut) int64) int64 {
		return int64(med(func(r runOut) float64 { return float64(get(r)) }))
	}
	return runOut{
		First: med(func(r runOut) float64 { return r.First }), Median: med(func(r runOut) float64 { return r.Median }),
		Last: med(func(r runOut) float64 { return r.Last }), Ratio: med(func(r runOut) float64 { return r.Ratio }),
		Unfinished: int(med(func(r runOut) float64 { return float64(r.Unfinished) })),
		FirstRatio: med(func(r runOut) float64 { return r.FirstRatio }),
		HeadCopies: med(func(r runOut) float64 { return r.HeadCopies }), HeadCopiesMax: med(func(r runOut) float64 { return r.HeadCopiesMax }),
		SiteIn: med(func(r runOut) float64 { return r.SiteIn }), SiblingCopies: med(func(r runOut) float64 { return r.SiblingCopies }),
		Redirects: medI(func(r runOut) int64 { return r.Redirects }), Hedges: medI(func(r runOut) int64 { return r.Hedges }),
		HedgesDeclined: medI(func(r runOut) int64 { return r.HedgesDeclined }), HedgesBusy: medI(func(r runOut) int64 { return r.HedgesBusy }), HedgesServed: medI(func(r runOut) int64 { return r.HedgesServed }), FirstServed: med(func(r runOut) float64 { return r.FirstServed }),
		HedgesNotHere: medI(func(r runOut) int64 { return r.HedgesNotHere }), Timeouts: medI(func(r runOut) int64 { return r.Timeouts }),
		Directs: medI(func(r runOut) int64 { return r.Directs }), Deferred: medI(func(r runOut) int64 { return r.Deferred }), Events: medI(func(r runOut) int64 { return r.Events }),
		MaxDepth: int(med(func(r runOut) float64 { return float64(r.MaxDepth) })), MeanDepth: med(func(r runOut) float64 { return r.MeanDepth }),
	}
}

func writeTable(w io.Writer, rep report) {
	c := rep.Config
	fmt.Fprintf(w, "%d sites, %s chunks, WAN %s %v, LAN %s %v, window %d; limit S/B_wan; medians of %d runs\n",
		c.Sites, pieceName(c.ChunkSize), rateName(c.WANRate), c.WANLatency, rateName(c.LANRate), c.LANLatency, c.Window, len(rep.Rows[0].Runs))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "blob\tlimit (s)\tworkers/site\tpiece\tfirst (s)\tlast (s)\tmin..max\t× limit\thead copies\tinto site\tdepth mean/max\thedges\tdeclined\tserved\ttimeouts\tunfinished\t")
	for _, r := range rep.Rows {
		m := r.Median
		fmt.Fprintf(tw, "%s\t%.2f\t%d\t%s\t%.2f\t%.2f\t%.2f..%.2f\t%.2f\t%.2f\t%.2f\t%.1f/%d\t%d\t%d\t%d\t%d\t%d\t\n",
			pieceName(r.BlobSize), r.Limit, r.Workers, r.PieceName, m.First, m.Last, r.MinLast, r.MaxLast, m.Ratio, m.HeadCopies, m.SiteIn, m.MeanDepth, m.MaxDepth, m.Hedges, m.HedgesDeclined, m.HedgesServed, m.Timeouts, m.Unfinished)
	}
	tw.Flush()
}

func rateName(bps float64) string {
	switch {
	case bps >= 1e9 && int64(bps)%1e9 == 0:
		return fmt.Sprintf("%dGbit/s", int64(bps/1e9))
	case bps >= 1e6:
		return strconv.FormatFloat(bps/1e6, 'f', -1, 64) + "Mbit/s"
	}
	return strconv.FormatFloat(bps, 'f', -1, 64) + "bit/s"
}
