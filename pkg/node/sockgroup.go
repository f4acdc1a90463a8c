package node

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// socketGroup is the group Config.SocketGroup names: gid -1 for none.
type socketGroup struct {
	gid  int
	name string // as given (a name or a number)
}

// lookupSocketGroup resolves a group name or numeric GID ("" = none). A
// name is looked up first (a group may have a numeric name); a number that
// is not in the group database is taken as a GID, so that groups the Go
// resolver cannot see (e.g. from LDAP in a static build) can be given by
// number.
func lookupSocketGroup(s string) (socketGroup, error) {
	if s == "" {
		return socketGroup{gid: -1}, nil
	}
	g, err := user.LookupGroup(s)
	if err == nil {
		gid, perr := strconv.Atoi(g.Gid)
		if perr != nil || gid < 0 {
			return socketGroup{}, fmt.Errorf("--socket-group %s: group has GID %q, not a number", s, g.Gid)
		}
		return socketGroup{gid: gid, name: s}, nil
	}
	if n, perr := strconv.ParseUint(s, 10, 32); perr == nil && n != math.MaxUint32 {
		return socketGroup{gid: int(n), name: s}, nil
	}
	var unknown user.UnknownGroupError
	if errors.As(err, &unknown) {
		return socketGroup{}, fmt.Errorf("--socket-group %s: no such group", s)
	}
	return socketGroup{}, fmt.Errorf("--socket-group %s: %w", s, err)
}

// shareHome lets the members of g reach the socket in home: home gets
// group g and mode 0710, search only, so that they can open the socket's
// path but not list the directory. Everything else in home must stay
// private by its own mode: lock and identity.key are 0600, and cache/
// (whose directories inside are 0755) is made 0700 here, before home is
// opened to the group.
func shareHome(home string, g socketGroup) error {
	cache := filepath.Join(home, "cache")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", cache, err)
	}
	if err := os.Chmod(cache, 0o700); err != nil {
		return fmt.Errorf("--socket-group: make %s private: %w", cache, err)
	}
	if err := os.Chown(home, -1, g.gid); err != nil {
		if errors.Is(err, syscall.EPERM) {
			if fi, serr := os.Stat(home); serr == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() != 0 && int(st.Uid) != os.Geteuid() {
					return fmt.Errorf("--socket-group %s: cannot give home %s to the group: it is not owned by the daemon's user: %w", g.name, home, err)
				}
			}
			return fmt.Errorf("--socket-group %s: cannot give home %s to the group (%w): the daemon's user must be a member of group %s", g.name, home, err, g.name)
		}
		return fmt.Errorf("--socket-group %s: give home %s to the group: %w", g.name, home, err)
	}
	if err := os.Chmod(home, 0o710); err != nil {
		return fmt.Errorf("--socket-group %s: chmod 0710 %s: %w", g.name, home, err)
	}
	return nil
}
