package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// getToFile fetches name into path, always the same way: the file is
// prepared here with the user's rights (a regular file or a new one is
// replaced atomically, keeping a replaced file's mode and group, a new
// one 0644 less the umask: localfile.Create; a link is followed as the
// kernel's protected_symlinks rule allows and its target replaced; a device
// or FIFO such as /dev/null is written in place), and the daemon writes the
// bytes into its descriptor (GET_TO_FD). On a terminal a progress bar
// follows the bytes the daemon says are written (getToFileShown).
func getToFile(ctx context.Context, g *globals, cl *rpcbridge.Client, name, path string) error {
	if g.quiet || !isTerminal() {
		_, err := cl.GetFile(ctx, name, path)
		return err
	}
	return getToFileShown(ctx, cl, name, path, func(total int64) *progress { return newProgress("get "+name, total, g.quiet) })
}

// getToFileShown is getToFile with a progress bar, made by bar with the
// blob's size once the daemon has found it, and set from the daemon's
// reports of the bytes written (PROGRESS frames, protocol version 8; a
// daemon of an older version reports every byte at the end only). Its
// last line, the get's summary, says the bytes of the last report.
func getToFileShown(ctx context.Context, cl *rpcbridge.Client, name, path string, bar func(total int64) *progress) error {
	var p *progress // the hooks run on this goroutine
	_, err := cl.GetFileWith(ctx, name, path, rpcbridge.GetHooks{
		Started:  func(info rpcbridge.Info) { p = bar(int64(info.Size)) },
		Progress: func(done uint64) { p.set(int64(done)) },
	})
	p.finish()
	return err
}

// getToWriter streams the blob named name to w (standard output), with a
// progress bar when standard error is a terminal and w is not one.
func getToWriter(ctx context.Context, g *globals, cl *rpcbridge.Client, name string, w io.Writer) error {
	if g.quiet || !isTerminal() || writerIsTerminal(w) {
		_, err := cl.Get(ctx, name, w)
		return err
	}
	info, rc, err := cl.GetStream(ctx, name)
	if err != nil {
		return err
	}
	defer rc.Close()
	p := newProgress("get "+name, int64(info.Size), g.quiet)
	_, err = io.Copy(p.writer(errWriter{w}), rc)
	p.finish()
	return err
}

// errWriter marks errors of writing to standard output as such.
type errWriter struct{ w io.Writer }

func (e errWriter) Write(b []byte) (int, error) {
	k, err := e.w.Write(b)
	if err != nil {
		err = fmt.Errorf("write to standard output: %w", err)
	}
	return k, err
}

// writerIsTerminal reports whether w is a terminal.
func writerIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// withParentReason adds to err, a failed get's error, why the daemon is
// not connected to its parent, when it is not and knows why (the last
// session's failure: "connection refused", a peer ID mismatch): the reason
// was only in daemon.log, and a get failed with the dial's backoff text.
// err is returned as is when the get succeeded, was interrupted, or the
// parent is connected or there is none.
func withParentReason(ctx context.Context, g *globals, err error) error {
	if err == nil || ctx.Err() != nil || !(errors.Is(err, blob.ErrUnreachable) || errors.Is(err, blob.ErrNotFound)) {
		return err
	}
	cl, derr := g.dial()
	if derr != nil {
		return err
	}
	defer cl.Close()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, serr := cl.Status(sctx)
	if serr != nil || st.Parent == "" || st.ParentConnected || st.ParentError == "" {
		return err
	}
	return fmt.Errorf("%w (this daemon is not connected to its parent %s: %s)", err, st.Parent, st.ParentError)
}
