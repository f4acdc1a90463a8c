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

// TestDefaultBulkListen: without --bulk-listen the bulk listener takes the
// one IP every TCP --listen names, and every interface otherwise.
func TestDefaultBulkListen(t *testing.T) {
	for _, c := range []struct {
		listen []string
		want   string
	}{
		{nil, "0.0.0.0:0"},
		{[]string{"/ip4/127.0.0.1/tcp/0"}, "127.0.0.1:0"},
		{[]string{"/ip4/10.1.2.3/tcp/4040", "/ip4/10.1.2.3/udp/4040/quic-v1"}, "10.1.2.3:0"},
		{[]string{"/ip6/::1/tcp/4040"}, "[::1]:0"},
		{[]string{"/ip4/10.1.2.3/tcp/4040", "/ip4/10.1.2.4/tcp/4040"}, "0.0.0.0:0"},
		{[]string{"/ip4/0.0.0.0/tcp/4040"}, "0.0.0.0:0"},
		{[]string{"/ip4/0.0.0.0/udp/4040/quic-v1"}, "0.0.0.0:0"},
		{[]string{"not a multiaddr"}, "0.0.0.0:0"},
	} {
		if got := defaultBulkListen(c.listen); got != c.want {
			t.Errorf("defaultBulkListen(%q) = %q, want %q", c.listen, got, c.want)
		}
	}
}
