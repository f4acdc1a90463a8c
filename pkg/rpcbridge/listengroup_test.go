package rpcbridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sockOwner returns the mode bits and group of the file at path.
func sockOwner(t *testing.T, path string) (fs.FileMode, int) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("%s is %v, not a socket", path, fi.Mode())
	}
	return fi.Mode().Perm(), int(fi.Sys().(*syscall.Stat_t).Gid)
}

// serveAt listens at path with ListenGroup(path, gid) and serves m there
// until the test ends.
func serveAt(t *testing.T, m Backend, path string, gid int) {
	t.Helper()
	s := NewServer(m, ServerOptions{})
	l, err := s.ListenGroup(path, gid)
	if err != nil {
		t.Fatalf("ListenGroup(%s, %d): %v", path, gid, err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
}

// otherGroup returns an existing group other than the process's own and
// root's, or -1.
func otherGroup() int {
	for _, name := range []string{"nogroup", "daemon", "users", "nobody", "staff"} {
		g, err := user.LookupGroup(name)
		if err != nil {
			continue
		}
		if gid, err := strconv.Atoi(g.Gid); err == nil && gid != 0 && gid != os.Getgid() {
			return gid
		}
	}
	return -1
}

// notMemberGroup returns a GID the process is not a member of, or -1.
func notMemberGroup() int {
	mine := map[int]bool{os.Getgid(): true, os.Getegid(): true}
	if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			mine[g] = true
		}
	}
	for _, g := range []int{0, 1, 65534, 54321} {
		if !mine[g] {
			return g
		}
	}
	return -1
}

func TestListenGroupMode(t *testing.T) {
	m := newMem()
	dir := t.TempDir()

	// gid < 0 is Listen: 0600
	p0 := filepath.Join(dir, "default.sock")
	serveAt(t, m, p0, -1)
	if mode, _ := sockOwner(t, p0); mode != 0o600 {
		t.Fatalf("ListenGroup(-1): mode %v, want 0600", mode)
	}

	// the process's own group always works
	gid := os.Getgid()
	p1 := filepath.Join(dir, "own.sock")
	serveAt(t, m, p1, gid)
	if mode, g := sockOwner(t, p1); mode != 0o660 || g != gid {
		t.Fatalf("ListenGroup(own gid %d): mode %v gid %d, want 0660 gid %d", gid, mode, g, gid)
	}
	if _, err := dial(t, p1).Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("directory holds %v, want the two sockets only", ents)
	}

	// the umask fallback for long paths sets the group and mode too
	long := filepath.Join(dir, strings.Repeat("d", max(1, 106-len(dir)-1-len("/omst.sock"))))
	if err := os.Mkdir(long, 0o755); err != nil {
		t.Fatal(err)
	}
	lp := filepath.Join(long, "omst.sock")
	if len(lp) > 107 || len(filepath.Join(long, ".s1234567890", "s")) <= maxSockPath {
		t.Logf("temporary directory %s does not fit the fallback test; skipping that part", dir)
	} else {
		serveAt(t, m, lp, gid)
		if mode, g := sockOwner(t, lp); mode != 0o660 || g != gid {
			t.Fatalf("fallback: mode %v gid %d, want 0660 gid %d", mode, g, gid)
		}
		dial(t, lp)
	}

	t.Run("another group", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("giving the socket to a group this user is not in needs root")
		}
		og := otherGroup()
		if og < 0 {
			t.Skip("no group other than our own in the group database (tried nogroup, daemon, users, nobody, staff)")
		}
		p := filepath.Join(dir, "other.sock")
		serveAt(t, m, p, og)
		if mode, g := sockOwner(t, p); mode != 0o660 || g != og {
			t.Fatalf("ListenGroup(%d): mode %v gid %d, want 0660 gid %d", og, mode, g, og)
		}
	})

	t.Run("not a member", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root may give files to any group (TestSocketGroupOtherUser checks this error as another user)")
		}
		ng := notMemberGroup()
		if ng < 0 {
			t.Skip("no group found that this user is not a member of")
		}
		d := t.TempDir()
		p := filepath.Join(d, "omst.sock")
		_, err := NewServer(m, ServerOptions{}).ListenGroup(p, ng)
		checkNotMember(t, err)
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Fatalf("failed ListenGroup left %v", ents)
		}
	})
}

func checkNotMember(t *testing.T, err error) {
	t.Helper()
	if err == nil || !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "must be a member") {
		t.Fatalf("ListenGroup with a group we are not in: %v, want a permission error saying the user must be a member", err)
	}
}

// The client side of TestSocketGroupOtherUser runs in a copy of this test
// binary, as another user, selected by these variables.
const (
	sockChildEnv  = "OMST_RPCBRIDGE_SOCKGROUP_CHILD" // "dial" or "listen"
	sockChildPath = "OMST_RPCBRIDGE_SOCKGROUP_PATH"
	sockChildGID  = "OMST_RPCBRIDGE_SOCKGROUP_GID"
)

// Exit codes of the child (os.Exit(0) is not allowed inside a test).
const (
	childOK     = 20 // connected and talked to the daemon / listened
	childDenied = 21 // permission denied (listen: with the "must be a member" message)
	childOther  = 22 // anything else (printed)
)

// TestSocketGroupChild is no test of its own: it is the child process of
// TestSocketGroupOtherUser (skipped unless started as one).
func TestSocketGroupChild(t *testing.T) {
	mode := os.Getenv(sockChildEnv)
	if mode == "" {
		t.Skip("child process of TestSocketGroupOtherUser only")
	}
	path := os.Getenv(sockChildPath)
	var err error
	switch mode {
	case "dial":
		var c *Client
		if c, err = Dial(path); err == nil {
			_, err = c.Status(context.Background())
			c.Close()
		}
	case "listen":
		gid, _ := strconv.Atoi(os.Getenv(sockChildGID))
		var l net.Listener
		if l, err = NewServer(newMem(), ServerOptions{}).ListenGroup(path, gid); err == nil {
			l.Close()
		} else if errors.Is(err, fs.ErrPermission) && !strings.Contains(err.Error(), "must be a member") {
			fmt.Fprintln(os.Stderr, "error without the membership hint:", err)
			os.Exit(childOther)
		}
	}
	switch {
	case err == nil:
		os.Exit(childOK)
	case errors.Is(err, fs.ErrPermission):
		fmt.Fprintln(os.Stderr, err)
		os.Exit(childDenied)
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(childOther)
}

// TestSocketGroupOtherUser: a process of another user connects to a 0660
// socket of its group, and is refused by a 0600 socket (even in the group)
// and by a 0660 socket of a group it is not in; as that user, giving a
// socket to a group it is not in fails with the membership hint.
func TestSocketGroupOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a client as another user needs root")
	}
	grp := otherGroup()
	if grp < 0 {
		t.Skip("no group other than our own in the group database (tried nogroup, daemon, users, nobody, staff)")
	}
	const childUID, strangerGID = 65534, 54321 // strangerGID: in no test group
	dir, err := os.MkdirTemp("", "rbgroup")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Only the sockets' modes must decide: let everyone reach dir.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			t.Skipf("%s (above the temporary directory) is not searchable by other users; set TMPDIR elsewhere", d)
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	// The child runs a copy of this binary that the other user can execute.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "rpcbridge.test")
	copyFile(t, exe, bin, 0o755)

	run := func(mode, path string, gid uint32, listenGID int) int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "-test.run=^TestSocketGroupChild$")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), sockChildEnv+"="+mode, sockChildPath+"="+path, sockChildGID+"="+strconv.Itoa(listenGID))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: childUID, Gid: gid, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("child %s %s: %v: %s", mode, path, err, out)
		}
		if c := ee.ExitCode(); c != childOK && c != childDenied {
			t.Fatalf("child %s %s: exit %d: %s", mode, path, c, out)
		}
		t.Logf("child %s %s as %d:%d: exit %d %s", mode, path, childUID, gid, ee.ExitCode(), strings.TrimSpace(string(out)))
		return ee.ExitCode()
	}

	m := newMem()
	shared := filepath.Join(dir, "shared.sock")
	serveAt(t, m, shared, grp)
	private := filepath.Join(dir, "private.sock")
	serveAt(t, m, private, -1)

	if c := run("dial", shared, uint32(grp), 0); c != childOK {
		t.Errorf("member of group %d on the 0660 socket: exit %d, want connected", grp, c)
	}
	if c := run("dial", shared, strangerGID, 0); c != childDenied {
		t.Errorf("non-member on the 0660 socket: exit %d, want permission denied", c)
	}
	if c := run("dial", private, uint32(grp), 0); c != childDenied {
		t.Errorf("other user on the 0600 socket: exit %d, want permission denied", c)
	}

	// As that user, ListenGroup to a group it is not in fails clearly.
	own := filepath.Join(dir, "child")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, childUID, strangerGID); err != nil {
		t.Fatal(err)
	}
	if c := run("listen", filepath.Join(own, "omst.sock"), strangerGID, grp); c != childDenied {
		t.Errorf("ListenGroup by a non-member: exit %d, want the membership error", c)
	}
	if c := run("listen", filepath.Join(own, "omst.sock"), strangerGID, strangerGID); c != childOK {
		t.Errorf("ListenGroup to the user's own group: exit %d, want success", c)
	}
	if ents, _ := os.ReadDir(own); len(ents) != 0 {
		t.Errorf("the child's ListenGroup calls left %v", ents)
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
