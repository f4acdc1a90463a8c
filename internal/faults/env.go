package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Descriptor tolerances for CheckDaemons: after a case settles, a daemon's
// open descriptors of each kind may exceed its baseline by at most these.
//
//   - Unix sockets: 0. At rest a daemon holds its API listener only; every
//     client connection must be closed once the client is gone (a killed
//     client's connection included), so any surplus is a leak.
//   - Chunk and temp files of the store: 0. Readers and uploads close
//     them when they end; at rest none is open.
//   - Everything else: 16. libp2p may keep a connection or two to a peer it
//     dialled while failing over (each one TCP socket) until its
//     connection manager trims it, and BadgerDB opens a file per new table
//     and value log (one per 16 MiB memtable flush, compactions replace
//     several by one): neither is a leak, both grow with the work done.
const (
	FDTolUnix  = 0
	FDTolStore = 0
	FDTolOther = 16
	// fdSettle is how long CheckDaemons waits for descriptors to return
	// to the baseline (a server notices a dead client's connection when its
	// next read fails; an abandoned fetch ends with its context).
	fdSettle = 15 * time.Second
)

// Default time bounds of the steps.
const (
	StartTimeout = 30 * time.Second // a daemon answers (and has a parent session)
	OpTimeout    = 90 * time.Second // one put or get of up to 64 MiB on loopback
	StopTimeout  = 15 * time.Second // SIGTERM to exit
)

// Env is what a case works with.
type Env struct {
	Ctx context.Context
	Bin string
	// FaultBin is the fault-injection build of Bin (Config.FaultBin).
	FaultBin string
	Dir      string // the case's temp directory (homes, logs, blobs, outputs)
	Case     string
	Seed     uint64
	Rng      *rand.Rand
	Ledger   *Ledger
	Verbose  bool

	out     io.Writer
	start   time.Time
	step    string
	daemons []*Daemon
	seq     int
}

// Step names what the case does now (shown with a failure and with -v).
func (e *Env) Step(format string, a ...any) {
	e.step = fmt.Sprintf(format, a...)
	if e.Verbose {
		fmt.Fprintf(e.out, "  [%s %5.1fs] %s\n", e.Case, time.Since(e.start).Seconds(), e.step)
	}
}

// Logf prints with -v only.
func (e *Env) Logf(format string, a ...any) {
	if e.Verbose {
		fmt.Fprintf(e.out, "  [%s]   "+format+"\n", append([]any{e.Case}, a...)...)
	}
}

// Printf always prints (results worth seeing without -v: RSS figures,
// outcomes that are allowed either way).
func (e *Env) Printf(format string, a ...any) {
	fmt.Fprintf(e.out, "  [%s] "+format+"\n", append([]any{e.Case}, a...)...)
}

// Daemons returns every daemon the case created.
func (e *Env) Daemons() []*Daemon { return e.daemons }

// NewDaemon creates (does not start) a daemon named name in the case's
// directory on a freshly picked loopback port.
func (e *Env) NewDaemon(name string, parents []*Daemon, args ...string) (*Daemon, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	return e.NewDaemonAt(name, filepath.Join(e.Dir, name), ports[0], parents, args...), nil
}

// NewDaemonAt creates a daemon with a given home and port.
func (e *Env) NewDaemonAt(name, home string, port int, parents []*Daemon, args ...string) *Daemon {
	d := NewDaemon(e.Bin, name, home, port, parents, args...)
	d.LogPath = filepath.Join(e.Dir, name+".log")
	e.daemons = append(e.daemons, d)
	return d
}

// Start starts d and waits for it (and its parent session, if it has a
// parent).
func (e *Env) Start(d *Daemon) error {
	return d.Start(e.Ctx, StartTimeout, true)
}

// Restart starts a daemon the case stopped, on its home and port, waiting
// for it to answer (and for a parent session, if waitParent). A daemon
// that does not come up is a Violation (after is what happened to it),
// except when its port was taken meanwhile by another process of the
// machine (a harness limitation: the port is free while the daemon is
// down), which is a plain error.
func (e *Env) Restart(d *Daemon, waitParent bool, after string) error {
	err := d.Start(e.Ctx, StartTimeout, waitParent)
	if err == nil || e.Ctx.Err() != nil {
		return err
	}
	if portTaken(err) {
		return fmt.Errorf("port %d of %s was taken by another process while it was down (not a daemon bug): %w", d.Port, d.Name, err)
	}
	return violation("%s does not restart after %s: %v", d.Name, after, err)
}

// portTaken reports whether a start failed because the listen port was in
// use.
func portTaken(err error) bool {
	var se *StartError
	return errors.As(err, &se) && strings.Contains(se.LogTail, "address already in use")
}

// Fork returns a new RNG seeded from two draws of the case's RNG. A step
// whose number of draws depends on the machine (files a daemon happened to
// write, retries) draws from a fork, so that the case's later decisions
// replay whatever that step consumed.
func (e *Env) Fork() *rand.Rand {
	return rand.New(rand.NewPCG(e.Rng.Uint64(), e.Rng.Uint64()))
}

// Blob returns size random bytes drawn from the case's RNG.
func (e *Env) Blob(size int64) []byte {
	r := rand.New(rand.NewPCG(e.Rng.Uint64(), e.Rng.Uint64()))
	b := make([]byte, size)
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		b[i], b[i+1], b[i+2], b[i+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		b[i+4], b[i+5], b[i+6], b[i+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Size draws a blob size in [lo, hi], sometimes on or next to a chunk
// boundary (1 MiB multiples), where off-by-one errors live.
func (e *Env) Size(lo, hi int64) int64 {
	if e.Rng.IntN(4) == 0 {
		const mib = 1 << 20
		if k := hi / mib; k >= 1 {
			s := (1+e.Rng.Int64N(k))*mib + int64(e.Rng.IntN(3)) - 1
			if s >= lo && s <= hi {
				return s
			}
		}
	}
	return lo + e.Rng.Int64N(hi-lo+1)
}

// Path returns a new path in the case directory (not created).
func (e *Env) Path(prefix string) string {
	e.seq++
	return filepath.Join(e.Dir, fmt.Sprintf("%s%d", prefix, e.seq))
}

// PutMode is how a put sends its bytes.
type PutMode int

const (
	PutFile PutMode = iota // `omst put NAME FILE`: the daemon reads the file
	PutPipe                // `omst put NAME -` fed through a pipe: the client streams it
)

func (m PutMode) String() string { return [...]string{"file", "pipe"}[m] }

// RandPutMode draws a put mode.
func (e *Env) RandPutMode() PutMode { return PutMode(e.Rng.IntN(2)) }

// WriteFile writes data to a new file in the case directory.
func (e *Env) WriteFile(data []byte) (string, error) {
	p := e.Path("blob-")
	return p, os.WriteFile(p, data, 0o644)
}

// Put puts data under name at d, recording the attempt in the ledger and,
// when the client reports success, the completed put. A failed put must
// fail clearly (documented exit code and a message): otherwise the error
// is a Violation. The result is returned either way.
func (e *Env) Put(d *Daemon, name string, data []byte, mode PutMode) (CLIResult, error) {
	v := NewVersion(data)
	e.Ledger.Attempt(name, v)
	var r CLIResult
	switch mode {
	case PutFile:
		p, err := e.WriteFile(data)
		if err != nil {
			return r, err
		}
		defer os.Remove(p)
		r = RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", d.Home, "put", name, p)
	case PutPipe:
		r = RunCLI(e.Ctx, e.Bin, OpTimeout, bytes.NewReader(data), "--home", d.Home, "put", name, "-")
	}
	if r.Err != nil {
		return r, r.Err
	}
	if r.Code == 0 {
		if strings.TrimSpace(string(r.Stdout)) == "" {
			return r, violation("put %q at %s: exit 0 without printing the blob ID", name, d.Name)
		}
		e.Ledger.Completed(name, v)
		e.Logf("put %q (%s, %s) at %s: %s", name, v, mode, d.Name, strings.TrimSpace(string(r.Stdout)))
		return r, nil
	}
	if r.TimedOut {
		return r, violation("put %q (%s) at %s did not finish within %v", name, v, d.Name, OpTimeout)
	}
	if r.Signal != "" {
		return r, violation("put %q at %s: client died of %s", name, d.Name, r.Signal)
	}
	if !documentedCodes[r.Code] {
		return r, violation("put %q at %s: undocumented exit code: %s", name, d.Name, r.Describe())
	}
	if strings.TrimSpace(r.Stderr) == "" {
		return r, violation("put %q at %s failed (exit %d) without a message", name, d.Name, r.Code)
	}
	return r, fmt.Errorf("%s", r.Describe())
}

// MustPut puts and requires success (a failure is a Violation: the case
// expects this put to work).
func (e *Env) MustPut(d *Daemon, name string, data []byte) error {
	mode := e.RandPutMode()
	_, err := e.Put(d, name, data, mode)
	if err != nil {
		if _, ok := err.(*Violation); ok {
			return err
		}
		return violation("put %q (%d bytes, %s) at %s must succeed: %v", name, len(data), mode, d.Name, err)
	}
	return nil
}

// GetMode is where a get writes.
type GetMode int

const (
	GetFile   GetMode = iota // `omst get NAME -o FILE`: the daemon writes FILE atomically
	GetStdout                // `omst get NAME`: streamed through the client to stdout
)

func (m GetMode) String() string { return [...]string{"file", "stdout"}[m] }

// RandGetMode draws a get mode.
func (e *Env) RandGetMode() GetMode { return GetMode(e.Rng.IntN(2)) }

// Get gets name at d and judges the read against the ledger (lost names
// are allowed at a node whose index the case damaged, or with mayBeLost).
// The error is a Violation, or the harness's own.
func (e *Env) Get(d *Daemon, name string, mode GetMode, mayBeLost bool) (Verdict, Read, error) {
	var r CLIResult
	rd := Read{ToStdout: mode == GetStdout}
	out := e.Path("out-")
	switch mode {
	case GetFile:
		r = RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", d.Home, "get", name, "-o", out)
	case GetStdout:
		r = RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", d.Home, "get", name)
	}
	if r.Err != nil {
		return Failed, rd, r.Err
	}
	rd.Code, rd.Signal, rd.Hung, rd.Stderr = r.Code, r.Signal, r.TimedOut, r.Stderr
	got, err := e.output(mode, out, r.Stdout)
	if err != nil {
		return Failed, rd, err
	}
	rd.Got = got
	v, err := e.Ledger.Judge(name, rd, JudgeOpts{MayBeLost: mayBeLost || d.indexDamaged})
	if err != nil {
		err = fmt.Errorf("at %s (get to %s): %w", d.Name, mode, err)
	}
	e.Logf("get %q at %s (%s): %s%s", name, d.Name, mode, v, failText(r))
	return v, rd, err
}

func failText(r CLIResult) string {
	if r.Code == 0 {
		return ""
	}
	return " (" + r.Describe() + ")"
}

// output reads what a get left: the -o file (removing it), or stdout.
func (e *Env) output(mode GetMode, path string, stdout []byte) (*Version, error) {
	if mode == GetStdout {
		if len(stdout) == 0 {
			return nil, nil
		}
		v := NewVersion(stdout)
		return &v, nil
	}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	os.Remove(path)
	v := NewVersion(b)
	return &v, nil
}

// GetExact gets name at d until it reads exactly the last completed put,
// for at most within (a node may need a moment to reconnect to its
// parent); every read on the way is judged. Still failing at the end is a
// Violation naming why the case expected success.
func (e *Env) GetExact(d *Daemon, name string, within time.Duration, why string) error {
	deadline := time.Now().Add(within)
	tries := 0
	first := e.RandGetMode() // one draw, however many tries follow
	for {
		mode := GetMode((int(first) + tries) % 2)
		tries++
		v, rd, err := e.Get(d, name, mode, false)
		if err != nil {
			return err
		}
		if v == Exact {
			return nil
		}
		if time.Now().After(deadline) || e.Ctx.Err() != nil {
			return violation("get %q at %s must return the put bytes (%s), but after %d tries in %v: %s, exit %d: %s",
				name, d.Name, why, tries, within, v, rd.Code, trim(rd.Stderr))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// CheckDaemons checks, for each daemon: it runs and answers `omst status`,
// its log shows no panic, fatal error or race, and (if a baseline was
// recorded since its last start) its descriptors returned near the
// baseline within fdSettle.
func (e *Env) CheckDaemons(ds ...*Daemon) error {
	for _, d := range ds {
		if bad := d.ScanLog(); len(bad) > 0 {
			return violation("daemon %s logged a panic/fatal error/race:\n    %s", d.Name, strings.Join(bad, "\n    "))
		}
		if !d.Running() {
			return violation("daemon %s is not running (%s); log tail:\n%s", d.Name, d.ExitState(), d.LogTail(15))
		}
		if _, _, err := d.Status(e.Ctx); err != nil {
			return violation("daemon %s does not answer status: %v", d.Name, err)
		}
	}
	for _, d := range ds {
		if err := e.checkFDs(d); err != nil {
			return err
		}
	}
	return nil
}

func (e *Env) checkFDs(d *Daemon) error {
	base, ok := d.Baseline()
	if !ok {
		return nil
	}
	deadline := time.Now().Add(fdSettle)
	for {
		p, err := d.FDs()
		if err != nil {
			return violation("daemon %s: %v", d.Name, err)
		}
		if p.Unix <= base.Unix+FDTolUnix && p.Store <= base.Store+FDTolStore && p.Other <= base.Other+FDTolOther {
			e.Logf("%s: %v (baseline %v)", d.Name, p, base)
			return nil
		}
		if time.Now().After(deadline) || e.Ctx.Err() != nil {
			return violation("daemon %s leaks file descriptors: %v, baseline %v (tolerance: unix +%d, chunk/tmp files +%d, other +%d; waited %v)",
				d.Name, p, base, FDTolUnix, FDTolStore, FDTolOther, fdSettle)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ScanAll checks every daemon's log for panics (also of daemons that are
// no longer running).
func (e *Env) ScanAll() error {
	for _, d := range e.daemons {
		if bad := d.ScanLog(); len(bad) > 0 {
			return violation("daemon %s logged a panic/fatal error/race:\n    %s", d.Name, strings.Join(bad, "\n    "))
		}
	}
	return nil
}

// KillAll kills every daemon of the case.
func (e *Env) KillAll() {
	for _, d := range e.daemons {
		d.Kill()
	}
}

// Status prints a daemon's counters (with -v), including the counters of
// newer daemons when present.
func (e *Env) ShowStatus(d *Daemon) {
	st, raw, err := d.Status(e.Ctx)
	if err != nil {
		e.Logf("%s: %v", d.Name, err)
		return
	}
	e.Logf("%s: %s", d.Name, Counters(st, raw))
}

// sleep waits d or until the run's context ends.
func (e *Env) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-e.Ctx.Done():
	}
}
