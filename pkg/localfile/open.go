package localfile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// OpenRead opens the file path names for reading, with this process's
// rights, following links as Resolve does. A directory is refused (an error
// wrapping syscall.EISDIR). Opening a FIFO waits until a writer opens it,
// but no longer than ctx (see the package documentation). The file is
// named by path in its errors.
func OpenRead(ctx context.Context, path string) (*os.File, error) {
	real, err := Resolve(path)
	if err == ErrMagicLink {
		return openMagic(ctx, path, real, unix.O_RDONLY)
	}
	if err != nil {
		return nil, err
	}
	dfd, err := openDir(filepath.Dir(real))
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	base := filepath.Base(real)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil, &fs.PathError{Op: "open", Path: path, Err: unix.EISDIR}
	}
	fd, err := openAt(ctx, dfd, base, unix.O_RDONLY, st.Mode&unix.S_IFMT == unix.S_IFIFO)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return newFile(fd, path, st.Mode&unix.S_IFMT != unix.S_IFREG), nil
}

// newFile returns an *os.File for fd. A stream (not a regular file) is
// made non-blocking first, so that the runtime's poller serves it where it
// can: its reads and writes then honour deadlines, and a cancelled request
// never leaves a thread blocked in one.
func newFile(fd int, name string, stream bool) *os.File {
	if stream {
		unix.SetNonblock(fd, true)
	}
	return os.NewFile(uintptr(fd), name)
}

// openMagic opens real, a path through a link in /proc (Resolve's
// ErrMagicLink), as the kernel resolves it; a directory is refused and a
// stream made non-blocking (newFile). A FIFO's open is bounded by ctx.
func openMagic(ctx context.Context, path, real string, flags int) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil, &fs.PathError{Op: "open", Path: path, Err: unix.EISDIR}
	}
	dir, base := filepath.Split(real)
	dfd, err := unix.Open(dir, oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(dfd)
	// Without O_NOFOLLOW: the last component is the magic link itself.
	fd, err := openAtFollow(ctx, dfd, base, flags, st.Mode&unix.S_IFMT == unix.S_IFIFO)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return newFile(fd, path, st.Mode&unix.S_IFMT != unix.S_IFREG), nil
}

// openAt opens name in the directory dfd with flags (O_RDONLY or
// O_WRONLY), never following a link. For a FIFO (fifo true) the open,
// which blocks until the other end is opened, runs in a goroutine; if ctx
// ends first, the FIFO's other end is opened for a moment (non-blocking) to
// release it, and the call fails with ctx's cause.
func openAt(ctx context.Context, dfd int, name string, flags int, fifo bool) (int, error) {
	return openAtFollow(ctx, dfd, name, flags|unix.O_NOFOLLOW, fifo)
}

// openAtFollow is openAt without adding O_NOFOLLOW.
func openAtFollow(ctx context.Context, dfd int, name string, flags int, fifo bool) (int, error) {
	flags |= unix.O_CLOEXEC | unix.O_NOCTTY
	if !fifo || ctx.Done() == nil {
		return unix.Openat(dfd, name, flags, 0)
	}
	// The goroutine needs its own descriptor of the directory: the
	// caller's is closed when this returns.
	own, err := unix.Dup(dfd)
	if err != nil {
		return -1, err
	}
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		fd, err := unix.Openat(own, name, flags, 0)
		done <- result{fd, err}
	}()
	select {
	case r := <-done:
		unix.Close(own)
		return r.fd, r.err
	case <-ctx.Done():
	}
	other := unix.O_WRONLY
	if flags&unix.O_ACCMODE == unix.O_WRONLY {
		other = unix.O_RDONLY
	}
	// Release the blocked open by opening the other end for a moment,
	// again every 10 ms until the open returns (at most 2 s): the wait may
	// have ended before the goroutine's open began, and then one release
	// is missed (a writer's end opened without a reader fails with ENXIO,
	// a reader's comes and goes unseen) and the open would block for good.
	release := func() {
		if fd, err := unix.Openat(own, name, other|unix.O_NONBLOCK|flags&unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
	}
	// Released, the open returns at once: close its end before
	// returning, so that the caller's next open of the FIFO never meets
	// it. Only an open still blocked (every release failed) is left to a
	// goroutine.
	reap := func(r result) {
		if r.err == nil {
			unix.Close(r.fd)
		}
		unix.Close(own)
	}
	release()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(2 * time.Second)
	for {
		select {
		case r := <-done:
			reap(r)
			return -1, context.Cause(ctx)
		case <-tick.C:
			release()
			continue
		case <-limit:
			go func() { reap(<-done) }()
		}
		break
	}
	return -1, context.Cause(ctx)
}

// Dest is the destination of a get: write the blob into File, then Commit
// (or Abort). See Create.
type Dest struct {
	// File receives the blob's bytes: a new temporary file (Regular true),
	// or the existing non-regular file itself (a FIFO, a device), opened
	// for writing and non-blocking (its writes honour deadlines where the
	// runtime can poll it).
	File *os.File
	// Regular: File is a temporary file that Commit renames onto Path.
	Regular bool
	// Path is the destination, resolved: links followed, absolute.
	Path string
	dfd  int    // the destination's directory (Regular only)
	temp string // the temporary file's name in it
	done bool
}

// Create prepares path as the destination of a get, with this process's
// rights: a regular file, or a path where nothing exists yet, gets a new
// temporary file beside it, renamed onto it by Commit, with the
// permission bits of the file it replaces (as `cp` and `curl -o` leave
// them: a private file stays private), its group where this process is in
// it (else the group's bits cut to the others', KeptMode), its owner where
// this process is root, or, new, mode 0644 less the umask; a link is
// followed as Resolve does, and its target is replaced,
// not the link. Anything else that exists is opened for writing in place
// (a FIFO waits for a reader, no longer than ctx). A directory is refused
// (an error wrapping syscall.EISDIR). Errors name path.
func Create(ctx context.Context, path string) (*Dest, error) {
	real, err := Resolve(path)
	if err == ErrMagicLink {
		// /dev/stdout and the like: the open file behind the link,
		// written in place.
		f, err := openMagic(ctx, path, real, unix.O_WRONLY)
		if err != nil {
			return nil, err
		}
		return &Dest{File: f, Path: real, dfd: -1}, nil
	}
	if err != nil {
		return nil, err
	}
	dfd, err := openDir(filepath.Dir(real))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	base := filepath.Base(real)
	var st unix.Stat_t
	err = unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
		unix.Close(dfd)
		return nil, &fs.PathError{Op: "create", Path: path, Err: unix.EISDIR}
	case err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG:
		// A FIFO, a device, a socket: written in place. A FIFO of
		// another user in a sticky world-writable directory is not
		// (the rule of fs.protected_fifos: it may be a trap).
		fifo := st.Mode&unix.S_IFMT == unix.S_IFIFO
		if fifo {
			var dir unix.Stat_t
			if err := unix.Fstat(dfd, &dir); err != nil || !MayFollow(uint32(os.Geteuid()), &st, &dir) {
				unix.Close(dfd)
				return nil, &fs.PathError{Op: "open", Path: path,
					Err: fmt.Errorf("FIFO of uid %d in a directory of uid %d: %w", st.Uid, dir.Uid, ErrUnsafeFIFO)}
			}
		}
		fd, err := openAt(ctx, dfd, base, unix.O_WRONLY, fifo)
		unix.Close(dfd)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return &Dest{File: newFile(fd, path, true), Path: real, dfd: -1}, nil
	case err != nil && !errors.Is(err, unix.ENOENT):
		unix.Close(dfd)
		return nil, &fs.PathError{Op: "create", Path: path, Err: err}
	}
	mode, keep := uint32(0o644), err == nil
	if keep {
		mode = st.Mode & 0o777
	}
	for range 10 {
		temp := tempName(base)
		fd, err := unix.Openat(dfd, temp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err == nil && keep {
			// Created with the umask, so never more open than the file
			// it replaces; now its owner and group where this process
			// may set them, and its permission bits (KeptMode).
			var now unix.Stat_t
			if err = unix.Fstat(fd, &now); err == nil {
				gid := now.Gid
				if st.Uid != now.Uid && os.Geteuid() == 0 {
					unix.Fchown(fd, int(st.Uid), -1)
				}
				if st.Gid != gid && unix.Fchown(fd, -1, int(st.Gid)) == nil {
					gid = st.Gid
				}
				err = unix.Fchmod(fd, KeptMode(st.Mode, st.Gid == gid))
			}
			if err != nil {
				unix.Close(fd)
				unix.Unlinkat(dfd, temp, 0)
			}
		}
		if err != nil {
			unix.Close(dfd)
			// The temporary file is an internal: the error names the
			// destination.
			return nil, &fs.PathError{Op: "create", Path: path, Err: err}
		}
		return &Dest{File: os.NewFile(uintptr(fd), path), Regular: true, Path: real, dfd: dfd, temp: temp}, nil
	}
	unix.Close(dfd)
	return nil, &fs.PathError{Op: "create", Path: path, Err: unix.EEXIST}
}

// KeptMode returns the permission bits of a file that replaces one of
// mode old: old's bits (not its set-id or sticky bits). Where the new file
// could not be given the old one's group (sameGroup false: this process is
// not in it), the group's bits are cut to the others' (the users of the new
// group were others of the old file, and get no more than they had). The
// owner's bits stay as they were, for the old owner or, where only root
// could give the new file to it, this process.
func KeptMode(old uint32, sameGroup bool) uint32 {
	m := old & 0o777
	if !sameGroup {
		m = m&^0o070 | m&(m&0o007<<3)
	}
	return m
}

// tempName returns a new name for the temporary file of a get of base:
// hidden, and saying whose it is (.NAME.omst-RANDOM).
func tempName(base string) string {
	var b [6]byte
	rand.Read(b[:])
	if len(base) > 200 {
		base = base[:200]
	}
	return "." + base + ".omst-" + hex.EncodeToString(b[:])
}

// Commit makes the bytes written to File the destination's: for a
// temporary file, it closes it and renames it onto the destination
// (atomically replacing what was there); else it closes File. On error the
// temporary file is removed. Commit and Abort may each be called more than
// once; only the first call of either acts.
func (d *Dest) Commit() error {
	if d.done {
		return nil
	}
	d.done = true
	if !d.Regular {
		return d.File.Close()
	}
	defer unix.Close(d.dfd)
	if err := d.File.Close(); err != nil {
		unix.Unlinkat(d.dfd, d.temp, 0)
		return fmt.Errorf("close: %w", unwrapPath(err))
	}
	if err := unix.Renameat(d.dfd, d.temp, d.dfd, filepath.Base(d.Path)); err != nil {
		unix.Unlinkat(d.dfd, d.temp, 0)
		return fmt.Errorf("rename into place: %w", err)
	}
	return nil
}

// CommitNew is Commit that never replaces: a temporary file is renamed
// onto the destination only if nothing is there (renameat2
// RENAME_NOREPLACE), else it is removed and the error wraps fs.ErrExist. A
// FIFO or device destination (written in place) is closed, as by Commit.
func (d *Dest) CommitNew() error {
	if d.done {
		return nil
	}
	if !d.Regular {
		return d.Commit()
	}
	d.done = true
	defer unix.Close(d.dfd)
	if err := d.File.Close(); err != nil {
		unix.Unlinkat(d.dfd, d.temp, 0)
		return fmt.Errorf("close: %w", unwrapPath(err))
	}
	if err := renameNoReplace(d.dfd, d.temp, filepath.Base(d.Path)); err != nil {
		unix.Unlinkat(d.dfd, d.temp, 0)
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("%s exists, not replaced: %w", d.Path, fs.ErrExist)
		}
		return fmt.Errorf("rename into place: %w", err)
	}
	return nil
}

// Abort gives up: it closes File and removes the temporary file, leaving
// the destination as it was (a FIFO or device keeps what was written).
func (d *Dest) Abort() {
	if d.done {
		return
	}
	d.done = true
	d.File.Close()
	if d.Regular {
		unix.Unlinkat(d.dfd, d.temp, 0)
		unix.Close(d.dfd)
	}
}

// unwrapPath drops the path of a *fs.PathError (the temporary file's name
// is an internal), keeping its cause.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
