package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/peerhost"
)

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func newPeerID(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestGridCLI(t *testing.T) {
	home := filepath.Join(t.TempDir(), "root-home") // created by init
	const tmo = 30 * time.Second
	grid1 := func(args ...string) cliResult {
		return omst(t, tmo, append([]string{"--home", home, "grid"}, args...)...)
	}
	mustGrid := func(args ...string) cliResult {
		t.Helper()
		r := grid1(args...)
		if r.code != 0 {
			t.Fatalf("omst grid %v: exit %d: %s", args, r.code, r.stderr)
		}
		return r
	}

	// init prints the grid ID; again, the same one.
	r := mustGrid("init")
	id := lastLine(r.stdout)
	if !strings.HasPrefix(id, "grid-") || !strings.Contains(r.stderr, "created") {
		t.Fatalf("init: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	k, err := peerhost.LoadOrCreateKey(filepath.Join(home, "identity.key"))
	if err != nil {
		t.Fatal(err)
	}
	self, _ := peer.IDFromPrivateKey(k)
	if !strings.Contains(r.stderr, self.String()) {
		t.Fatalf("init does not name the root's peer %s: %q", self, r.stderr)
	}
	if st, err := os.Stat(home); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("home: %v, %v", st, err)
	}
	r = mustGrid("init")
	if lastLine(r.stdout) != id || !strings.Contains(r.stderr, "already existed") {
		t.Fatalf("init again: stdout %q (want %s), stderr %q", r.stdout, id, r.stderr)
	}

	// token: the token alone on the last line, with the role and prefixes.
	r = mustGrid("token", "--role", "worker", "--prefix", "results/siteA/", "--prefix", "logs/", "--ttl", "2h", "--cert-ttl", "3d")
	tok, err := grid.ParseToken(lastLine(r.stdout))
	if err != nil {
		t.Fatalf("token %q: %v", r.stdout, err)
	}
	if tok.Role != grid.RoleWorker || !slices.Equal(tok.Prefixes, []string{"results/siteA/", "logs/"}) || tok.CertTTL != 3*24*time.Hour ||
		grid.IDOf(tok.GridKey).String() != id {
		t.Fatalf("token %+v", tok)
	}
	if d := time.Until(time.Unix(tok.NotAfter, 0)); d < 2*time.Hour-time.Minute || d > 2*time.Hour {
		t.Fatalf("token expires in %v, want 2h", d)
	}
	if !strings.Contains(r.stderr, "worker") || !strings.Contains(r.stderr, `"results/siteA/"`) {
		t.Fatalf("token stderr %q", r.stderr)
	}
	mustGrid("token", "--role", "head") // a head with no prefix: allowed

	// Bad flags: exit 2, naming the flag.
	for _, tc := range []struct {
		flag string // named in the error
		args []string
	}{
		{"--ttl", []string{"token", "--role", "worker", "--ttl", "31d"}},
		{"--ttl", []string{"token", "--role", "worker", "--ttl", "0s"}},
		{"--ttl", []string{"token", "--role", "worker", "--ttl", "soon"}},
		{"--cert-ttl", []string{"token", "--role", "worker", "--cert-ttl", "1d12h"}},
		{"--role", []string{"token", "--role", "boss"}},
		{"--role", []string{"token"}},
		{"--prefix", []string{"token", "--role", "client", "--prefix", "x/"}},
		{"--prefix", []string{"token", "--role", "worker", "--prefix", "/abs"}},
		{"--cert-ttl", []string{"admit", newPeerID(t).String(), "--role", "head", "--cert-ttl", "40d"}},
		{"peer ID", []string{"admit", "not-a-peer-id", "--role", "head"}},
	} {
		r := grid1(tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.flag) {
			t.Errorf("omst grid %v: exit %d, stderr %q; want %d naming %s", tc.args, r.code, r.stderr, exitUsage, tc.flag)
		}
	}

	// admit, then members lists it; revoke marks it revoked.
	p := newPeerID(t)
	r = mustGrid("admit", p.String(), "--role", "head", "--prefix", "results/siteA/", "--cert-ttl", "2d")
	pub, _, c, err := grid.ParseCertText(lastLine(r.stdout))
	if err != nil {
		t.Fatalf("admit printed %q: %v", r.stdout, err)
	}
	if grid.IDOf(pub).String() != id || c.Peer != p || c.Role != grid.RoleHead || !slices.Equal(c.Prefixes, []string{"results/siteA/"}) {
		t.Fatalf("admitted %+v", c)
	}
	if !strings.Contains(r.stderr, "omst daemon --join "+lastLine(r.stdout)) {
		t.Fatalf("admit stderr %q: want how to start the node", r.stderr)
	}
	r = mustGrid("members")
	var line string
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, p.String()) {
			line = l
		}
	}
	if f := strings.Fields(line); len(f) != 7 || f[1] != "head" || f[2] != "results/siteA/" || f[5] != "valid" || f[6] != "admit" {
		t.Fatalf("members:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, self.String()) || !strings.HasPrefix(r.stdout, "PEER") {
		t.Fatalf("members without the root or a header:\n%s", r.stdout)
	}

	r = mustGrid("revoke", p.String())
	if !strings.Contains(r.stdout, "revoked 1 certificate of "+p.String()) || !strings.Contains(r.stdout, "revocation list 1 ") {
		t.Fatalf("revoke: %q", r.stdout)
	}
	r = grid1("revoke", newPeerID(t).String())
	if r.code != exitError || !strings.Contains(r.stderr, "is not a member of "+id) {
		t.Fatalf("revoke a stranger: exit %d, %q", r.code, r.stderr)
	}

	// members --json parses, with the revocation.
	r = mustGrid("members", "--json")
	var ms []struct {
		Peer      string   `json:"peer"`
		Role      string   `json:"role"`
		Prefixes  []string `json:"prefixes"`
		Serial    uint64   `json:"serial"`
		NotBefore string   `json:"not_before"`
		NotAfter  string   `json:"not_after"`
		State     string   `json:"state"`
		How       string   `json:"how"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &ms); err != nil || len(ms) != 2 {
		t.Fatalf("members --json %q: %v", r.stdout, err)
	}
	for _, m := range ms {
		nb, err1 := time.Parse(time.RFC3339, m.NotBefore)
		na, err2 := time.Parse(time.RFC3339, m.NotAfter)
		if err1 != nil || err2 != nil || !na.After(nb) || m.Prefixes == nil {
			t.Fatalf("member %+v: %v, %v", m, err1, err2)
		}
		switch m.Peer {
		case p.String():
			if m.State != "revoked" || m.Role != "head" || m.How != "admit" || na.Sub(nb) != 48*time.Hour {
				t.Fatalf("the revoked member: %+v", m)
			}
		case self.String():
			if m.State != "valid" || m.Role != "client" || m.How != "init" {
				t.Fatalf("the root: %+v", m)
			}
		default:
			t.Fatalf("a member nobody admitted: %+v", m)
		}
	}

	// A home that is not the root's: exit 1, saying where to run it.
	other := t.TempDir()
	for _, args := range [][]string{
		{"token", "--role", "worker"},
		{"admit", p.String(), "--role", "reader"},
		{"revoke", p.String()},
		{"members"},
	} {
		r := omst(t, tmo, append([]string{"--home", other, "grid"}, args...)...)
		if r.code != exitError || !strings.Contains(r.stderr, "no grid key in "+filepath.Join(other, "grid")+": run this on the grid's root (omst grid init there)") {
			t.Errorf("omst grid %v off the root: exit %d, %q", args, r.code, r.stderr)
		}
	}
}
