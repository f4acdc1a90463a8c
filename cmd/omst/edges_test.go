package main

// Tests of the rough edges issue 28 lists, as a new user meets them on a
// fresh clone with a fresh HOME: help texts, empty listings, a put with
// its NAME forgotten, addresses in the order a remote host can use them,
// the settings of a running daemon, errors that say what went wrong once.

import (
	"path/filepath"
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
