// Package asuser runs a function with another user's rights, inside a test
// process that runs as root: what the function opens or connects, it does
// as that user would (the kernel's SO_PEERCRED reports that user to a
// daemon it connects to). For tests only.
package asuser

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Nobody is the unprivileged user (and group) tests act as.
const Nobody = 65534

// Available reports whether Run can work here (the process is root).
func Available() bool { return os.Geteuid() == 0 }

// Run runs f on a thread of its own whose effective uid and gid are uid and
// gid, with no supplementary groups, and returns what f returns (a panic in
// f is returned as an error). Only that thread changes: it is never given
// back to the Go runtime (its goroutine ends while locked to it, so the
// thread exits). f must not rely on goroutines it starts keeping its
// rights: they run on other threads.
func Run(uid, gid int, f func() error) (err error) {
	if !Available() {
		return fmt.Errorf("asuser: needs root")
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("as uid %d: panic: %v", uid, p)
			}
		}()
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			done <- fmt.Errorf("setgroups: %w", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
			done <- fmt.Errorf("setresgid: %w", e)
			return
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			done <- fmt.Errorf("setresuid: %w", e)
			return
		}
		done <- f()
	}()
	return <-done
}
