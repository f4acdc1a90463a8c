package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBulkFlags: bad values of the bulk path's daemon flags are usage
// errors that name the flag, before anything starts.
func TestBulkFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--bulk-conns", "-1"}, "--bulk-conns -1: want 0 (libp2p streams only) to 16"},
		{[]string{"--bulk-conns", "17"}, "--bulk-conns 17"},
		{[]string{"--bulk-listen", "nowhere"}, `--bulk-listen "nowhere": want HOST:PORT (port 0: any) or off`},
	} {
		r := omst(t, 10*time.Second, append([]string{"--home", filepath.Join(dir, "none"), "daemon"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("daemon %v: exit %d, stderr %q; want usage, %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
