package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/omst-project/omst/pkg/localfile"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/stablefile"
	"golang.org/x/term"
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

// errEmptyStdin is a put with FILE omitted whose standard input was
// empty: refused, since it is nearly always `omst put FILE` with the NAME
// forgotten (a script's stdin is often /dev/null). `omst put NAME -`
// stores an empty standard input.
var errEmptyStdin = errors.New("standard input is empty and no FILE was given: nothing stored")

// putStdin puts standard input, read here and streamed (PUT): a
// redirected regular file must not change while it is read, a pipe or
// terminal ends at its end of file, and an interrupt sends ABORT at once.
// implicit says FILE was omitted (not "-"): then a terminal on stdin gets
// a note on errw that standard input is read, and an empty standard input
// is refused with errEmptyStdin (a usage error) before anything is sent.
func putStdin(ctx context.Context, g *globals, cl *rpcbridge.Client, in io.Reader, errw io.Writer, name string, implicit bool, opts rpcbridge.PutOptions) (rpcbridge.Info, error) {
	if f, ok := in.(*os.File); ok {
		if implicit && term.IsTerminal(int(f.Fd())) {
			fmt.Fprintf(errw, "omst: put %q: reading standard input until end of file (Ctrl-D); to put a file: omst put NAME FILE\n", name)
		}
		sf, err := stablefile.New(ctx, f)
		if err != nil {
			return rpcbridge.Info{}, err
		}
		defer sf.Close()
		in = sf
	}
	if implicit {
		br := bufio.NewReader(in)
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			return rpcbridge.Info{}, usageError{fmt.Errorf("put %q: %w%s (to put a file: omst put NAME FILE; to store an empty blob: omst put NAME - </dev/null)",
				name, errEmptyStdin, fileHint(name))}
		}
		in = br
	}
	return putStream(ctx, cl, name, in, 0, g.quiet, opts)
}

// fileHint is a note that name is also a path here, or "".
func fileHint(name string) string {
	if _, err := os.Stat(name); err == nil {
		return fmt.Sprintf("; %s is a file here: the NAME comes first", name)
	}
	return ""
}

// nameFirst is put's error for an invalid NAME (err, from
// blob.ValidateName): when NAME looks like a path (it exists, or starts
// with ./, ../ or /, or ends with /), it says that NAME comes first.
func nameFirst(err error, name string) error {
	_, statErr := os.Stat(name)
	if statErr != nil && !strings.HasPrefix(name, "./") && !strings.HasPrefix(name, "../") &&
		!strings.HasPrefix(name, "/") && !strings.HasSuffix(name, "/") {
		return err
	}
	return fmt.Errorf("%w (the NAME comes first, then the file: omst put NAME %s)", err, name)
}
