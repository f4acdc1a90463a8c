//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/omst-project/omst/internal/wanemu"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// gridSSHSkip skips the test, recording why in $OMST_SKIPS (the file
// `make test` lists skipped parts from).
func gridSSHSkip(t *testing.T, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if path := os.Getenv("OMST_SKIPS"); path != "" {
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintf(f, "integration %s: %s\n", t.Name(), reason)
			f.Close()
		}
	}
	t.Skip("skipping: " + reason)
}

// TestGridUpSSH brings a grid up for real: an emulated WAN (internal/wanemu: a
// root, 2 sites of a head and 2 workers, each host a network namespace)
// with an sshd on every host's data address, and `omst grid up` run from
// the root's namespace (the master's machine) reaching the heads directly
// and the workers through their head. The grid is closed (`omst grid
// init` on the root first), so every other host joins with a token. It
// checks the daemons and their parents, that a rerun changes nothing, a
// blob put at the root read at every worker, a killed worker shown down by
// `grid status` and restarted by `grid up`, then `grid down --purge`, and
// that nothing is left.
func TestGridUpSSH(t *testing.T) {
	if testing.Short() {
		gridSSHSkip(t, "builds network namespaces and runs sshd in them; skipped with -short")
	}
	if err := wanemu.Preflight(); err != nil {
		gridSSHSkip(t, "%v", err)
	}
	const sshd = "/usr/sbin/sshd"
	if _, err := os.Stat(sshd); err != nil {
		gridSSHSkip(t, "no %s (Debian: apt-get install openssh-server)", sshd)
	}
	for _, tool := range []string{"ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(tool); err != nil {
			gridSSHSkip(t, "no %s (Debian: apt-get install openssh-client)", tool)
		}
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Everything of the test lives in tmp (short: daemon socket paths).
	tmp, err := os.MkdirTemp("/tmp", "omst-gridssh-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	// sshd's privilege separation directory (left in place: an empty
	// directory the system's sshd would make too, that another sshd may
	// be using by now).
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}

	cfg := wanemu.Config{RunID: wanemu.NewRunID(7), Sites: 2, Workers: 2,
		WAN: []wanemu.Link{{Rate: 200 * wanemu.Mbit, Delay: 10 * time.Millisecond}}, LAN: wanemu.Link{Rate: wanemu.Gbit}}
	plan, err := wanemu.NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	emu, err := wanemu.Start(ctx, plan, wanemu.Options{Logf: t.Logf})
	if errors.Is(err, wanemu.ErrUnsupported) {
		gridSSHSkip(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	closeEmu := func() {
		if !closed {
			closed = true
			if err := emu.Close(); err != nil {
				t.Errorf("emulator teardown: %v", err)
			}
		}
	}
	t.Cleanup(closeEmu)
	t.Logf("emulated WAN %s up in %v", cfg.RunID, time.Since(t0).Round(time.Millisecond))

	// Keys: the client's, and one host key per host.
	keygen := func(path string) {
		t.Helper()
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "omst-test", "-f", path).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
	}
	clientKey := filepath.Join(tmp, "id_ed25519")
	keygen(clientKey)
	if err := os.Rename(clientKey+".pub", filepath.Join(tmp, "authorized_keys")); err != nil {
		t.Fatal(err)
	}

	// An sshd on every host's data address; the one of b's head only
	// later (until then that host is unreachable).
	late := "b-head"
	sshdLogs := map[string]*gridLogBuf{}
	startSSHD := func(h wanemu.Host) {
		t.Helper()
		hostKey := filepath.Join(tmp, "hostkey-"+h.Name)
		keygen(hostKey)
		conf := filepath.Join(tmp, "sshd-"+h.Name+".conf")
		text := strings.Join([]string{
			"ListenAddress " + h.IP.String(), "Port 22", "HostKey " + hostKey,
			"AuthorizedKeysFile " + filepath.Join(tmp, "authorized_keys"),
			"PermitRootLogin prohibit-password", "PubkeyAuthentication yes", "PasswordAuthentication no",
			"KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no", "AllowTcpForwarding yes",
			"PidFile " + filepath.Join(tmp, "sshd-"+h.Name+".pid"), "PrintMotd no", "MaxStartups 100:30:200", "LogLevel INFO",
		}, "\n") + "\n"
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		buf := &gridLogBuf{}
		sshdLogs[h.Name] = buf
		if _, err := emu.Command(h.Netns, []string{sshd, "-D", "-e", "-f", conf}, nil, "", buf, buf); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := wanemu.DialIn(h.Netns, h.IP.String()+":22", time.Second)
			if err == nil {
				c.Close()
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("sshd of %s does not listen: %v\n%s", h.Name, err, buf.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			for name, b := range sshdLogs {
				t.Logf("sshd of %s:\n%s", name, b.String())
			}
		}
	})
	for _, h := range plan.Hosts {
		if h.Name != late {
			startSSHD(h)
		}
	}
	// A key the hosts do not know, for a failed login.
	strangerKey := filepath.Join(tmp, "stranger_ed25519")
	keygen(strangerKey)

	// The topology: hosts by data address, each its own dir (the hosts
	// share this machine's file system), workers reached through their
	// head. The "broken" one logs in to a-w2 with a key it refuses.
	dirOf := func(name string) string { return filepath.Join(tmp, "g", name) }
	byIP := map[string]wanemu.Host{}
	for _, h := range plan.Hosts {
		byIP[h.IP.String()] = h
	}
	writeTopology := func(file, badKeyHost string) string {
		t.Helper()
		var topo strings.Builder
		fmt.Fprintf(&topo, "[defaults]\nssh_user = \"root\"\nssh_key = %q\ncache_size = \"256M\"\n\n[root]\nhost = %q\ndir = %q\n",
			clientKey, plan.RootIP.String(), dirOf("root"))
		for s := range cfg.Sites {
			head, _ := plan.Host(wanemu.SiteName(s) + "-head")
			var workers []wanemu.Host
			for w := 1; w <= cfg.Workers; w++ {
				h, _ := plan.Host(wanemu.SiteName(s) + "-w" + strconv.Itoa(w))
				workers = append(workers, h)
			}
			var ips []string
			for _, w := range workers {
				ips = append(ips, strconv.Quote(w.IP.String()))
			}
			fmt.Fprintf(&topo, "\n[[site]]\nname = %q\nworkers = [%s]\n[site.head]\nhost = %q\ndir = %q\n",
				wanemu.SiteName(s), strings.Join(ips, ", "), head.IP.String(), dirOf(head.Name))
			for _, w := range workers {
				fmt.Fprintf(&topo, "[[site.worker]]\nhost = %q\ndir = %q\n", w.IP.String(), dirOf(w.Name))
				if w.Name == badKeyHost {
					fmt.Fprintf(&topo, "ssh_key = %q\n", strangerKey)
				}
			}
		}
		path := filepath.Join(tmp, file)
		if err := os.WriteFile(path, []byte(topo.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	topoFile := writeTopology("grid.toml", "")
	brokenFile := writeTopology("broken.toml", "a-w2")
	sshOpts := []string{"--ssh-option", "UserKnownHostsFile=" + filepath.Join(tmp, "known_hosts"),
		"--ssh-option", "StrictHostKeyChecking=accept-new", "--ssh-option", "LogLevel=ERROR"}

	// The CLI on the master's machine: the root's namespace.
	root, _ := plan.Host("root")
	grid := func(args ...string) cliResult {
		t.Helper()
		var out, errb gridLogBuf
		start := time.Now()
		p, err := emu.Command(root.Netns, append([]string{omstBin, "grid"}, args...), nil, "", &out, &errb)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
		case <-ctx.Done():
			syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
			<-p.Done()
			t.Fatalf("omst grid %s: not done when the test's time ran out\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), out.String(), errb.String())
		}
		r := cliResult{stdout: out.String(), stderr: errb.String(), code: p.ExitCode()}
		t.Logf("omst grid %s: exit %d in %v\n%s%s", args[0], r.code, time.Since(start).Round(time.Millisecond), r.stdout, r.stderr)
		return r
	}
	// A local CLI on one host's home (the daemons' sockets are files).
	home := func(name string) string { return filepath.Join(dirOf(name), "home") }
	status := func(name string) (rpcbridge.Status, error) {
		r := omst(t, 20*time.Second, "--home", home(name), "status", "--json")
		var st rpcbridge.Status
		if r.code != 0 {
			return st, fmt.Errorf("omst status on %s: exit %d: %s", name, r.code, r.stderr)
		}
		return st, json.Unmarshal([]byte(r.stdout), &st)
	}
	lockPid := func(name string) int {
		b, _ := os.ReadFile(filepath.Join(home(name), "lock"))
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	// lines maps each host's name to the fields of its progress line.
	lines := func(out string) map[string][]string {
		m := map[string][]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(l)
			if len(f) > 0 {
				if h, ok := byIP[f[0]]; ok {
					m[h.Name] = f[1:]
				}
			}
		}
		return m
	}

	// A closed grid: the root has a grid key before anything runs.
	if err := os.MkdirAll(home("root"), 0o700); err != nil {
		t.Fatal(err)
	}
	if r := omst(t, 30*time.Second, "--home", home("root"), "-q", "grid", "init"); r.code != 0 {
		t.Fatalf("grid init: %d %s", r.code, r.stderr)
	}

	// 1. Up from nothing with b's head unreachable and a-w2 refusing the
	// login: those fail, b's workers are skipped, the rest comes up.
	r := grid(append([]string{"up", brokenFile}, sshOpts...)...)
	if r.code != 1 {
		t.Fatalf("grid up with failures: exit %d, want 1", r.code)
	}
	broken := lines(r.stdout)
	for _, h := range plan.Hosts {
		f := strings.Join(broken[h.Name], " ")
		var want []string
		switch h.Name {
		case "a-w2":
			want = []string{"FAILED: ssh:", "Permission denied (publickey"}
		case "b-head":
			want = []string{"FAILED: ssh:", "connect to host 10.2.0.1 port 22: Connection refused"}
		case "b-w1", "b-w2":
			want = []string{"skipped: its head 10.2.0.1 is not up"}
		default:
			want = []string{"copied started 12D3"}
		}
		for _, w := range want {
			if !strings.Contains(f, w) {
				t.Errorf("%s: line %q, want %q in it", h.Name, f, w)
			}
		}
	}
	if !strings.Contains(r.stderr, "4 of 7 hosts are not up (2 failed, 2 skipped)") {
		t.Errorf("grid up's error: %q", r.stderr)
	}

	// 2. b's head reachable, a-w2 with the right key: what was missing
	// comes up, the rest is left alone.
	b, _ := plan.Host(late)
	startSSHD(b)
	r = grid(append([]string{"up", topoFile}, sshOpts...)...)
	if r.code != 0 {
		t.Fatalf("grid up: exit %d", r.code)
	}
	second := lines(r.stdout)
	ids := map[string]string{}
	for _, h := range plan.Hosts {
		f := second[h.Name]
		bin, dmn := "copied", "started"
		if strings.Contains(strings.Join(broken[h.Name], " "), "started") {
			bin, dmn = "up-to-date", "running"
		}
		if len(f) < 5 || f[2] != bin || f[3] != dmn {
			t.Fatalf("%s: progress line %q, want role, site, %s, %s, peer ID", h.Name, f, bin, dmn)
		}
		ids[h.Name] = f[4]
		joined := slices.Contains(f, "token)")
		if wantJoin := h.Role != wanemu.RoleRoot && dmn == "started"; joined != wantJoin {
			t.Errorf("%s: joined with a token: %v, want %v (%q)", h.Name, joined, wantJoin, f)
		}
	}
	// Every daemon is up with the right parent, connected, and a member.
	parentOf := func(h wanemu.Host) string {
		switch h.Role {
		case wanemu.RoleHead:
			return "root"
		case wanemu.RoleWorker:
			return wanemu.SiteName(h.Site) + "-head"
		}
		return ""
	}
	for _, h := range plan.Hosts {
		var st rpcbridge.Status
		deadline := time.Now().Add(30 * time.Second)
		for {
			st, err = status(h.Name)
			ok := err == nil && st.PeerID == ids[h.Name]
			if p := parentOf(h); p != "" {
				ok = ok && strings.HasSuffix(st.Parent, "/p2p/"+ids[p]) && st.ParentConnected
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %+v, %v; want peer %s under %s (%s), connected", h.Name, st, err, ids[h.Name], parentOf(h), ids[parentOf(h)])
			}
			time.Sleep(200 * time.Millisecond)
		}
		wantRole := map[wanemu.Role]string{wanemu.RoleRoot: "client", wanemu.RoleHead: "head", wanemu.RoleWorker: "worker"}[h.Role]
		if st.Membership == nil || st.Membership.Role != wantRole {
			t.Errorf("%s: membership %+v, want role %s", h.Name, st.Membership, wantRole)
		}
		if st.CacheCap != 256<<20 {
			t.Errorf("%s: cache capacity %d, want 256 MiB (the topology's)", h.Name, st.CacheCap)
		}
	}
	pids := map[string]int{}
	for _, h := range plan.Hosts {
		pids[h.Name] = lockPid(h.Name)
	}

	// 3. Again: nothing changes.
	r = grid(append([]string{"up", topoFile}, sshOpts...)...)
	if r.code != 0 {
		t.Fatalf("grid up again: exit %d", r.code)
	}
	again := lines(r.stdout)
	for _, h := range plan.Hosts {
		f := again[h.Name]
		if len(f) != 5 || f[2] != "up-to-date" || f[3] != "running" || f[4] != ids[h.Name] {
			t.Errorf("%s: rerun's line %q, want up-to-date running %s", h.Name, f, ids[h.Name])
		}
		if p := lockPid(h.Name); p != pids[h.Name] {
			t.Errorf("%s: daemon pid %d after the rerun, was %d", h.Name, p, pids[h.Name])
		}
	}

	// 4. A blob put at the root, read at every worker.
	blobFile := filepath.Join(tmp, "blob")
	data := make([]byte, 4<<20+12345)
	rand.Read(data)
	if err := os.WriteFile(blobFile, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := omst(t, time.Minute, "--home", home("root"), "put", "inputs/grid-ssh.bin", blobFile); r.code != 0 {
		t.Fatalf("put at the root: exit %d: %s", r.code, r.stderr)
	}
	want := sha256.Sum256(data)
	for _, h := range plan.Hosts {
		if h.Role != wanemu.RoleWorker {
			continue
		}
		out := filepath.Join(tmp, "got-"+h.Name)
		if r := omst(t, time.Minute, "--home", home(h.Name), "get", "inputs/grid-ssh.bin", "-o", out); r.code != 0 {
			t.Fatalf("get at %s: exit %d: %s", h.Name, r.code, r.stderr)
		}
		got, err := os.ReadFile(out)
		if err != nil || sha256.Sum256(got) != want {
			t.Fatalf("get at %s: %d bytes, %v; want the %d bytes put", h.Name, len(got), err, len(data))
		}
	}

	// 5. A worker's daemon dies: grid status shows it down, grid up
	// restarts it (and only it).
	victim := "b-w2"
	vp := lockPid(victim)
	if vp == 0 {
		t.Fatalf("no pid for %s", victim)
	}
	syscall.Kill(vp, syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); ; {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", vp))
		if len(b) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d of %s survives SIGKILL", vp, victim)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r = grid(append([]string{"status", topoFile, "--json"}, sshOpts...)...)
	if r.code != 1 {
		t.Errorf("grid status with a worker down: exit %d, want 1", r.code)
	}
	var rows []gridStatusJSON
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("grid status --json: %v", err)
	}
	if len(rows) != len(plan.Hosts) {
		t.Fatalf("grid status: %d rows for %d hosts", len(rows), len(plan.Hosts))
	}
	for _, row := range rows {
		h := byIP[row.Host]
		switch {
		case h.Name == victim:
			if row.State != "down" || row.Status != nil {
				t.Errorf("%s: state %s, want down (%+v)", h.Name, row.State, row)
			}
		case row.State != "up" || !row.ParentOK || row.Status == nil || row.Status.PeerID != ids[h.Name]:
			t.Errorf("%s: %+v, want up under its parent", h.Name, row)
		}
	}
	grid(append([]string{"status", topoFile}, sshOpts...)...) // the table, for the log

	r = grid(append([]string{"up", topoFile}, sshOpts...)...)
	if r.code != 0 {
		t.Fatalf("grid up after a kill: exit %d", r.code)
	}
	third := lines(r.stdout)
	for _, h := range plan.Hosts {
		f, wantDaemon := third[h.Name], "running"
		if h.Name == victim {
			wantDaemon = "started"
		}
		if len(f) != 5 || f[2] != "up-to-date" || f[3] != wantDaemon || f[4] != ids[h.Name] {
			t.Errorf("%s: line %q after the kill, want up-to-date %s %s", h.Name, f, wantDaemon, ids[h.Name])
		}
	}
	if st, err := status(victim); err != nil || st.PeerID != ids[victim] || st.Membership == nil || st.Membership.Role != "worker" {
		t.Errorf("%s after its restart: %+v, %v", victim, st, err)
	}

	// 6. Down, purged: no daemon, no directory but the root's grid key.
	r = grid(append([]string{"down", topoFile, "--purge"}, sshOpts...)...)
	if r.code != 0 {
		t.Fatalf("grid down --purge: exit %d", r.code)
	}
	for name, f := range lines(r.stdout) {
		if len(f) < 4 || f[2] != "stopped" || f[3] != "purged" {
			t.Errorf("%s: down's line %q, want stopped purged", name, f)
		}
	}
	omstIn := func() []string {
		var found []string
		for _, ns := range plan.Namespaces {
			out, _ := exec.Command("ip", "netns", "pids", ns).Output()
			for _, p := range strings.Fields(string(out)) {
				comm, _ := os.ReadFile("/proc/" + p + "/comm")
				if c := strings.TrimSpace(string(comm)); c != "" && c != "sshd" {
					found = append(found, ns+": pid "+p+" "+c)
				}
			}
		}
		return found
	}
	if left := omstIn(); len(left) > 0 {
		t.Errorf("after grid down, still running in the namespaces: %v", left)
	}
	for _, h := range plan.Hosts {
		var files []string
		filepath.WalkDir(dirOf(h.Name), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(dirOf(h.Name), p)
				files = append(files, rel)
			}
			return nil
		})
		if h.Role == wanemu.RoleRoot {
			for _, f := range files {
				if !regexp.MustCompile(`^(home/(identity\.key|grid/[^/]+)|\.omst-grid-up)$`).MatchString(f) {
					t.Errorf("root: %s left after the purge", f)
				}
			}
			if !slices.Contains(files, "home/grid/grid.key") {
				t.Errorf("root: the grid key went with the purge: %v", files)
			}
		} else if _, err := os.Stat(dirOf(h.Name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %s left after the purge (%v): %v", h.Name, dirOf(h.Name), err, files)
		}
	}
	// Down again: idempotent.
	r = grid(append([]string{"down", topoFile, "--purge"}, sshOpts...)...)
	if r.code != 0 {
		t.Fatalf("grid down --purge again: exit %d", r.code)
	}
	for name, f := range lines(r.stdout) {
		if len(f) < 3 || f[2] != "not-running" {
			t.Errorf("%s: second down's line %q, want not-running", name, f)
		}
	}

	// 7. Teardown: sshd and the namespaces go; nothing of the test is left.
	closeEmu()
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), cfg.RunID) {
		t.Errorf("namespaces left: %s", out)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(tmp)) {
			t.Errorf("a process of the test survives: %s: %q", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		}
	}
	if err := os.RemoveAll(tmp); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s left: %v", tmp, err)
	}
	t.Logf("TestGridUpSSH: %v in all", time.Since(t0).Round(time.Millisecond))
}

// gridLogBuf is a buffer that processes write to concurrently.
type gridLogBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *gridLogBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *gridLogBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
