package localfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrUnsafeLink is wrapped by the error of a call whose path goes through a
// symbolic link that the caller may not follow: a link in a sticky,
// world-writable directory, owned neither by the caller nor by the
// directory's owner (the rule of Linux's fs.protected_symlinks).
var ErrUnsafeLink = errors.New("symbolic link not followed: it is in a sticky world-writable directory and owned by another user")

// ErrUnsafeFIFO is wrapped by the error of Create for a FIFO that the
// caller would write into while another user owns it, in a sticky
// world-writable directory (the rule of Linux's fs.protected_fifos).
var ErrUnsafeFIFO = errors.New("FIFO not written: it is in a sticky world-writable directory and owned by another user")

// ErrChangedPath is wrapped by the error of a call during which a directory
// of the path was replaced (a link appeared where a directory was resolved).
var ErrChangedPath = errors.New("the path changed while it was opened")

// maxLinks bounds the links one resolution follows (Linux's limit).
const maxLinks = 40

// MayFollow reports whether a process of effective uid follower may follow
// the link whose lstat is link, found in the directory whose stat is dir:
// true unless the directory is sticky and world-writable and neither the
// follower nor the directory's owner owns the link.
func MayFollow(follower uint32, link, dir *unix.Stat_t) bool {
	sticky := dir.Mode&unix.S_ISVTX != 0
	worldWritable := dir.Mode&0o002 != 0
	if !sticky || !worldWritable {
		return true
	}
	return link.Uid == follower || link.Uid == dir.Uid
}

// Resolve returns the absolute path that path names, without symbolic
// links: each link on the way is followed if MayFollow allows it for this
// process's effective uid, and the call fails with an error wrapping
// ErrUnsafeLink otherwise. A relative path is taken against the working
// directory. Every component but the last must exist; the last need not
// (the result then names where it would be created, after following a
// dangling link if the last component is one).
//
// A link in /proc (a "magic" link such as /dev/stdin -> /proc/self/fd/0,
// whose target is an open file, not a path) is not resolved: Resolve
// returns the path up to and through it, and ErrMagicLink, for the caller to
// let the kernel open it (its own rules apply there).
func Resolve(path string) (string, error) {
	return resolve(path, uint32(os.Geteuid()))
}

// ErrMagicLink is returned by Resolve with a path that goes through a link
// in /proc, which only the kernel can follow.
var ErrMagicLink = errors.New("the path goes through a link in /proc")

// procSuperMagic is procfs's file system type (statfs).
const procSuperMagic = 0x9fa0

func resolve(path string, uid uint32) (string, error) {
	if path == "" {
		return "", &fs.PathError{Op: "resolve", Path: path, Err: unix.ENOENT}
	}
	if !filepath.IsAbs(path) {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("resolve %s: %w", path, err)
		}
		path = wd + "/" + path
	}
	rest := strings.Split(path, "/")
	cur := "/"
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // cur has no links: ".." is lexical
			continue
		}
		next := filepath.Join(cur, c)
		var st unix.Stat_t
		if err := unix.Lstat(next, &st); err != nil {
			if err == unix.ENOENT && last(rest) {
				return next, nil
			}
			return "", &fs.PathError{Op: "resolve", Path: path, Err: fmt.Errorf("%s: %w", next, err)}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			if !last(rest) && st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return "", &fs.PathError{Op: "resolve", Path: path, Err: fmt.Errorf("%s: %w", next, unix.ENOTDIR)}
			}
			cur = next
			continue
		}
		if links++; links > maxLinks {
			return "", &fs.PathError{Op: "resolve", Path: path, Err: unix.ELOOP}
		}
		var sfs unix.Statfs_t
		if unix.Statfs(cur, &sfs) == nil && sfs.Type == procSuperMagic {
			return filepath.Join(append([]string{next}, rest...)...), ErrMagicLink
		}
		var dir unix.Stat_t
		if err := unix.Stat(cur, &dir); err != nil {
			return "", &fs.PathError{Op: "resolve", Path: path, Err: fmt.Errorf("%s: %w", cur, err)}
		}
		if !MayFollow(uid, &st, &dir) {
			return "", &fs.PathError{Op: "resolve", Path: path,
				Err: fmt.Errorf("%s (owner uid %d, in %s of uid %d): %w", next, st.Uid, cur, dir.Uid, ErrUnsafeLink)}
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", &fs.PathError{Op: "resolve", Path: path, Err: err}
		}
		if strings.HasPrefix(target, "/") {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return cur, nil
}

// last reports whether rest holds no more components.
func last(rest []string) bool {
	for _, c := range rest {
		if c != "" && c != "." {
			return false
		}
	}
	return true
}

// openDir opens the directory dir (a path without links, from resolve) for
// use with the *at calls, and checks that it is the directory that was
// resolved.
func openDir(dir string) (int, error) {
	fd, err := unix.Open(dir, oPath|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	if err := checkFD(fd, dir); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// checkFD checks, where /proc shows it, that the open fd is the file at
// path (no link was swapped into the path since it was resolved).
func checkFD(fd int, path string) error {
	got, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return nil // no /proc: nothing to check against
	}
	if got != path {
		return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w: it is now %s", ErrChangedPath, got)}
	}
	return nil
}
