package gridops

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/topology"
)

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"plain":          "plain",
		"/opt/omst/bin":  "/opt/omst/bin",
		"a b":            "'a b'",
		"it's":           `'it'\''s'`,
		"":               "''",
		"~/.ssh/k":       "'~/.ssh/k'",
		"$HOME":          "'$HOME'",
		"user@host:2222": "user@host:2222",
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSSHCommandDirect(t *testing.T) {
	s := SSH{Path: "/usr/bin/ssh", Options: []string{"UserKnownHostsFile=/tmp/kh", "StrictHostKeyChecking=accept-new"}, ConnectTimeout: 1500 * time.Millisecond}
	got := s.Command(topology.SSH{User: "omst", Host: "head-a", Port: 2200, Key: "~/.ssh/k"}, "true")
	want := []string{"/usr/bin/ssh", "-o", "UserKnownHostsFile=/tmp/kh", "-o", "StrictHostKeyChecking=accept-new",
		"-o", "BatchMode=yes", "-o", "ConnectTimeout=2", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4",
		"-l", "omst", "-p", "2200", "-i", "~/.ssh/k", "head-a", "true"}
	if !slices.Equal(got, want) {
		t.Fatalf("Command =\n%q\nwant\n%q", got, want)
	}
	got = SSH{ConfigFile: "/etc/grid_ssh"}.Command(topology.SSH{Host: "m"}, "x")
	if !slices.Equal(got[:3], []string{"ssh", "-F", "/etc/grid_ssh"}) || !slices.Contains(got, "ConnectTimeout=10") || got[len(got)-2] != "m" {
		t.Fatalf("defaults: %q", got)
	}
}

// expandTokens does what ssh does to a ProxyCommand: %h, %p, %r and %%.
func expandTokens(s, host, port string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case '%':
			b.WriteByte('%')
		case 'h':
			b.WriteString(host)
		case 'p':
			b.WriteString(port)
		default:
			b.WriteByte('%')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// TestProxyCommandChain runs the ProxyCommand of a host behind two hops
// as ssh would (expanding its tokens, through sh), with a fake ssh that
// records its arguments, then the ProxyCommand that fake ssh was given,
// down to the first hop; each level must get its hop's user, port and key
// (a key path with a space, a quote and a '%'), the options, and forward
// to the next level's host and port.
func TestProxyCommandChain(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake ssh")
	record := filepath.Join(dir, "argv")
	// One argument per line (none has a newline).
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nfor a; do printf '%s\\n' \"$a\"; done > \""+record+"\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := SSH{Path: fake, Options: []string{"UserKnownHostsFile=/tmp/known hosts"}}
	key := filepath.Join(dir, "it's 100% mine")
	hops := []topology.Hop{{User: "admin", Host: "bastion", Port: 2222}, {User: "omst", Host: "head-a", Key: key}}
	run := func(proxy, host, port string) []string {
		t.Helper()
		cmd := exec.Command("sh", "-c", "exec "+expandTokens(proxy, host, port))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		b, err := os.ReadFile(record)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	argv := s.Command(topology.SSH{User: "omst", Host: "10.1.0.7", Jump: hops}, "true")
	var proxy string
	for _, a := range argv {
		if p, ok := strings.CutPrefix(a, "ProxyCommand="); ok {
			proxy = p
		}
	}
	if proxy == "" {
		t.Fatalf("no ProxyCommand in %q", argv)
	}
	common := []string{"-o", "UserKnownHostsFile=/tmp/known hosts", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
		"-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"}
	// The target's ssh runs the last hop's ssh, forwarding to the target.
	got := run(proxy, "10.1.0.7", "22")
	var inner string
	for j := range got {
		if p, ok := strings.CutPrefix(got[j], "ProxyCommand="); ok && j > 0 && got[j-1] == "-o" {
			inner = p
			got = slices.Delete(got, j-1, j+1)
			break
		}
	}
	want := append(slices.Clone(common), "-l", "omst", "-i", key, "-W", "[10.1.0.7]:22", "head-a")
	if !slices.Equal(got, want) {
		t.Fatalf("last hop's ssh got\n%q\nwant\n%q", got, want)
	}
	// That ssh runs the first hop's, forwarding to the last hop.
	got = run(inner, "head-a", "22")
	want = append(slices.Clone(common), "-l", "admin", "-p", "2222", "-W", "[head-a]:22", "bastion")
	if !slices.Equal(got, want) {
		t.Fatalf("first hop's ssh got\n%q\nwant\n%q", got, want)
	}
}

func TestTrimStderr(t *testing.T) {
	in := "Warning: Permanently added '10.0.0.1' (ED25519) to the list of known hosts.\r\n\nssh: connect to host 10.1.0.3 port 22: No route to host\n"
	if got := TrimStderr([]byte(in)); got != "ssh: connect to host 10.1.0.3 port 22: No route to host" {
		t.Errorf("TrimStderr = %q", got)
	}
	long := strings.Repeat("x", 1000)
	if got := TrimStderr([]byte("a\nb\nc\nd\ne\nf\ng\n" + long)); len(got) > 410 || !strings.HasPrefix(got, "...") {
		t.Errorf("long: %d bytes: %.20q", len(got), got)
	}
	if got := TrimStderr([]byte("1\n2\n3\n4\n5\n6\n7\n8\n")); got != "3 / 4 / 5 / 6 / 7 / 8" {
		t.Errorf("last six lines: %q", got)
	}
}
