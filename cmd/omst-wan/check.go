//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/omst-project/omst/internal/wanemu"
)

func cmdCheck(args []string) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	var topo topoFlags
	topo.register(fs, 1, 2)
	duration := fs.Duration("duration", 5*time.Second, "length of each throughput measurement (after a warm-up)")
	tolerance := fs.Float64("tolerance", 0.3, "largest accepted relative shortfall of a throughput, and excess of a round trip")
	timeout := fs.Duration("timeout", 3*time.Minute, "bound on the whole check, teardown excluded")
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage, "\nflags of check:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	cfg, err := topo.config(wanemu.NewRunID(0))
	if err != nil {
		logf("%v", err)
		return exitUsage
	}
	if cfg.Workers < 1 {
		logf("check needs at least one worker")
		return exitUsage
	}
	plan, err := wanemu.NewPlan(cfg)
	if err != nil {
		logf("%v", err)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	t0 := time.Now()
	emu, err := wanemu.Start(ctx, plan, wanemu.Options{Logf: logf, Trace: topo.trace})
	if err != nil {
		logf("%v", err)
		return failCode(err)
	}
	defer func() {
		t := time.Now()
		if err := emu.Close(); err != nil {
			logf("teardown: %v", err)
		}
		logf("teardown took %v", time.Since(t).Round(time.Millisecond))
	}()
	fmt.Printf("topology: %s (run %s, built in %v)\n", describe(plan), cfg.RunID, time.Since(t0).Round(time.Millisecond))

	done := make(chan int, 1)
	go func() { done <- measureAll(emu, *duration, *tolerance) }()
	select {
	case code := <-done:
		return code
	case <-ctx.Done():
		if context.Cause(ctx) == context.DeadlineExceeded {
			logf("check timed out after %v", *timeout)
			return exitTimeout
		}
		logf("interrupted")
		return exitInterrupted
	}
}

// measureAll runs the checks and prints them; its result is the exit status.
func measureAll(emu *wanemu.Emulator, duration time.Duration, tol float64) int {
	p := emu.Plan
	c := p.Config
	root, _ := p.Host("root")
	head, _ := p.Host(wanemu.SiteName(0) + "-head")
	w1, _ := p.Host(wanemu.SiteName(0) + "-w1")
	wan := c.WANLink(0)
	code := exitOK
	verdict := func(ok bool) string {
		if ok {
			return "ok"
		}
		code = exitFailed
		return "OFF"
	}

	rtt := func(from, to wanemu.Host, want time.Duration) {
		r, err := emu.MeasureRTT(from, to, 20)
		if err != nil {
			fmt.Printf("rtt %s -> %s: %v\n", from.Name, to.Name, err)
			code = exitFailed
			return
		}
		// A round trip may not be shorter than configured, nor longer by more
		// than the tolerance (at least 2 ms for the machine's own latency).
		ok := r.Median >= want-want/50 && r.Median <= want+max(time.Duration(tol*float64(want)), 2*time.Millisecond)
		fmt.Printf("rtt  %-8s -> %-8s median %7.2f ms  min %7.2f  max %7.2f  configured %7.2f ms  %s\n",
			from.Name, to.Name, msf(r.Median), msf(r.Min), msf(r.Max), msf(want), verdict(ok))
	}
	tput := func(from, to wanemu.Host, want wanemu.Rate, warmup time.Duration) {
		t, err := emu.MeasureThroughput(from, to, duration, warmup)
		if err != nil {
			fmt.Printf("bw   %s -> %s: %v\n", from.Name, to.Name, err)
			code = exitFailed
			return
		}
		got := t.Rate()
		ok := want == 0 || (got >= (1-tol)*float64(want) && got <= 1.1*float64(want))
		fmt.Printf("bw   %-8s -> %-8s %8.1f Mbit/s  configured %8.1f Mbit/s  (%3.0f%%)  %s\n",
			from.Name, to.Name, got/1e6, want.Mbits(), 100*got/max(float64(want), 1), verdict(ok))
	}
	// Warm-up: slow start needs a few dozen round trips to fill a long pipe.
	warm := func(l wanemu.Link) time.Duration { return max(time.Second, 20*l.Delay) }
	for site := 0; site < c.Sites; site++ {
		h, _ := p.Host(wanemu.SiteName(site) + "-head")
		l := c.WANLink(site)
		rtt(root, h, 2*l.Delay)
		tput(root, h, l.Rate, warm(l))
		tput(h, root, l.Rate, warm(l))
	}
	rtt(root, w1, 2*wan.Delay+2*c.LAN.Delay)
	rtt(head, w1, 2*c.LAN.Delay)
	if w2, ok := p.Host(wanemu.SiteName(0) + "-w2"); ok {
		tput(w1, w2, c.LAN.Rate, time.Second)
	} else {
		tput(head, w1, c.LAN.Rate, time.Second)
	}
	return code
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
