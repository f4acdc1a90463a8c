package main

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

func envOf(m map[string]string) slurmEnv { return func(k string) string { return m[k] } }

func TestParseHostnames(t *testing.T) {
	got, err := parseHostnames("n1\nn2\n\n  n10 \n")
	if err != nil || !slices.Equal(got, []string{"n1", "n2", "n10"}) {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "\n\n", "n1\nn1\n", "a/b\n", "..\n", "n1 n2\n", "n[1-2]x,y\n"} {
		if _, err := parseHostnames(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestChooseHeadAndTokens(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	if h, err := chooseHead(nodes, ""); err != nil || h != "n1" {
		t.Fatalf("default head %q, %v", h, err)
	}
	if h, err := chooseHead(nodes, "n3"); err != nil || h != "n3" {
		t.Fatalf("--head-node n3: %q, %v", h, err)
	}
	_, err := chooseHead(nodes, "n9")
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "n9") {
		t.Fatalf("--head-node n9: %v", err)
	}
	tk, err := assignTokens(nodes, "n2", []string{"a", "b", "c"})
	if err != nil || tk["n2"] != "a" || tk["n1"] != "b" || tk["n3"] != "c" {
		t.Fatalf("tokens %v, %v", tk, err)
	}
	if tk, err := assignTokens(nodes, "n1", nil); err != nil || len(tk) != 0 {
		t.Fatalf("no tokens: %v, %v", tk, err)
	}
	if _, err := assignTokens(nodes, "n1", []string{"a"}); !errors.As(err, &ue) || !strings.Contains(err.Error(), "1 token(s) for 3 nodes") {
		t.Fatalf("one token for three nodes: %v", err)
	}
}

func TestNodeHome(t *testing.T) {
	env := envOf(map[string]string{"TMPDIR": "/scratch/t"})
	h, err := slurmNodeHome(tmpBase(env), "42", "n1")
	if err != nil || h != "/scratch/t/omst-slurm-42/n1" {
		t.Fatalf("%q %v", h, err)
	}
	if h, _ := slurmNodeHome(tmpBase(envOf(nil)), "42", "n1"); h != "/tmp/omst-slurm-42/n1" {
		t.Fatalf("without TMPDIR: %q", h)
	}
	for _, c := range [][2]string{{"", "n1"}, {"4/2", "n1"}, {"..", "n1"}, {"42", ""}, {"42", "a/b"}, {"42", ".."}} {
		if _, err := slurmNodeHome("/tmp", c[0], c[1]); err == nil {
			t.Errorf("job %q node %q: no error", c[0], c[1])
		}
	}
	host := func() (string, error) { return "c7.cluster.example", nil }
	if n := slurmNodeName(envOf(map[string]string{"SLURMD_NODENAME": "n3"}), host); n != "n3" {
		t.Errorf("SLURMD_NODENAME: %q", n)
	}
	if n := slurmNodeName(envOf(nil), host); n != "c7" {
		t.Errorf("host name: %q", n)
	}
	if d := expandDest("/scratch/%N/in.dat", "n2"); d != "/scratch/n2/in.dat" {
		t.Errorf("expandDest: %q", d)
	}
	if s := slurmSite("", "7"); s != "slurm-7" {
		t.Errorf("site %q", s)
	}
}

func TestDaemonArgs(t *testing.T) {
	p := daemonPlan{Nodes: []string{"n1", "n2"}, Head: "n1", Site: "c-7", Parents: []string{"/ip4/10.0.0.1/tcp/4040/p2p/R"},
		Tokens: map[string]string{"n1": "T1", "n2": "T2"}, Extra: []string{"--cache-size", "1G"}}
	head := p.daemonArgs("n1")
	want := []string{"daemon", "--site", "c-7", "--listen", defaultListen, "--parent", "/ip4/10.0.0.1/tcp/4040/p2p/R", "--join", "T1", "--cache-size", "1G"}
	if !slices.Equal(head, want) {
		t.Fatalf("head: %v", head)
	}
	w := withParent(p.daemonArgs("n2"), "/ip4/10.0.0.2/tcp/5/p2p/H")
	want = []string{"daemon", "--parent", "/ip4/10.0.0.2/tcp/5/p2p/H", "--site", "c-7", "--listen", defaultListen, "--parent", "/ip4/10.0.0.1/tcp/4040/p2p/R", "--join", "T2", "--cache-size", "1G"}
	if !slices.Equal(w, want) {
		t.Fatalf("worker: %v", w)
	}
	p.Extra = []string{"--listen=/ip4/0.0.0.0/tcp/7000"}
	if a := p.daemonArgs("n2"); slices.Contains(a, defaultListen) {
		t.Fatalf("--listen given and the default added: %v", a)
	}
}

func TestOrderAndPickAddrs(t *testing.T) {
	const pid = "12D3KooWL8CuCon5jppjKyGJYjRiAtmg1fDJvYdh55ED5qt7Arox"
	addrs := []string{
		"/ip4/127.0.0.1/tcp/1/p2p/" + pid + "", "/ip4/127.0.0.1/udp/1/quic-v1/p2p/" + pid + "", "/ip6/::1/tcp/1/p2p/" + pid + "",
		"/ip6/fd00::1/tcp/1/p2p/" + pid + "", "/ip4/10.1.2.3/tcp/1/p2p/" + pid + "", "garbage",
	}
	got := orderAddrs(addrs)
	want := []string{"/ip4/10.1.2.3/tcp/1/p2p/" + pid + "", "/ip6/fd00::1/tcp/1/p2p/" + pid + "", "/ip4/127.0.0.1/tcp/1/p2p/" + pid + "", "/ip6/::1/tcp/1/p2p/" + pid + "",
		"/ip4/127.0.0.1/udp/1/quic-v1/p2p/" + pid + "", "garbage"}
	if !slices.Equal(got, want) {
		t.Fatalf("order:\n%v\nwant\n%v", got, want)
	}
	var tried []string
	a, err := pickHeadAddr(addrs, func(hp string) error {
		tried = append(tried, hp)
		if strings.HasPrefix(hp, "127.") {
			return nil
		}
		return errors.New("refused")
	})
	if err != nil || a != "/ip4/127.0.0.1/tcp/1/p2p/"+pid+"" || tried[0] != "10.1.2.3:1" {
		t.Fatalf("picked %q %v (tried %v)", a, err, tried)
	}
	_, err = pickHeadAddr(addrs, func(string) error { return errors.New("refused") })
	if err == nil || !strings.Contains(err.Error(), "10.1.2.3:1: refused") {
		t.Fatalf("none reachable: %v", err)
	}
	if _, err := pickHeadAddr([]string{"/ip4/1.2.3.4/udp/1/quic-v1"}, nil); err == nil {
		t.Fatal("no TCP address: no error")
	}
}

func TestSrunArgs(t *testing.T) {
	a := srunArgs("7", []string{"n1", "n2"}, stepDaemons, []string{"/bin/omst", "slurm", "task"})
	for _, w := range []string{"--jobid=7", "--overlap", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--nodelist=n1,n2", "--kill-on-bad-exit=0"} {
		if !slices.Contains(a, w) {
			t.Errorf("no %s in %v", w, a)
		}
	}
	if !slices.Equal(a[len(a)-3:], []string{"/bin/omst", "slurm", "task"}) {
		t.Errorf("command not last: %v", a)
	}
}

// TestSlurmSocket: the socket rule, against real directories and a real
// listening socket.
func TestSlurmSocket(t *testing.T) {
	base := t.TempDir()
	env := map[string]string{"TMPDIR": base, "SLURM_JOB_ID": "77", "SLURMD_NODENAME": "n2"}
	host := func() (string, error) { return "h", nil }
	uid := os.Geteuid()
	if s := slurmSocket(envOf(env), host, uid); s != "" {
		t.Fatalf("no directory yet: %q", s)
	}
	home := filepath.Join(base, "omst-slurm-77", "n2")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if s := slurmSocket(envOf(env), host, uid); s != "" {
		t.Fatalf("no socket yet: %q", s)
	}
	sock := filepath.Join(home, "omst.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if s := slurmSocket(envOf(env), host, uid); s != sock {
		t.Fatalf("got %q, want %q", s, sock)
	}
	if s := slurmSocket(envOf(env), host, uid+1); s != "" {
		t.Fatalf("a directory of another user trusted: %q", s)
	}
	other := map[string]string{"TMPDIR": base, "SLURM_JOB_ID": "78", "SLURMD_NODENAME": "n2"}
	if s := slurmSocket(envOf(other), host, uid); s != "" {
		t.Fatalf("another job's: %q", s)
	}
	delete(env, "SLURM_JOB_ID")
	if s := slurmSocket(envOf(env), host, uid); s != "" {
		t.Fatalf("outside a job: %q", s)
	}
	// The CLI: the rule applies without OMST_SOCKET/OMST_HOME/--home,
	// and each of those wins over it.
	t.Setenv("TMPDIR", base)
	t.Setenv("SLURM_JOB_ID", "77")
	t.Setenv("SLURMD_NODENAME", "n2")
	t.Setenv("OMST_SOCKET", "")
	t.Setenv("OMST_HOME", "")
	if s := (&globals{}).socket(); s != sock {
		t.Fatalf("CLI: %q, want %q", s, sock)
	}
	if s := (&globals{home: "/h"}).socket(); s != "/h/omst.sock" {
		t.Fatalf("--home: %q", s)
	}
	t.Setenv("OMST_HOME", "/e")
	if s := (&globals{}).socket(); s != "/e/omst.sock" {
		t.Fatalf("OMST_HOME: %q", s)
	}
	t.Setenv("OMST_SOCKET", "/s.sock")
	if s := (&globals{}).socket(); s != "/s.sock" {
		t.Fatalf("OMST_SOCKET: %q", s)
	}
}

// TestRendezvous: up's server and tasks over real loopback TCP: the head
// first, a worker gets the head's addresses, a wrong token, an unknown
// node and a second task for a node are refused.
func TestRendezvous(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plan := daemonPlan{Nodes: []string{"n1", "n2", "n3"}, Head: "n1", Site: "s"}
	srv := newRdvServer(ln, "tok", plan, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go srv.serve(ctx)
	defer ln.Close()
	addr := ln.Addr().String()

	// A worker asks before the head has reported: it waits.
	type got struct {
		a   rdvAssign
		err error
	}
	wch := make(chan got, 1)
	go func() {
		a, c, rd, err := rdvClient(ctx, addr, rdvHello{Token: "tok", Node: "n2"})
		if err == nil {
			err = reportAcked(c, rd, rdvReport{Node: "n2", OK: true, Addrs: []string{"/ip4/127.0.0.1/tcp/2/p2p/W"}})
		}
		wch <- got{a, err}
	}()
	select {
	case g := <-wch:
		t.Fatalf("worker answered before the head reported: %+v", g)
	case <-time.After(200 * time.Millisecond):
	}
	a, c, rd, err := rdvClient(ctx, addr, rdvHello{Token: "tok", Node: "n1"})
	if err != nil || a.Error != "" || len(a.HeadAddrs) != 0 || a.Args[0] != "daemon" {
		t.Fatalf("head: %+v %v", a, err)
	}
	if err := reportAcked(c, rd, rdvReport{Node: "n1", OK: true, Addrs: []string{"/ip4/127.0.0.1/tcp/1/p2p/H"}}); err != nil {
		t.Fatalf("head's report: %v", err)
	}
	g := <-wch
	if g.err != nil || !slices.Equal(g.a.HeadAddrs, []string{"/ip4/127.0.0.1/tcp/1/p2p/H"}) {
		t.Fatalf("worker: %+v", g)
	}
	for _, h := range []rdvHello{{Token: "bad", Node: "n3"}, {Token: "tok", Node: "n9"}, {Token: "tok", Node: "n1"}} {
		a, c, _, err := rdvClient(ctx, addr, h)
		if err != nil || a.Error == "" {
			t.Errorf("%+v: not refused: %+v %v", h, a, err)
		}
		if c != nil {
			c.Close()
		}
	}
	// n3 fails.
	a, c, rd, err = rdvClient(ctx, addr, rdvHello{Token: "tok", Node: "n3"})
	if err != nil {
		t.Fatal(err)
	}
	if err := reportAcked(c, rd, rdvReport{Node: "n3", Error: "home in use"}); err != nil {
		t.Fatal(err)
	}
	for len(srv.snapshot()) < 3 {
		select {
		case <-srv.changed:
		case <-ctx.Done():
			t.Fatalf("results: %+v", srv.snapshot())
		}
	}
	r := srv.snapshot()
	if !r["n1"].OK || !r["n2"].OK || r["n3"].OK || r["n3"].Err != "home in use" {
		t.Fatalf("results: %+v", r)
	}
}

// TestRendezvousHeadFails: the workers of a failed head are told so.
func TestRendezvousHeadFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := newRdvServer(ln, "tok", daemonPlan{Nodes: []string{"n1", "n2"}, Head: "n1"}, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go srv.serve(ctx)
	_, c, _, err := rdvClient(ctx, ln.Addr().String(), rdvHello{Token: "tok", Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // no report: the task died
	a, c2, _, err := rdvClient(ctx, ln.Addr().String(), rdvHello{Token: "tok", Node: "n2"})
	if err != nil || !strings.Contains(a.Error, "its head n1 failed") {
		t.Fatalf("worker: %+v %v", a, err)
	}
	c2.Close()
	if r := srv.snapshot(); r["n1"].OK || !strings.Contains(r["n1"].Err, "without a report") {
		t.Fatalf("head: %+v", r)
	}
}

// reportAcked sends a task's report and reads up's acknowledgement.
func reportAcked(c net.Conn, rd *bufio.Reader, r rdvReport) error {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := writeRdv(c, r); err != nil {
		return err
	}
	var ack rdvAck
	if err := readRdv(rd, &ack); err != nil {
		return err
	}
	if !ack.OK {
		return errors.New("not acknowledged")
	}
	return nil
}

// TestRendezvousLateReport: a report that comes after up gave up (closed)
// is neither counted nor acknowledged, so that its task stops its daemon.
func TestRendezvousLateReport(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv := newRdvServer(ln, "tok", daemonPlan{Nodes: []string{"n1"}, Head: "n1"}, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go srv.serve(ctx)
	_, c, rd, err := rdvClient(ctx, ln.Addr().String(), rdvHello{Token: "tok", Node: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	srv.close()
	if err := reportAcked(c, rd, rdvReport{Node: "n1", OK: true}); err == nil {
		t.Fatal("a report after close was acknowledged")
	}
	if r := srv.snapshot(); len(r) != 0 {
		t.Fatalf("a report after close was counted: %+v", r)
	}
}

func TestReadRdvBad(t *testing.T) {
	var h rdvHello
	long := strings.Repeat("x", rdvMaxLine+10) + "\n"
	for _, in := range []string{"", "not json\n", "[1,2]\n", long} {
		if err := readRdv(bufio.NewReader(strings.NewReader(in)), &h); err == nil {
			t.Errorf("%.20q: no error", in)
		}
	}
	if err := readRdv(bufio.NewReader(strings.NewReader(`{"token":"a","node":"n1"}`)), &h); err != nil || h.Node != "n1" {
		t.Fatalf("no final newline: %+v %v", h, err)
	}
}

func FuzzDecodeRdv(f *testing.F) {
	f.Add([]byte(`{"token":"t","node":"n1","pid":3}`))
	f.Add([]byte(`{"args":["daemon"],"head_addrs":["/ip4/1.2.3.4/tcp/1"]}`))
	f.Add([]byte(`{"node":"n1","ok":true,"addrs":null}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h rdvHello
		var a rdvAssign
		var r rdvReport
		for _, v := range []any{&h, &a, &r} {
			if err := decodeRdv(b, v); err != nil && !errors.Is(err, errRdvLine) {
				t.Fatalf("error not errRdvLine: %v", err)
			}
		}
		readRdv(bufio.NewReader(strings.NewReader(string(b))), &h)
		orderAddrs(a.HeadAddrs)
	})
}

// TestSlurmOutsideAllocation: up, down and bcast outside a job say so.
func TestSlurmOutsideAllocation(t *testing.T) {
	t.Setenv("SLURM_JOB_ID", "")
	for _, args := range [][]string{{"slurm", "up"}, {"slurm", "down"}, {"slurm", "bcast", "x", "/tmp/x"}} {
		root := newRoot()
		root.SetArgs(args)
		root.SetOut(new(strings.Builder))
		root.SetErr(new(strings.Builder))
		err := root.Execute()
		if !errors.Is(err, ErrNoAllocation) || exitCode(err) == 0 {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// runOmst runs the CLI in-process and returns its error.
func runOmst(args ...string) error {
	root := newRoot()
	usageErrors(root)
	root.SetArgs(args)
	root.SetOut(new(strings.Builder))
	root.SetErr(new(strings.Builder))
	return root.Execute()
}

// TestSlurmBadInput: each bad flag or argument of up and bcast is named,
// with exit status 2, before anything is started; scontrol's failure is
// named. scontrol is a script at the test's edge printing a node list.
func TestSlurmBadInput(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\n[ \"$3\" = broken ] && { echo 'scontrol: error: bad list' >&2; exit 1; }\nprintf 'n1\\nn2\\nn3\\n'\n"
	if err := os.WriteFile(filepath.Join(bin, "scontrol"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("SLURM_JOB_ID", "5")
	t.Setenv("SLURM_JOB_NODELIST", "n[1-3]")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"slurm", "up", "--head-node", "n9"}, "--head-node n9: not a node of this allocation (n1,n2,n3)"},
		{[]string{"slurm", "up", "--join", "tok"}, "--join: 1 token(s) for 3 nodes"},
		{[]string{"slurm", "up", "--timeout", "0s"}, "--timeout 0s"},
		{[]string{"slurm", "bcast", "x", "rel/path"}, "DEST \"rel/path\": want an absolute path"},
		{[]string{"slurm", "bcast", "--preserve", "some/name", "/tmp/x"}, "--preserve: SOURCE some/name is a blob name"},
		{[]string{"slurm", "bcast", t.TempDir(), "/tmp/x"}, "not a regular file"},
		{[]string{"slurm", "bcast", "x"}, "accepts 2 arg(s)"},
	} {
		err := runOmst(c.args...)
		if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: exit %d, %v; want exit 2 and %q", c.args, exitCode(err), err, c.want)
		}
	}
	t.Setenv("SLURM_JOB_NODELIST", "broken")
	err := runOmst("slurm", "down")
	if err == nil || !strings.Contains(err.Error(), "scontrol show hostnames broken") || !strings.Contains(err.Error(), "bad list") {
		t.Errorf("scontrol failing: %v", err)
	}
	t.Setenv("SLURM_JOB_NODELIST", "")
	if err := runOmst("slurm", "down"); err == nil || !strings.Contains(err.Error(), "no SLURM_JOB_NODELIST") {
		t.Errorf("no node list: %v", err)
	}
}

func FuzzParseHostnames(f *testing.F) {
	f.Add("n1\nn2\n")
	f.Add("node[01-02]\n")
	f.Add("\n\n")
	f.Add("a/b\n..\n")
	f.Fuzz(func(t *testing.T, out string) {
		nodes, err := parseHostnames(out)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, n := range nodes {
			if !validComponent(n) || seen[n] {
				t.Fatalf("%q: bad or repeated node %q in %v", out, n, nodes)
			}
			seen[n] = true
			if _, err := slurmNodeHome("/tmp", "1", n); err != nil {
				t.Fatalf("%q: node %q gives no home: %v", out, n, err)
			}
		}
	})
}

// TestSlurmGetToDest: bcast's part on one node against a real daemon:
// the blob into DEST with the mode and time asked, an existing DEST
// refused without --force and replaced with it, no daemon named as such.
func TestSlurmGetToDest(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	startDaemon(t, home)
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("broadcast me"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustOmst(t, 20*time.Second, "--home", home, "put", "bc/x", src)
	sock := filepath.Join(home, "omst.sock")
	dest := filepath.Join(dir, "dest")
	ctx := context.Background()
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	n, err := getToDest(ctx, "7", sock, "bc/x", dest, false, "0600", mtime.UnixNano())
	if err != nil || n != 12 {
		t.Fatalf("get: %d, %v", n, err)
	}
	st, err := os.Stat(dest)
	if err != nil || st.Mode().Perm() != 0o600 || !st.ModTime().Equal(mtime) {
		t.Fatalf("dest: %v %v", st, err)
	}
	if b, _ := os.ReadFile(dest); string(b) != "broadcast me" {
		t.Fatalf("dest holds %q", b)
	}
	if _, err := getToDest(ctx, "7", sock, "bc/x", dest, false, "", 0); err == nil || !strings.Contains(err.Error(), "exists (--force replaces it)") {
		t.Fatalf("existing dest without --force: %v", err)
	}
	if _, err := getToDest(ctx, "7", sock, "bc/x", dest, true, "", 0); err != nil {
		t.Fatalf("--force: %v", err)
	}
	if _, err := getToDest(ctx, "7", sock, "bc/x", filepath.Join(dir, "d2"), false, "9z", 0); exitCode(err) != exitUsage {
		t.Fatalf("bad mode: %v", err)
	}
	_, err = getToDest(ctx, "7", filepath.Join(dir, "none.sock"), "bc/x", filepath.Join(dir, "d3"), false, "", 0)
	if !errors.Is(err, rpcbridge.ErrNoDaemon) || !strings.Contains(err.Error(), "no omst daemon of job 7 on this node") {
		t.Fatalf("no daemon: %v", err)
	}
}

// TestStopNodeDaemon: down's part on one node removes the home; it
// signals only a process that is an `omst slurm task` (the pid in a lock
// file may be another's).
func TestStopNodeDaemon(t *testing.T) {
	dir := t.TempDir()
	if msg, err := stopNodeDaemon(filepath.Join(dir, "omst-slurm-7", "n1"), time.Second); err != nil || !strings.Contains(msg, "no daemon") {
		t.Fatalf("nothing there: %q %v", msg, err)
	}
	home := filepath.Join(dir, "omst-slurm-7", "n1")
	d := startDaemon(t, home) // a plain daemon, not a slurm task: left alone
	_, err := stopNodeDaemon(home, time.Second)
	if err == nil || !strings.Contains(err.Error(), "not an omst slurm task: left alone") {
		t.Fatalf("a home held by another process: %v", err)
	}
	select {
	case <-d.done:
		t.Fatal("a process that is not an omst slurm task was stopped")
	default:
	}
	if _, err := os.Stat(filepath.Join(home, "lock")); err != nil {
		t.Fatalf("its home was touched: %v", err)
	}
	d.stop(t)
	// Its lock released, the home is a leftover: removed, with the job's directory.
	if msg, err := stopNodeDaemon(home, time.Second); err != nil || !strings.Contains(msg, "removed") {
		t.Fatalf("leftover home: %q %v", msg, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "omst-slurm-7")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the job directory is left: %v", err)
	}
}
