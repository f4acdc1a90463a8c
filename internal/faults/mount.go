package faults

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// ErrNeedRoot: mounting a tmpfs needs root (CAP_SYS_ADMIN).
var ErrNeedRoot = errors.New("needs root for a tmpfs")

// MountTmpfs mounts a tmpfs of sizeBytes at dir (created if needed) and
// registers it, so that every path out of the run unmounts it. Without
// root, or when the mount is refused (no CAP_SYS_ADMIN), the error wraps
// ErrNeedRoot.
func MountTmpfs(dir string, sizeBytes int64) error {
	if os.Geteuid() != 0 {
		return ErrNeedRoot
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	opts := fmt.Sprintf("size=%d,mode=0700", sizeBytes)
	if err := syscall.Mount("omst-faults", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("mount tmpfs at %s: %v: %w", dir, err, ErrNeedRoot)
		}
		return fmt.Errorf("mount tmpfs at %s: %w", dir, err)
	}
	reg.mounts = append(reg.mounts, dir)
	return nil
}

// Unmount unmounts a tmpfs MountTmpfs mounted (the processes using it
// must be gone) and forgets it.
func Unmount(dir string) error {
	reg.mu.Lock()
	found := false
	for i, m := range reg.mounts {
		if m == dir {
			reg.mounts = append(reg.mounts[:i], reg.mounts[i+1:]...)
			found = true
			break
		}
	}
	reg.mu.Unlock()
	if !found {
		return nil
	}
	return unmount(dir)
}

// unmount detaches lazily when a plain unmount is refused (a process
// still holding a file there), so nothing stays mounted after the run.
func unmount(dir string) error {
	err := syscall.Unmount(dir, 0)
	if err == nil || errors.Is(err, syscall.EINVAL) {
		return nil
	}
	if err2 := syscall.Unmount(dir, syscall.MNT_DETACH); err2 != nil && !errors.Is(err2, syscall.EINVAL) {
		return fmt.Errorf("unmount %s: %v; lazy unmount: %v", dir, err, err2)
	}
	return nil
}

// mountsUnder returns the registered mounts inside dir.
func mountsUnder(dir string) []string {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	var out []string
	for _, m := range reg.mounts {
		if m == dir || strings.HasPrefix(m, dir+"/") {
			out = append(out, m)
		}
	}
	return out
}
