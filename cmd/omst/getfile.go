package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/term"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// getToFile fetches name into path, always the same way: the daemon
// writes the file (GET_FILE), atomically for a regular file or a new one
// (mode 0644), through a symlink to its target, in place for a device or
// FIFO (/dev/null, a pipe to another program). On a terminal a progress
// bar follows the daemon's side: the bytes of its temporary file, else
// the chunks its fetch has.
func getToFile(ctx context.Context, g *globals, cl *rpcbridge.Client, name, path string) error {
	if g.quiet || !isTerminal() {
		_, err := cl.GetFile(ctx, name, path)
		return err
	}
	info, err := cl.Stat(ctx, name)
	if err != nil {
		return err
	}
	p := newProgress("get "+name, int64(info.Size), g.quiet)
	stop := watchGetFile(g.socket(), p, name, info, path)
	_, err = cl.GetFile(ctx, name, path)
	stop()
	if err == nil {
		p.set(int64(info.Size))
	}
	p.finish()
	return err
}

// watchGetFile sets p from what the daemon has done of a GET_FILE of name
// to path, until the returned function is called.
func watchGetFile(sock string, p *progress, name string, info rpcbridge.Info, path string) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	dest := path
	if real, err := filepath.EvalSymlinks(path); err == nil {
		dest = real
	}
	tempGlob := filepath.Join(filepath.Dir(dest), "."+filepath.Base(dest)+".omst-*")
	go func() {
		defer close(done)
		var st *rpcbridge.Client // a second connection: the first is busy with the get
		defer func() {
			if st != nil {
				st.Close()
			}
		}()
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			n := tempBytes(tempGlob)
			if st == nil {
				st, _ = rpcbridge.Dial(sock)
			}
			if st != nil {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if s, err := st.Status(ctx); err == nil {
					n = max(n, fetchedBytes(s, name, info))
				}
				cancel()
			}
			if n > p.done.Load() {
				p.set(n)
			}
		}
	}()
	return func() { close(quit); <-done }
}

// tempBytes is the size of the largest file matching glob (the daemon's
// temporary file of a get), 0 if none.
func tempBytes(glob string) int64 {
	ms, _ := filepath.Glob(glob)
	var n int64
	for _, m := range ms {
		if fi, err := os.Stat(m); err == nil {
			n = max(n, fi.Size())
		}
	}
	return n
}

// fetchedBytes estimates the bytes of the blob the daemon has so far, from
// its transfer of name (chunks done x chunk size).
func fetchedBytes(s rpcbridge.Status, name string, info rpcbridge.Info) int64 {
	for _, tr := range s.Transfers {
		if tr.Name == name || tr.ID == info.ID {
			return min(int64(tr.Done)*int64(info.ChunkSize), int64(info.Size))
		}
	}
	return 0
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
