package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// CLIResult is what one omst CLI run printed and returned.
type CLIResult struct {
	Args     []string
	Stdout   []byte
	Stderr   string
	Code     int    // exit code; -1 if killed by a signal or not run
	Signal   string // the signal that ended it, if any
	TimedOut bool   // the harness killed it at its time bound
	Err      error  // could not be run at all, or the harness's context ended
	Took     time.Duration
}

// Describe summarises the result for a message.
func (r CLIResult) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "omst %s: ", strings.Join(shortArgs(r.Args), " "))
	switch {
	case r.Err != nil:
		fmt.Fprintf(&b, "%v", r.Err)
	case r.TimedOut:
		fmt.Fprintf(&b, "timed out after %v", r.Took.Round(time.Millisecond))
	case r.Signal != "":
		fmt.Fprintf(&b, "killed by %s", r.Signal)
	default:
		fmt.Fprintf(&b, "exit %d", r.Code)
	}
	if s := strings.TrimSpace(r.Stderr); s != "" {
		if len(s) > 600 {
			s = s[:600] + "..."
		}
		fmt.Fprintf(&b, "; stderr: %s", s)
	}
	return b.String()
}

// shortArgs drops the --home value's directory part for readability.
func shortArgs(args []string) []string {
	out := append([]string(nil), args...)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == "--home" {
			if j := strings.LastIndex(out[i+1], "/"); j >= 0 {
				out[i+1] = ".../" + out[i+1][j+1:]
			}
		}
	}
	return out
}

// RunCLI runs `bin args...` with stdin (nil: none), bounded by timeout, and
// collects its output. A run the harness had to kill is marked TimedOut.
func RunCLI(ctx context.Context, bin string, timeout time.Duration, stdin io.Reader, args ...string) CLIResult {
	return RunCLIAs(ctx, bin, timeout, stdin, nil, args...)
}

// RunCLIAs is RunCLI with the process's credential (another user's; nil:
// the harness's own).
func RunCLIAs(ctx context.Context, bin string, timeout time.Duration, stdin io.Reader, cred *syscall.Credential, args ...string) CLIResult {
	r := CLIResult{Args: args, Code: -1}
	if err := ctx.Err(); err != nil {
		r.Err = err
		return r
	}
	cmd := exec.Command(bin, args...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = "/"
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = stdin
	}
	start := time.Now()
	done, err := startProc(cmd)
	if err != nil {
		r.Err = err
		return r
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.TimedOut = true
		killProc(cmd)
		<-done
	case <-ctx.Done():
		killProc(cmd)
		<-done
		r.Err = ctx.Err()
	}
	r.Took = time.Since(start)
	r.Stdout, r.Stderr = out.Bytes(), errb.String()
	exitInfo(cmd, &r)
	return r
}

// exitInfo fills Code and Signal from a finished cmd.
func exitInfo(cmd *exec.Cmd, r *CLIResult) {
	ps := cmd.ProcessState
	if ps == nil {
		return
	}
	r.Code = ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		r.Signal = ws.Signal().String()
	}
}

// errTimeout marks a step that exceeded its time bound.
var errTimeout = errors.New("timed out")

// Proc is a CLI process the case steers itself (feeds, reads, kills).
type Proc struct {
	Args   []string
	Stdin  *os.File // the write end of its standard input, if piped
	Stdout *os.File // the read end of its standard output, if piped
	cmd    *exec.Cmd
	done   chan struct{}
	out    bytes.Buffer
	errb   bytes.Buffer
	start  time.Time
	killed bool
}

// StartCLI starts `bin args...`; with pipeIn its standard input is a pipe
// (write to p.Stdin, close it for EOF), with pipeOut its standard output
// is one (read p.Stdout to EOF), else output is collected.
func StartCLI(bin string, pipeIn, pipeOut bool, args ...string) (*Proc, error) {
	p := &Proc{Args: args, cmd: exec.Command(bin, args...)}
	var theirs []*os.File
	if pipeIn {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		p.cmd.Stdin, p.Stdin = r, w
		theirs = append(theirs, r)
	}
	if pipeOut {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		p.cmd.Stdout, p.Stdout = w, r
		theirs = append(theirs, w)
	} else {
		p.cmd.Stdout = &p.out
	}
	p.cmd.Stderr = &p.errb
	p.start = time.Now()
	done, err := startProc(p.cmd)
	for _, f := range theirs {
		f.Close()
	}
	if err != nil {
		if p.Stdin != nil {
			p.Stdin.Close()
		}
		if p.Stdout != nil {
			p.Stdout.Close()
		}
		return nil, err
	}
	p.done = done
	return p, nil
}

// Pid is the process ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Kill sends SIGKILL (the result then shows Signal "killed").
func (p *Proc) Kill() {
	p.killed = true
	killProc(p.cmd)
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the process (at most timeout: then it is killed and the
// result marked TimedOut), closes the pipe ends the harness holds, and
// returns the result. Stdout is what was collected (nil with pipeOut).
func (p *Proc) Wait(ctx context.Context, timeout time.Duration) CLIResult {
	r := CLIResult{Args: p.Args, Code: -1}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		r.TimedOut = true
		killProc(p.cmd)
		<-p.done
	case <-ctx.Done():
		killProc(p.cmd)
		<-p.done
		r.Err = ctx.Err()
	}
	if p.Stdin != nil {
		p.Stdin.Close()
	}
	r.Took = time.Since(p.start)
	r.Stdout, r.Stderr = p.out.Bytes(), p.errb.String()
	exitInfo(p.cmd, &r)
	return r
}
