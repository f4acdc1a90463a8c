package wanemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrUnsupported is wrapped by every error that means this machine cannot
// emulate the topology: not root, `ip`/`tc`/`iptables` missing, no htb or
// no NFQUEUE in the kernel. Callers skip (exit status 77) on it.
var ErrUnsupported = errors.New("cannot emulate a WAN here")

// TmpRoot is where runs keep short per-host scratch directories
// (/tmp/<RunID>/<host>) by default: short, because unix socket paths must
// stay under about 100 bytes.
const TmpRoot = "/tmp"

// ShmRoot is the usual tmpfs. With it as Options.ScratchRoot the daemons'
// stores live in memory, so that the emulated hosts do not contend for the
// one disk of the machine that emulates them (see docs/benchmarks.md).
const ShmRoot = "/dev/shm"

// ScratchRoots are where Cleanup looks for scratch directories that crashed
// runs left (besides any roots its caller names).
var ScratchRoots = []string{TmpRoot, ShmRoot}

// maxScratchRoot bounds the length of Options.ScratchRoot, so that a daemon
// home below <root>/<RunID>/<host>/ still holds a unix socket.
const maxScratchRoot = 40

// Options tune an Emulator.
type Options struct {
	// Logf receives progress lines; nil discards them.
	Logf func(format string, args ...any)
	// Trace logs every command the emulator runs.
	Trace bool
	// KillGrace is how long processes get between SIGTERM and SIGKILL at
	// teardown (default 3s).
	KillGrace time.Duration
	// ScratchRoot is the existing directory under which the run's scratch
	// directory <ScratchRoot>/<RunID> is made (default TmpRoot): an absolute
	// path of at most 40 bytes. Roots other than ScratchRoots must be named
	// to Cleanup.
	ScratchRoot string
}

// Emulator is a topology built on this machine. Close tears it down; it is
// safe to call more than once and from a signal handler's goroutine.
type Emulator struct {
	Plan *Plan
	opts Options

	mu       sync.Mutex
	created  []string // namespaces that exist because of us
	delayers []*delayer
	procs    []*Proc
	relays   []*relay
	tmpDir   string
	closed   bool
}

func (o Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

// Preflight reports, wrapping ErrUnsupported, why this process cannot build
// topologies, or nil.
func Preflight() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: needs root (network namespaces, tc, iptables); running as uid %d", ErrUnsupported, os.Geteuid())
	}
	var missing []string
	for _, tool := range []string{"ip", "tc", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not found in PATH (Debian: apt-get install iproute2 iptables)", ErrUnsupported, strings.Join(missing, ", "))
	}
	return nil
}

// Start builds plan p: namespaces, links, shaping, delayers. On error it
// removes whatever it had built. ctx bounds the build only.
func Start(ctx context.Context, p *Plan, o Options) (*Emulator, error) {
	if err := Preflight(); err != nil {
		return nil, err
	}
	if o.KillGrace == 0 {
		o.KillGrace = 3 * time.Second
	}
	if o.ScratchRoot == "" {
		o.ScratchRoot = TmpRoot
	}
	if err := checkScratchRoot(o.ScratchRoot); err != nil {
		return nil, err
	}
	e := &Emulator{Plan: p, opts: o, tmpDir: filepath.Join(o.ScratchRoot, p.Config.RunID)}
	if err := e.build(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Emulator) run(ctx context.Context, argv []string) error {
	if e.opts.Trace {
		e.opts.logf("+ %s", strings.Join(argv, " "))
	}
	return run(ctx, argv)
}

func (e *Emulator) build(ctx context.Context) error {
	p := e.Plan
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	for _, ns := range p.Namespaces {
		if err := e.run(ctx, []string{"ip", "netns", "add", ns}); err != nil {
			if os.Geteuid() == 0 && strings.Contains(err.Error(), "File exists") {
				return fmt.Errorf("namespace %s exists already (a leftover? see `omst-wan cleanup`): %w", ns, err)
			}
			return fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		e.mu.Lock()
		e.created = append(e.created, ns)
		e.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	for _, q := range p.Queues {
		d, err := startDelayer(q)
		if err != nil {
			return err
		}
		e.mu.Lock()
		e.delayers = append(e.delayers, d)
		e.mu.Unlock()
	}
	for _, s := range p.Steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := e.run(ctx, s.Argv); err != nil {
			if looksUnsupported(err.Error()) {
				return fmt.Errorf("%w: %v", ErrUnsupported, err)
			}
			return err
		}
	}
	if err := os.MkdirAll(e.tmpDir, 0o755); err != nil {
		return err
	}
	for _, h := range p.Hosts {
		if err := os.MkdirAll(e.TmpDir(h), 0o755); err != nil {
			return err
		}
	}
	return os.MkdirAll(e.SharedDir(), 0o755)
}

// looksUnsupported tells a missing kernel feature from a plain failure by
// the tools' messages.
func looksUnsupported(msg string) bool {
	for _, s := range []string{
		"Unknown qdisc", "Specified qdisc kind is unknown", "Operation not supported",
		"Couldn't load target", "Couldn't load match", "No chain/target/match",
		"can't initialize iptables table", "Permission denied", "Protocol not supported",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// checkScratchRoot reports why dir cannot hold a run's scratch directory.
func checkScratchRoot(dir string) error {
	if !filepath.IsAbs(dir) || len(dir) > maxScratchRoot {
		return fmt.Errorf("scratch root %q: want an absolute path of at most %d bytes (unix socket paths below it must stay short)", dir, maxScratchRoot)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("scratch root: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("scratch root %q is not a directory", dir)
	}
	return nil
}

// TmpDir is host h's scratch directory, <ScratchRoot>/<RunID>/<host>, removed at Close.
func (e *Emulator) TmpDir(h Host) string { return filepath.Join(e.tmpDir, h.Name) }

// SharedDir is a scratch directory of the run that every host may use
// (they share this machine's file system): <ScratchRoot>/<RunID>/shared,
// removed at Close. Hosts may coordinate through it.
func (e *Emulator) SharedDir() string { return filepath.Join(e.tmpDir, "shared") }

// TmpDirRoot is the run's scratch directory, <ScratchRoot>/<RunID>, removed at Close.
func (e *Emulator) TmpDirRoot() string { return e.tmpDir }

// Proc is a process the emulator started inside a namespace, in its own
// process group.
type Proc struct {
	Netns string
	Cmd   *exec.Cmd
	Start time.Time
	End   time.Time
	Err   error // from Wait, once Done is closed
	done  chan struct{}
}

// Done is closed when the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitCode is the process's exit status, -1 if a signal ended it or it is
// still running.
func (p *Proc) ExitCode() int {
	select {
	case <-p.done:
	default:
		return -1
	}
	if p.Cmd.ProcessState == nil {
		return -1
	}
	return p.Cmd.ProcessState.ExitCode()
}

// Command runs argv inside namespace ns (through `ip netns exec`), with the
// environment of this process plus env, in a new process group. The
// emulator reaps it and, at Close, kills its whole group and anything else
// left in the run's namespaces.
func (e *Emulator) Command(ns string, argv []string, env []string, dir string, stdout, stderr io.Writer) (*Proc, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("emulator closed")
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = dir
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if e.opts.Trace {
		e.opts.logf("+ %s", strings.Join(cmd.Args, " "))
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Netns: ns, Cmd: cmd, Start: time.Now(), done: make(chan struct{})}
	e.procs = append(e.procs, p)
	go func() {
		p.Err = cmd.Wait()
		p.End = time.Now()
		close(p.done)
	}()
	return p, nil
}

// Signal sends sig to the process group of every process the emulator
// started that has not been reaped.
func (e *Emulator) Signal(sig syscall.Signal) {
	e.mu.Lock()
	procs := append([]*Proc(nil), e.procs...)
	e.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.done:
		default:
			_ = syscall.Kill(-p.Cmd.Process.Pid, sig)
		}
	}
}

// Close kills every process of the run (SIGTERM, then SIGKILL after
// KillGrace), stops the delayers and relays, and deletes the namespaces
// (which takes their links, bridges, qdiscs and iptables rules with them)
// and the scratch directories. It returns the first error but always does
// all of it.
func (e *Emulator) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	procs, relays, delayers, created := e.procs, e.relays, e.delayers, e.created
	e.mu.Unlock()

	e.Signal(syscall.SIGTERM)
	deadline := time.After(e.opts.KillGrace)
wait:
	for _, p := range procs {
		select {
		case <-p.done:
		case <-deadline:
			break wait
		}
	}
	e.Signal(syscall.SIGKILL)
	for _, r := range relays {
		r.close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var first error
	// Anything still inside our namespaces (daemons that left their process
	// group, say) goes too.
	for _, ns := range created {
		killNetnsPids(ctx, ns)
	}
	// SIGKILL is asynchronous: wait (briefly) until the namespaces are empty.
	for try := 0; try < 40; try++ {
		left := 0
		for _, ns := range created {
			left += killNetnsPids(ctx, ns)
		}
		if left == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
		}
	}
	for _, d := range delayers {
		if d.recvErrs.Load() > 0 || d.verdictErrs.Load() > 0 {
			e.opts.logf("%s", d)
		}
		d.close()
	}
	for i := len(created) - 1; i >= 0; i-- {
		if err := e.run(ctx, []string{"ip", "netns", "del", created[i]}); err != nil && first == nil {
			first = err
		}
	}
	if e.tmpDir != "" {
		if err := os.RemoveAll(e.tmpDir); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// killNetnsPids SIGKILLs every process inside namespace ns.
func killNetnsPids(ctx context.Context, ns string) int {
	out, err := output(ctx, []string{"ip", "netns", "pids", ns})
	if err != nil {
		return 0
	}
	n := 0
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 1 || pid == os.Getpid() {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}
