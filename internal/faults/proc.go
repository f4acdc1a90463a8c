package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// registry holds everything a run started or made that must be undone on
// every path out of it: processes, mounts, temp directories.
type registry struct {
	mu     sync.Mutex
	procs  map[int]*exec.Cmd
	mounts []string
	dirs   []string
	users  []string // system users a case made (userdel)
	groups []string // and their groups (groupdel)
}

var reg = &registry{procs: map[int]*exec.Cmd{}}

// startProc starts cmd in its own process group (a ^C at the terminal
// reaches the harness, which then stops its children itself) with
// SIGKILL as its parent-death signal (a harness killed hard takes its
// children along), registers it, and reaps it in the background: done is
// closed when it has exited, after which cmd.ProcessState is set.
func startProc(cmd *exec.Cmd) (done chan struct{}, err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Pdeathsig = true, syscall.SIGKILL
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	reg.procs[pid] = cmd
	done = make(chan struct{})
	go func() {
		cmd.Wait()
		reg.mu.Lock()
		delete(reg.procs, pid)
		reg.mu.Unlock()
		close(done)
	}()
	return done, nil
}

// killProc sends SIGKILL to the process (and its group) of cmd.
func killProc(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Process.Kill()
}

// addDir registers a directory to remove at cleanup (unless kept).
func addDir(dir string) {
	reg.mu.Lock()
	reg.dirs = append(reg.dirs, dir)
	reg.mu.Unlock()
}

func removeDir(dir string) {
	reg.mu.Lock()
	for i, d := range reg.dirs {
		if d == dir {
			reg.dirs = append(reg.dirs[:i], reg.dirs[i+1:]...)
			break
		}
	}
	reg.mu.Unlock()
}

// Cleanup kills every process the harness started and still runs, unmounts
// what it mounted and removes its temp directories (keep: leave them). It
// is safe to call more than once and from a signal handler's goroutine.
// It returns what it could not undo.
func Cleanup(keep bool) []string {
	reg.mu.Lock()
	var cmds []*exec.Cmd
	for _, c := range reg.procs {
		cmds = append(cmds, c)
	}
	mounts := append([]string(nil), reg.mounts...)
	dirs := append([]string(nil), reg.dirs...)
	users, groups := append([]string(nil), reg.users...), append([]string(nil), reg.groups...)
	reg.mounts, reg.dirs = nil, nil
	reg.mu.Unlock()
	var left []string
	// A process blocked writing to a frozen filesystem (FreezeFS) sleeps
	// uninterruptibly and SIGKILL waits for the thaw: thaw first.
	for _, m := range mounts {
		thaw(m)
	}
	for _, c := range cmds {
		killProc(c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		reg.mu.Lock()
		n := len(reg.procs)
		reg.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			if n > 0 {
				left = append(left, fmt.Sprintf("%d processes still running after SIGKILL", n))
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		if err := unmount(mounts[i]); err != nil {
			left = append(left, err.Error())
		}
	}
	for _, u := range users {
		if err := removeUser(u); err != nil {
			left = append(left, err.Error())
		}
	}
	for _, g := range groups {
		if err := removeGroup(g); err != nil {
			left = append(left, err.Error())
		}
	}
	if !keep {
		for _, d := range dirs {
			if err := os.RemoveAll(d); err != nil {
				left = append(left, err.Error())
			}
		}
	}
	return left
}

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago (bound and released). They are taken below the kernel's ephemeral
// range (net.ipv4.ip_local_port_range) where it leaves room, so that a
// daemon started before the one a port is for cannot be handed it for a
// listener of its own on port 0 (its bulk listener: seen once, the root's
// taking a worker's port) or for a connection; elsewhere the kernel picks
// them, and that race remains.
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ports []int
	if low := ephemeralLow(); low-portFloor >= 4*n {
		for tries := 0; len(ports) < n && tries < 64*n; tries++ {
			p := portFloor + rand.IntN(low-portFloor)
			l, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				continue // taken, or picked already (still bound here)
			}
			lns = append(lns, l)
			ports = append(ports, p)
		}
	}
	for len(ports) < n {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// portFloor is the lowest port FreePorts picks below the ephemeral range.
const portFloor = 10000

// ephemeralLow is the first port of the kernel's ephemeral range (0 when
// it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil {
		return 0
	}
	return low
}

// Daemon is one `omst daemon` process, restartable on the same home and
// port, so a restart keeps its identity (HOME/identity.key) and address.
type Daemon struct {
	Name    string
	Home    string
	Port    int
	Parents []*Daemon // the parent, then fallback parents
	Args    []string  // further daemon flags (--site, --cache-size, --sync, ...)
	// Environ is added to the daemon's environment (a lying worker's
	// OMST_FAULT, with a fault-injection build as its binary: Env.Faulty).
	Environ []string
	LogPath string
	// MetricsAddr is the daemon's --metrics address (ServeMetrics), ""
	// without one.
	MetricsAddr string
	bin         string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
	peerID string

	base    FDProfile
	baseSet bool
	// indexDamaged: the suite damaged this node's index, so names it held
	// may be gone.
	indexDamaged bool
}

// NewDaemon describes a daemon; Start runs it.
func NewDaemon(bin, name, home string, port int, parents []*Daemon, args ...string) *Daemon {
	return &Daemon{Name: name, Home: home, Port: port, Parents: parents, Args: args, bin: bin,
		LogPath: filepath.Join(filepath.Dir(home), name+".log")}
}

// ListenAddr is the daemon's loopback TCP multiaddr.
func (d *Daemon) ListenAddr() string { return fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", d.Port) }

// Addr is the multiaddr with /p2p/ID for --parent (known after a start).
func (d *Daemon) Addr() string { return d.ListenAddr() + "/p2p/" + d.peerID }

// PeerID is the daemon's peer ID (known after a start).
func (d *Daemon) PeerID() string { return d.peerID }

// StartError is a daemon that exited instead of coming up.
type StartError struct {
	Name    string
	Code    int // exit code; -1 for a signal
	Signal  string
	LogTail string
}

func (e *StartError) Error() string {
	how := fmt.Sprintf("exit code %d", e.Code)
	if e.Signal != "" {
		how = "killed by " + e.Signal
	}
	return fmt.Sprintf("daemon %s exited while starting (%s); log tail:\n%s", e.Name, how, e.LogTail)
}

// Start runs the daemon and waits (at most timeout) until it answers on its
// socket and, when it has a parent and waitParent is set, is connected to a
// parent. A daemon that exits meanwhile gives a *StartError.
func (d *Daemon) Start(ctx context.Context, timeout time.Duration, waitParent bool) error {
	d.mu.Lock()
	if d.cmd != nil && !d.exited() {
		d.mu.Unlock()
		return fmt.Errorf("daemon %s already running (pid %d)", d.Name, d.cmd.Process.Pid)
	}
	d.mu.Unlock()
	if err := os.MkdirAll(d.Home, 0o700); err != nil {
		return err
	}
	args := []string{"daemon", "--home", d.Home, "--listen", d.ListenAddr(), "--log-level", "info"}
	for _, p := range d.Parents {
		if p.peerID == "" {
			return fmt.Errorf("daemon %s: parent %s was never started (no peer ID)", d.Name, p.Name)
		}
		args = append(args, "--parent", p.Addr())
	}
	args = append(args, d.Args...)
	logf, err := os.OpenFile(d.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	d.starts++
	fmt.Fprintf(logf, "=== omst-faults: start #%d of %s at %s: %s%s %s\n", d.starts, d.Name,
		time.Now().Format(time.RFC3339Nano), strings.Join(append(append([]string(nil), d.Environ...), ""), " "), d.bin, strings.Join(args, " "))
	cmd := exec.Command(d.bin, args...)
	if len(d.Environ) > 0 {
		cmd.Env = append(os.Environ(), d.Environ...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	done, err := startProc(cmd)
	logf.Close()
	if err != nil {
		return fmt.Errorf("start daemon %s: %w", d.Name, err)
	}
	d.mu.Lock()
	d.cmd, d.done, d.baseSet = cmd, done, false
	d.mu.Unlock()

	deadline := time.Now().Add(timeout)
	for {
		st, _, err := d.Status(ctx)
		if err == nil {
			d.peerID = st.PeerID
			if !waitParent || len(d.Parents) == 0 || st.ParentConnected {
				return nil
			}
		}
		select {
		case <-done:
			return d.startError()
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if time.Now().After(deadline) {
			what := "does not answer on its socket"
			if err == nil {
				what = "is not connected to a parent"
			}
			return fmt.Errorf("daemon %s %s after %v; log tail:\n%s", d.Name, what, timeout, d.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *Daemon) startError() *StartError {
	e := &StartError{Name: d.Name, Code: -1, LogTail: d.LogTail(20)}
	if ps := d.cmd.ProcessState; ps != nil {
		e.Code = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = ws.Signal().String()
		}
	}
	return e
}

// exited reports whether the last started process has exited (d.mu held
// or not: done is only replaced by Start).
func (d *Daemon) exited() bool {
	if d.done == nil {
		return true
	}
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// Running reports whether the daemon process is alive.
func (d *Daemon) Running() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.exited()
}

// ExitState describes how the last process ended ("" while it runs).
func (d *Daemon) ExitState() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || !d.exited() || d.cmd.ProcessState == nil {
		return ""
	}
	return d.cmd.ProcessState.String()
}

// Pid is the daemon's process ID (0 if it never started).
func (d *Daemon) Pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// Kill sends SIGKILL and waits for the process to be gone.
func (d *Daemon) Kill() error {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil {
		return nil
	}
	killProc(cmd)
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("daemon %s (pid %d) still there 10s after SIGKILL", d.Name, cmd.Process.Pid)
	}
}

// Signal sends sig to the daemon's process (e.g. SIGSTOP, SIGCONT); it
// fails if the daemon does not run.
func (d *Daemon) Signal(sig syscall.Signal) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cmd == nil || d.exited() {
		return fmt.Errorf("daemon %s: %v: not running", d.Name, sig)
	}
	if err := d.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("daemon %s: %v: %w", d.Name, sig, err)
	}
	return nil
}

// Stop sends SIGTERM and waits up to timeout; then SIGKILL, and an error
// saying the daemon ignored SIGTERM.
func (d *Daemon) Stop(timeout time.Duration) error {
	d.mu.Lock()
	cmd, done := d.cmd, d.done
	d.mu.Unlock()
	if cmd == nil || d.exited() {
		return nil
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		if ps := cmd.ProcessState; ps != nil && ps.ExitCode() != 0 {
			return fmt.Errorf("daemon %s exited with %s after SIGTERM; log tail:\n%s", d.Name, ps, d.LogTail(10))
		}
		return nil
	case <-time.After(timeout):
	}
	d.Kill()
	return fmt.Errorf("daemon %s did not stop within %v of SIGTERM (killed)", d.Name, timeout)
}

// Status asks the daemon for `omst status --json`, returning the typed
// status and the raw document (which may hold counters newer than the
// typed struct, e.g. chunks_damaged, cache_orphaned).
func (d *Daemon) Status(ctx context.Context) (rpcbridge.Status, map[string]any, error) {
	r := RunCLI(ctx, d.bin, 10*time.Second, nil, "--home", d.Home, "status", "--json")
	var st rpcbridge.Status
	if r.Err != nil || r.Code != 0 {
		return st, nil, fmt.Errorf("omst status at %s: %s", d.Name, r.Describe())
	}
	if err := json.Unmarshal(r.Stdout, &st); err != nil {
		return st, nil, fmt.Errorf("omst status --json at %s: %v: %q", d.Name, err, r.Stdout)
	}
	raw := map[string]any{}
	json.Unmarshal(r.Stdout, &raw)
	return st, raw, nil
}

// ExtraCounters are status counters the suite prints when a daemon reports
// them (newer daemons do), and tolerates the absence of.
var ExtraCounters = []string{"chunks_damaged", "cache_orphaned", "corrupt_received", "corrupt_reports", "redirects_sent", "redirects_taken", "sibling_failures"}

// HasExtraCounters reports whether a raw status holds any ExtraCounters.
func HasExtraCounters(raw map[string]any) bool {
	for _, k := range ExtraCounters {
		if _, ok := raw[k]; ok {
			return true
		}
	}
	return false
}

// Counters formats the byte counters of a status, with ExtraCounters when
// present.
func Counters(st rpcbridge.Status, raw map[string]any) string {
	s := fmt.Sprintf("served=%d fetched=%d peer_errors=%d chunks=%d names=%d", st.BytesServed, st.BytesFetched,
		st.PeerErrors, st.Chunks, st.Names)
	for _, k := range ExtraCounters {
		if v, ok := raw[k]; ok {
			s += fmt.Sprintf(" %s=%v", k, v)
		}
	}
	return s
}

// LogTail returns the last n lines of the daemon's log (all its runs).
func (d *Daemon) LogTail(n int) string {
	b, err := os.ReadFile(d.LogPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}

// badMarkers are what a Go process prints when it panics, dies of a fatal
// runtime error (including SIGBUS/SIGSEGV on a mapped file) or, built with
// -race, sees a data race; and what the local API logs when it recovered a
// panic in a handler.
var badMarkers = []string{"panic:", "fatal error:", "DATA RACE", "panic in handler"}

// ScanLog returns the log lines that show a panic, a fatal error or a race.
func (d *Daemon) ScanLog() []string {
	f, err := os.Open(d.LogPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var bad []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, m := range badMarkers {
			if strings.Contains(line, m) {
				if len(line) > 300 {
					line = line[:300] + "..."
				}
				bad = append(bad, line)
				break
			}
		}
	}
	return bad
}

// FDProfile counts a process's open descriptors by kind.
type FDProfile struct {
	Total int
	Unix  int // unix sockets: the local API's listener and its client connections
	Store int // files under HOME/cache/chunks and HOME/cache/tmp
	Other int // TCP sockets (libp2p), index files, pipes, epoll, ...
}

func (p FDProfile) String() string {
	return fmt.Sprintf("%d fds (unix sockets %d, chunk/tmp files %d, other %d)", p.Total, p.Unix, p.Store, p.Other)
}

// FDs reads /proc/PID/fd of the daemon.
func (d *Daemon) FDs() (FDProfile, error) {
	pid := d.Pid()
	var p FDProfile
	if pid == 0 || !d.Running() {
		return p, fmt.Errorf("daemon %s is not running", d.Name)
	}
	unix := unixInodes(pid)
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return p, err
	}
	store := []string{filepath.Join(d.Home, "cache", "chunks") + "/", filepath.Join(d.Home, "cache", "tmp") + "/"}
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		p.Total++
		switch {
		case strings.HasPrefix(link, "socket:["):
			ino := strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")
			if unix[ino] {
				p.Unix++
			} else {
				p.Other++
			}
		case strings.HasPrefix(link, store[0]) || strings.HasPrefix(link, store[1]):
			p.Store++
		default:
			p.Other++
		}
	}
	return p, nil
}

// unixInodes returns the inodes of the unix sockets in the process's
// network namespace (/proc/PID/net/unix, column 7).
func unixInodes(pid int) map[string]bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	set := map[string]bool{}
	if err != nil {
		return set
	}
	for i, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if i == 0 || len(f) < 7 {
			continue
		}
		set[f[6]] = true
	}
	return set
}

// RSS returns the daemon's resident set size in bytes.
func (d *Daemon) RSS() (int64, error) {
	pid := d.Pid()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}

// SetBaseline records the daemon's descriptor profile as its baseline,
// against which CheckFDs compares later.
func (d *Daemon) SetBaseline() error {
	p, err := d.FDs()
	if err != nil {
		return err
	}
	d.base, d.baseSet = p, true
	return nil
}

// Baseline is the recorded descriptor profile.
func (d *Daemon) Baseline() (FDProfile, bool) { return d.base, d.baseSet }
