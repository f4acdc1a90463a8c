package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigFile: a daemon reads HOME/config.toml, flags win over it,
// `omst config show` prints what is in effect, and a bad file is refused
// naming its line.
func TestConfigFile(t *testing.T) {
	home := filepath.Join(t.TempDir(), "h")
	os.MkdirAll(home, 0o700)
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(home, ConfigFile), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# a site\nsite = \"alpha\"\nwindow = 32\nno-dht = true\nlisten = [\"/ip4/127.0.0.1/tcp/0\"]\n")
	var show map[string]configEntry
	if err := json.Unmarshal([]byte(mustOmst(t, 10*time.Second, "--home", home, "config", "show", "--json")), &show); err != nil {
		t.Fatal(err)
	}
	if show["site"].Value != "alpha" || show["site"].Source != "file" || show["window"].Value != float64(32) || show["relay-mode"].Source != "default" {
		t.Fatalf("config show: %+v", show)
	}
	// The daemon runs with the file's site; a flag overrides it.
	d := startDaemon(t, home)
	if st := d.status(t); st.Site != "alpha" {
		t.Fatalf("site %q, want the file's alpha", st.Site)
	}
	d.stop(t)
	d = startDaemon(t, home, "--site", "beta")
	if st := d.status(t); st.Site != "beta" {
		t.Fatalf("site %q, want the flag's beta", st.Site)
	}
	d.stop(t)

	for _, bad := range []struct{ doc, want string }{
		{"site = \"a\"\n\nbogus-key = 1\n", ":3: unknown key \"bogus-key\""},
		{"window = \"many\"\n", ":1: window: want an integer"},
		{"site = [\"a\", \"b\"]\n", ":1: site: a list"},
		{"home = \"/elsewhere\"\n", ":1: unknown key \"home\""},
		{"site = \n", ":1:"},
	} {
		write(bad.doc)
		r := omst(t, 20*time.Second, "daemon", "--home", home, "--listen", "/ip4/127.0.0.1/tcp/0")
		if r.code != exitUsage || !strings.Contains(r.stderr, ConfigFile+bad.want) {
			t.Errorf("config %q: exit %d, %q; want exit %d and %q", bad.doc, r.code, r.stderr, exitUsage, bad.want)
		}
	}
	// --config names another file, which must exist.
	r := omst(t, 10*time.Second, "--home", home, "config", "show", "--config", filepath.Join(home, "none.toml"))
	if r.code == 0 {
		t.Fatal("a missing --config file accepted")
	}
}

func TestVersionAndLogFormat(t *testing.T) {
	out := mustOmst(t, 10*time.Second, "--version")
	if !strings.HasPrefix(out, "omst 0.") || !strings.Contains(out, "go1.") {
		t.Fatalf("--version: %q", out)
	}
	var b buildInfo
	if err := json.Unmarshal([]byte(mustOmst(t, 10*time.Second, "version", "--json")), &b); err != nil || b.Version == "" || b.Go == "" {
		t.Fatalf("version --json: %+v, %v", b, err)
	}
	home := filepath.Join(t.TempDir(), "h")
	d := startDaemon(t, home, "--log-format", "json", "--log-level", "info")
	d.stop(t)
	var lines int
	for _, l := range strings.Split(strings.TrimSpace(d.logText()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["msg"] == nil || m["level"] == nil {
			t.Fatalf("--log-format json printed a line that is not a JSON record: %q (%v)", l, err)
		}
		lines++
	}
	if lines == 0 {
		t.Fatal("no log lines")
	}
	if r := omst(t, 10*time.Second, "daemon", "--home", home, "--log-format", "xml"); r.code != exitUsage || !strings.Contains(r.stderr, "--log-format") {
		t.Fatalf("--log-format xml: exit %d: %s", r.code, r.stderr)
	}
}

// TestSystemdUnits: the units' ExecStart lines name flags the daemon
// accepts.
func TestSystemdUnits(t *testing.T) {
	for _, unit := range []string{"omst.service", "omst-user.service"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "dist", unit))
		if err != nil {
			t.Fatal(err)
		}
		var exec []string
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
				exec = strings.Fields(strings.ReplaceAll(v, "%h", t.TempDir()))
			}
		}
		if len(exec) < 2 || !strings.HasSuffix(exec[0], "/omst") || exec[1] != "daemon" {
			t.Fatalf("%s: ExecStart %q", unit, exec)
		}
		if r := omst(t, 10*time.Second, append(exec[1:], "--help")...); r.code != 0 {
			t.Fatalf("%s: `omst %s --help`: exit %d: %s", unit, strings.Join(exec[1:], " "), r.code, r.stderr)
		}
	}
}
