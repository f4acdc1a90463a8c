package node

import (
	"context"
	"fmt"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/cache"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// The rights of local users (docs/security.md, "The local socket"). The
// daemon's own user and root act with the node's full rights. Any other
// user that may reach the socket (a member of --socket-group) reads every
// blob and name, and puts within the node's grid rights, but replaces and
// removes only the names it put here itself, and keeps at most
// Config.UserQuota bytes of puts here.

// userPut returns the options of a put made by the request's caller: its
// uid recorded as the name's local user and, for a caller that is not
// trusted, the rule that it replaces only its own names, and its quota.
func (n *Node) userPut(ctx context.Context, name string) cache.IngestOptions {
	c, ok := rpcbridge.CallerOf(ctx)
	if !ok {
		return cache.IngestOptions{} // a put from inside the daemon
	}
	var opts cache.IngestOptions
	if c.Known {
		opts.User, opts.HasUser = c.UID, true
	}
	if !c.Trusted() {
		// A caller the kernel could not name is a stranger too: it
		// replaces nothing (no name is its own), and has no quota to
		// count against (only new names).
		opts.MayReplace = n.userMay(ctx, name, "replace")
		opts.Quota = n.userQuota()
	}
	return opts
}

// userMay returns the check that lets the request's caller act (op:
// "replace", "remove") on name as it is here: nil (no check) for a trusted
// caller or a call from inside the daemon.
func (n *Node) userMay(ctx context.Context, name, op string) func(uint32, bool) error {
	c, ok := rpcbridge.CallerOf(ctx)
	if !ok || c.Trusted() {
		return nil
	}
	return func(user uint32, has bool) error {
		switch {
		case has && user == c.UID && c.Known:
			return nil
		case has:
			return fmt.Errorf("%w: %s %q: it was put here by uid %d, and %s may %s only names it put here",
				blob.ErrForbidden, op, name, user, c, op)
		default:
			return fmt.Errorf("%w: %s %q: it was not put here by a local user (it came from another node), and %s may %s only names it put here",
				blob.ErrForbidden, op, name, c, op)
		}
	}
}

// userQuota is the bound on one untrusted user's puts (0: none).
func (n *Node) userQuota() uint64 {
	switch q := n.cfg.UserQuota; {
	case q < 0:
		return 0
	case q > 0:
		return uint64(q)
	}
	return uint64(max(n.store.Usage().CapBytes/4, 1))
}
