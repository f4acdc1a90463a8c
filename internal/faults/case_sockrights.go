package faults

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/omst-project/omst/internal/asuser"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// caseSocketRights (root only): a daemon run as root opens its socket to a
// group (--socket-group), as docs/operations.md suggests for a shared
// node, and a real unprivileged user of that group (made with useradd,
// removed on every path out of the run) attacks it:
//   - reads a file only root may read: `omst put loot/secret FILE` fails,
//     and a raw PUT_FILE naming the file is refused FORBIDDEN; no name;
//   - writes into a directory only root may write to: `omst get NAME -o
//     DIR/x` fails, and a raw GET_FILE into it is refused; nothing there;
//   - plants a symbolic link in a sticky world-writable directory (like
//     /tmp) pointing at a file of root's: root's own `omst get NAME -o LINK`
//     refuses to follow it, and the file keeps its bytes;
//   - replaces and removes a name root put: FORBIDDEN, the name stays;
//   - its own files: a put from its directory and a get into it work with
//     exact bytes, and the file it got is its own.
//
// The daemon stays up and leaks no descriptors.
func caseSocketRights(e *Env) error {
	if os.Geteuid() != 0 {
		return &SkipError{Reason: "needs root to make a user and run a root daemon"}
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		return &SkipError{Reason: "no useradd"}
	}
	e.Step("make a user and a group")
	u, err := NewUser(e.Ctx)
	if err != nil {
		return err
	}
	defer u.Remove()
	// The user must reach the socket and run the binary: the run's
	// directories searchable, the binary copied beside them.
	for _, d := range []string{filepath.Dir(e.Dir), e.Dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			return err
		}
	}
	bin := filepath.Join(e.Dir, "omst-user")
	if err := copyFile(e.Bin, bin, 0o755); err != nil {
		return err
	}

	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	d := e.NewDaemonAt("shared", e.Dir+"/shared", ports[0], nil, "--socket-group", u.Group)
	e.Step("start a root daemon with --socket-group %s", u.Group)
	if err := e.Start(d); err != nil {
		return err
	}
	if err := d.SetBaseline(); err != nil {
		return err
	}
	asUser := func(args ...string) CLIResult {
		return RunCLIAs(e.Ctx, bin, OpTimeout, nil, u.Cred(), append([]string{"--home", d.Home, "-q"}, args...)...)
	}
	asRoot := func(args ...string) CLIResult {
		return RunCLI(e.Ctx, e.Bin, OpTimeout, nil, append([]string{"--home", d.Home, "-q"}, args...)...)
	}

	// Root's files: a secret, a private directory, a victim file.
	private := filepath.Join(e.Dir, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		return err
	}
	secret := filepath.Join(private, "shadow")
	secretBytes := []byte("root:$6$not-for-you\n")
	if err := os.WriteFile(secret, secretBytes, 0o600); err != nil {
		return err
	}
	victim := filepath.Join(private, "bashrc")
	victimBytes := []byte("# root's own\n")
	if err := os.WriteFile(victim, victimBytes, 0o644); err != nil {
		return err
	}
	shared := filepath.Join(e.Dir, "tmp") // like /tmp: sticky, world-writable
	if err := os.Mkdir(shared, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(shared, 0o777|os.ModeSticky); err != nil {
		return err
	}
	userDir := filepath.Join(e.Dir, "userdir")
	if err := os.Mkdir(userDir, 0o700); err != nil {
		return err
	}
	if err := os.Chown(userDir, u.UID, u.GID); err != nil {
		return err
	}

	data := e.Blob(e.Size(1<<20, 6<<20))
	e.Step("root puts init/data (%d bytes)", len(data))
	if err := e.MustPut(d, "init/data", data); err != nil {
		return err
	}

	e.Step("the user puts root's secret with the CLI")
	if r := asUser("put", "loot/secret", secret); r.Code == 0 || !strings.Contains(strings.ToLower(r.Stderr), "permission denied") {
		return violation("a socket user's put of a root-only file: %s (want permission denied)", r.Describe())
	}
	e.Step("the user sends a raw PUT_FILE of the secret and a raw GET_FILE into root's directory")
	planted := filepath.Join(private, "planted")
	var codes [2]uint32
	var msgs [2]string
	err = runAs(u, func() error {
		for i, req := range []struct {
			t    byte
			body []byte
		}{
			{byte(rpcbridge.FramePutFile), appendStrs(appendStrs(nil, "loot/secret2"), "", secret)},
			{byte(rpcbridge.FrameGetFile), appendStrs(nil, "init/data", planted)},
		} {
			code, msg, err := rawRequest(d.Home+"/omst.sock", req.t, req.body)
			if err != nil {
				return err
			}
			codes[i], msgs[i] = code, msg
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, what := range []string{"PUT_FILE of root's secret", "GET_FILE into root's directory"} {
		if codes[i] != 14 { // FORBIDDEN
			return violation("raw %s by a socket user: code %d %q, want FORBIDDEN (14)", what, codes[i], msgs[i])
		}
	}
	for _, n := range []string{"loot/secret", "loot/secret2"} {
		if r := asRoot("stat", n); r.Code == 0 {
			return violation("%s exists after the refused puts", n)
		}
	}
	e.Step("the user gets into root's directory with the CLI")
	if r := asUser("get", "init/data", "-o", filepath.Join(private, "planted2")); r.Code == 0 {
		return violation("a socket user's get into a root-only directory succeeded: %s", r.Describe())
	}
	for _, p := range []string{planted, filepath.Join(private, "planted2")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			return violation("%s was created in root's directory (%v)", p, err)
		}
	}

	e.Step("the user plants a link to root's file in the sticky directory; root gets through it")
	link := filepath.Join(shared, "out")
	if err := runAs(u, func() error { return os.Symlink(victim, link) }); err != nil {
		return err
	}
	if r := asRoot("get", "init/data", "-o", link); r.Code == 0 || !strings.Contains(r.Stderr, "not followed") {
		return violation("root's get through a planted link: %s (want the link not followed)", r.Describe())
	}
	if b, _ := os.ReadFile(victim); !bytes.Equal(b, victimBytes) {
		return violation("the planted link's target was replaced: now %d bytes", len(b))
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		return violation("the planted link was replaced (%v)", err)
	}

	e.Step("the user replaces and removes root's name")
	if r := asUser("put", "init/data", "-"); r.Code == 0 {
		// stdin is empty: an empty blob would replace root's
		return violation("a socket user replaced root's name: %s", r.Describe())
	}
	if r := asUser("rm", "init/data"); r.Code == 0 || !strings.Contains(strings.ToLower(r.Stderr), "forbidden") {
		return violation("a socket user's rm of root's name: %s (want forbidden)", r.Describe())
	}
	if err := e.GetExact(d, "init/data", OpTimeout, "root's name after the user's attempts"); err != nil {
		return err
	}

	e.Step("the user's own files: put from and get into its directory")
	mine := e.Blob(e.Size(1, 3<<20))
	minePath := filepath.Join(userDir, "result")
	if err := runAs(u, func() error { return os.WriteFile(minePath, mine, 0o600) }); err != nil {
		return err
	}
	if r := asUser("put", "jobs/u/result", minePath); r.Code != 0 {
		return violation("the user's put of its own file: %s", r.Describe())
	}
	if r := asRoot("get", "jobs/u/result", "-o", "-"); r.Code != 0 || !bytes.Equal(r.Stdout, mine) {
		return violation("root's get of the user's put: %s, %d bytes", r.Describe(), len(r.Stdout))
	}
	got := filepath.Join(userDir, "got")
	if r := asUser("get", "init/data", "-o", got); r.Code != 0 {
		return violation("the user's get into its own directory: %s", r.Describe())
	}
	fi, err := os.Stat(got)
	if err != nil {
		return violation("the user's get left no file: %v", err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != u.UID {
		return violation("the file the user got belongs to uid %d, not the user's %d", st.Uid, u.UID)
	}
	if b, _ := os.ReadFile(got); !bytes.Equal(b, data) {
		return violation("the user's get wrote other bytes")
	}
	if r := asUser("rm", "jobs/u/result"); r.Code != 0 {
		return violation("the user's rm of its own name: %s", r.Describe())
	}
	return e.CheckDaemons(d)
}

// User is a system user (and its own group) made for a case.
type User struct {
	Name, Group string
	UID, GID    int
}

// NewUser makes a user with a group of its own (no home, no login shell),
// registered so that every path out of the run removes them.
func NewUser(ctx interface{ Err() error }) (*User, error) {
	var b [4]byte
	rand.Read(b[:])
	name := "omstf" + hex.EncodeToString(b[:])
	if out, err := exec.Command("groupadd", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("groupadd %s: %v: %s", name, err, out)
	}
	reg.mu.Lock()
	reg.groups = append(reg.groups, name)
	reg.mu.Unlock()
	if out, err := exec.Command("useradd", "-M", "-N", "-g", name, "-s", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		removeGroup(name)
		return nil, fmt.Errorf("useradd %s: %v: %s", name, err, out)
	}
	reg.mu.Lock()
	reg.users = append(reg.users, name)
	reg.mu.Unlock()
	u := &User{Name: name, Group: name}
	for _, f := range []struct {
		flag string
		dst  *int
	}{{"-u", &u.UID}, {"-g", &u.GID}} {
		out, err := exec.Command("id", f.flag, name).Output()
		if err == nil {
			*f.dst, err = strconv.Atoi(strings.TrimSpace(string(out)))
		}
		if err != nil {
			u.Remove()
			return nil, fmt.Errorf("id %s %s: %v", f.flag, name, err)
		}
	}
	return u, nil
}

// Cred is the credential to run a process as the user.
func (u *User) Cred() *syscall.Credential {
	return &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID), Groups: []uint32{}}
}

// Remove deletes the user and its group (and forgets them).
func (u *User) Remove() {
	removeUser(u.Name)
	removeGroup(u.Group)
}

func removeUser(name string) error {
	reg.mu.Lock()
	for i, n := range reg.users {
		if n == name {
			reg.users = append(reg.users[:i], reg.users[i+1:]...)
			break
		}
	}
	reg.mu.Unlock()
	if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
		return fmt.Errorf("userdel %s: %v: %s", name, err, out)
	}
	return nil
}

func removeGroup(name string) error {
	reg.mu.Lock()
	for i, n := range reg.groups {
		if n == name {
			reg.groups = append(reg.groups[:i], reg.groups[i+1:]...)
			break
		}
	}
	reg.mu.Unlock()
	if out, err := exec.Command("groupdel", name).CombinedOutput(); err != nil {
		return fmt.Errorf("groupdel %s: %v: %s", name, err, out)
	}
	return nil
}

// runAs runs f with the user's rights (on a thread of its own: see
// internal/asuser).
func runAs(u *User, f func() error) error {
	return asuser.Run(u.UID, u.GID, f)
}

// appendStrs appends rpcbridge strings (u32 length + bytes); an empty
// string in the middle of PUT_FILE's body stands for its u32 chunk size
// of 0 (both are four zero bytes).
func appendStrs(dst []byte, ss ...string) []byte {
	for _, s := range ss {
		n := len(s)
		dst = append(dst, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		dst = append(dst, s...)
	}
	return dst
}

// rawRequest sends one request frame of type t on a new connection to the
// socket (after HELLO, version 1: what an old client speaks) and returns
// the ERROR code and message of the reply (code 0 for any other reply).
func rawRequest(sock string, t byte, body []byte) (uint32, string, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(OpTimeout))
	frame := func(t byte, body []byte) []byte {
		n := len(body)
		return append([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), t, 0, 0, 0}, body...)
	}
	read := func() (byte, []byte, error) {
		var h [8]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return 0, nil, err
		}
		n := int(h[0])<<24 | int(h[1])<<16 | int(h[2])<<8 | int(h[3])
		if n > 1<<20 {
			return 0, nil, errors.New("reply too big")
		}
		b := make([]byte, n)
		_, err := io.ReadFull(c, b)
		return h[4], b, err
	}
	if _, err := c.Write(frame(byte(rpcbridge.FrameHello), []byte{'O', 'M', 'S', 'T', 0, 0, 0, 1})); err != nil {
		return 0, "", err
	}
	if _, _, err := read(); err != nil {
		return 0, "", err
	}
	if _, err := c.Write(frame(t, body)); err != nil {
		return 0, "", err
	}
	typ, b, err := read()
	if err != nil {
		return 0, "", err
	}
	if typ != byte(rpcbridge.FrameError) || len(b) < 8 {
		return 0, "", nil
	}
	code := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	return code, string(b[8:]), nil
}

// copyFile copies src to a new file dst of mode perm.
func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
