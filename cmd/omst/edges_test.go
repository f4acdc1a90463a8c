package main

// Tests of the rough edges issue 28 lists, as a new user meets them on a
// fresh clone with a fresh HOME: help texts, empty listings, a put with
// its NAME forgotten, addresses in the order a remote host can use them,
// the settings of a running daemon, errors that say what went wrong once.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestFlagPlaceholders: cobra takes a backquoted word of a flag's usage
// text as the placeholder of its value (`--config FILE`); a backquoted
// command (`omst config show`) made `omst daemon --help` print
// "--config omst config show". Every flag's placeholder is one word.
func TestFlagPlaceholders(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		check := func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if strings.ContainsAny(name, " \t") {
				t.Errorf("%s --%s: placeholder %q (a backquoted phrase in its usage text)", c.CommandPath(), f.Name, name)
			}
		}
		c.LocalFlags().VisitAll(check)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
	r := omst(t, 10*time.Second, "daemon", "--help")
	for _, bad := range []string{"--config omst", "--join omst"} {
		if strings.Contains(r.stdout, bad) {
			t.Errorf("daemon --help shows %q", bad)
		}
	}
}

// TestGetHelp: get --help says that NAME may be a blob ID, that a file is
// written atomically, and what the exit statuses mean.
func TestGetHelp(t *testing.T) {
	out := mustOmst(t, 10*time.Second, "get", "--help")
	for _, want := range []string{"blob whose ID", "atomically", "exit status", "3 ", "4 "} {
		if !strings.Contains(out, want) {
			t.Errorf("get --help does not say %q:\n%s", want, out)
		}
	}
}

// TestPeersNone: peers on a daemon with no peers says so (on standard
// error: standard output stays empty for scripts) and exits 0.
func TestPeersNone(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "alone"), "--no-dht")
	r := omst(t, 10*time.Second, "--home", d.home, "peers")
	if r.code != 0 || r.stdout != "" || !strings.Contains(r.stderr, "no peers") {
		t.Fatalf("peers with none: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// TestPutNameForgotten: `omst put data.bin` (NAME forgotten) with an
// empty, terminal-less standard input is refused (exit 2, nothing stored)
// instead of storing an empty blob; `omst put NAME -` still stores one;
// on a terminal it says it reads standard input; `./v1.txt` as NAME says
// that NAME comes first. A FILE that cannot be read exits 1 whether it is
// missing or a directory; a NAME that is a directory's path exits 2.
func TestPutNameForgotten(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, filepath.Join(dir, "d"), "--no-dht")
	data := filepath.Join(dir, "data.bin")
	os.WriteFile(data, []byte("payload"), 0o644)
	run := func(stdin io.Reader, args ...string) cliResult {
		t.Helper()
		cmd := exec.Command(omstBin, append([]string{"--home", d.home}, args...)...)
		cmd.Dir, cmd.Stdin = dir, stdin
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return cliResult{out.String(), errb.String(), code}
	}
	r := run(nil, "put", "data.bin") // stdin /dev/null
	if r.code != exitUsage || !strings.Contains(r.stderr, "standard input is empty") || !strings.Contains(r.stderr, "NAME comes first") {
		t.Fatalf("put data.bin </dev/null: exit %d, stderr %q (want exit 2 saying stdin is empty)", r.code, r.stderr)
	}
	if r := run(nil, "stat", "data.bin"); r.code != exitNotFound {
		t.Fatalf("the refused put stored data.bin: stat exit %d", r.code)
	}
	if r := run(nil, "put", "empty", "-"); r.code != 0 {
		t.Fatalf("put empty - </dev/null: exit %d, %q", r.code, r.stderr)
	}
	if r := run(strings.NewReader("piped"), "put", "piped"); r.code != 0 {
		t.Fatalf("put piped <pipe: exit %d, %q", r.code, r.stderr)
	}
	r = run(nil, "put", "./v1.txt", "data.bin")
	if r.code != exitUsage || !strings.Contains(r.stderr, "NAME comes first") {
		t.Fatalf("put ./v1.txt data.bin: exit %d, stderr %q", r.code, r.stderr)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"put", "x", "missing.bin"}, exitError, "no such file"},
		{[]string{"put", "x", "sub"}, exitError, "is a directory"},
		{[]string{"put", "sub/"}, exitUsage, "NAME comes first"},
	} {
		if r := run(nil, c.args...); r.code != c.code || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q (want %d, %q)", c.args, r.code, r.stderr, c.code, c.want)
		}
	}

	// On a terminal it says it reads standard input, and reads it.
	p := newPTY(t)
	cmd := exec.Command(omstBin, "--home", d.home, "put", "typed")
	cmd.Stdin, cmd.Stderr = p.Slave, p.Slave
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Output(), "reading standard input") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("put on a terminal said nothing: %q", p.Output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.master.Write([]byte("typed\n\x04"))
	if err := cmd.Wait(); err != nil {
		t.Fatalf("put on a terminal: %v: %s", err, p.Output())
	}
	if got := mustOmst(t, 10*time.Second, "--home", d.home, "get", "typed"); got != "typed\n" {
		t.Fatalf("typed: %q", got)
	}
}

// TestIDRoutableFirst: with a listen on every interface, `omst id`,
// `daemon --detach` and status list an address other hosts can reach
// before 127.0.0.1, so `$(omst id | head -n 1)` works as a remote --parent.
func TestIDRoutableFirst(t *testing.T) {
	routable := false
	ifaddrs, _ := net.InterfaceAddrs()
	for _, a := range ifaddrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() && !ip.IP.IsLinkLocalUnicast() {
			routable = true
		}
	}
	if !routable {
		t.Skip("no IPv4 address but loopback on this host")
	}
	home := filepath.Join(t.TempDir(), "any")
	t.Cleanup(func() { stopDetached(t, home) })
	r := omst(t, time.Minute, "daemon", "--home", home, "--listen", "/ip4/0.0.0.0/tcp/0", "--no-dht", "--detach")
	if r.code != 0 {
		t.Fatalf("daemon --detach: exit %d: %s", r.code, r.stderr)
	}
	id := mustOmst(t, 10*time.Second, "--home", home, "id")
	for what, out := range map[string]string{"id": id, "daemon --detach": r.stdout} {
		lines := strings.Fields(out)
		if len(lines) < 2 || !strings.Contains(out, "/ip4/127.0.0.1/") {
			t.Fatalf("%s: %q (want a routable address and 127.0.0.1)", what, out)
		}
		if strings.HasPrefix(lines[0], "/ip4/127.") {
			t.Errorf("%s lists loopback first:\n%s", what, out)
		}
	}
}

// TestRoutableFirst: the order itself, loopback and link-local last,
// stable within each group.
func TestRoutableFirst(t *testing.T) {
	in := []string{"/ip4/127.0.0.1/tcp/1", "/ip6/::1/tcp/1", "/ip6/fe80::1/tcp/1", "/ip4/10.0.0.2/tcp/1", "/dns4/a.example/tcp/1", "/ip4/192.0.2.2/udp/1/quic-v1", "junk"}
	want := []string{"/ip4/10.0.0.2/tcp/1", "/dns4/a.example/tcp/1", "/ip4/192.0.2.2/udp/1/quic-v1", "junk", "/ip6/fe80::1/tcp/1", "/ip4/127.0.0.1/tcp/1", "/ip6/::1/tcp/1"}
	if got := routableFirst(in); !slices.Equal(got, want) {
		t.Fatalf("routableFirst:\n got %q\nwant %q", got, want)
	}
}

// TestUnknownIDSaidOnce: a get of an unknown blob ID at a worker, asked
// of its head and the root in turn, says "not found" once (before, each
// hop's answer nested the next one's: the ID and "not found" at every
// hop, ~700 characters), names the ID twice (the argument, the
// manifest) and exits 3.
func TestUnknownIDSaidOnce(t *testing.T) {
	dir := t.TempDir()
	root := startDaemon(t, filepath.Join(dir, "root"), "--no-dht")
	head := startDaemon(t, filepath.Join(dir, "head"), "--no-dht", "--parent", tcpAddr(t, root), "--site", "a")
	w := startDaemon(t, filepath.Join(dir, "w"), "--no-dht", "--parent", tcpAddr(t, head), "--site", "a")
	waitConnected(t, head)
	waitConnected(t, w)
	src := filepath.Join(dir, "src")
	os.WriteFile(src, []byte("some bytes"), 0o644)
	id := strings.TrimSpace(mustOmst(t, 10*time.Second, "--home", root.home, "put", "x", src))
	// The same ID with its last character changed: well formed, unknown.
	last := id[len(id)-1]
	unknown := id[:len(id)-1] + map[bool]string{true: "b", false: "a"}[last == 'a']
	r := omst(t, time.Minute, "--home", w.home, "get", unknown, "-o", filepath.Join(dir, "out"))
	if r.code != exitNotFound {
		t.Fatalf("get of an unknown ID: exit %d, stderr %q", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "not found"); n != 1 {
		t.Errorf("get of an unknown ID says \"not found\" %d times:\n%s", n, r.stderr)
	}
	if n := strings.Count(r.stderr, "manifest"); n != 1 {
		t.Errorf("get of an unknown ID says \"manifest\" %d times:\n%s", n, r.stderr)
	}
	// The command's argument and the manifest that was not found: the ID
	// twice, not a third time in a "blob ID:" wrapper between them.
	if n := strings.Count(r.stderr, unknown); n != 2 {
		t.Errorf("get of an unknown ID names it %d times, want 2:\n%s", n, r.stderr)
	}
	if !strings.Contains(r.stderr, "asked") || len(r.stderr) > 400 {
		t.Errorf("get of an unknown ID: %d characters, want who was asked in fewer than 400:\n%s", len(r.stderr), r.stderr)
	}
}

// waitConnected waits (30 s at most) until d is connected to its parent.
func waitConnected(t *testing.T, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !d.status(t).ParentConnected {
		if time.Now().After(deadline) {
			t.Fatalf("%s not connected to its parent after 30s: %s", d.home, d.logText())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestParentReasonShown: a daemon whose --parent is unreachable, or names
// the wrong peer ID, shows why in `omst status` and in a get's error
// (before: only "(DISCONNECTED)", the reason in daemon.log alone).
func TestParentReasonShown(t *testing.T) {
	dir := t.TempDir()
	real := startDaemon(t, filepath.Join(dir, "real"), "--no-dht")
	other := startDaemon(t, filepath.Join(dir, "other"), "--no-dht")
	realAddr := tcpAddr(t, real)
	otherID := other.status(t).PeerID
	// Unreachable: a closed port; wrong ID: the real daemon's address with
	// another daemon's ID.
	closed := fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", freePort(t), otherID)
	wrongID := realAddr[:strings.LastIndex(realAddr, "/p2p/")] + "/p2p/" + otherID
	for _, c := range []struct{ name, parent, want string }{
		{"unreachable", closed, "connection refused"},
		{"wrong-id", wrongID, "peer id mismatch"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := startDaemon(t, filepath.Join(dir, c.name), "--no-dht", "--parent", c.parent)
			deadline := time.Now().Add(30 * time.Second)
			var out string
			for {
				out = mustOmst(t, 10*time.Second, "--home", w.home, "status")
				if strings.Contains(strings.ToLower(out), c.want) || time.Now().After(deadline) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			if !strings.Contains(out, "DISCONNECTED: ") || !strings.Contains(strings.ToLower(out), c.want) {
				t.Fatalf("status does not say %q:\n%s", c.want, out)
			}
			r := omst(t, time.Minute, "--home", w.home, "get", "shared/init", "-o", filepath.Join(dir, "out"))
			if r.code == 0 || !strings.Contains(strings.ToLower(r.stderr), c.want) || !strings.Contains(r.stderr, "not connected to its parent") {
				t.Fatalf("get: exit %d, stderr %q (want the reason %q)", r.code, r.stderr, c.want)
			}
		})
	}
}

// TestConfigShowRunning: `omst config show` on a home whose daemon runs
// shows the settings it runs with (its flags over the file as it was at
// its start), not the defaults; --file shows what the file gives now; a
// stopped daemon leaves no settings behind.
func TestConfigShowRunning(t *testing.T) {
	home := filepath.Join(t.TempDir(), "h")
	os.MkdirAll(home, 0o700)
	os.WriteFile(filepath.Join(home, ConfigFile), []byte("window = 32\n"), 0o600)
	root := startDaemon(t, filepath.Join(filepath.Dir(home), "root"), "--no-dht")
	parent := tcpAddr(t, root)
	stale := runningSettingsPath(home, 999999999) // a daemon killed with -9 left it
	os.WriteFile(stale, []byte("{}"), 0o600)
	d := startDaemon(t, home, "--no-dht", "--site", "beta", "--parent", parent)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("a killed daemon's settings file %s is left after the next start (stat: %v)", stale, err)
	}
	os.WriteFile(filepath.Join(home, ConfigFile), []byte("window = 8\nsite = \"gamma\"\n"), 0o600)
	show := func(args ...string) map[string]configEntry {
		t.Helper()
		var m map[string]configEntry
		out := mustOmst(t, 10*time.Second, append([]string{"--home", home, "config", "show", "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return m
	}
	m := show()
	if m["site"].Value != "beta" || m["site"].Source != "flag" || m["window"].Value != float64(32) || m["window"].Source != "file" {
		t.Fatalf("config show of the running daemon: site %+v, window %+v (want beta from the command line, 32 from the file at its start)", m["site"], m["window"])
	}
	if p, _ := m["parent"].Value.([]any); len(p) != 1 || p[0] != parent {
		t.Fatalf("config show of the running daemon: parent %+v, want [%s]", m["parent"], parent)
	}
	if out := mustOmst(t, 10*time.Second, "--home", home, "config", "show"); !strings.Contains(out, "pid") || !strings.Contains(out, "site = 'beta'  # from the command line") {
		t.Fatalf("config show (text):\n%s", out)
	}
	if m := show("--file"); m["site"].Value != "gamma" || m["window"].Value != float64(8) {
		t.Fatalf("config show --file: site %+v, window %+v", m["site"], m["window"])
	}
	d.stop(t)
	if m := show(); m["site"].Value != "gamma" {
		t.Fatalf("config show with the daemon stopped: site %+v, want the file's gamma", m["site"])
	}
	if left, _ := filepath.Glob(filepath.Join(home, "settings.*")); len(left) > 0 {
		t.Fatalf("a stopped daemon left %v", left)
	}
}

// TestWanSmallKeepsBuiltOmst: scripts/wan-small.sh (make test's last
// part) uses the omst make build made, passed as OMST_BIN, and never
// builds bin/omst itself: it ran a plain `go build -o bin/omst`, which
// left a dynamic binary without the commit stamp after make test. The
// script runs in a copy of its tree with a go that only records what it
// is asked, and an omst-wan that cannot emulate (the script then skips).
func TestWanSmallKeepsBuiltOmst(t *testing.T) {
	tree := t.TempDir()
	for _, d := range []string{"scripts", "bin", "testplans/omst", "testplans/sync"} {
		os.MkdirAll(filepath.Join(tree, d), 0o755)
	}
	script, err := os.ReadFile("../../scripts/wan-small.sh")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(tree, "scripts/wan-small.sh"), script, 0o755)
	goLog := filepath.Join(tree, "go.log")
	fakeGo := filepath.Join(tree, "fake-go")
	os.WriteFile(fakeGo, []byte("#!/bin/sh\necho \"$PWD: $*\" >>"+goLog+"\n"), 0o755)
	os.WriteFile(filepath.Join(tree, "bin/omst-wan"), []byte("#!/bin/sh\necho 'cannot emulate a WAN here: test'\nexit 77\n"), 0o755)
	stamped := filepath.Join(tree, "bin/omst")
	os.WriteFile(stamped, []byte("make build's omst"), 0o755)
	cmd := exec.Command("bash", filepath.Join(tree, "scripts/wan-small.sh"))
	cmd.Env = append(os.Environ(), "GO="+fakeGo, "OMST_BIN="+stamped, "OMST_SKIPS="+filepath.Join(tree, "skips"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("wan-small.sh: %v\n%s", err, out)
	}
	log, _ := os.ReadFile(goLog)
	if !strings.Contains(string(log), "build -o bin/omst-wan") {
		t.Fatalf("the fake go was not used: %q\n%s", log, out)
	}
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "cmd/omst ") || strings.HasSuffix(l, "cmd/omst") || strings.Contains(l, "-o bin/omst ") {
			t.Errorf("wan-small.sh builds omst itself: go %s", l)
		}
	}
	if b, _ := os.ReadFile(stamped); string(b) != "make build's omst" {
		t.Errorf("bin/omst was replaced")
	}
}
