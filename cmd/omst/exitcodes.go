package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
)

// Exit statuses of a command ended by a signal: 128 + the signal's number,
// as shells report them.
const (
	exitSIGINT  = 128 + int(syscall.SIGINT)  // 130
	exitSIGTERM = 128 + int(syscall.SIGTERM) // 143
)

// signalContext returns a context cancelled by the first SIGINT or SIGTERM
// (later ones are ignored while the command winds down) and a function
// that reports which signal ended it, if any.
func signalContext() (ctx context.Context, received func() os.Signal, stop func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	var got atomic.Value
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			got.Store(s)
			cancel(errInterrupted{s})
		case <-done:
		}
	}()
	received = func() os.Signal {
		s, _ := got.Load().(os.Signal)
		return s
	}
	stop = func() {
		close(done)
		cancel(nil)
	}
	return ctx, received, stop
}

// errInterrupted is the cause of the command's context when a signal
// ended it.
type errInterrupted struct{ sig os.Signal }

func (e errInterrupted) Error() string { return "interrupted by " + signalName(e.sig) }

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// usageErrors makes every flag and argument error of root and its
// subcommands a usageError (exit status 2).
func usageErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageOf(cmd, err) })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return usageOf(cmd, err)
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// usageOf is err, a flag or argument error of cmd, as a usageError that
// points to cmd's help.
func usageOf(cmd *cobra.Command, err error) error {
	if cmd.HasParent() {
		return usageError{fmt.Errorf("%s: %w (see '%s --help')", cmd.Name(), err, cmd.CommandPath())}
	}
	return usageError{fmt.Errorf("%w (see '%s --help')", err, cmd.CommandPath())}
}

// cobraUsage reports whether err is one of the usage errors cobra makes
// itself, outside the hooks usageErrors sets: an unknown command, a
// required flag missing, flags of a group not given together.
func cobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command ", "required flag(s) ", "if any flags in the group ", "at least one of the flags in the group "} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// finish prints err (if any) to w and returns the exit status: the
// signal's (130, 143) if one interrupted the command and it failed,
// else exitCode's.
func finish(w io.Writer, err error, sig os.Signal) int {
	if err == nil {
		return exitOK
	}
	if sig != nil {
		fmt.Fprintf(w, "omst: %s\n", interruptedText(err, sig))
		if sig == syscall.SIGTERM {
			return exitSIGTERM
		}
		return exitSIGINT
	}
	if cobraUsage(err) {
		err = usageError{err}
	}
	fmt.Fprintf(w, "omst: %v\n", err)
	if code := exitCode(err); code != exitError {
		return code
	}
	var es exitStatus
	if errors.As(err, &es) && es.code > 0 {
		return es.code
	}
	return exitError
}

// interruptedText is what omst prints for a command a signal ended: the
// signal, and what the error says beyond the cancellation (e.g. that a put
// stored nothing), without "context canceled".
func interruptedText(err error, sig os.Signal) string {
	msg := err.Error()
	for _, noise := range []string{
		": " + context.Canceled.Error() + ": " + errInterrupted{sig}.Error(),
		": " + errInterrupted{sig}.Error(),
		": " + context.Canceled.Error(),
		context.Canceled.Error() + ": " + errInterrupted{sig}.Error(),
		context.Canceled.Error(),
	} {
		msg = strings.ReplaceAll(msg, noise, "")
	}
	msg = strings.TrimSpace(msg)
	if msg == "" || msg == (errInterrupted{sig}).Error() {
		return "interrupted (" + signalName(sig) + ")"
	}
	return msg + ": interrupted (" + signalName(sig) + ")"
}
