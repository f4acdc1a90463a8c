package faults

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNoLoopFS: this machine cannot give a case a filesystem of its own to
// freeze (not root, no mkfs.ext4 or mount, no loop device, or the mount
// refused).
var ErrNoLoopFS = errors.New("no loop-mounted ext4 filesystem here")

// MountLoopExt4 makes an ext4 filesystem of sizeBytes in a sparse image
// file img (created) and mounts it at dir (created) through a loop device
// (`mount -o loop`, which frees the device at unmount), registered like
// MountTmpfs's, so every path out of the run thaws and unmounts it. A
// machine that cannot (see ErrNoLoopFS) gets an error wrapping
// ErrNoLoopFS.
func MountLoopExt4(img, dir string, sizeBytes int64) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("needs root to mount: %w", ErrNoLoopFS)
	}
	for _, tool := range []string{"mkfs.ext4", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s: %v: %w", tool, err, ErrNoLoopFS)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.Create(img)
	if err != nil {
		return err
	}
	err = f.Truncate(sizeBytes)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4 %s: %v: %s", img, err, strings.TrimSpace(string(out)))
	}
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if out, err := exec.Command("mount", "-o", "loop,nosuid,nodev", img, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mount -o loop %s %s: %v: %s: %w", img, dir, err, strings.TrimSpace(string(out)), ErrNoLoopFS)
	}
	reg.mounts = append(reg.mounts, dir)
	return nil
}

// FreezeFS freezes the filesystem mounted at dir (ioctl FIFREEZE, what
// fsfreeze(8) does): from now on every write to it (write(2), a file's
// creation, rename, fsync, a store through a shared mapping) blocks in
// the kernel, uninterruptibly, until ThawFS; reads go on. It is a real
// stalled disk as the processes writing there see it. So that a harness
// killed hard (SIGKILL, no cleanup) cannot leave it frozen, and the
// daemons writing there unkillable, it also starts a detached watchdog
// (its own session, outliving the harness) that thaws dir after maxFor;
// Cleanup thaws every mount first as well. The thaw it returns thaws dir
// and ends the watchdog.
func FreezeFS(dir string, maxFor time.Duration) (thaw func() error, err error) {
	secs := strconv.Itoa(int(maxFor/time.Second) + 1)
	dog := exec.Command("sh", "-c", `sleep "$1"; exec fsfreeze -u "$2" 2>/dev/null`, "omst-faults-thaw", secs, dir)
	dog.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if _, err := exec.LookPath("fsfreeze"); err != nil {
		return nil, fmt.Errorf("fsfreeze (the watchdog's thaw): %w", err)
	}
	if err := dog.Start(); err != nil {
		return nil, fmt.Errorf("start the thaw watchdog: %w", err)
	}
	go dog.Wait()
	stopDog := func() { syscall.Kill(-dog.Process.Pid, syscall.SIGKILL) }
	if err := ioctlDir(dir, ioctlFIFREEZE); err != nil {
		stopDog()
		return nil, err
	}
	return func() error {
		err := ThawFS(dir)
		stopDog()
		return err
	}, nil
}

// The freeze ioctls of linux/fs.h (golang.org/x/sys/unix has not got
// them): _IOWR('X', 119, int) and _IOWR('X', 120, int).
const (
	ioctlFIFREEZE = 0xc0045877
	ioctlFITHAW   = 0xc0045878
)

// ThawFS thaws a filesystem FreezeFS froze.
func ThawFS(dir string) error { return ioctlDir(dir, ioctlFITHAW) }

// thaw thaws dir if it is frozen (an error means it was not, or is no
// filesystem that freezes: nothing to undo).
func thaw(dir string) { ThawFS(dir) }

func ioctlDir(dir string, req uint) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), req, 0); err != nil {
		return fmt.Errorf("ioctl %#x on %s: %w", req, dir, err)
	}
	return nil
}

// blockedThreads counts the threads of process pid in uninterruptible
// sleep (state D in /proc/PID/task/TID/stat): on a frozen filesystem,
// those blocked writing to it.
func blockedThreads(pid int) int {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	n := 0
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
		if err != nil {
			continue
		}
		// pid (comm) S ...: comm may hold spaces and parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'D' {
			n++
		}
	}
	return n
}
