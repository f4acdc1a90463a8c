package gridops

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/topology"
)

// fakeOmst stands in for the omst binary in the scripts' tests: `daemon
// --detach` starts `daemon --fg` in the background (it writes its pid to
// HOME/lock as the real one does, and ignores SIGTERM when HOME/deaf
// exists) and waits until the lock names a live process (a killed
// daemon's pid may still be there: waiting only for a non-empty lock let
// the restart's status run before the new daemon was up); `status --json` answers while it runs; `grid
// token` prints a token naming its role and prefix.
const fakeOmst = `#!/bin/sh
[ "$1" = --home ] || exit 2
H=$2; shift 2
[ "$1" = -q ] && shift
case "$1 $2" in
"daemon --detach")
  sh "$0" --home "$H" daemon --fg </dev/null >/dev/null 2>&1 &
  for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    p=$(cat "$H/lock" 2>/dev/null)
    [ -n "$p" ] && [ -n "$(tr -d '\000' < /proc/$p/cmdline 2>/dev/null)" ] && exit 0
    sleep 0.1
  done
  echo "the fake daemon did not start" >&2; exit 1 ;;
"daemon --fg")
  if [ -e "$H/deaf" ]; then trap '' TERM; else trap ': > "$H/lock"; exit 0' TERM; fi
  echo $$ > "$H/lock"
  while :; do sleep 0.1; done ;;
"status --json")
  p=$(cat "$H/lock" 2>/dev/null)
  if [ -n "$p" ] && [ -n "$(tr -d '\000' < /proc/$p/cmdline 2>/dev/null)" ]; then
    printf '{\n  "peer_id": "12D3Fake%s",\n  "cache_cap": 100\n}\n' "$p"; exit 0
  else
    echo "omst: no daemon answered at $H/omst.sock" >&2; exit 4
  fi ;;
"grid token")
  echo "note: something on stdout first"
  echo "omst-join-$4-$6"
  [ "$4" = reader ] && { echo "omst: --role reader: refused" >&2; exit 2; }
  exit 0 ;;
esac
exit 2
`

// runRemote runs a remote command as the login shell behind ssh would,
// with standard input from in, and parses its report.
func runRemote(t *testing.T, remote string, in io.Reader) (Report, string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", remote)
	cmd.Stdin = in
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v: %s\n%s", remote, err, stderr.String(), out)
	}
	r, err := ParseReport(string(out))
	if err != nil {
		t.Fatalf("%v in:\n%s", err, out)
	}
	return r, string(out)
}

// runScript runs a script as `sh -s` (ScriptCommand) on its standard input.
func runScript(t *testing.T, script string) (Report, string) {
	t.Helper()
	return runRemote(t, ScriptCommand, strings.NewReader(script))
}

// runCopy installs the file at path with CopyCommand.
func runCopy(t *testing.T, h *topology.Host, path string) Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, _ := runRemote(t, CopyCommand(h), f)
	return r
}

// TestScripts runs the remote scripts on this machine against a fake omst:
// copy, probe, start, probe, restart, stop with SIGKILL, purge, purge again,
// a root's purge keeping its grid key, and tokens.
func TestScripts(t *testing.T) {
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skip("needs /proc (Linux)")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "omst-fake")
	if err := os.WriteFile(fake, []byte(fakeOmst), 0o755); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(fakeOmst))
	hash := hex.EncodeToString(sum[:])
	gdir := filepath.Join(dir, "grid dir's") // quoting
	top := parse(t, "[root]\nhost = \"m\"\ndir = \"/placeholder\"\n")
	h := top.Root()
	h.Dir = gdir
	home := h.Home()
	t.Cleanup(func() {
		// Whatever a failed step left running.
		if b, err := os.ReadFile(filepath.Join(home, "lock")); err == nil {
			exec.Command("kill", "-KILL", strings.TrimSpace(string(b))).Run()
		}
	})

	if c := CopyCommand(h); strings.Contains(c, "\n") {
		t.Fatalf("CopyCommand has a newline (csh would refuse it): %q", c)
	}
	r := runCopy(t, h, fake)
	if !r.HasBinary || r.BinSHA256 != hash {
		t.Fatalf("copy: %+v, want hash %s", r, hash)
	}
	if fi, err := os.Stat(h.Bin()); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("the binary: %v, %v", fi, err)
	}

	r, _ = runScript(t, ProbeScript(h))
	if r.OS == "" || r.Machine == "" || r.BinSHA256 != hash || r.HasConfig || r.Pid != 0 || r.Status != nil ||
		!strings.Contains(r.StatusErr, "no daemon answered") || r.HasCert || r.HasGridKey {
		t.Fatalf("probe of a stopped host: %+v", r)
	}
	want := Want{BinSHA256: hash, Config: "site = \"a\"\nparent = ['/ip4/10.0.0.1/tcp/4040/p2p/X']\n"}
	a, err := Decide(topology.RoleWorker, want, r.Observation)
	if err != nil || a != (Action{WriteConfig: true, Start: true}) {
		t.Fatalf("Decide: %+v, %v", a, err)
	}
	r, out := runScript(t, ApplyScript(h, a, want.Config, 5*time.Second, 5*time.Second))
	if r.Status == nil || !strings.HasPrefix(r.Status.PeerID, "12D3Fake") || r.Status.CacheCap != 100 {
		t.Fatalf("apply: %+v\n%s", r, out)
	}
	if b, err := os.ReadFile(filepath.Join(home, "config.toml")); err != nil || string(b) != want.Config {
		t.Fatalf("config.toml: %q, %v", b, err)
	}
	if fi, err := os.Stat(home); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("home: %v, %v", fi, err)
	}

	r, _ = runScript(t, ProbeScript(h))
	if r.Pid == 0 || r.Status == nil || r.Config != want.Config || !r.HasConfig {
		t.Fatalf("probe of a running host: %+v", r)
	}
	if a, err := Decide(topology.RoleWorker, want, r.Observation); err != nil || a != (Action{}) {
		t.Fatalf("Decide on a current host: %+v, %v", a, err)
	}
	first := r.Pid

	// A new configuration: written, daemon restarted.
	want.Config += "cache-size = '1G'\n"
	a, _ = Decide(topology.RoleWorker, want, r.Observation)
	if a != (Action{WriteConfig: true, Stop: true, Start: true}) {
		t.Fatalf("Decide after a change: %+v", a)
	}
	r, _ = runScript(t, ApplyScript(h, a, want.Config, 5*time.Second, 5*time.Second))
	if r.Stop != "stopped" || r.Status == nil || r.Status.PeerID == "12D3Fake"+strconv.Itoa(first) {
		t.Fatalf("restart: %+v", r)
	}

	// A daemon deaf to SIGTERM is killed after the wait.
	os.WriteFile(filepath.Join(home, "deaf"), nil, 0o600)
	runScript(t, ApplyScript(h, Action{Stop: true, Start: true}, "", 5*time.Second, 5*time.Second))
	r, _ = runScript(t, ProbeScript(h))
	deaf := r.Pid
	os.Remove(filepath.Join(home, "deaf"))
	r, _ = runScript(t, ApplyScript(h, Action{Stop: true, Start: true}, "", time.Second, 5*time.Second))
	if r.Stop != "killed" || r.Status == nil {
		t.Fatalf("restart of a deaf daemon: %+v", r)
	}
	if b, _ := os.ReadFile("/proc/" + strconv.Itoa(deaf) + "/cmdline"); len(b) > 0 {
		t.Fatalf("pid %d still runs: %q", deaf, b)
	}

	r, _ = runScript(t, DownScript(h, false, 5*time.Second))
	if r.Stop != "stopped" {
		t.Fatalf("down: %+v", r)
	}
	r, _ = runScript(t, ProbeScript(h))
	if r.Pid != 0 || r.Status != nil {
		t.Fatalf("probe after down: %+v", r)
	}
	r, _ = runScript(t, DownScript(h, true, 5*time.Second))
	if r.Stop != "none" || r.Purge != "removed" {
		t.Fatalf("down --purge: %+v", r)
	}
	if _, err := os.Stat(gdir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after the purge: %v", err)
	}
	r, _ = runScript(t, DownScript(h, true, 5*time.Second))
	if r.Stop != "none" || r.Purge != "absent" {
		t.Fatalf("down --purge again: %+v", r)
	}

	// Something else in DIR stays, and DIR with it.
	runCopy(t, h, fake)
	os.WriteFile(filepath.Join(gdir, "mine"), nil, 0o600)
	if r, _ = runScript(t, DownScript(h, true, 5*time.Second)); r.Purge != "left" {
		t.Fatalf("purge with a stranger in DIR: %+v", r)
	}
	if ents, _ := os.ReadDir(gdir); len(ents) != 1 || ents[0].Name() != "mine" {
		t.Fatalf("left in DIR: %v", ents)
	}

	// The root of a closed grid keeps its grid key and identity.
	runCopy(t, h, fake)
	for _, f := range []string{"grid/grid.key", "grid/member.cert", "identity.key", "config.toml", ".hidden", "cache/x/y"} {
		p := filepath.Join(home, f)
		os.MkdirAll(filepath.Dir(p), 0o700)
		os.WriteFile(p, []byte("x"), 0o600)
	}
	r, _ = runScript(t, ProbeScript(h))
	if !r.HasGridKey || !r.HasCert || !r.HasConfig || r.Config != "x" {
		t.Fatalf("probe of a root: %+v", r)
	}
	if r, _ = runScript(t, DownScript(h, true, 5*time.Second)); r.Purge != "kept-grid" {
		t.Fatalf("purge of a root: %+v", r)
	}
	var left []string
	filepath.WalkDir(gdir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(gdir, p)
			left = append(left, rel)
		}
		return nil
	})
	if w := []string{GridMarker, "home/grid/grid.key", "home/grid/member.cert", "home/identity.key", "mine"}; !slices.Equal(left, w) {
		t.Fatalf("left after a root's purge: %v, want %v", left, w)
	}

	// Tokens.
	runCopy(t, h, fake)
	reqs := []TokenRequest{{Host: "a", Role: "head", Prefix: "results/a/"}, {Host: "r", Role: "reader", Prefix: "x/"}, {Host: "w", Role: "worker", Prefix: "results/a/w/"}}
	cmd := exec.Command("sh", "-c", ScriptCommand)
	cmd.Stdin = strings.NewReader(TokenScript(h, reqs, time.Hour))
	tout, err := cmd.Output()
	if err != nil {
		t.Fatalf("token script: %v\n%s", err, tout)
	}
	toks, errs, err := ParseTokens(string(tout), len(reqs))
	if err != nil {
		t.Fatal(err)
	}
	if toks[0] != "omst-join-head-results/a/" || errs[0] != nil || toks[2] != "omst-join-worker-results/a/w/" || errs[2] != nil {
		t.Fatalf("tokens %q, %v", toks, errs)
	}
	if toks[1] != "" || errs[1] == nil || !strings.Contains(errs[1].Error(), "exit 2") || !strings.Contains(errs[1].Error(), "refused") {
		t.Fatalf("the refused token: %q, %v", toks[1], errs[1])
	}
}

func TestParseReport(t *testing.T) {
	out := "motd noise\n" + Marker + "uname Linux x86_64\n" + Marker + "binary " + strings.Repeat("Ab", 32) + "  /opt/omst/bin/omst\n" +
		Marker + "cert\n" + Marker + "pid 42\n" + Marker + "config-begin\n" + "a = 1\n\n" + "\n" + Marker + "config-end\n" +
		Marker + "status-begin\nomst: a warning first\n{\"peer_id\": \"12D3X\", \"parent_connected\": true}\n" + Marker + "status-end\n" +
		Marker + "end\n"
	r, err := ParseReport(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.OS != "Linux" || r.Machine != "x86_64" || r.BinSHA256 != strings.Repeat("ab", 32) || !r.HasCert || r.HasGridKey || r.Pid != 42 ||
		r.Config != "a = 1\n\n" || r.Status == nil || r.Status.PeerID != "12D3X" || !r.Status.ParentConnected {
		t.Fatalf("ParseReport: %+v", r)
	}
	// An empty configuration file, a binary no tool could hash, no JSON.
	r, err = ParseReport(Marker + "binary \n" + Marker + "config-begin\n\n" + Marker + "config-end\n" + Marker + "status-begin\nnope\n" + Marker + "status-end\n" + Marker + "end\n")
	if err != nil || !r.HasBinary || r.BinSHA256 != "" || !r.HasConfig || r.Config != "" || r.Status != nil || r.StatusErr == "" {
		t.Fatalf("ParseReport: %+v, %v", r, err)
	}
	for _, bad := range []string{"", Marker + "uname Linux x86_64\n", Marker + "config-begin\na\n" + Marker + "end\n"} {
		if _, err := ParseReport(bad); err == nil {
			t.Errorf("ParseReport(%q): no error", bad)
		}
	}
}

func TestParseTokens(t *testing.T) {
	out := Marker + "token-begin 1\nnote: x\nomst-join-B\n" + Marker + "token-end 0\n" +
		Marker + "token-begin 0\n" + Marker + "token-end 0\n" +
		Marker + "token-begin 2\nomst: no grid key\n" + Marker + "token-end 1\n" + Marker + "end\n"
	toks, errs, err := ParseTokens(out, 4)
	if err != nil {
		t.Fatal(err)
	}
	if toks[1] != "omst-join-B" || errs[1] != nil {
		t.Errorf("token 1: %q, %v", toks[1], errs[1])
	}
	for i, want := range map[int]string{0: "printed nothing", 2: "no grid key", 3: "no token issued"} {
		if toks[i] != "" || errs[i] == nil || !strings.Contains(errs[i].Error(), want) {
			t.Errorf("token %d: %q, %v; want an error with %q", i, toks[i], errs[i], want)
		}
	}
	if _, _, err := ParseTokens(Marker+"token-begin 0\nomst-join-A\n"+Marker+"token-end 0\n", 1); err == nil {
		t.Error("a script cut short: no error")
	}
}
