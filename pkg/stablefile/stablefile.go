// Package stablefile reads the input file of a put so that a file that
// changes while it is read never passes for a complete input.
//
// A regular file is read up to the size it had when it was opened, and no
// further. The Reader fails, with an error wrapping ErrChanged that names
// the file, if the file ends before that size ("it shrank from X to Y
// bytes"), if it has more bytes after it ("it grew"), or if its size or
// modification time differ at the end from those at the start (like tar's
// "file changed as we read it"). Only after those checks does Read return
// io.EOF.
//
// Any other file that can be read (a FIFO, a character device such as a
// terminal or /dev/stdin) has no size to check: it is read as a stream, and
// its end of file, reported by the kernel when every writer has closed it,
// is the end of the input. A directory is refused.
package stablefile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// ErrChanged is wrapped by the error of a Reader whose regular file changed
// while it was read.
var ErrChanged = errors.New("file changed while it was read")

// Reader reads one opened file; see the package documentation.
type Reader struct {
	f       *os.File
	path    string
	ctx     context.Context
	stop    func() bool // ends the watch of ctx (streams)
	mode    fs.FileMode
	size    int64     // regular files: the size at open
	mtime   time.Time // regular files: the modification time at open
	off     int64     // file offset: where the next Read starts
	err     error     // sticky: io.EOF after the checks passed, or the failure
	regular bool
}

// Open opens path and records its size and modification time (fstat of the
// opened file). Opening a FIFO waits until a writer opens it too, but no
// longer than ctx: if ctx ends first, Open fails with ctx's cause. While
// a stream is read, ctx ending interrupts a blocked Read where the file
// supports deadlines (FIFOs and pipes opened by path do), which then fails
// with ctx's cause. The caller closes the Reader.
func Open(ctx context.Context, path string) (*Reader, error) {
	f, err := open(ctx, path)
	if err != nil {
		return nil, err
	}
	return New(ctx, f)
}

// New is Open for a file that is already open (such as os.Stdin), read from
// its current offset: a regular file must then keep the size it has now
// and yields the bytes from the offset to that size. Errors name the file
// by f.Name(). The Reader owns f: its Close closes f, and New closes f if
// it fails.
func New(ctx context.Context, f *os.File) (*Reader, error) {
	path := f.Name()
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.IsDir() {
		f.Close()
		return nil, &fs.PathError{Op: "read", Path: path, Err: syscall.EISDIR}
	}
	r := &Reader{f: f, path: path, ctx: ctx, mode: st.Mode(), regular: st.Mode().IsRegular()}
	if r.regular {
		r.size, r.mtime = st.Size(), st.ModTime()
		if r.off, err = f.Seek(0, io.SeekCurrent); err != nil {
			f.Close()
			return nil, err
		}
	} else {
		// Streams are pollable (FIFOs, most devices): a past deadline
		// interrupts a blocked read. Where it is not supported, reads
		// are not interrupted.
		r.stop = context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Unix(1, 0)) })
	}
	return r, nil
}

// open opens path for reading. A FIFO's open blocks until a writer
// appears; if ctx ends first, open releases it by opening the FIFO for
// writing for a moment (the FIFO then reads as empty and is closed).
func open(ctx context.Context, path string) (*os.File, error) {
	if fi, err := os.Stat(path); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 || ctx.Done() == nil {
		return os.Open(path)
	}
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := os.Open(path)
		done <- result{f, err}
	}()
	select {
	case r := <-done:
		return r.f, r.err
	case <-ctx.Done():
	}
	if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		w.Close()
	}
	go func() {
		if r := <-done; r.f != nil {
			r.f.Close()
		}
	}()
	return nil, &fs.PathError{Op: "open", Path: path, Err: context.Cause(ctx)}
}

// Mode returns the file's mode at open.
func (r *Reader) Mode() fs.FileMode { return r.mode }

// Size returns the size of a regular file at open (the Reader yields it
// less the offset New found), and whether the file is regular (false for
// streams: then the size is unknown).
func (r *Reader) Size() (int64, bool) { return r.size, r.regular }

// Regular returns, for a regular file, the file, the offset of its next
// unread byte and how many bytes remain to the size it had at open, for a
// caller that copies them by other means (copy_file_range) and then calls
// Skip; ok is false for a stream. The caller must not close f; it may
// read f from its offset (moving it, as Read does) or at offsets.
func (r *Reader) Regular() (f *os.File, off, n int64, ok bool) {
	if !r.regular || r.err != nil {
		return nil, 0, 0, false
	}
	return r.f, r.off, max(r.size-r.off, 0), true
}

// Skip records that the caller has read the next n bytes of a regular
// file by other means (see Regular) and moves past them, so that the next
// Read goes on after them: at the size at open, it makes the end's checks
// and returns io.EOF only if the file is unchanged. A caller whose copy
// ended early (the file shrank) skips what it got: the next Read then
// reports the change.
func (r *Reader) Skip(n int64) error {
	if !r.regular {
		return fmt.Errorf("skip %s: not a regular file", r.path)
	}
	if n < 0 || n > r.size-r.off {
		return fmt.Errorf("skip %d bytes of %s: %d left", n, r.path, r.size-r.off)
	}
	if _, err := r.f.Seek(r.off+n, io.SeekStart); err != nil {
		return err
	}
	r.off += n
	return nil
}

// Read reads the file. For a regular file it returns io.EOF only once the
// size recorded at open has been read and the file is unchanged (see the
// package documentation); for a stream, at its end of file.
func (r *Reader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if !r.regular {
		n, err := r.f.Read(p)
		r.off += int64(n)
		if err != nil && err != io.EOF {
			if cerr := r.ctx.Err(); cerr != nil {
				err = &fs.PathError{Op: "read", Path: r.path, Err: context.Cause(r.ctx)}
			}
			r.err = err
		}
		return n, err
	}
	if r.off >= r.size {
		r.err = r.finish()
		return 0, r.err
	}
	if int64(len(p)) > r.size-r.off {
		p = p[:r.size-r.off]
	}
	n, err := r.f.Read(p)
	r.off += int64(n)
	switch {
	case err == io.EOF:
		now := r.off
		if st, serr := r.f.Stat(); serr == nil {
			now = st.Size()
		}
		r.err = r.changed("it shrank from %d to %d bytes", r.size, now)
		return n, r.err
	case err != nil:
		r.err = err
		return n, err
	}
	return n, nil
}

// finish checks, after the last byte of a regular file, that the file has
// no more and that its size and modification time are those at open.
func (r *Reader) finish() error {
	var one [1]byte
	n, err := r.f.Read(one[:])
	if n > 0 {
		return r.changed("it grew beyond its %d bytes", r.size)
	}
	if err != nil && err != io.EOF {
		return err
	}
	st, err := r.f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != r.size || !st.ModTime().Equal(r.mtime) {
		return r.changed("size %d -> %d bytes, modified %s -> %s", r.size, st.Size(),
			r.mtime.Format(time.RFC3339Nano), st.ModTime().Format(time.RFC3339Nano))
	}
	return io.EOF
}

func (r *Reader) changed(format string, args ...any) error {
	return &fs.PathError{Op: "read", Path: r.path, Err: fmt.Errorf("%w: "+format, append([]any{ErrChanged}, args...)...)}
}

// Close closes the file.
func (r *Reader) Close() error {
	if r.stop != nil {
		r.stop()
	}
	return r.f.Close()
}
