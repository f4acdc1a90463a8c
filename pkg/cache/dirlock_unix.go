//go:build unix

package cache

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// withDirLock runs f holding the same lock Badger takes on dir (flock, exclusive,
// not waiting), so that f never reads an index another process is writing;
// a held lock is an error wrapping ErrLocked. A missing dir runs f unlocked.
func withDirLock(dir string, f func() error) error {
	d, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return f()
	}
	if err != nil {
		return err
	}
	defer d.Close()
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("%w (index %s is locked: is another omst daemon running with this home?)", ErrLocked, dir)
		}
		return fmt.Errorf("lock %s: %w", dir, err)
	}
	defer syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
	return f()
}
