package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// client dials d's socket (a real daemon, a real socket).
func client(t *testing.T, d *daemon) *rpcbridge.Client {
	t.Helper()
	c, err := rpcbridge.Dial(filepath.Join(d.home, "omst.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func names(t *testing.T, d *daemon, prefix string) int {
	t.Helper()
	infos, err := client(t, d).List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return len(infos)
}

func du(t *testing.T, d *daemon, prefix string) rpcbridge.DiskUsage {
	t.Helper()
	var u rpcbridge.DiskUsage
	out := mustOmst(t, 10*time.Second, "--home", d.home, "du", prefix, "--json")
	if err := json.Unmarshal([]byte(out), &u); err != nil {
		t.Fatalf("du --json: %v: %s", err, out)
	}
	return u
}

// TestJobNamespaces is issue 27's job namespaces with real daemons in a
// closed grid: a root (client), a head and two workers (each may write
// under its own job1/wN/). 1,000 names under job1/; w2 goes down; `omst
// rm -r job1 --everywhere` at the root: when it returns the root, the
// head and w1 have forgotten every name (ls empty, get: not found) and
// their bytes are evictable; w2 forgets its 500 when it returns and brings
// none back; a put after the removal lives; a worker removing another's
// prefix is refused; bad prefixes get clear errors; TTLs expire names.
func TestJobNamespaces(t *testing.T) {
	dir := t.TempDir()
	home := func(n string) string { return filepath.Join(dir, n) }
	root := startDaemon(t, home("root"), "--site", "master")
	mustOmst(t, 10*time.Second, "--home", home("root"), "grid", "init")
	waitFor(t, 10*time.Second, "the root closes its grid", func() bool { return !root.status(t).Open })
	token := func(role string, prefix string) string {
		return lastLine(mustOmst(t, 10*time.Second, "--home", home("root"), "grid", "token", "--role", role, "--prefix", prefix, "--ttl", "10m", "--cert-ttl", "1h"))
	}
	head := startDaemon(t, home("head"), "--parent", tcpAddr(t, root), "--site", "a", "--join", token("head", "job1/"))
	w1 := startDaemon(t, home("w1"), "--parent", tcpAddr(t, head), "--site", "a", "--join", token("worker", "job1/w1/"))
	w2tok := token("worker", "job1/w2/")
	w2 := startDaemon(t, home("w2"), "--parent", tcpAddr(t, head), "--site", "a", "--join", w2tok)

	ctx := context.Background()
	var wg sync.WaitGroup
	for i, w := range []*daemon{w1, w2} {
		c := client(t, w)
		wg.Go(func() {
			for k := range 500 {
				name := fmt.Sprintf("job1/w%d/%04d", i+1, k)
				if _, err := c.Put(ctx, name, bytes.NewReader(bytes.Repeat([]byte{byte(k)}, 2048+k)), rpcbridge.PutOptions{}); err != nil {
					t.Errorf("put %s: %v", name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	waitFor(t, 30*time.Second, "the root to list 1,000 names", func() bool { return names(t, root, "job1/") == 1000 })
	if u := du(t, w1, "job1/"); u.Names != 500 || u.Pinned == 0 || u.PinnedBlobs != 500 {
		t.Fatalf("w1 du before: %+v", u)
	}

	// A worker may not remove another's prefix: its own daemon refuses.
	r := omst(t, 30*time.Second, "--home", w1.home, "rm", "-r", "job1/w2", "--everywhere")
	if r.code == 0 || !strings.Contains(r.stderr, "not allowed") || !strings.Contains(r.stderr, `"job1/w1/"`) {
		t.Fatalf("w1 removing w2's prefix: exit %d: %s", r.code, r.stderr)
	}
	// Bad prefixes and flags: clear errors, nothing removed.
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"rm", "-r", "", "--everywhere"}, "empty"},
		{[]string{"rm", "-r", "/", "--everywhere"}, "whole namespace"},
		{[]string{"rm", "-r", "..", "--everywhere"}, `".."`},
		{[]string{"rm", "-r", "job1/../x", "--everywhere"}, `".."`},
		{[]string{"rm", "-r", "job1//x"}, "empty segment"},
		{[]string{"rm", "job1", "--everywhere"}, "--everywhere needs -r"},
		{[]string{"ttl", "job1", "soon"}, "not a duration"},
		{[]string{"ttl", "/", "2h"}, "whole namespace"},
		{[]string{"put", "--ttl", "-1h", "job9/x", "/dev/null"}, "must be positive"},
	} {
		r := omst(t, 10*time.Second, append([]string{"--home", root.home}, bad.args...)...)
		if r.code == 0 || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("omst %q: exit %d, stderr %q; want an error saying %s", bad.args, r.code, r.stderr, bad.want)
		}
	}
	if n := names(t, root, "job1/"); n != 1000 {
		t.Fatalf("bad input removed names: %d left", n)
	}

	// w2 goes down; the root removes job1/ everywhere.
	w2.stop(t)
	waitFor(t, 10*time.Second, "the head to see w2 leave", func() bool {
		for _, c := range head.status(t).Children {
			if !c.Connected {
				return true
			}
		}
		return false
	})
	start := time.Now()
	var res rpcbridge.RuleResult
	out := mustOmst(t, time.Minute, "--home", root.home, "rm", "-r", "job1", "--everywhere", "--json")
	took := time.Since(start)
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err, out)
	}
	t.Logf("rm -r job1 --everywhere of 1,000 names: %v (CLI included); %+v", took, res)
	if res.Scope != "job1/" || res.Removed != 1000 || res.Reached != 3 || res.Unreached != 1 {
		t.Fatalf("result: %+v, want 1,000 removed at the root, 3 nodes reached, 1 (w2) not", res)
	}
	for _, d := range []*daemon{root, head, w1} {
		if n := names(t, d, "job1/"); n != 0 {
			t.Errorf("%s lists %d names under job1/", d.home, n)
		}
		r := omst(t, 30*time.Second, "--home", d.home, "get", "job1/w1/0007", "-o", filepath.Join(dir, "x"))
		if r.code == 0 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("get of a removed name at %s: exit %d: %s", d.home, r.code, r.stderr)
		}
	}
	if u := du(t, w1, ""); u.Pinned != 0 || w1.status(t).CachePinned != 0 {
		t.Fatalf("w1 keeps pinned bytes after the removal: %+v", u)
	}
	if u := du(t, root, "").Rules; len(u) != 1 || u[0].Scope != "job1/" || u[0].Kind != "remove" {
		t.Fatalf("root's rules: %+v", u)
	}

	// w2 returns with its store: it forgets its 500 names.
	w2 = startDaemon(t, home("w2"), "--parent", tcpAddr(t, head), "--site", "a")
	waitFor(t, 15*time.Second, "w2 to forget job1/", func() bool {
		return names(t, w2, "job1/") == 0 && w2.status(t).CachePinned == 0
	})
	time.Sleep(time.Second) // its re-announce, had it sent any
	if n := names(t, root, "job1/"); n != 0 {
		t.Fatalf("w2's return brought back %d names to the root", n)
	}

	// A put after the removal lives everywhere.
	in := filepath.Join(dir, "in")
	writeRandomFile(t, in, 4096, 3)
	mustOmst(t, 30*time.Second, "--home", w2.home, "put", "job1/w2/after", in)
	waitFor(t, 10*time.Second, "the root to see a put after the removal", func() bool { return names(t, root, "job1/") == 1 })

	// TTLs: a prefix's, set once, and one put's.
	mustOmst(t, 30*time.Second, "--home", root.home, "ttl", "job1/w1/short", "2s")
	mustOmst(t, 30*time.Second, "--home", w1.home, "put", "job1/w1/short/a", in)
	mustOmst(t, 30*time.Second, "--home", w1.home, "put", "--ttl", "2s", "job1/w1/one", in)
	mustOmst(t, 30*time.Second, "--home", w1.home, "put", "job1/w1/kept", in)
	waitFor(t, 10*time.Second, "the root to list the TTL's names", func() bool { return names(t, root, "job1/w1/") == 3 })
	waitFor(t, 20*time.Second, "the TTLs to expire everywhere", func() bool {
		return names(t, root, "job1/w1/") == 1 && names(t, w1, "job1/w1/") == 1 && names(t, head, "job1/w1/") == 1
	})
	r = omst(t, 30*time.Second, "--home", w1.home, "get", "job1/w1/one", "-o", filepath.Join(dir, "y"))
	if r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("get of an expired name: exit %d: %s", r.code, r.stderr)
	}
	waitFor(t, 15*time.Second, "w1 to unpin the expired names", func() bool { return du(t, w1, "").PinnedBlobs == 1 })
}

// BenchmarkRemovePrefixEverywhere (docs/benchmarks.md, "Job namespaces"):
// real daemons on loopback, a root, two heads and two workers per head;
// 10,000 names (2,500 put at each worker); the time from `omst rm -r
// job1 --everywhere` at the root until every node lists none of them. Run
// with -benchtime 1x: its set-up is far longer than the removal.
func BenchmarkRemovePrefixEverywhere(b *testing.B) {
	dir := b.TempDir()
	for range b.N {
		b.StopTimer()
		root, nodes := benchGrid(b, dir)
		b.StartTimer()
		start := time.Now()
		c, err := rpcbridge.Dial(filepath.Join(root.home, "omst.sock"))
		if err != nil {
			b.Fatal(err)
		}
		res, err := c.RemovePrefix(context.Background(), "job1", true)
		c.Close()
		if err != nil {
			b.Fatal(err)
		}
		cmdDone := time.Since(start)
		for _, d := range nodes {
			for benchNames(b, d, "job1/") != 0 {
				time.Sleep(time.Millisecond)
			}
		}
		all := time.Since(start)
		b.ReportMetric(cmdDone.Seconds(), "s-command")
		b.ReportMetric(all.Seconds(), "s-every-node")
		b.Logf("10,000 names, %d nodes: command %v, every node %v, result %+v", len(nodes), cmdDone, all, res)
		b.StopTimer()
		for _, d := range nodes {
			d.kill()
		}
	}
}

// benchDaemon is a daemon for a benchmark (the test helpers take a *testing.T).
type benchDaemon struct {
	home string
	cmd  *exec.Cmd
	addr string
}

func (d *benchDaemon) kill() { d.cmd.Process.Kill(); d.cmd.Wait() }

func startBenchDaemon(b *testing.B, home string, extra ...string) *benchDaemon {
	args := append([]string{"daemon", "--home", home, "--listen", "/ip4/127.0.0.1/tcp/0", "--log-level", "error"}, extra...)
	d := &benchDaemon{home: home, cmd: exec.Command(omstBin, args...)}
	if err := d.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(d.kill)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command(omstBin, "--home", home, "id").Output()
		if err == nil {
			for _, a := range strings.Fields(string(out)) {
				if strings.Contains(a, "/tcp/") {
					d.addr = a
					return d
				}
			}
		}
	}
	b.Fatalf("daemon %s did not start", home)
	return nil
}

func benchNames(b *testing.B, d *benchDaemon, prefix string) int {
	c, err := rpcbridge.Dial(filepath.Join(d.home, "omst.sock"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	infos, err := c.List(context.Background(), prefix)
	if err != nil {
		b.Fatal(err)
	}
	return len(infos)
}

func benchGrid(b *testing.B, dir string) (*benchDaemon, []*benchDaemon) {
	sub := filepath.Join(dir, fmt.Sprint(time.Now().UnixNano()))
	root := startBenchDaemon(b, filepath.Join(sub, "root"))
	nodes := []*benchDaemon{root}
	var workers []*benchDaemon
	for h := range 2 {
		site := fmt.Sprintf("s%d", h)
		head := startBenchDaemon(b, filepath.Join(sub, "head"+site), "--parent", root.addr, "--site", site)
		nodes = append(nodes, head)
		for w := range 2 {
			wk := startBenchDaemon(b, filepath.Join(sub, fmt.Sprintf("w%s-%d", site, w)), "--parent", head.addr, "--site", site)
			nodes, workers = append(nodes, wk), append(workers, wk)
		}
	}
	time.Sleep(2 * time.Second) // sessions up
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() {
			c, err := rpcbridge.Dial(filepath.Join(w.home, "omst.sock"))
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			for k := range 2500 {
				name := fmt.Sprintf("job1/w%d/%05d", i, k)
				if _, err := c.Put(context.Background(), name, strings.NewReader(name), rpcbridge.PutOptions{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for deadline := time.Now().Add(2 * time.Minute); benchNames(b, root, "job1/") != 10000; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("the root lists %d names, not 10,000", benchNames(b, root, "job1/"))
		}
	}
	return root, nodes
}
