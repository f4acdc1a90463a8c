package rpcbridge

import (
	"context"
	"fmt"
	"net"
	"os"
)

// Caller is the process at the other end of a local API connection, as the
// kernel saw it when the connection was made (SO_PEERCRED on Linux). The
// server puts it in the context of every request it passes to the Backend
// (CallerOf).
type Caller struct {
	UID, GID uint32
	PID      int32
	// Known: the kernel told who the caller is. Where it cannot (not a
	// unix socket; a system without peer credentials), the caller is
	// treated as a stranger: not Daemon.
	Known bool
	// Daemon: the caller runs as the daemon's own user. Only such a
	// caller may have the daemon open paths (PUT_FILE, GET_FILE); every
	// other passes descriptors.
	Daemon bool
	// Root: the caller runs as root.
	Root bool
}

// Trusted reports whether the caller acts with the node's full local
// rights: it is the daemon's user or root. Others may only read, and put,
// replace and remove names of their own (docs/security.md).
func (c Caller) Trusted() bool { return c.Daemon || c.Root }

func (c Caller) String() string {
	if !c.Known {
		return "an unknown caller"
	}
	return fmt.Sprintf("uid %d (pid %d)", c.UID, c.PID)
}

type callerKey struct{}

// WithCaller returns ctx carrying c (the server does this for every
// request; tests of a Backend may too).
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerOf returns the caller a request's context carries; ok is false for
// a context that did not come from the server (a call inside the daemon).
func CallerOf(ctx context.Context) (c Caller, ok bool) {
	c, ok = ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// callerOf asks the kernel who is at the other end of c; daemonUID is the
// server's effective uid.
func callerOf(c net.Conn, daemonUID uint32) Caller {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Caller{}
	}
	cr, err := peerCred(uc)
	if err != nil {
		return Caller{}
	}
	cr.Known = true
	cr.Daemon = cr.UID == daemonUID
	cr.Root = cr.UID == 0
	return cr
}

// daemonUID is this process's effective uid.
var daemonUID = uint32(os.Geteuid())
