package node

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSocketGroupUnknown(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	_, err := Start(context.Background(), Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, NoDHT: true, SocketGroup: "nosuchgroup-omst"})
	if err == nil || !strings.Contains(err.Error(), "--socket-group nosuchgroup-omst: no such group") {
		t.Fatalf("Start with an unknown group: %v", err)
	}
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Fatalf("a failed start created the home: %v", err)
	}
}

func TestSocketGroupLookup(t *testing.T) {
	for _, c := range []struct {
		in   string
		gid  int
		fail string
	}{
		{"", -1, ""},
		{strconv.Itoa(os.Getgid()), os.Getgid(), ""},
		{"4000000000", 4000000000, ""}, // a number not in the database is a GID
		{"4294967295", 0, "no such group"},
		{"-5", 0, "no such group"},
		{"nosuchgroup-omst", 0, "no such group"},
	} {
		g, err := lookupSocketGroup(c.in)
		if c.fail != "" {
			if err == nil || !strings.Contains(err.Error(), c.fail) || !strings.Contains(err.Error(), c.in) {
				t.Errorf("lookupSocketGroup(%q) = %v, %v; want an error with %q naming it", c.in, g, err, c.fail)
			}
			continue
		}
		if err != nil || g.gid != c.gid {
			t.Errorf("lookupSocketGroup(%q) = %v, %v; want gid %d", c.in, g, err, c.gid)
		}
	}
	if g, err := user.LookupGroupId(strconv.Itoa(os.Getgid())); err == nil {
		if sg, err := lookupSocketGroup(g.Name); err != nil || sg.gid != os.Getgid() {
			t.Errorf("lookupSocketGroup(%q) = %v, %v; want gid %d", g.Name, sg, err, os.Getgid())
		}
	}
}

// socketGroupForTest returns a group to open the socket to: as root one
// that is not the process's own, when the database has one, else the
// process's own group.
func socketGroupForTest() (name string, gid int) {
	if os.Geteuid() == 0 {
		for _, n := range []string{"nogroup", "daemon", "users"} {
			if g, err := user.LookupGroup(n); err == nil {
				if id, err := strconv.Atoi(g.Gid); err == nil && id != os.Getgid() {
					return n, id
				}
			}
		}
	}
	return strconv.Itoa(os.Getgid()), os.Getgid()
}

func statOwner(t *testing.T, path string) (os.FileMode, int) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm(), int(fi.Sys().(*syscall.Stat_t).Gid)
}

func TestSocketGroupHome(t *testing.T) {
	name, gid := socketGroupForTest()
	home := filepath.Join(t.TempDir(), "home")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := Start(ctx, Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, NoDHT: true, SocketGroup: name})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if mode, g := statOwner(t, home); mode != 0o710 || g != gid {
		t.Errorf("home: mode %v gid %d, want 0710 gid %d", mode, g, gid)
	}
	if mode, _ := statOwner(t, filepath.Join(home, "cache")); mode != 0o700 {
		t.Errorf("cache: mode %v, want 0700", mode)
	}
	if mode, g := statOwner(t, SocketPath(home)); mode != 0o660 || g != gid {
		t.Errorf("socket: mode %v gid %d, want 0660 gid %d", mode, g, gid)
	}
	if _, err := dial(t, home).Status(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSocketGroupNotMember(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may give files to any group (pkg/rpcbridge's TestSocketGroupOtherUser checks this error as another user)")
	}
	mine := map[int]bool{os.Getgid(): true, os.Getegid(): true}
	if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			mine[g] = true
		}
	}
	other := -1
	for _, g := range []int{0, 1, 65534, 54321} {
		if !mine[g] {
			other = g
			break
		}
	}
	if other < 0 {
		t.Skip("no group found that this user is not a member of")
	}
	home := filepath.Join(t.TempDir(), "home")
	_, err := Start(context.Background(), Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, NoDHT: true, SocketGroup: strconv.Itoa(other)})
	if err == nil || !strings.Contains(err.Error(), "must be a member of group "+strconv.Itoa(other)) {
		t.Fatalf("Start with a group we are not in: %v", err)
	}
	if mode, _ := statOwner(t, home); mode != 0o700 {
		t.Errorf("home after the failed start: mode %v, want 0700 still", mode)
	}
}
