package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/omst-project/omst/pkg/localfile"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/stablefile"
)

// putFile puts the file at path: opened here, with the user's rights
// (localfile: a link another user planted in /tmp is not followed), and
// read by the daemon through its descriptor, never by path. A regular file
// must not change while it is read. On a terminal a bar follows the
// daemon's reading (the descriptor's offset, which it shares).
func putFile(ctx context.Context, g *globals, cl *rpcbridge.Client, name, path string, opts rpcbridge.PutOptions) (rpcbridge.Info, error) {
	f, err := localfile.OpenRead(ctx, path)
	if err != nil {
		return rpcbridge.Info{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return rpcbridge.Info{}, err
	}
	if g.quiet || !isTerminal() || !st.Mode().IsRegular() {
		info, err := cl.PutFD(ctx, name, f, opts)
		if err != nil {
			return info, rpcbridge.PutFrom(err, name, path)
		}
		return info, nil
	}
	p := newProgress("put "+name, st.Size(), g.quiet)
	stop := watch(func() int64 { n, _ := f.Seek(0, io.SeekCurrent); return n }, p)
	info, err := cl.PutFD(ctx, name, f, opts)
	stop()
	if err == nil {
		p.set(st.Size())
	}
	p.finish()
	if err != nil {
		return info, rpcbridge.PutFrom(err, name, path)
	}
	return info, nil
}

// putStdin puts standard input, read here and streamed (PUT): a
// redirected regular file must not change while it is read, a pipe or
// terminal ends at its end of file, and an interrupt sends ABORT at once.
func putStdin(ctx context.Context, g *globals, cl *rpcbridge.Client, in io.Reader, name string, opts rpcbridge.PutOptions) (rpcbridge.Info, error) {
	if f, ok := in.(*os.File); ok {
		sf, err := stablefile.New(ctx, f)
		if err != nil {
			return rpcbridge.Info{}, err
		}
		defer sf.Close()
		in = sf
	}
	return putStream(ctx, cl, name, in, 0, g.quiet, opts)
}

// watch sets p from done() every 200 ms until the returned function is
// called.
func watch(done func() int64, p *progress) (stop func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			if n := done(); n > p.done.Load() {
				p.set(n)
			}
		}
	}()
	return func() { close(quit); <-finished }
}
