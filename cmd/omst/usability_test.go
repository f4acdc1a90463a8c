package main

// Tests of the rough edges a new user meets: the README's "Using it"
// block run as is, omst wait and omst daemon --detach, two daemons on one
// port, exit statuses, error texts.

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stopDetached stops the daemon whose pid is in home/lock (a detached
// daemon is no child of the test) and waits until it is gone.
func stopDetached(t *testing.T, home string) {
	b, err := os.ReadFile(filepath.Join(home, "lock"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return
	}
	syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Logf("daemon %s (pid %d) did not stop on SIGTERM; killing", home, pid)
			syscall.Kill(pid, syscall.SIGKILL)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readmeBlock returns the shell block of the README's "Using it" section.
func readmeBlock(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## Using it")
	if i < 0 {
		t.Fatal(`README.md has no "## Using it" section`)
	}
	s = s[i:]
	start := strings.Index(s, "\n```sh\n")
	if start < 0 {
		t.Fatal(`no sh block in README.md's "Using it"`)
	}
	s = s[start+len("\n```sh\n"):]
	end := strings.Index(s, "\n```")
	if end < 0 {
		t.Fatal("unterminated sh block in README.md")
	}
	return s[:end+1]
}

// TestReadmeUsingIt runs the README's "Using it" block as a user pastes it:
// unchanged, under sh -e, from an unrelated directory, with a fresh HOME
// and omst on PATH: every command must succeed, in order, with no sleep
// between, and nothing may be written into the directory it was pasted
// in, nor at a fixed path (the block once used /tmp/root and wrote its
// 32 MiB files into the checkout). TMPDIR puts its mktemp -d here.
func TestReadmeUsingIt(t *testing.T) {
	block := readmeBlock(t)
	if strings.Contains(block, "/tmp/") || strings.Contains(block, "$PWD/bin") {
		t.Fatalf("README block uses fixed paths (/tmp/...) or the checkout ($PWD/bin): it works only from the repository's root, and clashes with another user's:\n%s", block)
	}
	tmp, cwd := t.TempDir(), t.TempDir()
	scratch := func() string {
		dirs, _ := filepath.Glob(filepath.Join(tmp, "tmp.*"))
		if len(dirs) != 1 {
			return ""
		}
		return dirs[0]
	}
	t.Cleanup(func() {
		if dir := scratch(); dir != "" {
			for _, h := range []string{"root", "head", "w1"} {
				stopDetached(t, filepath.Join(dir, h))
			}
		}
	})
	cmd := exec.Command("sh", "-e", "-x", "-c", block)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(omstBin)+":"+os.Getenv("PATH"), "OMST_HOME=", "OMST_SOCKET=",
		"TMPDIR="+tmp, "HOME="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("README block failed: %v\nstdout:\n%s\nstderr:\n%s\nroot's log:\n%s", err, out.String(), errb.String(), readLog(scratch(), "root"))
		}
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("README block did not finish in 3 minutes\nstdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	if left, _ := os.ReadDir(cwd); len(left) > 0 {
		t.Errorf("README block wrote %d entries into the directory it ran from (%s, ...)", len(left), left[0].Name())
	}
	dir := scratch()
	if dir == "" {
		t.Fatalf("README block made no scratch directory with mktemp -d")
	}
	if fileHash(t, filepath.Join(dir, "copy.bin")) != fileHash(t, filepath.Join(dir, "data.bin")) {
		t.Fatal("copy.bin differs from data.bin")
	}
	if !strings.Contains(out.String(), "results/w1") {
		t.Fatalf("the root's ls results/ did not list results/w1:\n%s", out.String())
	}
	for _, h := range []string{"root", "head", "w1"} {
		if _, err := os.Stat(filepath.Join(dir, h, "daemon.log")); err != nil {
			t.Errorf("detached daemon %s: %v", h, err)
		}
	}
}

func readLog(dir, home string) string {
	b, _ := os.ReadFile(filepath.Join(dir, home, "daemon.log"))
	return string(b)
}

// TestWaitAndDetach: omst wait times out with exit 4 when no daemon
// answers, returns 0 at once after `omst daemon &`; --detach returns
// once the daemon answers, and fails with its log when it cannot start.
func TestWaitAndDetach(t *testing.T) {
	dir := t.TempDir()
	r := omst(t, 10*time.Second, "--home", filepath.Join(dir, "none"), "wait", "--timeout", "300ms")
	if r.code != exitUnreachable || !strings.Contains(r.stderr, "no omst daemon answered") || !strings.Contains(r.stderr, "300ms") {
		t.Fatalf("wait without a daemon: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := omst(t, 10*time.Second, "wait", "--timeout", "-1s"); r.code != exitUsage {
		t.Fatalf("wait --timeout -1s: exit %d, stderr %q", r.code, r.stderr)
	}

	// omst daemon &, then omst wait, then a command: no race.
	home := filepath.Join(dir, "bg")
	d := exec.Command(omstBin, "daemon", "--home", home, "--listen", "/ip4/127.0.0.1/tcp/0", "--log-level", "warn")
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Process.Signal(syscall.SIGTERM); d.Wait() })
	mustOmst(t, 40*time.Second, "--home", home, "wait")
	if out := mustOmst(t, 10*time.Second, "--home", home, "id"); !strings.Contains(out, "/p2p/") {
		t.Fatalf("id right after wait: %q", out)
	}

	// --detach: returns with the addresses, the daemon answers at once.
	dh := filepath.Join(dir, "detached")
	t.Cleanup(func() { stopDetached(t, dh) })
	r = omst(t, time.Minute, "daemon", "--home", dh, "--listen", "/ip4/127.0.0.1/tcp/0", "--detach")
	if r.code != 0 || !strings.Contains(r.stdout, "/p2p/") || !strings.Contains(r.stderr, "daemon.log") {
		t.Fatalf("daemon --detach: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if out := mustOmst(t, 10*time.Second, "--home", dh, "id"); strings.TrimSpace(out) != strings.TrimSpace(r.stdout) {
		t.Fatalf("id %q, --detach printed %q", out, r.stdout)
	}
	// A second one on that home refuses, naming the pid.
	r = omst(t, time.Minute, "daemon", "--home", dh, "--listen", "/ip4/127.0.0.1/tcp/0", "--detach")
	if r.code == 0 || !strings.Contains(r.stderr, "already runs") {
		t.Fatalf("second daemon --detach on a home in use: exit %d, stderr %q", r.code, r.stderr)
	}
	// A daemon that exits while starting: its exit status and log lines.
	r = omst(t, time.Minute, "daemon", "--home", filepath.Join(dir, "bad"), "--relay-mode", "teleport", "--detach")
	if r.code != exitUsage || !strings.Contains(r.stderr, "exited while starting") || !strings.Contains(r.stderr, "--relay-mode") {
		t.Fatalf("daemon --detach with a bad flag: exit %d, stderr %q", r.code, r.stderr)
	}
}

// freePort returns a port free on loopback for both TCP and UDP.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		c, err := net.ListenPacket("udp4", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// TestTwoDaemonsOnePort: a second daemon on the port of a running one
// refuses to start, naming the port and the first daemon; so does one
// whose UDP (QUIC) side alone is taken, which go-libp2p would start on TCP
// only.
func TestTwoDaemonsOnePort(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	listen := []string{"--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port), "--listen", fmt.Sprintf("/ip4/127.0.0.1/udp/%d/quic-v1", port)}
	first := startDaemon(t, filepath.Join(dir, "first"), listen...)
	r := omst(t, 30*time.Second, append([]string{"daemon", "--home", filepath.Join(dir, "second")}, listen...)...)
	pid := strconv.Itoa(first.cmd.Process.Pid)
	if r.code == 0 || !strings.Contains(r.stderr, fmt.Sprintf("port %d", port)) || !strings.Contains(r.stderr, "pid "+pid) ||
		!strings.Contains(r.stderr, "first") {
		t.Fatalf("second daemon on port %d: exit %d, stderr %q (want a refusal naming the port and pid %s)", port, r.code, r.stderr, pid)
	}

	// Only QUIC's UDP port taken (here by a daemon listening on QUIC only).
	port2 := freePort(t)
	startDaemon(t, filepath.Join(dir, "quic"), "--listen", fmt.Sprintf("/ip4/127.0.0.1/udp/%d/quic-v1", port2))
	r = omst(t, 30*time.Second, "daemon", "--home", filepath.Join(dir, "third"),
		"--listen", fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", port2), "--listen", fmt.Sprintf("/ip4/127.0.0.1/udp/%d/quic-v1", port2))
	if r.code == 0 || !strings.Contains(r.stderr, fmt.Sprintf("UDP port %d", port2)) {
		t.Fatalf("daemon whose QUIC port is taken: exit %d, stderr %q", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "OnStart hook failed") {
		t.Errorf("libp2p's start-up noise in the error: %q", r.stderr)
	}
}

// TestExitStatuses: usage errors exit 2; a command interrupted by SIGINT
// exits 130, by SIGTERM 143, saying so without "context canceled".
func TestExitStatuses(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"get"},                  // missing argument
		{"get", "a", "b"},        // one too many
		{"ls", "--bogus"},        // unknown flag
		{"stat", "--json=maybe"}, // bad flag value
		{"bogus"},                // unknown command
		{"id", "extra"},          // arguments to a command taking none
		{"daemon", "--window", "x"},
	} {
		r := omst(t, 10*time.Second, append([]string{"--home", filepath.Join(dir, "none")}, args...)...)
		if r.code != exitUsage {
			t.Errorf("omst %v: exit %d, want %d (usage); stderr %q", args, r.code, exitUsage, r.stderr)
		}
	}

	d := startDaemon(t, filepath.Join(dir, "d"))
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		// A put from a pipe that never closes blocks until the signal.
		cmd := exec.Command(omstBin, "--home", d.home, "put", "never/done", "-")
		pr, pw, _ := os.Pipe()
		cmd.Stdin = pr
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pr.Close()
		pw.Write([]byte("some bytes"))
		time.Sleep(500 * time.Millisecond)
		cmd.Process.Signal(sig)
		err := cmd.Wait()
		pw.Close()
		code := cmd.ProcessState.ExitCode()
		if want := 128 + int(sig); code != want {
			t.Errorf("put interrupted by %v: exit %d (%v), want %d; stderr %q", sig, code, err, want, errb.String())
		}
		msg := errb.String()
		if strings.Contains(msg, "context canceled") || !strings.Contains(msg, "interrupted") {
			t.Errorf("put interrupted by %v: stderr %q, want it to say interrupted, without context canceled", sig, msg)
		}
	}
	if r := omst(t, 10*time.Second, "--home", d.home, "stat", "never/done"); r.code != exitNotFound {
		t.Fatalf("an interrupted put stored the name: stat exit %d", r.code)
	}
	// omst wait, interrupted.
	cmd := exec.Command(omstBin, "--home", filepath.Join(dir, "none"), "wait", "--timeout", "1m")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	cmd.Start()
	time.Sleep(300 * time.Millisecond)
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 || !regexp.MustCompile(`^omst: interrupted \(SIGINT\)\n$`).MatchString(errb.String()) {
		t.Errorf("wait interrupted: exit %d, stderr %q", code, errb.String())
	}
}

// TestLsJSONLikeStat: at a root that holds no copy of a worker's result
// (--no-replicate), ls --json gives the chunk size and count stat gives
// (before, ls said 0: the manifest was not here), and both give the put
// time in RFC 3339.
func TestLsJSONLikeStat(t *testing.T) {
	dir := t.TempDir()
	root := startDaemon(t, filepath.Join(dir, "root"), "--no-replicate")
	w := startDaemon(t, filepath.Join(dir, "w"), "--parent", tcpAddr(t, root))
	src := filepath.Join(dir, "result.bin")
	writeRandomFile(t, src, 3<<20+17, 11)
	mustOmst(t, time.Minute, "--home", w.home, "put", "--chunk-size", "512K", "results/w", src)
	var ls []infoJSON
	deadline := time.Now().Add(15 * time.Second)
	for {
		out := mustOmst(t, 30*time.Second, "--home", root.home, "ls", "results/", "--json")
		ls = nil
		if err := json.Unmarshal([]byte(out), &ls); err != nil {
			t.Fatalf("ls --json: %v: %s", err, out)
		}
		if len(ls) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the root does not list results/w: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if ls[0].ChunkSize != 512<<10 || ls[0].Chunks != 7 {
		t.Fatalf("ls --json at the root: chunk_size %d, chunks %d; want 524288 and 7", ls[0].ChunkSize, ls[0].Chunks)
	}
	var st infoJSON
	out := mustOmst(t, 30*time.Second, "--home", root.home, "stat", "results/w", "--json")
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("stat --json: %v: %s", err, out)
	}
	if st.ChunkSize != ls[0].ChunkSize || st.Chunks != ls[0].Chunks || st.Time != ls[0].Time {
		t.Fatalf("stat %+v, ls %+v: chunk fields or time differ", st, ls[0])
	}
	pt, err := time.Parse(time.RFC3339Nano, st.Time)
	if err != nil || time.Since(pt) > 5*time.Minute || time.Since(pt) < 0 {
		t.Fatalf("put time %q: %v (want RFC 3339, a moment ago)", st.Time, err)
	}
	if !strings.Contains(out, `"time": "`) {
		t.Fatalf("stat --json time is not a string: %s", out)
	}
}

// TestGetDebugLog: with --log-level debug, a get logs where the name was
// found, the blob and the sources its fetch starts from, and its end with
// the bytes, the time and where they came from.
func TestGetDebugLog(t *testing.T) {
	dir := t.TempDir()
	root := startDaemon(t, filepath.Join(dir, "root"))
	w := startDaemon(t, filepath.Join(dir, "w"), "--parent", tcpAddr(t, root), "--log-level", "debug")
	src := filepath.Join(dir, "data.bin")
	writeRandomFile(t, src, 2<<20+5, 3)
	mustOmst(t, time.Minute, "--home", root.home, "put", "dbg/x", src)
	mustOmst(t, time.Minute, "--home", w.home, "get", "dbg/x", "-o", filepath.Join(dir, "copy"))
	rootID := root.status(t).PeerID
	deadline := time.Now().Add(10 * time.Second)
	for {
		log := w.logText()
		ok := true
		for _, re := range []string{
			`level=DEBUG msg="name lookup" name=dbg/x via=tree id=\S+ size=2097157`,
			`level=DEBUG msg="get: resolved" name=dbg/x .*chunks=3 .*local=false sources="parent ` + rootID,
			`level=DEBUG msg="get: done" name=dbg/x .*bytes=2097157 took=\S+ MB_per_s=\S+ from="parent ` + rootID + `: 2097157"`,
		} {
			if !regexp.MustCompile(re).MatchString(log) {
				ok = false
				if time.Now().After(deadline) {
					t.Fatalf("the worker's debug log has no line matching %s:\n%s", re, log)
				}
			}
		}
		if ok {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestGetOutputs: get -o writes the same way whether standard error is a
// terminal (progress bar) or not: a new file is 0644, an existing one keeps
// its permission bits, group and (as root) owner, /dev/null and a FIFO
// are written in place, a symlink's target is replaced and the link kept;
// get > FILE draws a progress line on a terminal too.
func TestGetOutputs(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, filepath.Join(dir, "d"))
	src := filepath.Join(dir, "data.bin")
	want := writeRandomFile(t, src, 3<<20+7, 5)
	mustOmst(t, time.Minute, "--home", d.home, "put", "out/x", src)

	for _, mode := range []string{"pipe", "terminal"} {
		t.Run(mode, func(t *testing.T) {
			var pty *ptyOut
			if mode == "terminal" {
				pty = newPTY(t)
			}
			run := func(stdout *os.File, args ...string) (int, string) {
				t.Helper()
				cmd := exec.Command(omstBin, append([]string{"--home", d.home}, args...)...)
				var errb bytes.Buffer
				cmd.Stderr = &errb
				if pty != nil {
					cmd.Stderr = pty.Slave
				}
				if stdout != nil {
					cmd.Stdout = stdout
				}
				done := make(chan struct{})
				time.AfterFunc(time.Minute, func() {
					select {
					case <-done:
					default:
						cmd.Process.Kill()
					}
				})
				err := cmd.Run()
				close(done)
				if err != nil {
					if _, ok := err.(*exec.ExitError); !ok {
						t.Fatalf("omst %v: %v", args, err)
					}
				}
				return cmd.ProcessState.ExitCode(), errb.String()
			}
			sub := t.TempDir()
			os.Chmod(sub, 0o755)

			// A new file: 0644 whatever the umask (the daemon writes it).
			f := filepath.Join(sub, "new.bin")
			if code, e := run(nil, "get", "out/x", "-o", f); code != 0 {
				t.Fatalf("get -o new file: exit %d: %s", code, e)
			}
			if fileHash(t, f) != want {
				t.Fatal("get -o new file: other bytes")
			}
			if fi, _ := os.Stat(f); fi.Mode().Perm() != 0o644 {
				t.Errorf("get -o new file: mode %v, want 0644", fi.Mode().Perm())
			}

			// An existing file: replaced with its permission bits, group
			// and (as root) owner kept: a private file stays private.
			for _, perm := range []os.FileMode{0o600, 0o640} {
				f := filepath.Join(sub, fmt.Sprintf("old-%o.bin", perm))
				os.WriteFile(f, []byte("old"), perm)
				os.Chmod(f, perm)
				uid, gid := os.Geteuid(), os.Getegid()
				if uid == 0 {
					uid, gid = 4343, 4242
					os.Chown(f, uid, gid)
				}
				if code, e := run(nil, "get", "out/x", "-o", f); code != 0 {
					t.Fatalf("get -o a %04o file: exit %d: %s", perm, code, e)
				}
				if fileHash(t, f) != want {
					t.Fatalf("get -o a %04o file: other bytes", perm)
				}
				fi, _ := os.Stat(f)
				sys := fi.Sys().(*syscall.Stat_t)
				if fi.Mode().Perm() != perm || int(sys.Uid) != uid || int(sys.Gid) != gid {
					t.Errorf("get -o a %04o file of uid %d gid %d: mode %04o uid %d gid %d", perm, uid, gid, fi.Mode().Perm(), sys.Uid, sys.Gid)
				}
			}

			// /dev/null: written in place, not replaced.
			if code, e := run(nil, "get", "out/x", "-o", "/dev/null"); code != 0 {
				t.Fatalf("get -o /dev/null: exit %d: %s", code, e)
			}
			if fi, err := os.Stat("/dev/null"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
				t.Fatalf("/dev/null is no longer a character device: %v %v", fi.Mode(), err)
			}

			// A FIFO: its reader gets the bytes.
			fifo := filepath.Join(sub, "fifo")
			if err := unixMkfifo(fifo); err != nil {
				t.Fatal(err)
			}
			got := make(chan [32]byte, 1)
			go func() {
				r, err := os.Open(fifo)
				if err != nil {
					got <- [32]byte{}
					return
				}
				defer r.Close()
				h := sha256.New()
				io.Copy(h, r)
				got <- [32]byte(h.Sum(nil))
			}()
			if code, e := run(nil, "get", "out/x", "-o", fifo); code != 0 {
				t.Fatalf("get -o FIFO: exit %d: %s", code, e)
			}
			select {
			case h := <-got:
				if h != want {
					t.Fatal("get -o FIFO: the reader got other bytes")
				}
			case <-time.After(30 * time.Second):
				t.Fatal("get -o FIFO: the reader got no end of file")
			}
			if fi, _ := os.Lstat(fifo); fi.Mode()&os.ModeNamedPipe == 0 {
				t.Fatalf("the FIFO was replaced: mode %v", fi.Mode())
			}

			// A symlink: its target gets the bytes, the link stays.
			target := filepath.Join(sub, "target.bin")
			os.WriteFile(target, []byte("old"), 0o600)
			link := filepath.Join(sub, "link.bin")
			os.Symlink(target, link)
			if code, e := run(nil, "get", "out/x", "-o", link); code != 0 {
				t.Fatalf("get -o symlink: exit %d: %s", code, e)
			}
			if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
				t.Fatal("get -o symlink replaced the link")
			}
			if fileHash(t, target) != want {
				t.Fatal("get -o symlink: the target does not hold the blob")
			}

			// get > FILE.
			outf, err := os.Create(filepath.Join(sub, "stdout.bin"))
			if err != nil {
				t.Fatal(err)
			}
			code, e := run(outf, "get", "out/x")
			outf.Close()
			if code != 0 || fileHash(t, outf.Name()) != want {
				t.Fatalf("get > file: exit %d: %s", code, e)
			}
			if pty != nil {
				deadline := time.Now().Add(5 * time.Second)
				for strings.Count(pty.Output(), "get out/x") < 7 && time.Now().Before(deadline) {
					time.Sleep(50 * time.Millisecond)
				}
				out := pty.Output()
				// One final line per get: "get out/x  3.0 MiB in 0.1s, ... MiB/s".
				if n := regexp.MustCompile(`get out/x  3\.0 MiB in [0-9]+(ms|s)`).FindAllStringIndex(out, -1); len(n) != 7 {
					t.Fatalf("terminal: %d final progress lines for 7 gets, want 7:\n%q", len(n), out)
				}
			}
		})
	}
}

// TestErrorTexts: errors say what failed in the user's terms: no
// temporary file names, no repeated wording, no "dial backoff".
func TestErrorTexts(t *testing.T) {
	dir := t.TempDir()
	d := startDaemon(t, filepath.Join(dir, "d"))
	src := filepath.Join(dir, "small")
	os.WriteFile(src, []byte("hello"), 0o644)
	mustOmst(t, 10*time.Second, "--home", d.home, "put", "t/x", src)

	dest := filepath.Join(dir, "no", "such", "dir", "x")
	r := omst(t, 30*time.Second, "--home", d.home, "get", "t/x", "-o", dest)
	if r.code == 0 || strings.Contains(r.stderr, ".omst-") || !strings.Contains(r.stderr, dest) || !strings.Contains(r.stderr, "no such file or directory") {
		t.Errorf("get -o into a missing directory: exit %d, stderr %q (want the destination and the cause, no temporary name)", r.code, r.stderr)
	}
	r = omst(t, 30*time.Second, "--home", d.home, "get", "t/x", "-o", dir)
	if r.code == 0 || strings.Count(r.stderr, dir) != 1 || !strings.Contains(r.stderr, "directory") {
		t.Errorf("get -o DIRECTORY: exit %d, stderr %q", r.code, r.stderr)
	}

	mustOmst(t, 10*time.Second, "--home", d.home, "rm", "t/x")
	r = omst(t, 10*time.Second, "--home", d.home, "rm", "t/x")
	if r.code != exitNotFound || strings.Count(r.stderr, "remove") != 1 || strings.Count(r.stderr, `"t/x"`) != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("rm of a name already removed: exit %d, stderr %q (want one 'remove', the name once, not found)", r.code, r.stderr)
	}

	// A parent that is gone: the second get finds libp2p's dial backoff.
	ghost := startDaemon(t, filepath.Join(dir, "ghost"))
	parent := tcpAddr(t, ghost)
	ghost.stop(t)
	w := startDaemon(t, filepath.Join(dir, "w"), "--parent", parent)
	for i := range 2 {
		r := omst(t, time.Minute, "--home", w.home, "get", "t/y", "-o", filepath.Join(dir, "y"))
		if r.code != exitUnreachable || strings.Contains(r.stderr, "dial backoff") || strings.Contains(r.stderr, "all dials failed") ||
			!strings.Contains(r.stderr, "cannot connect") {
			t.Errorf("get %d with the parent gone: exit %d, stderr %q", i+1, r.code, r.stderr)
		}
	}
}
