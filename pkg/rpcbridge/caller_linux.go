package rpcbridge

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerCred returns the credentials of the process that connected uc
// (SO_PEERCRED: taken by the kernel at connect).
func peerCred(uc *net.UnixConn) (Caller, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return Caller{}, err
	}
	var cr *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cr, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Caller{}, err
	}
	if serr != nil {
		return Caller{}, serr
	}
	return Caller{UID: cr.Uid, GID: cr.Gid, PID: cr.Pid}, nil
}
