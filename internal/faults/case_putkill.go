package faults

import (
	"fmt"
	"strings"
	"time"
)

// casePutKill: SIGKILL a daemon while a client streams a blob of random
// size and content into it (through a pipe, killed once a random number of
// bytes went in), or while the daemon reads a file for a put (killed after
// a random delay); restart it on the same home. Every completed put must
// be there after the restart, the interrupted name must be absent or hold
// the bytes of an earlier completed put (or, if the daemon committed it
// before dying, the whole new bytes), and the client must have ended with
// a clear error unless it got the success reply.
func casePutKill(e *Env) error {
	args := randomSync(e)
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	d := e.NewDaemonAt("n1", e.Dir+"/n1", ports[0], nil, args...)
	e.Step("start daemon n1 %v", args)
	if err := e.Start(d); err != nil {
		return err
	}
	e.Step("two completed puts before any fault")
	for i := 0; i < 2; i++ {
		if err := e.MustPut(d, fmt.Sprintf("pk/base%d", i), e.Blob(e.Size(0, 4<<20))); err != nil {
			return err
		}
	}
	for it := 1; it <= 3; it++ {
		name := fmt.Sprintf("pk/n%d", it)
		overwrite, pick := e.Rng.IntN(3) == 0, e.Rng.Uint64()
		if done := e.Ledger.CompletedNames(); overwrite {
			// Which puts completed depends on timing: one draw whatever
			// their number, so the later draws replay.
			name = done[pick%uint64(len(done))] // overwrite a completed name
		}
		data := e.Blob(e.Size(1<<20, 32<<20))
		mode := e.RandPutMode()
		e.Step("iteration %d: put %q (%d bytes, %s) at n1, SIGKILL n1 during it", it, name, len(data), mode)
		if err := e.putKillingDaemon(d, d, name, data, mode); err != nil {
			return err
		}
		e.Step("iteration %d: restart n1 on the same home", it)
		if err := e.Restart(d, false, "SIGKILL during a put"); err != nil {
			return err
		}
		e.Step("iteration %d: every ledger name at n1 after the restart", it)
		if err := e.CheckNames(d, false); err != nil {
			return err
		}
	}
	e.Step("a put and a get after the faults")
	data := e.Blob(e.Size(0, 8<<20))
	if err := e.MustPut(d, "pk/after", data); err != nil {
		return err
	}
	if err := e.GetExact(d, "pk/after", 0, "a fresh put on a restarted daemon"); err != nil {
		return err
	}
	return e.CheckDaemons(d)
}

// randomSync returns --sync half of the time.
func randomSync(e *Env) []string {
	if e.Rng.IntN(2) == 0 {
		return []string{"--sync"}
	}
	return nil
}

// putKillingDaemon puts data under name at d (through the CLI, in mode)
// and SIGKILLs victim during it: for a pipe put, once a random number of
// bytes went into the client's standard input; for a file put, after a
// random delay. It records the put in the ledger (completed if the client
// got its reply first) and checks the client ended in time and clearly.
func (e *Env) putKillingDaemon(d, victim *Daemon, name string, data []byte, mode PutMode) error {
	v := NewVersion(data)
	e.Ledger.Attempt(name, v)
	var p *Proc
	var err error
	if mode == PutFile {
		path, werr := e.WriteFile(data)
		if werr != nil {
			return werr
		}
		if p, err = StartCLI(e.Bin, false, false, "--home", d.Home, "put", name, path); err != nil {
			return err
		}
		// A put reads, hashes and stores ~100-300 MiB/s here: a delay up
		// to 20 ms + the time of the whole blob at 128 MiB/s lands before,
		// during, and sometimes after it.
		max := 20*time.Millisecond + time.Duration(int64(len(data))*int64(time.Second)/(128<<20))
		delay := time.Duration(e.Rng.Int64N(int64(max)))
		e.Logf("kill %s after %v", victim.Name, delay)
		e.sleep(delay)
		if err := victim.Kill(); err != nil {
			return err
		}
	} else {
		if p, err = StartCLI(e.Bin, true, false, "--home", d.Home, "put", name, "-"); err != nil {
			return err
		}
		at := e.Rng.Int64N(int64(len(data)) + 1)
		e.Logf("kill %s once %d of %d bytes went into the client", victim.Name, at, len(data))
		wrote, werr := writeAll(p.Stdin, data[:at])
		if werr != nil {
			e.Logf("client stopped reading after %d bytes: %v", wrote, werr)
		}
		if at == int64(len(data)) {
			p.Stdin.Close() // the whole blob: the kill races the commit
		}
		if err := victim.Kill(); err != nil {
			return err
		}
		if at < int64(len(data)) {
			writeAll(p.Stdin, data[at:]) // fails once the client is gone
			p.Stdin.Close()
		}
	}
	r := p.Wait(e.Ctx, OpTimeout)
	if r.Err != nil {
		return r.Err
	}
	switch {
	case r.TimedOut:
		return violation("put %q: the client did not end within %v after daemon %s was killed", name, OpTimeout, victim.Name)
	case r.Signal != "":
		return violation("put %q: the client died of %s", name, r.Signal)
	case r.Code == 0:
		if strings.TrimSpace(string(r.Stdout)) == "" {
			return violation("put %q: exit 0 without printing the blob ID", name)
		}
		e.Ledger.Completed(name, v)
		e.Logf("the put completed before the kill: %s", strings.TrimSpace(string(r.Stdout)))
	case !documentedCodes[r.Code]:
		return violation("put %q: undocumented exit code after its daemon died: %s", name, r.Describe())
	case strings.TrimSpace(r.Stderr) == "":
		return violation("put %q failed (exit %d) without a message", name, r.Code)
	default:
		e.Logf("client: %s", r.Describe())
	}
	return nil
}

// writeAll writes b in 64 KiB pieces (so a kill lands between them) and
// returns how much went in.
func writeAll(w interface{ Write([]byte) (int, error) }, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := w.Write(b[n:min(n+64<<10, len(b))])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// CheckNames gets every ledger name at d (random get mode) and judges it;
// completed names must read exactly unless lost is allowed (mayBeLost) or
// d's index was damaged (then absent or a clear error is fine, wrong bytes
// never).
func (e *Env) CheckNames(d *Daemon, mayBeLost bool) error {
	for _, name := range e.Ledger.Names() {
		v, rd, err := e.Get(d, name, e.RandGetMode(), mayBeLost)
		if err != nil {
			return err
		}
		if _, ok := e.Ledger.Done(name); ok && v != Exact && v != Attempt && !mayBeLost && !d.indexDamaged {
			return violation("get %q at %s: a completed put must read back, got %s (exit %d): %s", name, d.Name, v, rd.Code, trim(rd.Stderr))
		}
	}
	return nil
}
