//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// host is this instance: its configuration and the processes it started.
type host struct {
	cfg  *config
	logf func(string, ...any)

	mu    sync.Mutex
	procs []*child
}

// child is a process this host started (aria2c, opentracker).
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // from Wait, once done is closed
}

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// start runs argv with its output appended to OUT/<name>.log. The child
// dies with this process's thread (Pdeathsig), and stopAll ends it on every
// way out of main; omst-wan kills whatever is left in the namespace.
func (h *host) start(name string, argv []string, env []string) (*child, error) {
	logPath := filepath.Join(h.cfg.out, name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		lf.Close()
		close(c.done)
	}()
	h.mu.Lock()
	h.procs = append(h.procs, c)
	h.mu.Unlock()
	h.logf("started %s (pid %d): %v", name, cmd.Process.Pid, argv)
	return c, nil
}

// stop ends c: SIGTERM (aria2c then tells its tracker it stops), SIGKILL
// after grace.
func (h *host) stop(c *child, grace time.Duration) {
	if c.exited() {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		select {
		case <-c.done:
		case <-time.After(2 * time.Second):
			h.logf("%s (pid %d) did not exit after SIGKILL", c.name, c.cmd.Process.Pid)
		}
	}
}

// stopAll stops every child, the latest first.
func (h *host) stopAll() {
	h.mu.Lock()
	procs := h.procs
	h.procs = nil
	h.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		h.stop(procs[i], 2*time.Second)
	}
}

// btPort is where every aria2c listens for peers (each host is its own
// namespace, so one port for all); trackerPort is opentracker's.
const (
	btPort      = 6881
	trackerPort = 6969
)

// ariaArgs are the options every aria2c gets: off the internet (no DHT, no
// local peer discovery, IPv4 only: the emulated hosts have no IPv6),
// seeding without a ratio limit (until this program stops it), files
// allocated with fallocate, no config file, a log in OUT, and an exit
// when this program dies.
func (h *host) ariaArgs(dir string) []string {
	return []string{
		"aria2c", "--no-conf=true",
		"--enable-dht=false", "--enable-dht6=false", "--bt-enable-lpd=false", "--disable-ipv6=true",
		"--listen-port=" + strconv.Itoa(btPort),
		"--seed-ratio=0.0",
		"--file-allocation=falloc",
		"--dir=" + dir,
		"--bt-tracker-connect-timeout=10", "--bt-tracker-timeout=10",
		"--summary-interval=0", "--show-console-readout=false", "--console-log-level=warn",
		"--log=" + filepath.Join(h.cfg.out, "aria2c-detail.log"), "--log-level=" + h.cfg.ariaLogLevel,
		"--stop-with-process=" + strconv.Itoa(os.Getpid()),
	}
}
