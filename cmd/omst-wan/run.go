//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/omst-project/omst/internal/wanemu"
)

type runFlags struct {
	topo             topoFlags
	timeout          time.Duration
	out              string
	testPlan, tcase  string
	params           string
	syncBin          string
	syncAddr         string
	keep, tee, quiet bool
	failFast         bool
	scratch          string
}

func cmdRun(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var f runFlags
	f.topo.register(fs, 2, 2)
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "bound on the whole run (build, commands); then every process is killed and the exit status is 124")
	fs.StringVar(&f.out, "out", "omst-wan-out", "output directory: OUT/<host>/{stdout,stderr}.log and OUT/summary.json")
	fs.StringVar(&f.testPlan, "plan", "omst", "TEST_PLAN for every host")
	fs.StringVar(&f.tcase, "case", "", "TEST_CASE for every host")
	fs.StringVar(&f.params, "params", "", `TEST_INSTANCE_PARAMS for every host, "k=v|k=v"`)
	fs.StringVar(&f.syncBin, "sync", os.Getenv("OMST_WAN_SYNC_BIN"), "start this sync service binary (testground sync-service, listening on :5050) in the run's own control namespace, and relay every host's 127.0.0.1:5050 to it; its log goes to OUT/sync-service.log (default $OMST_WAN_SYNC_BIN)")
	fs.StringVar(&f.syncAddr, "sync-addr", "127.0.0.1:5050", "without -sync: the service in the host namespace that every host's 127.0.0.1:5050 relays to (\"\": no relay)")
	fs.BoolVar(&f.keep, "keep", false, "after the commands end (or with no command), keep the topology until SIGINT, to look around with: ip netns exec RUN-HOST sh")
	fs.BoolVar(&f.tee, "tee", false, "also copy every host's output to this terminal, each line prefixed with [host]")
	fs.BoolVar(&f.quiet, "q", false, "no progress lines")
	fs.StringVar(&f.scratch, "scratch", wanemu.TmpRoot, "make the run's scratch directories (daemon homes: OMST_WAN_TMP) under this directory; "+wanemu.ShmRoot+" keeps the emulated hosts' stores in memory, off the one disk they would otherwise share")
	fs.BoolVar(&f.failFast, "fail-fast", true, "when one host's command exits non-zero, kill the others at once (instances waiting at a barrier would otherwise hang until -timeout)")
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage, "\nflags of run:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	argv := fs.Args()
	if len(argv) == 0 && !f.keep {
		logf("run: no command (give one after --, or -keep)")
		return exitUsage
	}
	cfg, err := f.topo.config(wanemu.NewRunID(0))
	if err != nil {
		logf("%v", err)
		return exitUsage
	}
	plan, err := wanemu.NewPlan(cfg)
	if err != nil {
		logf("%v", err)
		return exitUsage
	}
	return runPlan(plan, &f, argv)
}

// hostResult is one host's line in the summary (and summary.json).
type hostResult struct {
	Host     string  `json:"host"`
	Role     string  `json:"role"`
	IP       string  `json:"ip"`
	Exit     int     `json:"exit"` // -1: killed or never started
	Seconds  float64 `json:"seconds"`
	Error    string  `json:"error,omitempty"`
	Finished bool    `json:"finished"`
}

func runPlan(plan *wanemu.Plan, f *runFlags, argv []string) int {
	progress := logf
	if f.quiet {
		progress = func(string, ...any) {}
	}
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(sigCtx, f.timeout)
	defer cancel()
	exitFor := func() int {
		if sigCtx.Err() != nil {
			return exitInterrupted
		}
		return exitTimeout
	}

	out, err := filepath.Abs(f.out)
	if err != nil {
		logf("%v", err)
		return exitUsage
	}
	t0 := time.Now()
	emu, err := wanemu.Start(ctx, plan, wanemu.Options{Logf: logf, Trace: f.topo.trace, ScratchRoot: f.scratch})
	if err != nil {
		if ctx.Err() != nil {
			logf("building the topology: %v", ctx.Err())
			return exitFor()
		}
		logf("%v", err)
		return failCode(err)
	}
	defer func() {
		t := time.Now()
		if err := emu.Close(); err != nil {
			logf("teardown: %v", err)
		}
		progress("torn down in %v", time.Since(t).Round(time.Millisecond))
	}()
	progress("run %s: %s, built in %v", plan.Config.RunID, describe(plan), time.Since(t0).Round(time.Millisecond))

	if err := os.MkdirAll(out, 0o755); err != nil {
		logf("%v", err)
		return exitFailed
	}
	if err := startControl(ctx, emu, f, out); err != nil {
		logf("%v", err)
		if ctx.Err() != nil {
			return exitFor()
		}
		return exitFailed
	}

	var results []*hostResult
	var procs []*wanemu.Proc
	if len(argv) > 0 {
		results, procs, err = startHosts(emu, f, out, argv)
		if err != nil {
			logf("%v", err)
			return exitFailed
		}
		progress("started %q on %d hosts; output in %s", argv[0], len(procs), out)
	}
	code := exitOK
	exited := make(chan *wanemu.Proc, len(procs))
	for _, p := range procs {
		go func() { <-p.Done(); exited <- p }()
	}
	failed := ""
wait:
	for range procs {
		select {
		case p := <-exited:
			if f.failFast && p.ExitCode() != 0 {
				failed = strings.TrimPrefix(p.Netns, plan.Config.RunID+"-")
				break wait
			}
		case <-ctx.Done():
			break wait
		}
	}
	if ctx.Err() != nil || failed != "" {
		switch {
		case ctx.Err() == nil:
			code = exitFailed
			logf("%s failed (-fail-fast); killing every process", failed)
		case exitFor() == exitTimeout:
			code = exitTimeout
			logf("timed out after %v; killing every process", f.timeout)
		default:
			code = exitInterrupted
			logf("interrupted; killing every process")
		}
		emu.Signal(syscall.SIGTERM)
		grace := time.After(3 * time.Second)
		for _, p := range procs {
			select {
			case <-p.Done():
			case <-grace:
			}
		}
		emu.Signal(syscall.SIGKILL)
		for _, p := range procs {
			select {
			case <-p.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}
	if len(procs) > 0 {
		if c := summarize(results, procs, out); code == exitOK {
			code = c
		}
	}
	if f.keep && sigCtx.Err() == nil {
		fmt.Printf("topology kept; enter a host with: ip netns exec %s-<host> sh  (hosts: ", plan.Config.RunID)
		for i, h := range plan.Hosts {
			if i > 0 {
				fmt.Print(" ")
			}
			fmt.Print(h.Name)
		}
		fmt.Println("). SIGINT tears it down.")
		<-sigCtx.Done()
	}
	return code
}

// startControl starts the sync service when asked and the relays that make
// it reachable as 127.0.0.1:5050 in every host.
func startControl(ctx context.Context, emu *wanemu.Emulator, f *runFlags, out string) error {
	dial := wanemu.DialHostTCP(f.syncAddr)
	if f.syncBin != "" {
		ctl := emu.Plan.Control
		logPath := filepath.Join(out, "sync-service.log")
		lf, err := os.Create(logPath)
		if err != nil {
			return err
		}
		defer lf.Close()
		if _, err := emu.Command(ctl, []string{f.syncBin}, nil, "", lf, lf); err != nil {
			return fmt.Errorf("start sync service: %w", err)
		}
		addr := "127.0.0.1:" + wanemu.ControlPort
		deadline := time.Now().Add(15 * time.Second)
		for {
			c, err := wanemu.DialIn(ctl, addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("sync service %s did not listen on %s within 15s (log: %s): %w", f.syncBin, addr, logPath, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		dial = wanemu.DialNetnsTCP(ctl, addr)
	} else if f.syncAddr == "" {
		return nil
	}
	return emu.StartControlRelay(dial)
}

func startHosts(emu *wanemu.Emulator, f *runFlags, out string, argv []string) ([]*hostResult, []*wanemu.Proc, error) {
	plan := emu.Plan
	opts := wanemu.EnvOptions{
		TestPlan: f.testPlan, TestCase: f.tcase, Params: f.params,
		TestRun:   plan.Config.RunID + "-" + strconv.FormatInt(time.Now().Unix(), 10),
		OutDir:    func(h wanemu.Host) string { return filepath.Join(out, h.Name) },
		TmpDir:    emu.TmpDir,
		SharedDir: emu.SharedDir(),
		SyncHost:  wanemu.ControlHost, SyncPort: wanemu.ControlPort,
	}
	var tee *lineTee
	if f.tee {
		tee = newLineTee(os.Stdout)
	}
	var results []*hostResult
	var procs []*wanemu.Proc
	for _, h := range plan.Hosts {
		dir := filepath.Join(out, h.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, nil, err
		}
		so, err := os.Create(filepath.Join(dir, "stdout.log"))
		if err != nil {
			return nil, nil, err
		}
		se, err := os.Create(filepath.Join(dir, "stderr.log"))
		if err != nil {
			return nil, nil, err
		}
		var stdout, stderr io.Writer = so, se
		if tee != nil {
			stdout = io.MultiWriter(so, tee.writer(h.Name))
			stderr = io.MultiWriter(se, tee.writer(h.Name))
		}
		p, err := emu.Command(h.Netns, argv, plan.Env(h, opts), dir, stdout, stderr)
		// The child has its own descriptors; ours close when the child is reaped.
		if err != nil {
			so.Close()
			se.Close()
			return nil, nil, fmt.Errorf("start %s on %s: %w", argv[0], h.Name, err)
		}
		go func() { <-p.Done(); so.Close(); se.Close() }()
		results = append(results, &hostResult{Host: h.Name, Role: string(h.Role), IP: h.IP.String(), Exit: -1})
		procs = append(procs, p)
	}
	return results, procs, nil
}

// summarize fills results from procs, prints the summary and writes
// summary.json. Its result is exitOK only if every command exited 0.
func summarize(results []*hostResult, procs []*wanemu.Proc, out string) int {
	code := exitOK
	fmt.Printf("%-10s %-7s %-10s %5s %9s\n", "host", "role", "ip", "exit", "seconds")
	for i, r := range results {
		p := procs[i]
		select {
		case <-p.Done():
			r.Finished = true
			r.Exit = p.ExitCode()
			r.Seconds = p.End.Sub(p.Start).Seconds()
			var ee interface{ ExitCode() int }
			if p.Err != nil && !errors.As(p.Err, &ee) {
				r.Error = p.Err.Error()
			} else if p.Err != nil && r.Exit < 0 {
				r.Error = p.Err.Error() // killed by a signal
			}
		default:
			r.Error = "still running at teardown"
		}
		if r.Exit != 0 {
			code = exitFailed
		}
		exit := strconv.Itoa(r.Exit)
		if r.Exit < 0 {
			exit = "-"
		}
		fmt.Printf("%-10s %-7s %-10s %5s %9.2f %s\n", r.Host, r.Role, r.IP, exit, r.Seconds, r.Error)
	}
	for _, r := range results {
		if r.Exit != 0 {
			tail := tailFile(filepath.Join(out, r.Host, "stderr.log"), 10)
			if tail != "" {
				fmt.Printf("--- %s: last lines of stderr.log\n%s", r.Host, tail)
			}
		}
	}
	if b, err := json.MarshalIndent(results, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(out, "summary.json"), append(b, '\n'), 0o644)
	}
	return code
}
