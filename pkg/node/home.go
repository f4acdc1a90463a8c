package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultHome returns the home directory used when none is given:
// $OMST_HOME, else ~/.omst.
func DefaultHome() string {
	if h := os.Getenv("OMST_HOME"); h != "" {
		return h
	}
	if d, err := os.UserHomeDir(); err == nil {
		return filepath.Join(d, ".omst")
	}
	return ".omst"
}

// SocketPath returns the local API socket of the daemon with this home.
func SocketPath(home string) string { return filepath.Join(home, "omst.sock") }

// homeLock is an exclusive flock on HOME/lock, held while a daemon runs.
type homeLock struct{ f *os.File }

// ErrHomeInUse is returned when another daemon holds the home directory.
var ErrHomeInUse = errors.New("home directory in use by another omst daemon")

// lockHome takes the home lock or fails, naming the pid of the holder.
func lockHome(home string) (*homeLock, error) {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, fmt.Errorf("create home %s: %w", home, err)
	}
	path := filepath.Join(home, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid := strings.TrimSpace(string(b))
			if _, perr := strconv.Atoi(pid); perr != nil {
				pid = "unknown"
			}
			return nil, fmt.Errorf("%w: %s (pid %s); stop it or use another --home", ErrHomeInUse, home, pid)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &homeLock{f: f}, nil
}

func (l *homeLock) release() {
	if l == nil || l.f == nil {
		return
	}
	l.f.Truncate(0)
	syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
}
