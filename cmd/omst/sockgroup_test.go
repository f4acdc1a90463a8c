package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/node"
)

// TestSocketGroupCLI: --socket-group reaches the node (socket 0660 and home
// 0710 with the group), and an unknown group fails naming it.
func TestSocketGroupCLI(t *testing.T) {
	dir := t.TempDir()
	r := omst(t, 20*time.Second, "daemon", "--home", filepath.Join(dir, "bad"), "--listen", "/ip4/127.0.0.1/tcp/0", "--socket-group", "nosuchgroup-omst")
	if r.code == 0 || !strings.Contains(r.stderr, "--socket-group nosuchgroup-omst: no such group") {
		t.Fatalf("unknown --socket-group: exit %d, stderr %q", r.code, r.stderr)
	}

	gid := os.Getgid()
	d := startDaemon(t, filepath.Join(dir, "home"), "--socket-group", strconv.Itoa(gid))
	for path, want := range map[string]os.FileMode{node.SocketPath(d.home): 0o660, d.home: 0o710} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
			t.Errorf("%s: mode %v gid %d, want %v gid %d", path, fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid, want, gid)
		}
	}
}
