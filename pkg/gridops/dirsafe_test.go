package gridops

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/topology"
)

// tryRemote runs a remote command as runRemote does, with extra
// environment, and returns its standard output, standard error and error
// instead of failing.
func tryRemote(t *testing.T, remote, stdin string, env ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command("sh", "-c", remote)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	var e strings.Builder
	cmd.Stderr = &e
	out, err := cmd.Output()
	return string(out), e.String(), err
}

// hostIn is a host whose DIR is dir.
func hostIn(t *testing.T, dir string) *topology.Host {
	t.Helper()
	h := parse(t, "[root]\nhost = \"m\"\ndir = \"/placeholder\"\n").Root()
	h.Dir = dir
	return h
}

// otherUser makes p another user's: owned by uid 65534 (nobody) when the
// test runs as root; else p must be made of something already not ours.
func otherUser(t *testing.T, p string) {
	t.Helper()
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatalf("chown %s to nobody (the test needs root for this case): %v", p, err)
	}
}

// TestScriptsRefuseOthersDirs: the probe, the copy, the apply and down
// refuse a DIR (or its bin or home, or a directory above it) that another
// user owns or may write, before they read, run or write anything there;
// DIR in a sticky world-writable directory (as /tmp) and DIR through a
// symlink to a safe directory are fine.
func TestScriptsRefuseOthersDirs(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test chowns directories to another user: run it as root (as make test does here)")
	}
	base := t.TempDir()
	mk := func(rel string, mode os.FileMode) string {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stranger := mk("stranger", 0o755)
	otherUser(t, stranger)
	otherBin := mk("otherbin", 0o755)
	otherUser(t, mk("otherbin/bin", 0o755))
	otherHome := mk("otherhome", 0o755)
	otherUser(t, mk("otherhome/home", 0o755))
	underStranger := mk("strangers/omst", 0o755)
	otherUser(t, filepath.Join(base, "strangers"))
	underOpen := mk("open/omst", 0o755)
	mk("open", 0o777)
	linked := filepath.Join(base, "link")
	if err := os.Symlink(stranger, linked); err != nil {
		t.Fatal(err)
	}
	refused := map[string]struct{ dir, why string }{
		"owned by another user":                {stranger, "owned by uid 65534, not by the ssh user"},
		"group-writable":                       {mk("groupw", 0o775), "writable by other users"},
		"world-writable":                       {mk("worldw", 0o777), "writable by other users"},
		"its bin another user's":               {otherBin, "bin is owned by uid 65534"},
		"its home another user's":              {otherHome, "home is owned by uid 65534"},
		"under another user's directory":       {underStranger, "above the omst directory, is owned by uid 65534"},
		"under a world-writable, not sticky":   {underOpen, "above the omst directory, is writable by other users"},
		"not made yet, under another user's":   {filepath.Join(base, "strangers/new/omst"), "above the omst directory, is owned by uid 65534"},
		"a symlink to another user's":          {linked, "owned by uid 65534"},
		"not made yet, under a world-writable": {filepath.Join(base, "open/new"), "writable by other users and not sticky"},
	}
	for what, c := range refused {
		h := hostIn(t, c.dir)
		before := listTree(t, base)
		for script, run := range map[string]func() (string, string, error){
			"probe": func() (string, string, error) { return tryRemote(t, ScriptCommand, ProbeScript(h)) },
			"copy":  func() (string, string, error) { return tryRemote(t, CopyCommand(h), "#!/bin/sh\necho pwned\n") },
			"apply": func() (string, string, error) {
				return tryRemote(t, ScriptCommand, ApplyScript(h, Action{WriteConfig: true, Start: true}, "x = 1\n", time.Second, time.Second))
			},
			"down": func() (string, string, error) { return tryRemote(t, ScriptCommand, DownScript(h, false, time.Second)) },
		} {
			out, stderr, err := run()
			if err == nil || !strings.Contains(stderr, c.why) {
				t.Errorf("%s: %s: %v, stderr %q, want a refusal with %q\n%s", what, script, err, stderr, c.why, out)
			}
			if strings.Contains(out, Marker+"end") {
				t.Errorf("%s: %s went on to its end", what, script)
			}
		}
		// Nothing was written anywhere (a copy into a directory not made
		// yet may leave the empty directories mkdir made: nothing in them).
		after := listTree(t, base)
		for p := range after {
			if !before[p] {
				t.Errorf("%s: %s written", what, p)
			}
		}
	}

	// Fine: DIR in a sticky world-writable directory, made there by the
	// copy; DIR through a symlink to our own directory.
	sticky := mk("sticky", os.ModeSticky|0o777)
	for what, dir := range map[string]string{"in a sticky directory": filepath.Join(sticky, "omst"), "through a symlink": func() string {
		own := mk("own", 0o755)
		l := filepath.Join(base, "ownlink")
		os.Symlink(own, l)
		return l
	}()} {
		h := hostIn(t, dir)
		if _, stderr, err := tryRemote(t, CopyCommand(h), "#!/bin/sh\n"); err != nil {
			t.Errorf("%s: copy: %v: %s", what, err, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, GridMarker)); err != nil {
			t.Errorf("%s: no %s after the copy: %v", what, GridMarker, err)
		}
		if _, stderr, err := tryRemote(t, ScriptCommand, ProbeScript(h)); err != nil {
			t.Errorf("%s: probe: %v: %s", what, err, stderr)
		}
	}
}

// listTree returns the paths under root whose entries are not empty
// directories (files, symlinks), as a set.
func listTree(t *testing.T, root string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out[p] = true
		}
		return nil
	})
	return out
}

// TestPurgeRefusesDangerousDirs: `grid down --purge` refuses a DIR that
// is /, the ssh user's home directory or above it, has a .. component, or
// does not look like a directory grid up made, before it stops or removes
// anything; it purges a DIR an older grid up made (no marker).
func TestPurgeRefusesDangerousDirs(t *testing.T) {
	for _, c := range []struct {
		dir string
		ok  bool
	}{
		{"omst", true}, {"/opt/omst", true}, {"a/b", true}, {"./omst", true},
		{"", false}, {"/", false}, {"//", false}, {".", false}, {"./", false},
		{"../omst", false}, {"/opt/../home", false}, {"omst/..", false},
	} {
		if err := CheckPurgeDir(c.dir); (err == nil) != c.ok {
			t.Errorf("CheckPurgeDir(%q) = %v, want ok %v", c.dir, err, c.ok)
		}
	}

	base := t.TempDir()
	home := filepath.Join(base, "user")
	os.MkdirAll(filepath.Join(home, "home"), 0o755)
	precious := filepath.Join(home, "home", "precious")
	os.WriteFile(precious, []byte("x"), 0o600)
	os.MkdirAll(filepath.Join(home, "bin"), 0o755)
	os.WriteFile(filepath.Join(home, "bin", "omst"), []byte("x"), 0o755)
	other := filepath.Join(base, "data")
	os.MkdirAll(filepath.Join(other, "home", "alice"), 0o755)
	os.WriteFile(filepath.Join(other, "home", "alice", "notes"), []byte("x"), 0o600)
	os.MkdirAll(filepath.Join(base, "x"), 0o755)
	env := "HOME=" + home
	for what, c := range map[string]struct{ dir, why string }{
		"the ssh user's home":          {home, "the ssh user's home directory"},
		"the home, relative":           {".", "the ssh user's home directory"},
		"above the ssh user's home":    {base, "the ssh user's home directory"},
		"a .. component":               {base + "/x/../data", ".. component"},
		"not a directory grid up made": {other, "does not look like a directory omst grid up made"},
	} {
		h := hostIn(t, c.dir)
		cmd := exec.Command("sh", "-s")
		cmd.Dir = home // a relative DIR is in the ssh user's home
		cmd.Env = append(os.Environ(), env)
		cmd.Stdin = strings.NewReader(DownScript(h, true, time.Second))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err == nil || !strings.Contains(stderr.String(), c.why) {
			t.Errorf("%s: %v, stderr %q, want a refusal with %q\n%s", what, err, stderr.String(), c.why, out)
		}
		if strings.Contains(string(out), Marker+"stop") {
			t.Errorf("%s: the daemon was stopped before the refusal", what)
		}
	}
	for _, p := range []string{precious, filepath.Join(home, "bin", "omst"), filepath.Join(other, "home", "alice", "notes")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s after refused purges: %v", p, err)
		}
	}
	// / itself: only the check runs here (never a purge script with DIR
	// = / in a test), as the root user would run it.
	script := prelude(hostIn(t, "/")) + purgeCheck + "purgeok && echo CHECKED-OK\n"
	out, stderr, err := tryRemote(t, ScriptCommand, script, env)
	if err == nil || strings.Contains(out, "CHECKED-OK") || !strings.Contains(stderr, "dir / is /") {
		t.Errorf("DIR /: %v, %q, stderr %q; want a refusal", err, out, stderr)
	}

	// A DIR an older grid up made (bin/omst and home/config.toml, no
	// marker) is purged.
	old := filepath.Join(base, "old")
	os.MkdirAll(filepath.Join(old, "bin"), 0o755)
	os.MkdirAll(filepath.Join(old, "home"), 0o700)
	os.WriteFile(filepath.Join(old, "bin", "omst"), []byte("x"), 0o755)
	os.WriteFile(filepath.Join(old, "home", "config.toml"), []byte("x"), 0o600)
	if r, _ := runScript(t, DownScript(hostIn(t, old), true, time.Second)); r.Purge != "removed" {
		t.Fatalf("purge of an older grid up's DIR: %+v", r)
	}
}
