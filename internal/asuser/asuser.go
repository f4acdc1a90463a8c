// Package asuser runs a function with another user's rights, inside a test
// process that runs as root: what the function opens or connects, it does
// as that user would (the kernel's SO_PEERCRED reports that user to a
// daemon it connects to). For tests only.
package asuser

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Nobody is the unprivileged user (and group) tests act as.
const Nobody = 65534

// Available reports whether Run can work here (the process is root).
func Available() bool { return os.Geteuid() == 0 }

// Run runs f on a thread of its own whose effective uid and gid are uid and
// gid, with no supplementary groups, and returns what f returns (a panic in
// f is returned as an error). Only that thread changes (raw system calls:
// Go's own Setuid would change every thread), and it gets its identity back
// before it returns to the Go runtime. Should that fail, the thread is not
// returned at all (its goroutine ends while locked to it, so the thread
// exits). The thread must not simply be left to exit in every case: a
// child started from it with a parent-death signal would get that signal.
// f must not rely on goroutines it starts keeping its rights: they run on
// other threads.
func Run(uid, gid int, f func() error) (err error) {
	if !Available() {
		return fmt.Errorf("asuser: needs root")
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restored := false
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("as uid %d: panic: %v", uid, p)
			}
			if restored {
				runtime.UnlockOSThread()
			}
			// else: still locked, the thread exits with the goroutine
		}()
		groups, err := unix.Getgroups()
		if err != nil {
			done <- fmt.Errorf("getgroups: %w", err)
			return
		}
		origGID := unix.Getegid()
		if err := setIDs(uid, gid, nil); err != nil {
			done <- err
			return
		}
		ferr := f()
		restored = setIDs(0, origGID, groups) == nil
		done <- ferr
	}()
	return <-done
}

// setIDs sets the calling thread's effective gid, supplementary groups and
// effective uid (real and saved ids stay root's, so that it can go back).
func setIDs(uid, gid int, groups []int) error {
	if uid == 0 {
		// Back to root first: only root may set groups.
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), 0, ^uintptr(0)); e != 0 {
			return fmt.Errorf("setresuid: %w", e)
		}
	}
	gs := make([]uint32, len(groups))
	for i, g := range groups {
		gs[i] = uint32(g)
	}
	var p uintptr
	if len(gs) > 0 {
		p = uintptr(unsafe.Pointer(&gs[0]))
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), p, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if uid != 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			return fmt.Errorf("setresuid: %w", e)
		}
	}
	return nil
}
