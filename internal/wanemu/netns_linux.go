package wanemu

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// NetnsDir is where `ip netns` keeps named namespaces.
const NetnsDir = "/run/netns"

// NetnsPath is the file that names namespace ns.
func NetnsPath(ns string) string { return filepath.Join(NetnsDir, ns) }

// InNetns runs fn on an OS thread that has entered namespace ns, then
// returns the thread to its namespace. Sockets fn creates stay in ns for
// their whole life; fn must not start goroutines that expect to be in ns.
func InNetns(ns string, fn func() error) error {
	target, err := os.Open(NetnsPath(ns))
	if err != nil {
		return fmt.Errorf("open namespace %s: %w", ns, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open own namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter namespace %s: %w", ns, err)
	}
	defer func() {
		// If the thread cannot go back it stays locked: the runtime then
		// ends it with this goroutine instead of reusing it.
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	return fn()
}

// ListenIn opens a TCP listener on addr inside namespace ns.
func ListenIn(ns, addr string) (net.Listener, error) {
	var l net.Listener
	err := InNetns(ns, func() (err error) {
		l, err = net.Listen("tcp4", addr)
		return err
	})
	return l, err
}

// DialIn connects to addr from inside namespace ns.
func DialIn(ns, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := InNetns(ns, func() (err error) {
		c, err = net.DialTimeout("tcp4", addr, timeout)
		return err
	})
	return c, err
}

// run executes argv with a time limit and returns its error with its output.
func run(ctx context.Context, argv []string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// output executes argv with a time limit and returns its standard output.
func output(ctx context.Context, argv []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	return string(out), err
}
