//go:build !linux

package rpcbridge

import (
	"errors"
	"net"
)

// peerCred is not implemented here: callers are strangers (they pass
// descriptors; nothing is opened for them).
func peerCred(uc *net.UnixConn) (Caller, error) {
	return Caller{}, errors.New("peer credentials are not supported on this system")
}
