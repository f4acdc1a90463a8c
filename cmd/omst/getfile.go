package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/term"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// getToFile fetches name into path, always the same way: the file is
// prepared here with the user's rights (a regular file or a new one is
// replaced atomically, mode 0644 less the umask; a link is followed as the
// kernel's protected_symlinks rule allows and its target replaced; a device
// or FIFO such as /dev/null is written in place), and the daemon writes the
// bytes into its descriptor (GET_TO_FD). On a terminal a progress bar
// follows the file being written.
func getToFile(ctx context.Context, g *globals, cl *rpcbridge.Client, name, path string) error {
	if g.quiet || !isTerminal() {
		_, err := cl.GetFile(ctx, name, path)
		return err
	}
	var (
		mu   sync.Mutex
		p    *progress
		stop func()
	)
	_, err := cl.GetFileStarted(ctx, name, path, func(info rpcbridge.Info, f *os.File) {
		mu.Lock()
		defer mu.Unlock()
		p = newProgress("get "+name, int64(info.Size), g.quiet)
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			stop = watch(func() int64 {
				if st, err := f.Stat(); err == nil {
					return st.Size()
				}
				return 0
			}, p)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if stop != nil {
		stop()
	}
	if p != nil {
		if err == nil {
			p.set(p.total)
		}
		p.finish()
	}
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
