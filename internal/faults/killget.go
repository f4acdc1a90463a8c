package faults

import (
	"io"
	"os"
	"path/filepath"
	"time"
)

// GetKill is the outcome of a get during which something was killed.
type GetKill struct {
	Read    Read
	Verdict Verdict
	// Before: the kill point was reached before the get ended (else the
	// get had finished and the kill came after it).
	Before bool
	Result CLIResult
	// Victim is the daemon killed (nil: the client).
	Victim *Daemon
}

// getKilling runs `omst get name` at d in mode and, once at bytes of the
// blob came out (the -o file's temp file reached that size, or that many
// bytes came through stdout), SIGKILLs victim, or the client itself when
// victim is nil. A victim daemon is killed also if the get ended before
// the point (so that the case's restart path always runs). The read is
// judged against the ledger; a killed client's read is judged only on
// what it left behind (no -o file, or a whole one).
func (e *Env) getKilling(d, victim *Daemon, name string, mode GetMode, at int64) (GetKill, error) {
	return e.getKillingPick(d, func() *Daemon { return victim }, name, mode, at)
}

// getKillingPick is getKilling with the victim chosen at the kill point
// by pick (nil: the client).
func (e *Env) getKillingPick(d *Daemon, pick func() *Daemon, name string, mode GetMode, at int64) (GetKill, error) {
	return e.getKillingIf(d, pick, name, mode, func(out int64) (bool, error) { return out >= at, nil })
}

// getKillingIf is getKillingPick with the kill point decided by fire,
// asked with the bytes out so far: through -o, every millisecond plus
// fire's own time; through stdout, between reads (so a fire that watches
// something else than the bytes is for GetFile). An error from fire ends
// the get and is returned.
func (e *Env) getKillingIf(d *Daemon, pick func() *Daemon, name string, mode GetMode, fire func(out int64) (bool, error)) (GetKill, error) {
	var gk GetKill
	var victim *Daemon
	outDir := e.Path("get-")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		return gk, err
	}
	out := filepath.Join(outDir, "out")
	var p *Proc
	var err error
	kill := func() error {
		victim = pick()
		gk.Victim = victim
		if victim == nil {
			p.Kill()
			return nil
		}
		return victim.Kill()
	}
	killed := false
	var got []byte
	if mode == GetFile {
		if p, err = StartCLI(e.Bin, false, false, "--home", d.Home, "get", name, "-o", out); err != nil {
			return gk, err
		}
		for !killed {
			now, err := fire(dirBytes(outDir))
			if err != nil {
				p.Kill()
				p.Wait(e.Ctx, OpTimeout)
				return gk, err
			}
			if now {
				gk.Before = !p.Exited()
				killed = true
				if err := kill(); err != nil {
					return gk, err
				}
				break
			}
			if p.Exited() {
				break
			}
			select {
			case <-p.Done():
			case <-time.After(time.Millisecond):
			case <-e.Ctx.Done():
				p.Kill()
				return gk, e.Ctx.Err()
			}
		}
	} else {
		if p, err = StartCLI(e.Bin, false, true, "--home", d.Home, "get", name); err != nil {
			return gk, err
		}
		buf := make([]byte, 64<<10)
		for {
			now := false
			if !killed {
				if now, err = fire(int64(len(got))); err != nil {
					p.Kill()
					p.Stdout.Close()
					p.Wait(e.Ctx, OpTimeout)
					return gk, err
				}
			}
			if now {
				gk.Before = true
				killed = true
				if err := kill(); err != nil {
					p.Stdout.Close()
					return gk, err
				}
			}
			n, rerr := p.Stdout.Read(buf)
			got = append(got, buf[:n]...)
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				break
			}
		}
		p.Stdout.Close()
	}
	r := p.Wait(e.Ctx, OpTimeout)
	if r.Err != nil {
		return gk, r.Err
	}
	if !killed {
		if victim = pick(); victim != nil {
			gk.Victim = victim
			if err := victim.Kill(); err != nil {
				return gk, err
			}
		}
	}
	gk.Result = r
	rd := Read{Code: r.Code, Signal: r.Signal, Hung: r.TimedOut, Stderr: r.Stderr, ToStdout: mode == GetStdout}
	if mode == GetStdout {
		if len(got) > 0 {
			v := NewVersion(got)
			rd.Got = &v
		}
	} else if b, err := os.ReadFile(out); err == nil {
		v := NewVersion(b)
		rd.Got = &v
	}
	if victim == nil && p.killed && r.Signal != "" {
		// The client was killed by the harness: what matters is what it
		// left. A -o file must be absent or whole; stdout a prefix.
		rd.Signal, rd.Code = "", 1
		if rd.Stderr == "" {
			rd.Stderr = "(killed by the harness)"
		}
	}
	gk.Read = rd
	gk.Verdict, err = e.Ledger.Judge(name, rd, JudgeOpts{MayBeLost: d.indexDamaged})
	return gk, err
}

// dirBytes is the size of the largest file in dir (the get's output or
// its temp file).
func dirBytes(dir string) int64 {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Size() > n {
			n = fi.Size()
		}
	}
	return n
}
