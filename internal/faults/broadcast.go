package faults

import (
	"fmt"
	"sync"
	"time"
)

// broadcastGets is a get of one name started at several daemons at once,
// each to a file or to standard output (drawn).
type broadcastGets struct {
	name    string
	ds      []*Daemon
	modes   []GetMode
	outs    []string
	results []CLIResult
	// Started is when the gets were started; ends[i] is when get i ended
	// (zero while it runs, under mu).
	Started time.Time
	mu      sync.Mutex
	ends    []time.Time
	wg      sync.WaitGroup
}

// startGets starts `omst get name` at every daemon of ds at once; wait
// for them with (*broadcastGets).judge.
func (e *Env) startGets(ds []*Daemon, name string) *broadcastGets {
	g := &broadcastGets{name: name, ds: ds, modes: make([]GetMode, len(ds)), outs: make([]string, len(ds)), results: make([]CLIResult, len(ds)),
		ends: make([]time.Time, len(ds))}
	for i := range ds {
		g.modes[i], g.outs[i] = e.RandGetMode(), e.Path("out-")
	}
	g.Started = time.Now()
	for i, d := range ds {
		g.wg.Go(func() {
			args := []string{"--home", d.Home, "get", name}
			if g.modes[i] == GetFile {
				args = append(args, "-o", g.outs[i])
			}
			g.results[i] = RunCLI(e.Ctx, e.Bin, OpTimeout, nil, args...)
			g.mu.Lock()
			g.ends[i] = time.Now()
			g.mu.Unlock()
		})
	}
	return g
}

// End returns when get i ended, and whether it has.
func (g *broadcastGets) End(i int) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ends[i], !g.ends[i].IsZero()
}

// Took returns how long get i took from the start of the gets (valid
// once it ended).
func (g *broadcastGets) Took(i int) time.Duration {
	end, _ := g.End(i)
	return end.Sub(g.Started)
}

// wait waits for every get to end.
func (g *broadcastGets) wait() { g.wg.Wait() }

// judge waits for the gets, judges each against the ledger (an invariant
// broken is returned, with during saying what the case did meanwhile),
// prints each verdict, and returns the verdicts and results in ds's order.
func (g *broadcastGets) judge(e *Env, during string) ([]Verdict, []CLIResult, error) {
	g.wait()
	vs := make([]Verdict, len(g.ds))
	for i, d := range g.ds {
		r := g.results[i]
		if r.Err != nil {
			return nil, nil, r.Err
		}
		got, err := e.output(g.modes[i], g.outs[i], r.Stdout)
		if err != nil {
			return nil, nil, err
		}
		rd := Read{ToStdout: g.modes[i] == GetStdout, Code: r.Code, Signal: r.Signal, Hung: r.TimedOut, Stderr: r.Stderr, Got: got}
		if vs[i], err = e.Ledger.Judge(g.name, rd, JudgeOpts{}); err != nil {
			return nil, nil, fmt.Errorf("at %s (get to %s, %s): %w", d.Name, g.modes[i], during, err)
		}
		e.Printf("%s: %s%s", d.Name, vs[i], failText(r))
	}
	return vs, g.results, nil
}
