package main

import (
	"context"
	"fmt"
	"time"
)

// idleCase: every daemon is up (the root, a head per site, its workers)
// and nothing is asked of any for idle_for; each instance records the CPU
// seconds its daemon used over that time (timers, the DHT's and the
// membership's upkeep, status): what a grid costs the hosts between jobs.
type idleCase struct{}

func (idleCase) name() string                             { return "idle" }
func (idleCase) workerStartsLate(*instance) bool          { return false }
func (idleCase) workerParents(in *instance) []string      { return []string{in.defaultParent()} }
func (idleCase) prepare(context.Context, *instance) error { return nil }

func (idleCase) act(ctx context.Context, in *instance, rec *record) error {
	pid := in.d.cmd.Process.Pid
	c0, err := procCPUSeconds(pid)
	if err != nil {
		return fmt.Errorf("daemon CPU at the start: %w", err)
	}
	t0 := time.Now()
	select {
	case <-time.After(in.cfg.idleFor):
	case <-ctx.Done():
		return fmt.Errorf("idle for %s: %w", in.cfg.idleFor, ctx.Err())
	case <-in.d.exited:
		return fmt.Errorf("daemon exited while idle: %v", in.d.err)
	}
	c1, err := procCPUSeconds(pid)
	if err != nil {
		return fmt.Errorf("daemon CPU at the end: %w", err)
	}
	rec.Seconds, rec.IdleCPUSeconds, rec.OK = time.Since(t0).Seconds(), c1-c0, true
	return nil
}

// measured: every instance's idle time.
func (idleCase) measured(in *instance, all, _ []record) ([]record, int) {
	return all, 1 + in.cfg.sites + in.cfg.sites*in.cfg.workersPerSite
}

// extras: the idle CPU seconds per daemon by role.
func (idleCase) extras(_ *instance, all []record, s *summary) {
	s.IdleCPUByRole = cpuByRole(all, func(r record) float64 { return r.IdleCPUSeconds })
}
