package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGridValidateExample: the example topology is valid; the tree and
// the JSON show every host with its parents, ssh route and settings.
func TestGridValidateExample(t *testing.T) {
	const file = "../../examples/grid/grid.toml"
	out := mustOmst(t, 30*time.Second, "grid", "validate", file)
	for _, want := range []string{
		file + ": valid: 1 root, 2 sites, 48 workers\n",
		"\nroot master.example.org\n",
		"  site lyon (32 workers)\n    head head.lyon.example.org <- parent master.example.org\n",
		"      worker lyon-n07 <- parent head.lyon.example.org, fallback master.example.org\n" +
			"             ssh omst@lyon-n07 -J omst@head.lyon.example.org -i ~/.ssh/omst_ed25519\n" +
			"             dial /dns/lyon-n07/tcp/4040, dir /opt/omst, cache 5 GiB, chunk 1 MiB, cut-through\n",
		"    head gw.nancy.example.org <- parent master.example.org\n         ssh grid@gw.nancy.example.org -p 2222 -i ~/.ssh/omst_ed25519\n",
		"      worker 10.20.1.25 <- parent gw.nancy.example.org, fallback master.example.org\n" +
			"             ssh grid@10.20.1.25 -J grid@gw.nancy.example.org:2222 -i ~/.ssh/omst_ed25519\n" +
			"             dial /ip4/10.20.1.25/tcp/4040, dir /opt/omst, cache 20 GiB, chunk 1 MiB, cut-through, args --window 32\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n      worker "); n != 48 {
		t.Errorf("%d workers printed, want 48", n)
	}

	var top struct {
		Hosts []struct {
			Host, Role, Site, Parent, Address, Dial string
			Fallbacks                               []string
			SSHTarget                               string `json:"ssh_target"`
			SSHJump                                 string `json:"ssh_jump"`
			Line                                    int
			Daemon                                  struct {
				CacheSize int64  `json:"cache_size"`
				RelayMode string `json:"relay_mode"`
			}
		}
		Sites []struct {
			Name, Head string
			Workers    []string
		}
	}
	if err := json.Unmarshal([]byte(mustOmst(t, 30*time.Second, "grid", "validate", "--json", file)), &top); err != nil {
		t.Fatal(err)
	}
	if len(top.Hosts) != 51 || len(top.Sites) != 2 || top.Sites[1].Head != "gw.nancy.example.org" || len(top.Sites[0].Workers) != 32 {
		t.Fatalf("JSON: %d hosts, sites %+v", len(top.Hosts), top.Sites)
	}
	w := top.Hosts[1+1+6] // root, lyon's head, lyon-n01..06, then lyon-n07
	if w.Host != "lyon-n07" || w.Role != "worker" || w.Site != "lyon" || w.Parent != "head.lyon.example.org" ||
		!slices.Equal(w.Fallbacks, []string{"master.example.org"}) || w.Dial != "/dns/lyon-n07/tcp/4040" ||
		w.SSHTarget != "omst@lyon-n07" || w.SSHJump != "omst@head.lyon.example.org" || w.Daemon.CacheSize != 5<<30 || w.Daemon.RelayMode != "cut-through" || w.Line != 24 {
		t.Fatalf("lyon-n07 in JSON: %+v", w)
	}
	if h := top.Hosts[1]; h.Role != "head" || h.Address != "10.10.0.1" || h.Dial != "/ip4/10.10.0.1/tcp/4040" || h.SSHJump != "" {
		t.Fatalf("lyon's head in JSON: %+v", h)
	}
}

// TestGridValidateBad: a bad file exits 2 with 'omst: FILE:LINE: ...'
// on stderr, one line per error, and nothing on stdout.
func TestGridValidateBad(t *testing.T) {
	dir := t.TempDir()
	const good = "[root]\nhost = \"master\"\n[[site]]\nname = \"a\"\nworkers = [\"n[01-08]\"]\n[site.head]\nhost = \"head-a\"\n"
	for i, tc := range []struct {
		doc  string
		line int
		want string
	}{
		{"[root]\nhost = \"master\"\ncache_sise = \"1G\"\n", 3, "root.cache_sise: unknown key (did you mean cache_size?)"},
		{good + "[[site]]\nname = \"b\"\nworkers = [\"n[08-09]\"]\n[site.head]\nhost = \"head-b\"\n", 10, `site.workers: host "n08" is already declared at line 5`},
		{"[root]\nhost = \"master\"\n[[site]]\nname = \"a\"\nworkers = [\"n1\"]\n", 3, `site: site "a" has no head`},
		{"[root]\nhost = \"master\"\n[[site]]\nname = \"a\"\nworkers = [\n  \"n[1-]\",\n]\n[site.head]\nhost = \"h\"\n", 6, "site.workers: host \"n[1-]\""},
		{good + "[[site]]\nname = \"a\"\nworkers = [\"m1\"]\n[site.head]\nhost = \"head-b\"\n", 9, `site.name: site "a" is already defined at line 4`},
		{good + "cache_size = -1\n", 8, "site.head.cache_size: -1 is negative"},
		{good + "relay_mode = \"fast\"\n", 8, `site.head.relay_mode: "fast": want cut-through or store-forward`},
		{good + "[site.defaults]\nport = 70000\n", 9, "site.defaults.port: port 70000 out of range"},
		{"", 1, "root: missing"},
		{"[root\n", 1, ""},
	} {
		path := filepath.Join(dir, fmt.Sprintf("bad%d.toml", i))
		if err := os.WriteFile(path, []byte(tc.doc), 0o644); err != nil {
			t.Fatal(err)
		}
		r := omst(t, 30*time.Second, "grid", "validate", path)
		prefix := fmt.Sprintf("omst: %s:%d: %s", path, tc.line, tc.want)
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, prefix) || r.stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.doc, r.code, r.stdout, r.stderr, exitUsage, prefix)
		}
	}

	// Several errors: each on its own line.
	path := filepath.Join(dir, "many.toml")
	if err := os.WriteFile(path, []byte("[defaults]\nport = 0\n[root]\nhost = \"r\"\n[[site]]\nname = \"a\"\nworkers = [\"x[2-1]\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := omst(t, 30*time.Second, "grid", "validate", "--json", path)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if r.code != exitUsage || len(lines) != 3 || !strings.HasPrefix(lines[0], "omst: "+path+":2: defaults.port") ||
		!strings.HasPrefix(lines[1], "omst: "+path+":5: site: ") || !strings.HasPrefix(lines[2], "omst: "+path+":7: site.workers: ") {
		t.Errorf("several errors: exit %d, stderr:\n%s", r.code, r.stderr)
	}

	// A missing file.
	r = omst(t, 30*time.Second, "grid", "validate", filepath.Join(dir, "none.toml"))
	if r.code != exitUsage || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("missing file: exit %d, stderr %q", r.code, r.stderr)
	}
}
