package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeTree writes n files of a few KiB under dir/sub, each's bytes
// saying its path, and returns their contents by relative path.
func writeTree(t *testing.T, dir, tag string, n int) map[string]string {
	t.Helper()
	files := map[string]string{}
	for i := range n {
		rel := fmt.Sprintf("r%d.out", i)
		if i%3 == 0 {
			rel = fmt.Sprintf("sub%d/r%d.out", i%2, i)
		}
		body := strings.Repeat(fmt.Sprintf("%s %s %d\n", tag, rel, i), 100+i)
		p := filepath.Join(dir, filepath.FromSlash(rel))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		files[rel] = body
	}
	return files
}

// waitNames waits (30 s at most) until d lists want names under prefix.
func waitNames(t *testing.T, d *daemon, prefix string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := names(t, d, prefix)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s lists %d names under %s, want %d", d.home, got, prefix, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestGetPutRecursive: issue 27's many names in one call with real
// daemons (a root and two sites' heads). Each head puts a directory tree
// with `omst put -r` (a FIFO and a file whose name breaks the rules
// among them: named, the rest put, exit 1); the root gets everything with
// `omst get -r job -o OUT` in one request, every byte right, in
// OUT/<site>/<path>. Into an OUT that holds other files: they are kept, a
// file of the same path is not replaced (that name fails, exit 1, the
// summary says 1 failed) unless --force. With site b's head killed, a get
// -r of both sites brings site a's files, names each of b's as failed,
// and leaves no partial file.
func TestGetPutRecursive(t *testing.T) {
	dir := t.TempDir()
	root := startDaemon(t, filepath.Join(dir, "root"), "--no-dht")
	ha := startDaemon(t, filepath.Join(dir, "ha"), "--no-dht", "--parent", tcpAddr(t, root), "--site", "a")
	hb := startDaemon(t, filepath.Join(dir, "hb"), "--no-dht", "--parent", tcpAddr(t, root), "--site", "b")
	waitConnected(t, ha)
	waitConnected(t, hb)
	want := map[string]string{}
	for _, h := range []struct {
		d    *daemon
		site string
	}{{ha, "a"}, {hb, "b"}} {
		src := filepath.Join(dir, "src-"+h.site)
		for rel, body := range writeTree(t, src, h.site, 40) {
			want[h.site+"/"+rel] = body
		}
		if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(src, "bad\x01name"), []byte("x"), 0o644)
		r := omst(t, time.Minute, "--home", h.d.home, "put", "-r", src, "job/"+h.site)
		if r.code != 1 || !strings.Contains(r.stdout, "put 40 of 42 names") || !strings.Contains(r.stdout, "2 failed") ||
			!strings.Contains(r.stderr, "not a regular file") || !strings.Contains(r.stderr, "bad") {
			t.Fatalf("put -r at %s: exit %d\n%s\n%s", h.site, r.code, r.stdout, r.stderr)
		}
	}
	waitNames(t, root, "job/", 80)

	out := filepath.Join(dir, "out")
	os.MkdirAll(filepath.Join(out, "a"), 0o755)
	os.WriteFile(filepath.Join(out, "keep.txt"), []byte("mine"), 0o644)
	os.WriteFile(filepath.Join(out, "a", "r1.out"), []byte("old"), 0o644)
	r := omst(t, time.Minute, "--home", root.home, "get", "-r", "job", "-o", out, "--json")
	var rep manyReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("get -r --json: %v: %s", err, r.stdout)
	}
	if r.code != 1 || rep.Entries != 80 || rep.OK != 79 || rep.Failed != 1 || len(rep.Failures) != 1 ||
		rep.Failures[0].Name != "job/a/r1.out" || !strings.Contains(rep.Failures[0].Error, "exists") {
		t.Fatalf("get -r into a directory with a file of the same path: exit %d %+v\n%s", r.code, rep, r.stderr)
	}
	checkTree := func(skip string) {
		t.Helper()
		for rel, body := range want {
			if rel == skip {
				continue
			}
			b, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(rel)))
			if err != nil || string(b) != body {
				t.Fatalf("%s: %d bytes, %v", rel, len(b), err)
			}
		}
	}
	checkTree("a/r1.out")
	if b, _ := os.ReadFile(filepath.Join(out, "a", "r1.out")); string(b) != "old" {
		t.Fatal("an existing file replaced without --force")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "keep.txt")); string(b) != "mine" {
		t.Fatal("another file of DIR touched")
	}
	r = omst(t, time.Minute, "--home", root.home, "get", "-r", "job/", "-o", out, "--force")
	if r.code != 0 || !strings.Contains(r.stdout, "got 80 of 80 names under job/") || !strings.Contains(r.stdout, "0 failed") {
		t.Fatalf("get -r --force: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	checkTree("")
	if b, _ := os.ReadFile(filepath.Join(out, "keep.txt")); string(b) != "mine" {
		t.Fatal("another file of DIR touched by --force")
	}

	// Bad usage.
	for _, args := range [][]string{{"get", "-r", "job"}, {"get", "-r", "a//b", "-o", out}, {"get", "x", "--force"}, {"put", "-r", out}} {
		if r := omst(t, 10*time.Second, append([]string{"--home", root.home}, args...)...); r.code != exitUsage {
			t.Errorf("omst %v: exit %d, want %d: %s", args, r.code, exitUsage, r.stderr)
		}
	}

	// Site b's head gone: a's files come, b's are named, nothing partial
	// (names the root has not fetched yet).
	want = map[string]string{}
	for _, h := range []struct {
		d    *daemon
		site string
	}{{ha, "a"}, {hb, "b"}} {
		src := filepath.Join(dir, "src2-"+h.site)
		for rel, body := range writeTree(t, src, h.site+"2", 40) {
			want[h.site+"/"+rel] = body
		}
		mustOmst(t, time.Minute, "--home", h.d.home, "put", "-r", src, "job2/"+h.site)
	}
	waitNames(t, root, "job2/", 80)
	hb.stop(t)
	out2 := filepath.Join(dir, "out2")
	r = omst(t, 2*time.Minute, "--home", root.home, "get", "-r", "job2", "-o", out2)
	if r.code == 0 || !strings.Contains(r.stdout, "got 40 of 80 names") || strings.Count(r.stderr, "omst: get job2/b/") != 40 {
		t.Fatalf("get -r with site b down: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	filepath.WalkDir(out2, func(p string, de os.DirEntry, err error) error {
		if err == nil && !de.IsDir() && (strings.Contains(p, "omst-") || strings.HasPrefix(p, filepath.Join(out2, "b"))) {
			t.Errorf("left in DIR: %s", p)
		}
		return nil
	})
	for rel, body := range want {
		if strings.HasPrefix(rel, "a/") {
			if b, err := os.ReadFile(filepath.Join(out2, filepath.FromSlash(rel))); err != nil || string(b) != body {
				t.Fatalf("%s with b down: %v", rel, err)
			}
		}
	}
}
