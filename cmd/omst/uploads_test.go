package main

// Multi-process tests of issue #10: an upload is stored only after its
// explicit end; a killed, interrupted or changed upload leaves no name.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
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

func randData(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// cutLine is what the daemon logs for an upload that ended without its
// closing empty DATA frame.
const cutLine = "upload ended without its closing empty DATA frame"

// waitCut waits (10 s at most) until the daemon has logged the cut upload
// of name, or the name became visible (the bug), and returns the log.
func waitCut(t *testing.T, d *daemon, name string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if log := d.logText(); strings.Contains(log, "name="+name) {
			return log
		}
		if omst(t, 10*time.Second, "--home", d.home, "stat", name).code == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return d.logText()
}

// putBytes runs `omst put NAME -` with data on standard input and returns
// the blob ID.
func putBytes(t *testing.T, home, name string, data []byte) string {
	t.Helper()
	cmd := exec.Command(omstBin, "--home", home, "put", name, "-")
	cmd.Stdin = bytes.NewReader(data)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("omst put %s -: %v: %s", name, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// checkGet fetches name and compares it with want.
func checkGet(t *testing.T, home, name string, want []byte) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "got")
	mustOmst(t, time.Minute, "--home", home, "get", name, "-o", out)
	got, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("get %s: %d bytes (%v), want the %d bytes put", name, len(got), err, len(want))
	}
}

// TestPutKilledMidUpload: `omst put NAME -` fed through a pipe and
// SIGKILLed after several MiB leaves no name (with and without --sync); the
// daemon logs the cut once; a complete put of the same name then works.
func TestPutKilledMidUpload(t *testing.T) {
	data := randData(12<<20+333, 10)
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"default", nil}, {"sync", []string{"--sync"}}} {
		t.Run(mode.name, func(t *testing.T) {
			d := startDaemon(t, filepath.Join(t.TempDir(), "home"), mode.flags...)
			const name = "cut/stdin"
			pr, pw, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(omstBin, "--home", d.home, "put", name, "-")
			cmd.Stdin = pr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pr.Close()
			// The pipe holds 64 KiB: when Write returns, the CLI has
			// read almost all of the 8 MiB.
			if _, err := pw.Write(data[:8<<20]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // let it reach the daemon
			cmd.Process.Kill()
			cmd.Wait()
			pw.Close()

			log := waitCut(t, d, name)
			if r := omst(t, 10*time.Second, "--home", d.home, "stat", name); r.code != exitNotFound {
				t.Fatalf("stat after the killed put: exit %d, %s%s; want not found", r.code, r.stdout, r.stderr)
			}
			if n := strings.Count(log, cutLine); n != 1 || !strings.Contains(log, "name="+name) {
				t.Fatalf("daemon logged the cut %d times, want once with the name:\n%s", n, log)
			}
			m := regexp.MustCompile(`bytes=(\d+)`).FindStringSubmatch(log)
			if m == nil {
				t.Fatalf("cut log line without a byte count:\n%s", log)
			}
			if got, _ := strconv.Atoi(m[1]); got < 4<<20 {
				t.Fatalf("the daemon had only %d bytes when the put was killed, want several MiB", got)
			}

			// The same name, complete, works and holds exactly its bytes.
			putBytes(t, d.home, name, data)
			checkGet(t, d.home, name, data)
		})
	}
}

// TestPutInterrupted: SIGINT or SIGTERM to `omst put NAME -` while it waits
// for more input sends ABORT at once: the CLI exits promptly saying so, the
// daemon stores nothing (and sees an ABORT, not a cut connection).
func TestPutInterrupted(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "home"))
	data := randData(3<<20, 11)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		name := "int/" + strings.ToLower(sig.String()[:4])
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(omstBin, "--home", d.home, "put", name, "-")
		cmd.Stdin = pr
		var errb bytes.Buffer
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pr.Close()
		pw.Write(data) // and the pipe stays open: the CLI waits for more
		time.Sleep(300 * time.Millisecond)
		cmd.Process.Signal(sig)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(errb.String(), "aborted") {
				t.Errorf("%v: put exited with %v: %s; want a failure saying the upload was aborted", sig, err, errb.String())
			}
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%v: put still running 10 s after the signal (blocked reading its input)", sig)
		}
		pw.Close()
		if r := omst(t, 10*time.Second, "--home", d.home, "stat", name); r.code != exitNotFound {
			t.Errorf("%v: stat after the interrupted put: exit %d %s; want not found", sig, r.code, r.stderr)
		}
		if strings.Contains(d.logText(), "name="+name) {
			t.Errorf("%v: the daemon saw a cut upload, not an ABORT:\n%s", sig, d.logText())
		}
	}
}

// TestPutDevStdin: `omst put NAME /dev/stdin` stores the CLI's standard
// input (the CLI streams what is not a regular file; the daemon would read
// its own /dev/stdin).
func TestPutDevStdin(t *testing.T) {
	d := startDaemon(t, filepath.Join(t.TempDir(), "home"))
	data := randData(2<<20+5, 12)
	cmd := exec.Command(omstBin, "--home", d.home, "put", "dev/stdin", "/dev/stdin")
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("put /dev/stdin: %v: %s", err, out)
	}
	checkGet(t, d.home, "dev/stdin", data)
}

// fdOf returns the descriptor number under which process pid has path
// open, or "".
func fdOf(pid int, path string) string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == path {
			return e.Name()
		}
	}
	return ""
}

// fdPos returns the file offset of descriptor fd of process pid.
func fdPos(pid int, fd string) (int64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd))
	if err != nil {
		return 0, false
	}
	m := regexp.MustCompile(`(?m)^pos:\s+(\d+)`).FindSubmatch(b)
	if m == nil {
		return 0, false
	}
	pos, err := strconv.ParseInt(string(m[1]), 10, 64)
	return pos, err == nil
}

// TestPutFileShrinks: `omst put NAME FILE` (the daemon reads FILE: PUT_FILE)
// of a 256 MiB file truncated while the daemon reads it, once its read
// position (/proc/PID/fdinfo) is past the first chunk and before the end,
// fails naming the change, and leaves no name; with and without --sync.
func TestPutFileShrinks(t *testing.T) {
	if testing.Short() {
		t.Skip("256 MiB test skipped in -short mode")
	}
	if _, err := os.Stat("/proc/self/fdinfo"); err != nil {
		t.Skipf("no /proc/PID/fdinfo to watch the daemon's reads: %v", err)
	}
	const size = 256 << 20
	scratch := t.TempDir()
	if dir, err := os.MkdirTemp("/dev/shm", "omst-shrink-"); err == nil {
		scratch = dir // memory: the daemon's reads do not wait for the disk
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	for _, mode := range []struct {
		name  string
		flags []string
	}{{"default", nil}, {"sync", []string{"--sync"}}} {
		t.Run(mode.name, func(t *testing.T) {
			d := startDaemon(t, filepath.Join(t.TempDir(), "home"), mode.flags...)
			src := filepath.Join(scratch, "big-"+mode.name+".bin")
			writeRandomFile(t, src, size, 13)
			defer os.Remove(src)
			const name = "big/shrunk"
			cmd := exec.Command(omstBin, "--home", d.home, "put", name, src)
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			pid := d.cmd.Process.Pid
			var fd string
			var cutAt int64
			deadline := time.Now().Add(time.Minute)
		watch:
			for time.Now().Before(deadline) {
				select {
				case <-done:
					done <- nil // for the wait below
					break watch
				default:
				}
				if fd == "" {
					fd = fdOf(pid, src)
					continue
				}
				pos, ok := fdPos(pid, fd)
				if !ok {
					fd = "" // closed (or another descriptor): look again
					continue
				}
				if pos > 1<<20 && pos < size {
					if err := os.Truncate(src, 1<<20); err != nil {
						t.Fatal(err)
					}
					cutAt = pos
					break
				}
			}
			select {
			case <-done:
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				t.Fatal("put of the shrinking file did not end within a minute")
			}
			if cutAt == 0 {
				t.Fatalf("never saw the daemon's read position between 1 MiB and %d (descriptor %q): stderr %s", size, fd, errb.String())
			}
			t.Logf("truncated at read position %d", cutAt)
			if code := cmd.ProcessState.ExitCode(); code == 0 || !strings.Contains(errb.String(), "file changed while it was read") ||
				!strings.Contains(errb.String(), src) {
				t.Fatalf("put of a file truncated at %d: exit %d, %s; want a failure naming the file and the change", cutAt, code, errb.String())
			}
			if r := omst(t, 10*time.Second, "--home", d.home, "stat", name); r.code != exitNotFound {
				t.Fatalf("stat after the failed put: exit %d %s%s; want not found", r.code, r.stdout, r.stderr)
			}
		})
	}
}
