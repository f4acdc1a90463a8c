package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/omst-project/omst/pkg/node"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// A daemon started in the background (omst daemon --detach) and `omst
// wait` let a script start daemons and use them at once: both return only
// once the daemon's socket answers a status request.

// defaultWait bounds omst wait and omst daemon --detach.
const defaultWait = 30 * time.Second

// DaemonLog is the file, in HOME, that a detached daemon logs to.
const DaemonLog = "daemon.log"

// envDetached is set in the environment of the daemon that --detach
// starts: that one runs in the foreground (its --detach, e.g. from a
// configuration file, is ignored).
const envDetached = "OMST_DETACHED"

func waitCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "wait",
		Short: "Wait until the daemon answers on its socket (after `omst daemon &`)",
		Long: "Wait until the daemon of HOME answers a status request on its socket, then exit 0.\n" +
			"Exits 4 if none answered within --timeout. For scripts that start a daemon in the\n" +
			"background and use it at once (or use `omst daemon --detach`, which waits itself).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usageError{fmt.Errorf("--timeout %s: want a positive duration", timeout)}
			}
			_, err := waitDaemon(cmd.Context(), g.socket(), timeout, nil)
			return err
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", defaultWait, "how long to wait")
	return c
}

// errDaemonExited is returned by waitDaemon when the process it waits for
// exits first.
var errDaemonExited = errors.New("the daemon exited")

// waitDaemon asks the daemon at sock for its status until it answers, ctx
// ends, timeout passes (an error wrapping rpcbridge.ErrNoDaemon: exit
// status 4) or exited is closed (errDaemonExited).
func waitDaemon(ctx context.Context, sock string, timeout time.Duration, exited <-chan struct{}) (rpcbridge.Status, error) {
	deadline := time.Now().Add(timeout)
	pause := 20 * time.Millisecond
	var last error
	for {
		st, err := askStatus(ctx, sock, time.Until(deadline))
		if err == nil {
			return st, nil
		}
		last = err
		select {
		case <-exited:
			return rpcbridge.Status{}, errDaemonExited
		default:
		}
		if ctx.Err() != nil {
			return rpcbridge.Status{}, ctx.Err()
		}
		if time.Now().After(deadline) {
			break
		}
		t := time.NewTimer(min(pause, time.Until(deadline)+time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return rpcbridge.Status{}, ctx.Err()
		case <-exited:
			t.Stop()
			return rpcbridge.Status{}, errDaemonExited
		case <-t.C:
		}
		pause = min(2*pause, 200*time.Millisecond)
	}
	why := "nothing listens there"
	if last != nil && !errors.Is(last, rpcbridge.ErrNoDaemon) {
		why = last.Error()
	}
	return rpcbridge.Status{}, fmt.Errorf("%w answered at %s within %v (%s)", rpcbridge.ErrNoDaemon, sock, timeout, why)
}

// askStatus connects to sock and asks for the daemon's status, within d.
func askStatus(ctx context.Context, sock string, d time.Duration) (rpcbridge.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, max(d, 100*time.Millisecond))
	defer cancel()
	type res struct {
		st  rpcbridge.Status
		err error
	}
	ch := make(chan res, 1)
	go func() {
		cl, err := rpcbridge.Dial(sock)
		if err != nil {
			ch <- res{err: err}
			return
		}
		defer cl.Close()
		st, err := cl.Status(ctx)
		ch <- res{st, err}
	}()
	select {
	case r := <-ch:
		return r.st, r.err
	case <-ctx.Done():
		return rpcbridge.Status{}, ctx.Err()
	}
}

// withDetach adds --detach to the daemon command.
func withDetach(g *globals, daemon *cobra.Command) *cobra.Command {
	var detach bool
	var timeout time.Duration
	daemon.Flags().BoolVar(&detach, "detach", false, "start the daemon in the background (its log in HOME/"+DaemonLog+"), return once it answers on its\n"+
		"socket (and is connected to its --parent, up to 10s) and print its addresses; if it exits while starting,\n"+
		"print its last log lines and fail")
	daemon.Flags().DurationVar(&timeout, "detach-timeout", defaultWait, "with --detach, how long to wait for the daemon to answer")
	run := daemon.RunE
	daemon.RunE = func(cmd *cobra.Command, args []string) error {
		if !detach || os.Getenv(envDetached) != "" {
			return run(cmd, args)
		}
		if timeout <= 0 {
			return usageError{fmt.Errorf("--detach-timeout %s: want a positive duration", timeout)}
		}
		return runDetached(cmd, g, timeout)
	}
	return daemon
}

// runDetached starts this same command line again, without --detach, as a
// background process in its own session, logging to HOME/daemon.log, and
// waits until it answers on its socket.
func runDetached(cmd *cobra.Command, g *globals, timeout time.Duration) error {
	home := g.homeDir()
	sock := node.SocketPath(home) // where the daemon listens ($OMST_SOCKET may point elsewhere)
	if _, err := askStatus(cmd.Context(), sock, 2*time.Second); err == nil {
		return fmt.Errorf("an omst daemon already runs with home %s (pid %s): stop it or use another --home", home, lockPid(home))
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("create home %s: %w", home, err)
	}
	logPath := filepath.Join(home, DaemonLog)
	if abs, err := filepath.Abs(logPath); err == nil {
		logPath = abs
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("daemon log: %w", err)
	}
	defer logf.Close()
	start, _ := logf.Seek(0, io.SeekEnd)
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the omst executable: %w", err)
	}
	child := exec.Command(exe, withoutDetach(os.Args[1:])...)
	child.Env = append(os.Environ(), envDetached+"=1")
	child.Stdout, child.Stderr = logf, logf
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // not stopped by the terminal's ^C
	if err := child.Start(); err != nil {
		return fmt.Errorf("start the daemon: %w", err)
	}
	exited := make(chan struct{})
	go func() { child.Wait(); close(exited) }()
	st, err := waitDaemon(cmd.Context(), sock, timeout, exited)
	switch {
	case errors.Is(err, errDaemonExited):
		code := child.ProcessState.ExitCode()
		return exitStatus{code: code, err: fmt.Errorf("the daemon exited while starting (exit status %d); its log (%s) ends:\n%s",
			code, logPath, logTail(logPath, start, 15))}
	case cmd.Context().Err() != nil:
		child.Process.Signal(syscall.SIGTERM)
		return fmt.Errorf("interrupted while the daemon started: stopped it (pid %d)", child.Process.Pid)
	case err != nil:
		return fmt.Errorf("%w; it still runs (pid %d); its log (%s) ends:\n%s", err, child.Process.Pid, logPath, logTail(logPath, start, 15))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "omst daemon started in the background: pid %d, log %s\n", child.Process.Pid, logPath)
	// With a parent, give its session a moment to come up, so that what
	// the next commands put is announced up the tree at once.
	if st.Parent != "" && !st.ParentConnected {
		if st2, ok := waitParent(cmd.Context(), sock, parentWait); ok {
			st = st2
		} else {
			why := ""
			if st2.ParentError != "" {
				why = " (" + st2.ParentError + ")"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "omst: warning: not connected to its parent %s after %v%s; it keeps trying (see `omst status` and the log)\n", st.Parent, parentWait, why)
		}
	}
	for _, a := range routableFirst(st.Addrs) { // addrorder.go
		fmt.Fprintln(cmd.OutOrStdout(), a)
	}
	return nil
}

// parentWait bounds how long --detach waits for the new daemon's parent
// session.
const parentWait = 10 * time.Second

// waitParent asks the daemon at sock for its status until it is connected
// to its parent, for at most d.
func waitParent(ctx context.Context, sock string, d time.Duration) (rpcbridge.Status, bool) {
	deadline := time.Now().Add(d)
	for {
		st, err := askStatus(ctx, sock, time.Second)
		if err == nil && st.ParentConnected {
			return st, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return st, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// withoutDetach returns args without the --detach flag (in any form).
func withoutDetach(args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if a == "--detach" || strings.HasPrefix(a, "--detach=") {
			continue
		}
		out = append(out, a)
	}
	return out
}

// logTail returns the last n lines the file at path got after offset
// start, indented.
func logTail(path string, start int64, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "  (" + err.Error() + ")"
	}
	if start <= int64(len(b)) {
		b = b[start:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	if len(lines) == 1 && lines[0] == "" {
		return "  (nothing)"
	}
	return "  " + strings.Join(lines, "\n  ")
}

// lockPid is the pid in HOME/lock (written by the daemon holding it).
func lockPid(home string) string {
	b, _ := os.ReadFile(filepath.Join(home, "lock"))
	if p := string(bytes.TrimSpace(b)); p != "" {
		return p
	}
	return "unknown"
}

// exitStatus makes omst exit with code (e.g. a detached daemon's own).
type exitStatus struct {
	code int
	err  error
}

func (e exitStatus) Error() string { return e.err.Error() }
func (e exitStatus) Unwrap() error { return e.err }
