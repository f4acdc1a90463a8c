// Command omst-bench measures omst on loopback, side by side in one run:
// a raw TCP copy between two processes (the reference), a cold fetch from a
// parent daemon, the start-up time and asymptotic rate of single fetches
// (t(m) = t0 + m/r_inf, fitted over sizes from 1 KiB to 1 GiB) for parent
// fetches and local cache hits, and the ingest rate of puts. Each figure is
// the median of -runs repetitions; every single run is written to CSV files
// under -out for plots, and a markdown summary goes to standard output.
//
// Usage:
//
//	omst-bench -omst bin/omst [-size 1G] [-runs 5] [-max-fit 1G] [-out docs/bench]
//
// It starts its own daemons (homes in a temporary directory, listening on
// 127.0.0.1 only), stops them on exit, on error and on SIGINT/SIGTERM, and
// removes the temporary directory. Progress goes to standard error.
//
// A benchmark is not a test: it reports figures and the limits they are
// judged against (docs: /work/shared/design/PERFORMANCE.md), it does not
// pass or fail on them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/omst-project/omst/pkg/bytesize"
)

// config holds the command-line flags.
type config struct {
	omst      string
	size      int64
	runs      int
	maxFit    int64
	minFit    int64
	out       string
	tmp       string
	figures   map[string]bool
	cacheSize int64 // 0 = computed per section
	seed      uint64
	keepTmp   bool
	cmdline   string
	grid      bool // a closed grid: the root runs `omst grid init`, the others join with tokens
}

// Figure groups selectable with -figures.
var allFigures = []string{"raw-tcp", "parent-fetch", "fit", "put-ingest"}

func main() {
	// The raw-tcp sender is this same binary re-executed.
	if len(os.Args) > 2 && os.Args[1] == "-role" {
		os.Exit(senderMain(os.Args[1:]))
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "omst-bench: %v\n", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		logf("received %v: stopping (daemons are being shut down)", s)
		cancel()
		// A second signal, or a shutdown that hangs, ends the process
		// after killing what it started.
		select {
		case <-sigs:
		case <-time.After(30 * time.Second):
		}
		procs.killAll()
		os.Exit(130)
	}()
	err = run(ctx, cfg)
	procs.stopAll()
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "omst-bench: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("omst-bench", flag.ContinueOnError)
	cfg := &config{}
	var size, maxFit, minFit, cacheSize, figures string
	fs.StringVar(&cfg.omst, "omst", "bin/omst", "path of the omst binary to benchmark")
	fs.StringVar(&size, "size", "1G", "blob size for raw-tcp, parent-fetch and put-ingest (K, M, G = KiB, MiB, GiB)")
	fs.IntVar(&cfg.runs, "runs", 5, "repetitions per figure (the median is reported)")
	fs.StringVar(&maxFit, "max-fit", "1G", "largest size of the t(m) fit series (1K, 16K, ... 1G)")
	fs.StringVar(&minFit, "min-fit", "1K", "smallest size of the t(m) fit series")
	fs.StringVar(&cfg.out, "out", "docs/bench", "directory for the CSV files")
	fs.StringVar(&cfg.tmp, "tmp", "", "parent of the temporary directory holding the daemons' homes (default $TMPDIR)")
	fs.StringVar(&figures, "figures", strings.Join(allFigures, ","), "comma-separated figures to measure: "+strings.Join(allFigures, ", "))
	fs.StringVar(&cacheSize, "cache-size", "", "daemons' --cache-size (default: computed from what each section stores)")
	fs.Uint64Var(&cfg.seed, "seed", 1, "seed of the random blob contents")
	fs.BoolVar(&cfg.keepTmp, "keep-tmp", false, "keep the temporary directory (daemon logs) after the run")
	fs.BoolVar(&cfg.grid, "grid", false, "membership on: the root makes a grid (omst grid init), every other daemon joins it with a token")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.size, err = bytesize.Parse(size); err != nil || cfg.size < 1 {
		return nil, fmt.Errorf("-size: %v", orPositive(err))
	}
	if cfg.maxFit, err = bytesize.Parse(maxFit); err != nil || cfg.maxFit < 1 {
		return nil, fmt.Errorf("-max-fit: %v", orPositive(err))
	}
	if cfg.minFit, err = bytesize.Parse(minFit); err != nil || cfg.minFit < 1 {
		return nil, fmt.Errorf("-min-fit: %v", orPositive(err))
	}
	if cacheSize != "" {
		if cfg.cacheSize, err = bytesize.Parse(cacheSize); err != nil || cfg.cacheSize < 1 {
			return nil, fmt.Errorf("-cache-size: %v", orPositive(err))
		}
	}
	if cfg.runs < 1 {
		return nil, errors.New("-runs: want at least 1")
	}
	cfg.figures = map[string]bool{}
	for _, f := range strings.Split(figures, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		known := false
		for _, a := range allFigures {
			known = known || a == f
		}
		if !known {
			return nil, fmt.Errorf("-figures: unknown figure %q (want %s)", f, strings.Join(allFigures, ", "))
		}
		cfg.figures[f] = true
	}
	if len(cfg.figures) == 0 {
		return nil, errors.New("-figures: none selected")
	}
	if len(fitSizes(cfg.minFit, cfg.maxFit)) < 2 && cfg.figures["fit"] {
		return nil, fmt.Errorf("-min-fit %d / -max-fit %d leave fewer than two fit sizes", cfg.minFit, cfg.maxFit)
	}
	if cfg.omst, err = filepath.Abs(cfg.omst); err != nil {
		return nil, err
	}
	if st, err := os.Stat(cfg.omst); err != nil || st.IsDir() {
		return nil, fmt.Errorf("-omst %s: not an executable file (build it: go build -o bin/omst ./cmd/omst)", cfg.omst)
	}
	cfg.cmdline = commandLine(args)
	return cfg, nil
}

func orPositive(err error) error {
	if err != nil {
		return err
	}
	return errors.New("want a positive size")
}

// commandLine renders the invocation as one shell-quoted line.
func commandLine(args []string) string {
	parts := []string{"omst-bench"}
	for _, a := range args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// fitSizes returns the fit series 1 KiB, 16 KiB, 256 KiB, 1 MiB, 4 MiB,
// 16 MiB, 64 MiB, 256 MiB, 1 GiB restricted to [lo, hi].
func fitSizes(lo, hi int64) []int64 {
	all := []int64{1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30}
	var out []int64
	for _, s := range all {
		if s >= lo && s <= hi {
			out = append(out, s)
		}
	}
	return out
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}
