package rpcbridge

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// maxSockPath is the longest socket path we bind through the private
// directory (sun_path holds 108 bytes on Linux, 104 on the BSDs, with the
// NUL).
const maxSockPath = 103

// Listen creates the unix socket at path with mode 0600 and returns its
// listener (pass it to Serve). Closing the listener removes the socket
// file, if it is still the one Listen created. It is ListenGroup(path, -1).
//
// There is no moment at which anyone else can connect: the socket is bound
// inside a fresh private directory (mode 0700) next to path, chmod'ed to
// 0600 there, then renamed onto path (rename is atomic and keeps the
// mode). Unlike changing the umask, this does not touch process-wide state
// that other goroutines creating files depend on. Only when that temporary
// path would be too long for a socket address does Listen fall back to
// binding in place under umask 0177 (serialised by a mutex, restored
// immediately).
//
// An existing socket file at path is replaced only if nothing answers on it
// (a stale socket left by a dead daemon); if a daemon answers, Listen fails
// with an error saying the socket is in use. A non-socket file at path is
// never removed.
func (s *Server) Listen(path string) (net.Listener, error) {
	return s.ListenGroup(path, -1)
}

// ListenGroup is Listen giving the socket to group gid with mode 0660, so
// that the group's members (other users, e.g. jobs on a cluster) can
// connect; gid < 0 is Listen (mode 0600, the process's group). The group
// and the mode are set before the socket appears at path (chown, then
// chmod, inside the private directory, or in place while the socket is
// still 0600 in the fallback), so there is no moment at which the socket
// is open to anyone else. The directories above path must let the group
// reach it (search permission); ListenGroup does not change them. If the
// process may not give files to gid (EPERM: it is neither a member of the
// group nor privileged), the error says so and wraps fs.ErrPermission.
func (s *Server) ListenGroup(path string, gid int) (net.Listener, error) {
	if err := checkStale(path); err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	tmpDir, err := os.MkdirTemp(dir, ".s")
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	if len(tmp) > maxSockPath {
		return listenUmask(path, gid)
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	ul.SetUnlinkOnClose(false)
	if err := setSocketPerm(tmp, gid); err != nil {
		ul.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ul.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return newListener(ul, path)
}

var umaskMu sync.Mutex

// setSocketPerm gives the socket file at path its final group and mode:
// 0600, or group gid and 0660 if gid >= 0 (the group first, so the socket
// is never group-accessible with the wrong group).
func setSocketPerm(path string, gid int) error {
	mode := os.FileMode(0o600)
	if gid >= 0 {
		if err := os.Chown(path, -1, gid); err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the temporary path means nothing to the reader
			}
			if errors.Is(err, syscall.EPERM) {
				return fmt.Errorf("give the socket to group %d: %w (the daemon's user must be a member of that group)", gid, err)
			}
			return fmt.Errorf("give the socket to group %d: %w", gid, err)
		}
		mode = 0o660
	}
	return os.Chmod(path, mode)
}

func listenUmask(path string, gid int) (net.Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	umaskMu.Lock()
	old := syscall.Umask(0o177)
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	umaskMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	ul.SetUnlinkOnClose(false)
	if gid >= 0 {
		// Bound 0600 in place; only now widen it to the group.
		if err := setSocketPerm(path, gid); err != nil {
			ul.Close()
			os.Remove(path)
			return nil, fmt.Errorf("listen %s: %w", path, err)
		}
	}
	return newListener(ul, path)
}

// checkStale returns nil if path does not exist or is a socket nobody
// answers on.
func checkStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("listen %s: file exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("listen %s: socket in use (a daemon answers on it)", path)
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
		return nil // stale
	}
	return fmt.Errorf("listen %s: socket in use? %w", path, err)
}

// listener is a unix listener whose socket file lives at path.
type listener struct {
	*net.UnixListener
	path string
	fi   fs.FileInfo
	once sync.Once
}

func newListener(ul *net.UnixListener, path string) (*listener, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		ul.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return &listener{UnixListener: ul, path: path, fi: fi}, nil
}

func (l *listener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

// Close stops listening and removes the socket file unless another one
// replaced it.
func (l *listener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.fi) {
			os.Remove(l.path)
		}
	})
	return err
}
