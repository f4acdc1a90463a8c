package wanemu

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRunOwner(t *testing.T) {
	for name, want := range map[string]int{"omstw123-root": 123, "omstw77x2-a-w1": 77, "omstw": 0, "other1-root": 0, "/tmp/omstw5": 0} {
		if got := runOwner(name); got != want {
			t.Errorf("runOwner(%q) = %d, want %d", name, got, want)
		}
	}
}

// TestEmulatedWAN builds 1 site x 2 workers with a 100mbit/20ms WAN and a
// 1gbit LAN, checks the round trip and the WAN throughput, the control
// relay, that processes started inside die at Close, and that nothing is
// left. It needs root, ip, tc, iptables and NFQUEUE; it skips without them.
func TestEmulatedWAN(t *testing.T) {
	if testing.Short() {
		t.Skip("builds network namespaces and measures for 5-10 s; skipped with -short")
	}
	if err := Preflight(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	cfg := Config{
		RunID: NewRunID(1), Sites: 1, Workers: 2,
		WAN: []Link{{Rate: 100 * Mbit, Delay: 20 * time.Millisecond}},
		LAN: Link{Rate: Gbit},
	}
	p, err := NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := Start(ctx, p, Options{Logf: t.Logf})
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			e.Close()
		}
	}()
	root, _ := p.Host("root")
	head, _ := p.Host("a-head")
	w1, _ := p.Host("a-w1")

	rtt, err := e.MeasureRTT(w1, root, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v", rtt)
	if rtt.Median < 40*time.Millisecond || rtt.Median > 60*time.Millisecond {
		t.Errorf("root<->worker RTT median %v, want 40-60ms", rtt.Median)
	}
	lan, err := e.MeasureRTT(head, w1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if lan.Median > 5*time.Millisecond {
		t.Errorf("head<->worker RTT median %v on an undelayed LAN", lan.Median)
	}
	tp, err := e.MeasureThroughput(root, head, 3*time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v", tp)
	if mb := tp.Rate() / 1e6; mb < 70 || mb > 110 {
		t.Errorf("WAN throughput %.1f Mbit/s, want 70-110", mb)
	}

	// Control relay: 127.0.0.1:5050 inside a worker reaches a service in
	// this (the host) namespace.
	svc, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	go func() {
		for {
			c, err := svc.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	if err := e.StartControlRelay(DialHostTCP(svc.Addr().String())); err != nil {
		t.Fatal(err)
	}
	c, err := DialIn(w1.Netns, ControlHost+":"+ControlPort, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "hello\n" {
		t.Errorf("relay echo %q, %v", line, err)
	}
	c.Close()

	// A process with a child that leaves its process group: both go at Close.
	pr, pw, _ := os.Pipe()
	proc, err := e.Command(w1.Netns, []string{"sh", "-c", "setsid sleep 300 & echo $!; ip -br addr show eth0; sleep 300"}, nil, "", pw, os.Stderr)
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(pr)
	childLine, _ := rd.ReadString('\n')
	addrLine, _ := rd.ReadString('\n')
	if !strings.Contains(addrLine, w1.IP.String()) {
		t.Errorf("command did not run in %s: %q", w1.Netns, addrLine)
	}
	var child int
	for _, ch := range strings.TrimSpace(childLine) {
		child = child*10 + int(ch-'0')
	}
	t0 := time.Now()
	if err := e.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	closed = true
	t.Logf("teardown took %v", time.Since(t0))
	select {
	case <-proc.Done():
	default:
		t.Error("process still running after Close")
	}
	if child > 0 && running(child) {
		t.Errorf("setsid child %d still alive after Close", child)
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	ls, err := FindLeftovers(cfg.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) > 0 {
		t.Errorf("leftovers after Close: %+v", ls)
	}
}

// running tells whether pid exists and is not a zombie (an exited child of
// a reaper that has not collected it yet).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestStartFailureCleansUp: when a namespace of the run exists already,
// Start fails, removes what it made, and leaves the other one alone.
func TestStartFailureCleansUp(t *testing.T) {
	if err := Preflight(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	cfg := Config{RunID: NewRunID(2), Sites: 1, Workers: 2, WAN: []Link{{Rate: 10 * Mbit, Delay: time.Millisecond}}}
	p, err := NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	squatter := cfg.RunID + "-a-w2"
	if err := run(context.Background(), []string{"ip", "netns", "add", squatter}); err != nil {
		t.Skipf("skipping: %v", err)
	}
	defer run(context.Background(), []string{"ip", "netns", "del", squatter})
	if _, err := Start(context.Background(), p, Options{}); err == nil || errors.Is(err, ErrUnsupported) {
		t.Fatalf("Start over an existing namespace: %v", err)
	}
	ls, err := FindLeftovers(cfg.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != 1 || ls[0].Path != NetnsPath(squatter) {
		t.Errorf("after a failed Start: %+v, want only %s", ls, squatter)
	}
}

// TestCleanup removes the namespace of a dead run and the process in it.
func TestCleanup(t *testing.T) {
	if err := Preflight(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	const prefix = RunIDPrefix + "999999999" // no such pid: a dead run
	ns := prefix + "-root"
	if err := run(context.Background(), []string{"ip", "netns", "add", ns}); err != nil {
		t.Skipf("skipping: %v", err)
	}
	defer run(context.Background(), []string{"ip", "netns", "del", ns})
	// The process says when it runs inside: `ip netns exec` forks and
	// enters the namespace only then, so a Cleanup right after Start may
	// list the namespace's processes before it is one of them (and leave
	// it running: under load, 5 runs of 40 did).
	cmd := exec.Command("ip", "netns", "exec", ns, "sh", "-c", "echo in; exec sleep 300")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "in\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("the process in %s did not start: %q, %v", ns, line, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	removed, err := Cleanup(context.Background(), prefix, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].Path != NetnsPath(ns) {
		t.Errorf("removed %+v, want %s", removed, ns)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("the process inside the leftover namespace survived Cleanup")
		_ = cmd.Process.Kill()
	}
}

func TestCheckScratchRoot(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/f"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if len(dir) <= maxScratchRoot {
		if err := checkScratchRoot(dir); err != nil {
			t.Errorf("checkScratchRoot(%q) = %v, want nil", dir, err)
		}
	}
	for _, bad := range []string{"", "tmp", "/no/such/omst/dir", file, "/" + strings.Repeat("x", maxScratchRoot)} {
		if err := checkScratchRoot(bad); err == nil {
			t.Errorf("checkScratchRoot(%q) = nil, want an error", bad)
		}
	}
}

// TestCleanupScratchRoots finds and removes a dead run's scratch directory
// in a root the caller names, and keeps a live run's.
func TestCleanupScratchRoots(t *testing.T) {
	root := t.TempDir()
	dead := root + "/" + RunIDPrefix + "999999999"
	live := root + "/" + RunIDPrefix + "1x7" // pid 1 lives
	for _, d := range []string{dead + "/a-w1", live + "/a-w1"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ls, err := FindLeftovers(RunIDPrefix, root)
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, l := range ls {
		if strings.HasPrefix(l.Path, root) {
			found[l.Path] = l.Live
		}
	}
	if live, ok := found[dead]; !ok || live {
		t.Errorf("leftovers %+v: want %s as a dead run", ls, dead)
	}
	if isLive, ok := found[live]; !ok || !isLive {
		t.Errorf("leftovers %+v: want %s as a live run", ls, live)
	}
	// Only the dead run's directory, by prefix: no namespaces match it.
	removed, err := Cleanup(context.Background(), RunIDPrefix+"999999999", false, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].Path != dead {
		t.Errorf("removed %+v, want %s", removed, dead)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("%s still there after Cleanup (%v)", dead, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("live run's %s removed: %v", live, err)
	}
}
