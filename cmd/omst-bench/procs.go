package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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

// Bounded waits for the processes this program starts.
const (
	daemonReadyTimeout = 30 * time.Second
	termTimeout        = 10 * time.Second // SIGTERM, then SIGKILL
	killTimeout        = 5 * time.Second
)

// process is a child process this program started and must not leave behind.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has been reaped
}

// registry tracks every child process so that all exits (normal, error,
// signal) stop them.
type registry struct {
	mu    sync.Mutex
	procs map[*process]bool
}

var procs = &registry{procs: map[*process]bool{}}

// start starts cmd as a tracked child. The child also gets SIGKILL if this
// process dies without cleaning up (Linux parent-death signal).
func (r *registry) start(name string, cmd *exec.Cmd) (*process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	r.mu.Lock()
	r.procs[p] = true
	r.mu.Unlock()
	go func() {
		cmd.Wait()
		close(p.done)
		r.mu.Lock()
		delete(r.procs, p)
		r.mu.Unlock()
	}()
	return p, nil
}

// exited reports whether p has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to termTimeout, then SIGKILL and waits up to
// killTimeout. It reports whether the process is gone.
func (p *process) stop() bool {
	if p.exited() {
		return true
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(termTimeout):
	}
	logf("%s did not stop within %v of SIGTERM: killing it", p.name, termTimeout)
	p.cmd.Process.Kill()
	select {
	case <-p.done:
		return true
	case <-time.After(killTimeout):
		logf("%s (pid %d) still not reaped after SIGKILL", p.name, p.cmd.Process.Pid)
		return false
	}
}

func (r *registry) list() []*process {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*process, 0, len(r.procs))
	for p := range r.procs {
		out = append(out, p)
	}
	return out
}

// stopAll stops every tracked process, in parallel, with bounded waits.
func (r *registry) stopAll() {
	var wg sync.WaitGroup
	for _, p := range r.list() {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
}

// killAll sends SIGKILL to every tracked process without waiting.
func (r *registry) killAll() {
	for _, p := range r.list() {
		p.cmd.Process.Kill()
	}
}

// daemon is a running `omst daemon` with a client on its local socket.
type daemon struct {
	name    string
	home    string
	logPath string
	proc    *process
	client  *rpcbridge.Client
	tcpAddr string // loopback TCP multiaddr ending in /p2p/<ID>
	version string
}

// startDaemon starts `omst daemon` on 127.0.0.1 with its home under dir and
// waits until its socket answers a status request with a TCP address.
func startDaemon(ctx context.Context, bin, dir, name string, cacheSize int64, parent string, extra ...string) (*daemon, error) {
	d := &daemon{name: name, home: filepath.Join(dir, name), logPath: filepath.Join(dir, name+".log")}
	if err := os.MkdirAll(d.home, 0o700); err != nil {
		return nil, err
	}
	logFile, err := os.Create(d.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	args := []string{"daemon", "--home", d.home, "--listen", "/ip4/127.0.0.1/tcp/0",
		"--cache-size", strconv.FormatInt(cacheSize, 10), "--log-level", "warn"}
	if parent != "" {
		args = append(args, "--parent", parent)
	}
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Env = append(os.Environ(), "OMST_HOME="+d.home)
	if d.proc, err = procs.start("daemon "+name, cmd); err != nil {
		return nil, err
	}
	fail := func(err error) (*daemon, error) {
		d.close()
		return nil, fmt.Errorf("daemon %s: %w%s", name, err, logTail(d.logPath))
	}
	deadline := time.Now().Add(daemonReadyTimeout)
	sock := socketPath(d.home)
	for {
		if d.proc.exited() {
			return fail(fmt.Errorf("exited during start-up (%v)", d.proc.cmd.ProcessState))
		}
		if ctx.Err() != nil {
			return fail(ctx.Err())
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("not ready after %v", daemonReadyTimeout))
		}
		if d.client == nil {
			if c, err := rpcbridge.Dial(sock); err == nil {
				d.client = c
			}
		}
		if d.client != nil {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := d.client.Status(sctx)
			cancel()
			if err == nil {
				for _, a := range st.Addrs {
					if strings.Contains(a, "/ip4/127.0.0.1/tcp/") && strings.Contains(a, "/p2p/") {
						d.tcpAddr = a
						break
					}
				}
				if d.tcpAddr != "" {
					d.version = st.Version
					return d, nil
				}
			} else {
				// A stale connection from an early dial: redial.
				d.client.Close()
				d.client = nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitParent waits (bounded) until the daemon reports its parent connected.
func (d *daemon) waitParent(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := d.client.Status(sctx)
		cancel()
		if err == nil && st.ParentConnected {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("parent not connected")
			}
			return fmt.Errorf("daemon %s: %w after %v%s", d.name, err, timeout, logTail(d.logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// counters returns the daemon's BytesServed and BytesFetched.
func (d *daemon) counters(ctx context.Context) (served, fetched int64, err error) {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := d.client.Status(sctx)
	if err != nil {
		return 0, 0, fmt.Errorf("status of %s: %w", d.name, err)
	}
	return int64(st.BytesServed), int64(st.BytesFetched), nil
}

// close closes the client and stops the process (bounded waits).
func (d *daemon) close() {
	if d.client != nil {
		d.client.Close()
		d.client = nil
	}
	if d.proc != nil && !d.proc.stop() {
		logf("daemon %s may be left behind (pid %d)", d.name, d.proc.cmd.Process.Pid)
	}
}

// socketPath is where a daemon with home listens for clients (the same
// as node.SocketPath; not imported, so that this program depends only on
// the client API and builds without the daemon's packages).
func socketPath(home string) string { return filepath.Join(home, "omst.sock") }

// logTail returns the last lines of a daemon log, for error messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "\n--- " + path + " (last lines) ---\n" + strings.Join(lines, "\n")
}

// gridInit makes a grid in home (omst grid init), before its daemon starts.
func gridInit(ctx context.Context, bin, home string) error {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, bin, "--home", home, "-q", "grid", "init").CombinedOutput()
	if err != nil {
		return fmt.Errorf("omst grid init: %w: %s", err, out)
	}
	return nil
}

// gridToken mints a worker's join token at the root whose home is home.
func gridToken(ctx context.Context, bin, home string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "--home", home, "-q", "grid", "token", "--role", "worker", "--prefix", "bench/", "--ttl", "1h").Output()
	if err != nil {
		return "", fmt.Errorf("omst grid token: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}
