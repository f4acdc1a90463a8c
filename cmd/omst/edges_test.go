package main

// Tests of the rough edges issue 28 lists, as a new user meets them on a
// fresh clone with a fresh HOME: help texts, empty listings, a put with
// its NAME forgotten, addresses in the order a remote host can use them,
// the settings of a running daemon, errors that say what went wrong once.

import (
	"bytes"
	"io"
	"os"
	"os/exec"
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
