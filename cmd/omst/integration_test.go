package main

// Multi-process tests: real `omst daemon` processes on loopback, driven
// through the CLI exactly as a user would.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

var omstBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "omst-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	omstBin = filepath.Join(dir, "omst")
	build := exec.Command("go", "build", "-o", omstBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as make build: omst grid up copies it to hosts
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build omst:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is a running `omst daemon` process.
type daemon struct {
	home  string
	cmd   *exec.Cmd
	addrs []string
	log   *bytes.Buffer
	logw  *lockedWriter // d.log's writer (and lock)
	done  chan struct{}
}

// logText returns what the daemon logged so far.
func (d *daemon) logText() string {
	d.logw.mu.Lock()
	defer d.logw.mu.Unlock()
	return d.log.String()
}

// cliResult is what one CLI invocation printed and returned.
type cliResult struct {
	stdout, stderr string
	code           int
}

// omst runs the CLI with a time bound.
func omst(t *testing.T, timeout time.Duration, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, omstBin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		code = -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if ctx.Err() != nil {
			t.Fatalf("omst %v: timed out after %v; stderr: %s", args, timeout, errb.String())
		}
	}
	return cliResult{out.String(), errb.String(), code}
}

func mustOmst(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	r := omst(t, timeout, args...)
	if r.code != 0 {
		t.Fatalf("omst %v: exit %d: %s", args, r.code, r.stderr)
	}
	return r.stdout
}

// startDaemon starts a daemon on loopback with the given extra flags and
// waits until it answers `omst id`.
func startDaemon(t *testing.T, home string, extra ...string) *daemon {
	t.Helper()
	args := append([]string{"daemon", "--home", home, "--listen", "/ip4/127.0.0.1/tcp/0", "--log-level", "warn"}, extra...)
	d := &daemon{home: home, cmd: exec.Command(omstBin, args...), log: &bytes.Buffer{}, done: make(chan struct{})}
	d.cmd.Stdout = io.Discard
	d.logw = &lockedWriter{w: d.log}
	d.cmd.Stderr = d.logw
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := omst(t, 10*time.Second, "--home", home, "id")
		if r.code == 0 && strings.TrimSpace(r.stdout) != "" {
			d.addrs = strings.Fields(r.stdout)
			return d
		}
		select {
		case <-d.done:
			t.Fatalf("daemon %s exited early: %s", home, d.logText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon %s not ready after 30s: %s", home, d.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits (bounded), then kills.
func (d *daemon) stop(t *testing.T) {
	select {
	case <-d.done:
		return
	default:
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		t.Logf("daemon %s did not stop on SIGTERM; killing", d.home)
		d.cmd.Process.Kill()
		<-d.done
	}
}

func (d *daemon) status(t *testing.T) rpcbridge.Status {
	t.Helper()
	var st rpcbridge.Status
	out := mustOmst(t, 10*time.Second, "--home", d.home, "status", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v: %s", err, out)
	}
	return st
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func writeRandomFile(t *testing.T, path string, size int64, seed uint64) [32]byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(seed, seed+1))
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := int64(len(buf))
		if left < n {
			n = left
		}
		for i := 0; i < int(n); i += 8 {
			v := r.Uint64()
			for j := 0; j < 8 && i+j < int(n); j++ {
				buf[i+j] = byte(v >> (8 * j))
			}
		}
		f.Write(buf[:n])
		h.Write(buf[:n])
		left -= n
	}
	return [32]byte(h.Sum(nil))
}

func fileHash(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	return [32]byte(h.Sum(nil))
}

// tcpAddr picks the loopback TCP multiaddr of a daemon (for --parent).
func tcpAddr(t *testing.T, d *daemon) string {
	t.Helper()
	for _, a := range d.addrs {
		if strings.Contains(a, "/tcp/") {
			return a
		}
	}
	t.Fatalf("daemon %s has no TCP address in %v", d.home, d.addrs)
	return ""
}

// TestTreeBroadcast is the multi-process test: root, head and two
// workers; 256 MiB put at the root, fetched by both workers at once through
// the head; the root serves it about once; a third worker still gets it
// after the root is gone.
func TestTreeBroadcast(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process 256 MiB test skipped in -short mode")
	}
	dir := t.TempDir()
	root := startDaemon(t, filepath.Join(dir, "root"))
	head := startDaemon(t, filepath.Join(dir, "head"), "--parent", tcpAddr(t, root), "--site", "a")
	w1 := startDaemon(t, filepath.Join(dir, "w1"), "--parent", tcpAddr(t, head), "--site", "a")
	w2 := startDaemon(t, filepath.Join(dir, "w2"), "--parent", tcpAddr(t, head), "--site", "a")

	const size = 256 << 20
	src := filepath.Join(dir, "data.bin")
	want := writeRandomFile(t, src, size, 1)
	id := strings.TrimSpace(mustOmst(t, time.Minute, "--home", root.home, "put", "shared/init", src))
	if !strings.HasPrefix(id, "b") {
		t.Fatalf("put printed %q, want a CIDv1", id)
	}

	var wg sync.WaitGroup
	errs := make([]string, 2)
	for i, w := range []*daemon{w1, w2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := filepath.Join(dir, fmt.Sprintf("copy%d.bin", i))
			r := omst(t, 2*time.Minute, "--home", w.home, "get", "shared/init", "-o", out)
			if r.code != 0 {
				errs[i] = r.stderr
				return
			}
			if fileHash(t, out) != want {
				errs[i] = "bytes differ"
			}
		}()
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Fatalf("worker %d: %s", i+1, e)
		}
	}
	served := root.status(t).BytesServed
	if served < size || served > size*3/2 {
		t.Fatalf("root served %d bytes for a %d-byte blob fetched by two workers; want about one blob (coalesced at the head)", served, size)
	}
	if st := head.status(t); len(st.Children) != 2 || !st.ParentConnected {
		t.Fatalf("head status: %d children, parent connected %v", len(st.Children), st.ParentConnected)
	}

	root.stop(t)
	w3 := startDaemon(t, filepath.Join(dir, "w3"), "--parent", tcpAddr(t, head), "--site", "a")
	out := filepath.Join(dir, "copy3.bin")
	mustOmst(t, 2*time.Minute, "--home", w3.home, "get", "shared/init", "-o", out)
	if fileHash(t, out) != want {
		t.Fatal("third worker (root stopped) got different bytes")
	}
}

// TestResultPath: a worker's put is readable by name from its sibling, its
// head and the root.
func TestResultPath(t *testing.T) {
	dir := t.TempDir()
	root := startDaemon(t, filepath.Join(dir, "root"))
	head := startDaemon(t, filepath.Join(dir, "head"), "--parent", tcpAddr(t, root), "--site", "a")
	w1 := startDaemon(t, filepath.Join(dir, "w1"), "--parent", tcpAddr(t, head), "--site", "a")
	w2 := startDaemon(t, filepath.Join(dir, "w2"), "--parent", tcpAddr(t, head), "--site", "a")

	src := filepath.Join(dir, "result.bin")
	want := writeRandomFile(t, src, 9<<20+123, 2)
	mustOmst(t, time.Minute, "--home", w1.home, "put", "results/w1", src)
	for _, d := range []*daemon{w2, head, root} {
		out := filepath.Join(dir, "got-"+filepath.Base(d.home))
		// The announcement travels up asynchronously: allow it a moment.
		deadline := time.Now().Add(15 * time.Second)
		for {
			r := omst(t, time.Minute, "--home", d.home, "get", "results/w1", "-o", out)
			if r.code == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("get results/w1 at %s: exit %d: %s", d.home, r.code, r.stderr)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if fileHash(t, out) != want {
			t.Fatalf("%s got different bytes", d.home)
		}
	}
	// The root's listing shows the worker's result, with the worker as origin.
	var infos []rpcbridge.Info
	json.Unmarshal([]byte(mustOmst(t, 10*time.Second, "--home", root.home, "ls", "results/", "--json")), &infos)
	if len(infos) != 1 || infos[0].Name != "results/w1" || infos[0].Origin != w1.status(t).PeerID {
		t.Fatalf("root ls results/: %+v", infos)
	}
}

// TestCLIBadInput covers the CLI's error paths against a live daemon.
func TestCLIBadInput(t *testing.T) {
	dir := t.TempDir()
	root := startDaemon(t, filepath.Join(dir, "root"))
	src := filepath.Join(dir, "small")
	os.WriteFile(src, []byte("hello"), 0o644)

	r := omst(t, 10*time.Second, "--home", root.home, "get", "no/such/name", "-o", filepath.Join(dir, "x"))
	if r.code != exitNotFound || !strings.Contains(r.stderr, "no/such/name") {
		t.Fatalf("unknown name: exit %d, stderr %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Fatal("failed get left an output file")
	}
	for _, bad := range []string{"", "/abs", "a/../b", "a/./b", "x\x01y", strings.Repeat("n", 1025), "a//b"} {
		r := omst(t, 10*time.Second, "--home", root.home, "put", bad, src)
		if r.code != exitUsage || !strings.Contains(r.stderr, "invalid name") {
			t.Fatalf("put %q: exit %d, stderr %q", bad, r.code, r.stderr)
		}
		// A get's NAME is checked by the CLI (its trust boundary), before
		// it dials: nothing is created.
		r = omst(t, 10*time.Second, "--home", root.home, "get", bad, "-o", filepath.Join(dir, "bad"))
		if r.code != exitUsage || !strings.Contains(r.stderr, "invalid name") {
			t.Fatalf("get %q: exit %d, stderr %q", bad, r.code, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "bad")); err == nil {
			t.Fatalf("get %q left an output file", bad)
		}
	}
	// A second daemon on a home in use refuses, naming the problem.
	r = omst(t, 20*time.Second, "daemon", "--home", root.home, "--listen", "/ip4/127.0.0.1/tcp/0")
	if r.code == 0 || !strings.Contains(r.stderr, "in use") {
		t.Fatalf("second daemon on the same home: exit %d, stderr %q", r.code, r.stderr)
	}
	// A bad relay mode is a usage error naming the flag.
	r = omst(t, 20*time.Second, "daemon", "--home", t.TempDir(), "--listen", "/ip4/127.0.0.1/tcp/0", "--relay-mode", "teleport")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--relay-mode") {
		t.Fatalf("bad --relay-mode: exit %d, stderr %q", r.code, r.stderr)
	}
	// So is a negative --parent-retry.
	r = omst(t, 20*time.Second, "daemon", "--home", t.TempDir(), "--listen", "/ip4/127.0.0.1/tcp/0", "--parent-retry", "-5s")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--parent-retry") {
		t.Fatalf("negative --parent-retry: exit %d, stderr %q", r.code, r.stderr)
	}
	// No daemon at all.
	r = omst(t, 10*time.Second, "--home", filepath.Join(dir, "nobody"), "stat", "x")
	if r.code != exitUnreachable || !strings.Contains(r.stderr, "daemon") {
		t.Fatalf("no daemon: exit %d, stderr %q", r.code, r.stderr)
	}
	// Stat and ls work, rm removes.
	mustOmst(t, 10*time.Second, "--home", root.home, "put", "greeting", src)
	if out := mustOmst(t, 10*time.Second, "--home", root.home, "stat", "greeting"); !strings.Contains(out, "size") {
		t.Fatalf("stat: %q", out)
	}
	mustOmst(t, 10*time.Second, "--home", root.home, "rm", "greeting")
	if r := omst(t, 10*time.Second, "--home", root.home, "stat", "greeting"); r.code != exitNotFound {
		t.Fatalf("stat after rm: exit %d", r.code)
	}
	// Standard input and output.
	cmd := exec.Command(omstBin, "--home", root.home, "put", "piped")
	cmd.Stdin = strings.NewReader("through a pipe")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if out := mustOmst(t, 10*time.Second, "--home", root.home, "get", "piped"); out != "through a pipe" {
		t.Fatalf("get to stdout: %q", out)
	}
}

// TestUnreachableParent: a worker whose parent does not answer fails a get
// within a bounded time with an error naming the parent.
func TestUnreachableParent(t *testing.T) {
	dir := t.TempDir()
	// A real peer ID, but nothing listens at the address any more.
	ghost := startDaemon(t, filepath.Join(dir, "ghost"))
	parent := tcpAddr(t, ghost)
	ghost.stop(t)
	w := startDaemon(t, filepath.Join(dir, "w"), "--parent", parent)
	start := time.Now()
	r := omst(t, time.Minute, "--home", w.home, "get", "shared/init", "-o", filepath.Join(dir, "out"))
	took := time.Since(start)
	id := parent[strings.LastIndex(parent, "/")+1:]
	if r.code != exitUnreachable || !strings.Contains(r.stderr, id) {
		t.Fatalf("get with unreachable parent: exit %d, stderr %q (want exit %d naming %s)", r.code, r.stderr, exitUnreachable, id)
	}
	if took > 20*time.Second {
		t.Fatalf("get with unreachable parent took %v", took)
	}
}

// TestPreheatCLI: `omst put --preheat --site a` has site a's head fetch
// the blob at once; `omst preheat` does it for every head; a worker's get
// afterwards costs the root nothing.
func TestPreheatCLI(t *testing.T) {
	dir := t.TempDir()
	root := startDaemon(t, filepath.Join(dir, "root"))
	ha := startDaemon(t, filepath.Join(dir, "ha"), "--parent", tcpAddr(t, root), "--site", "a")
	hb := startDaemon(t, filepath.Join(dir, "hb"), "--parent", tcpAddr(t, root), "--site", "b")
	wa := startDaemon(t, filepath.Join(dir, "wa"), "--parent", tcpAddr(t, ha), "--site", "a")
	waitChildren := func(d *daemon, n int) {
		deadline := time.Now().Add(20 * time.Second)
		for len(d.status(t).Children) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: children did not connect", d.home)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitChildren(root, 2)
	waitChildren(ha, 1)
	src := filepath.Join(dir, "data.bin")
	want := writeRandomFile(t, src, 5<<20+3, 7)
	r := omst(t, time.Minute, "--home", root.home, "put", "--preheat", "--site", "a", "pre/x", src)
	if r.code != 0 || !strings.Contains(r.stderr, "site a") || strings.Contains(r.stderr, "site b") {
		t.Fatalf("put --preheat --site a: exit %d, stderr %q", r.code, r.stderr)
	}
	local := func(d *daemon) bool {
		out := mustOmst(t, 30*time.Second, "--home", d.home, "stat", "pre/x", "--json")
		return strings.Contains(out, `"local": true`)
	}
	if !local(ha) {
		t.Fatal("site a's head does not hold the blob after put --preheat")
	}
	out := mustOmst(t, time.Minute, "--home", root.home, "preheat", "pre/x")
	if !strings.Contains(out, "site a") || !strings.Contains(out, "site b") || strings.Count(out, "ok in") != 2 {
		t.Fatalf("preheat: %q", out)
	}
	if !local(hb) {
		t.Fatal("site b's head does not hold the blob after omst preheat")
	}
	served := root.status(t).BytesServed
	copyPath := filepath.Join(dir, "copy.bin")
	mustOmst(t, time.Minute, "--home", wa.home, "get", "pre/x", "-o", copyPath)
	if fileHash(t, copyPath) != want {
		t.Fatal("the worker got other bytes")
	}
	if more := root.status(t).BytesServed - served; more != 0 {
		t.Fatalf("the root served %d more bytes for a worker's get after the preheat", more)
	}
	if r := omst(t, 30*time.Second, "--home", root.home, "preheat", "pre/none"); r.code != 3 {
		t.Fatalf("preheat of an unknown name: exit %d (%s), want 3", r.code, r.stderr)
	}
}

// TestProvidersPeersCLI: a worker's result at site a is listed by
// `omst providers` at site b (head a among the holders), read there by its
// blob ID head to head (the root serves none of it), and `omst peers`
// shows each daemon's parent and children.
func TestProvidersPeersCLI(t *testing.T) {
	dir := t.TempDir()
	root := startDaemon(t, filepath.Join(dir, "root"))
	ha := startDaemon(t, filepath.Join(dir, "ha"), "--parent", tcpAddr(t, root), "--site", "a")
	hb := startDaemon(t, filepath.Join(dir, "hb"), "--parent", tcpAddr(t, root), "--site", "b")
	wa := startDaemon(t, filepath.Join(dir, "wa"), "--parent", tcpAddr(t, ha), "--site", "a")
	wb := startDaemon(t, filepath.Join(dir, "wb"), "--parent", tcpAddr(t, hb), "--site", "b")
	src := filepath.Join(dir, "result.bin")
	want := writeRandomFile(t, src, 6<<20+5, 9)
	id := strings.TrimSpace(mustOmst(t, time.Minute, "--home", wa.home, "put", "results/a/x", src))
	if _, ok := blob.ParseID(id); !ok {
		t.Fatalf("put printed %q, not a blob ID", id)
	}
	haID := ha.status(t).PeerID
	deadline := time.Now().Add(30 * time.Second)
	var res rpcbridge.Providers
	for {
		out := mustOmst(t, 30*time.Second, "--home", hb.home, "providers", "results/a/x", "--json")
		res = rpcbridge.Providers{}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("providers --json: %v: %q", err, out)
		}
		if slices.ContainsFunc(res.Providers, func(p rpcbridge.Provider) bool { return p.Peer == haID }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("head a not listed as a provider at site b within 30 s: %+v", res)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if res.ID != id {
		t.Fatalf("providers of the name: blob %s, the put said %s", res.ID, id)
	}
	for _, p := range res.Providers {
		if p.Peer == haID && (!p.Known || p.Site != "a" || !p.Gateway) {
			t.Fatalf("head a listed as %+v, want site a, gateway", p)
		}
	}
	if out := mustOmst(t, 30*time.Second, "--home", hb.home, "providers", id); !strings.Contains(out, haID) || !strings.Contains(out, "site a") {
		t.Fatalf("providers by ID, text: %q", out)
	}

	served := root.status(t).BytesServed
	got := filepath.Join(dir, "got.bin")
	mustOmst(t, time.Minute, "--home", wb.home, "get", id, "-o", got)
	if fileHash(t, got) != want {
		t.Fatal("get by blob ID at site b: other bytes")
	}
	if more := root.status(t).BytesServed - served; more != 0 {
		t.Fatalf("the root served %d bytes of a result that should flow head to head", more)
	}

	out := mustOmst(t, 10*time.Second, "--home", ha.home, "peers")
	for _, want := range []string{"parent", root.status(t).PeerID, "child", wa.status(t).PeerID} {
		if !strings.Contains(out, want) {
			t.Fatalf("peers at head a: no %q in %q", want, out)
		}
	}
	if r := omst(t, 30*time.Second, "--home", hb.home, "providers", "results/none"); r.code != exitNotFound {
		t.Fatalf("providers of an unknown name: exit %d (%s), want %d", r.code, r.stderr, exitNotFound)
	}
}
