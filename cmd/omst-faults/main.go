// Command omst-faults is omst's fault-injection suite: it runs real
// `omst daemon` processes on loopback, injects faults (SIGKILL of daemons
// and clients during puts, gets and relays, on-disk damage, full disks,
// cache caps, parent restarts, bursts of gets) at points drawn from a
// seeded RNG, and checks invariants after each (see docs/faults.md).
//
//	omst-faults [-bin bin/omst] [-fault-bin bin/omst-fault] [-seed N] [-duration 0|30m] [-cases a,b] [-keep] [-v]
//
// -duration 0 (the default) runs each case once: the small form, part of
// `make test`. A duration repeats rounds of every case, each round with a
// new seed (printed), until it has passed: `make soak SOAK=30m`. The exit
// status is 0 when no case failed (skipped cases do not fail), 1 on any
// invariant violation or harness error, 2 on bad usage, 130 when
// interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/omst-project/omst/internal/faults"
)

func main() {
	os.Exit(run())
}

func run() int {
	fs := flag.NewFlagSet("omst-faults", flag.ContinueOnError)
	bin := fs.String("bin", "bin/omst", "the omst binary to test")
	faultBin := fs.String("fault-bin", "bin/omst-fault", "the same omst built with -tags omstfault (make faults builds it): the lying workers of worker-corrupt, worker-liar and worker-silent run it")
	seed := fs.Uint64("seed", 0, "RNG seed (0: $SEED if set, else draw one); printed at the start and with every failure")
	duration := fs.Duration("duration", 0, "0: each case once (small form); else rounds until this has passed (soak)")
	cases := fs.String("cases", "", "comma-separated cases to run (default all): "+strings.Join(faults.CaseNames(), ","))
	keep := fs.Bool("keep", false, "keep the temp directory (daemon homes and logs) of failed cases")
	verbose := fs.Bool("v", false, "print every step")
	timeout := fs.Duration("timeout", 0, "global time bound (default: 8m for the small form, duration + 10m for a soak)")
	list := fs.Bool("list", false, "list the cases and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: omst-faults [flags]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "omst-faults: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *list {
		for _, c := range faults.Cases {
			fmt.Printf("%-15s %s\n", c.Name, c.Doc)
		}
		return 0
	}
	if *seed == 0 {
		if env := os.Getenv("SEED"); env != "" {
			v, err := strconv.ParseUint(env, 10, 64)
			if err != nil {
				fmt.Fprintf(os.Stderr, "omst-faults: SEED=%q: not a seed\n", env)
				return 2
			}
			*seed = v
		}
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())&(1<<53-1) | 1
	}
	if *timeout == 0 {
		*timeout = 8 * time.Minute
		if *duration > 0 {
			*timeout = *duration + 10*time.Minute
		}
	}
	var names []string
	if *cases != "" {
		names = strings.Split(*cases, ",")
	}
	if _, err := faults.SelectCases(names); err != nil {
		fmt.Fprintf(os.Stderr, "omst-faults: %v\n", err)
		return 2
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	var interrupted atomic.Bool
	go func() {
		s := <-sigs
		interrupted.Store(true)
		fmt.Fprintf(os.Stderr, "\nomst-faults: %v: stopping (seed %d); killing the daemons, unmounting, removing temp dirs\n", s, *seed)
		cancel()
		// The run notices the cancelled context at its next step; if it
		// does not wind down in time, or on a second signal, clean up
		// here and leave.
		select {
		case <-sigs:
		case <-time.After(20 * time.Second):
		}
		for _, l := range faults.Cleanup(*keep) {
			fmt.Fprintln(os.Stderr, "omst-faults: cleanup:", l)
		}
		os.Exit(130)
	}()

	sum, err := faults.Run(ctx, faults.Config{
		Bin: *bin, FaultBin: *faultBin, Seed: *seed, Duration: *duration, Cases: names, Keep: *keep, Verbose: *verbose, Out: os.Stdout,
	})
	for _, l := range faults.Cleanup(*keep) {
		fmt.Fprintln(os.Stderr, "omst-faults: cleanup:", l)
	}
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	switch {
	case interrupted.Load():
		fmt.Printf("omst-faults: interrupted after %v (seed %d)\n", sum.Took.Round(time.Second), *seed)
		return 130
	case timedOut:
		fmt.Printf("omst-faults: global timeout %v reached (seed %d)\n", *timeout, *seed)
		sum.Failed++
	case err != nil:
		fmt.Fprintf(os.Stderr, "omst-faults: %v\n", err)
		return 1
	}
	rounds := ""
	if *duration > 0 {
		rounds = fmt.Sprintf(" in %d rounds", sum.Rounds)
	}
	fmt.Printf("omst-faults: %d passed, %d failed, %d skipped%s in %v (seed %d)\n",
		sum.Passed, sum.Failed, sum.Skipped, rounds, sum.Took.Round(time.Second), *seed)
	for _, f := range sum.Failures {
		fmt.Printf("  FAILED %s\n", f)
	}
	if sum.Failed > 0 {
		return 1
	}
	return 0
}
