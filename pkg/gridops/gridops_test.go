package gridops

import (
	"slices"
	"strings"
	"testing"

	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/topology"
)

// grid2 is two sites: a with two workers, b with one and no fallback.
const grid2 = `
[defaults]
ssh_user = "omst"
ssh_key = "~/.ssh/k"
dir = "/opt/omst"

[root]
host = "master"
address = "192.0.2.1"

[[site]]
name = "a"
workers = ["a-n[1-2]"]
[site.head]
host = "head-a"
address = "10.1.0.1"
ssh_port = 2200

[[site]]
name = "b"
workers = ["b-n1"]
[site.defaults]
fallback_to_root = false
[site.head]
host = "head-b"
`

func parse(t *testing.T, doc string) *topology.Topology {
	t.Helper()
	top, err := topology.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func names(hs []*topology.Host) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Host)
	}
	return out
}

func TestPhases(t *testing.T) {
	top := parse(t, grid2)
	var got [][]string
	for _, p := range Phases(top) {
		got = append(got, names(p))
	}
	want := [][]string{{"master"}, {"head-a", "head-b"}, {"a-n1", "a-n2", "b-n1"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("Phases = %v, want %v", got, want)
	}
	alone := parse(t, "[root]\nhost = \"m\"\n")
	if p := Phases(alone); len(p) != 1 || len(p[0]) != 1 {
		t.Fatalf("Phases of a root alone = %v", p)
	}
}

func TestBlocked(t *testing.T) {
	top := parse(t, grid2)
	for _, tc := range []struct {
		host   string
		failed []string
		want   string // in the reason; "" for none
	}{
		{"master", []string{"head-a"}, ""},
		{"head-a", nil, ""},
		{"head-a", []string{"master"}, "its root master is not up"},
		{"a-n1", []string{"head-b"}, ""},
		{"a-n1", []string{"HEAD-A"}, ""}, // keys are lower-cased by the caller
		{"a-n1", []string{"head-a"}, "skipped: its head head-a is not up"},
		{"b-n1", []string{"master", "head-b"}, "its head head-b"},
	} {
		f := map[string]bool{}
		for _, x := range tc.failed {
			f[x] = true
		}
		got := Blocked(top.Host(tc.host), f)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("Blocked(%s, %v) = %q, want %q", tc.host, tc.failed, got, tc.want)
		}
	}
}

func TestParentAddrs(t *testing.T) {
	top := parse(t, grid2)
	ids := map[string]string{"master": "12D3Root", "head-a": "12D3HeadA", "head-b": "12D3HeadB"}
	for _, tc := range []struct {
		host string
		want []string
	}{
		{"master", nil},
		{"head-a", []string{"/ip4/192.0.2.1/tcp/4040/p2p/12D3Root"}},
		{"a-n2", []string{"/ip4/10.1.0.1/tcp/4040/p2p/12D3HeadA", "/ip4/192.0.2.1/tcp/4040/p2p/12D3Root"}},
		{"b-n1", []string{"/dns/head-b/tcp/4040/p2p/12D3HeadB"}}, // no fallback
	} {
		got, err := ParentAddrs(top, top.Host(tc.host), ids)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParentAddrs(%s) = %v, %v; want %v", tc.host, got, err, tc.want)
		}
	}
	delete(ids, "master")
	if _, err := ParentAddrs(top, top.Host("a-n1"), ids); err == nil || !strings.Contains(err.Error(), "master") {
		t.Errorf("without the root's ID: %v", err)
	}
}

func TestTokenFor(t *testing.T) {
	top := parse(t, grid2)
	if got := TokenFor(top.Host("head-a")); got != (TokenRequest{Host: "head-a", Role: "head", Prefix: "results/a/"}) {
		t.Errorf("head: %+v", got)
	}
	if got := TokenFor(top.Host("a-n2")); got != (TokenRequest{Host: "a-n2", Role: "worker", Prefix: "results/a/a-n2/"}) {
		t.Errorf("worker: %+v", got)
	}
}

func TestDecide(t *testing.T) {
	const sha = "aa"
	const cfg = "site = \"a\"\nparent = [\"/ip4/10.1.0.1/tcp/4040/p2p/X\"]\n"
	want := Want{Platform: "linux/amd64", BinSHA256: sha, Config: cfg}
	closed := want
	closed.Closed = true
	up := &rpcbridge.Status{PeerID: "12D3X"}
	current := Observation{OS: "Linux", Machine: "x86_64", HasBinary: true, BinSHA256: sha, HasConfig: true, Config: cfg, Pid: 7, Status: up}
	with := func(f func(o *Observation)) Observation { o := current; f(&o); return o }
	for _, tc := range []struct {
		name string
		role topology.Role
		want Want
		obs  Observation
		act  Action
		bin  string
		dmn  string
	}{
		{"fresh host", topology.RoleWorker, want, Observation{OS: "Linux", Machine: "x86_64"},
			Action{Copy: true, WriteConfig: true, Start: true}, Copied, Started},
		{"up and current", topology.RoleWorker, want, current, Action{}, UpToDate, Running},
		{"config differs only by a trailing newline", topology.RoleWorker, want, with(func(o *Observation) { o.Config = strings.TrimSuffix(cfg, "\n") }),
			Action{}, UpToDate, Running},
		{"binary differs: restart", topology.RoleWorker, want, with(func(o *Observation) { o.BinSHA256 = "bb" }),
			Action{Copy: true, Stop: true, Start: true}, Copied, Restarted},
		{"binary hash unknown: copy", topology.RoleWorker, want, with(func(o *Observation) { o.BinSHA256 = "" }),
			Action{Copy: true, Stop: true, Start: true}, Copied, Restarted},
		{"config differs (a new parent ID): restart", topology.RoleWorker, want, with(func(o *Observation) { o.Config = strings.Replace(cfg, "/X", "/Y", 1) }),
			Action{WriteConfig: true, Stop: true, Start: true}, UpToDate, Restarted},
		{"config missing", topology.RoleWorker, want, with(func(o *Observation) { o.HasConfig, o.Config = false, "" }),
			Action{WriteConfig: true, Stop: true, Start: true}, UpToDate, Restarted},
		{"stopped: start, nothing else", topology.RoleWorker, want, with(func(o *Observation) { o.Status, o.Pid = nil, 0 }),
			Action{Start: true}, UpToDate, Started},
		{"holds the lock, does not answer: restart", topology.RoleWorker, want, with(func(o *Observation) { o.Status = nil }),
			Action{Stop: true, Start: true}, UpToDate, Restarted},
		{"closed grid, no certificate: token and restart", topology.RoleHead, closed, current,
			Action{Token: true, WriteConfig: true, Stop: true, Start: true}, UpToDate, Restarted},
		{"closed grid, fresh host: token", topology.RoleWorker, closed, Observation{},
			Action{Copy: true, Token: true, WriteConfig: true, Start: true}, Copied, Started},
		{"closed grid, member: its old join line is kept", topology.RoleWorker, closed,
			with(func(o *Observation) { o.HasCert, o.Config = true, cfg+"join = \"omst-join-old\"\n" }), Action{}, UpToDate, Running},
		{"closed grid, member, stopped: started without a token", topology.RoleWorker, closed,
			with(func(o *Observation) {
				o.HasCert, o.Status, o.Pid, o.Config = true, nil, 0, "join = 'omst-join-old'\n"+cfg
			}),
			Action{Start: true}, UpToDate, Started},
		{"closed grid: the root needs no token", topology.RoleRoot, closed, current, Action{}, UpToDate, Running},
		{"unknown platform: no check", topology.RoleWorker, want, with(func(o *Observation) { o.Machine = "vax" }), Action{}, UpToDate, Running},
	} {
		got, err := Decide(tc.role, tc.want, tc.obs)
		if err != nil || got != tc.act {
			t.Errorf("%s: Decide = %+v, %v; want %+v", tc.name, got, err, tc.act)
			continue
		}
		if b, d := got.Words(); b != tc.bin || d != tc.dmn {
			t.Errorf("%s: words %s %s, want %s %s", tc.name, b, d, tc.bin, tc.dmn)
		}
	}
	_, err := Decide(topology.RoleWorker, want, with(func(o *Observation) { o.Machine = "aarch64" }))
	if err == nil || !strings.Contains(err.Error(), "linux/arm64") || !strings.Contains(err.Error(), "--binary") {
		t.Errorf("arm64 host, amd64 binary: %v", err)
	}
}

func TestSameConfig(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"a = 1\n", "a = 1", true},
		{"a = 1\njoin = \"x\"\n", "a = 1\n", true},
		{"join=\"x\"\na = 1\n", "a = 1\n", true},
		{"a = 1\n  \"join\" = \"x\"\n", "a = 1\n", true},
		{"a = 1\njoiner = 2\n", "a = 1\n", false},
		{"a = 1\n", "a = 2\n", false},
		{"", "a = 1", false},
	} {
		if got := SameConfig(tc.a, tc.b); got != tc.same {
			t.Errorf("SameConfig(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func TestRemotePlatform(t *testing.T) {
	for _, tc := range []struct{ os, m, want string }{
		{"Linux", "x86_64", "linux/amd64"},
		{"Linux", "aarch64", "linux/arm64"},
		{"Darwin", "arm64", "darwin/arm64"},
		{"Linux", "armv7l", "linux/arm"},
		{"Linux", "ppc64le", "linux/ppc64le"},
		{"Linux", "i686", "linux/386"},
		{"Linux", "vax", ""},
		{"Plan9", "x86_64", ""},
		{"", "", ""},
	} {
		if got := RemotePlatform(tc.os, tc.m); got != tc.want {
			t.Errorf("RemotePlatform(%q, %q) = %q, want %q", tc.os, tc.m, got, tc.want)
		}
	}
}

func TestColumns(t *testing.T) {
	top := parse(t, grid2)
	c := NewColumns(top)
	if got := c.Line(top.Root(), "copied", "started", "12D3X"); got != "master  root    -  copied  started  12D3X" {
		t.Errorf("root line %q", got)
	}
	if got := c.Line(top.Host("a-n1"), "FAILED: x"); got != "a-n1    worker  a  FAILED: x" {
		t.Errorf("worker line %q", got)
	}
}

func TestStatusRows(t *testing.T) {
	top := parse(t, grid2)
	st := func(id, parent string, connected bool) *rpcbridge.Status {
		return &rpcbridge.Status{PeerID: id, Parent: parent, ParentConnected: connected, CacheUsed: 1 << 20, CacheCap: 1 << 30,
			BytesIn: map[string]uint64{"parent": 1 << 20, "sibling": 1 << 20}, BytesOut: map[string]uint64{"child": 3 << 20},
			Transfers: []rpcbridge.Transfer{{Name: "x"}}}
	}
	probes := map[string]Probe{
		"master": {Obs: Observation{HasBinary: true, Status: st("R", "", false)}},
		"head-a": {Obs: Observation{HasBinary: true, Status: st("A", "/ip4/192.0.2.1/tcp/4040/p2p/R", true)}},
		"head-b": {Err: "ssh: connect to host head-b port 22: Connection refused"},
		"a-n1":   {Obs: Observation{HasBinary: true, Status: st("W1", "/ip4/192.0.2.1/tcp/4040/p2p/R", true)}}, // on its fallback
		"a-n2":   {Obs: Observation{HasBinary: true, StatusErr: "no daemon", Pid: 0}},                          // down
		"b-n1":   {Obs: Observation{HasBinary: false}},                                                         // never installed
	}
	rows := StatusRows(top, probes)
	type row struct{ host, state, parent, cache, in, out, xfers string }
	var got []row
	for _, r := range rows {
		got = append(got, row{r.Host.Host, r.State, r.Parent, r.Cache, r.In, r.Out, r.Transfers})
	}
	want := []row{
		{"master", StateUp, "-", "1 MiB/1 GiB", "2 MiB", "3 MiB", "1"},
		{"head-a", StateUp, "master connected", "1 MiB/1 GiB", "2 MiB", "3 MiB", "1"},
		{"a-n1", StateUp, "master (fallback) connected", "1 MiB/1 GiB", "2 MiB", "3 MiB", "1"},
		{"a-n2", StateDown, "-", "-", "-", "-", "-"},
		{"head-b", StateUnreachable, "-", "-", "-", "-", "-"},
		{"b-n1", StateMissing, "-", "-", "-", "-", "-"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows:\n%v\nwant\n%v", got, want)
	}
	if !rows[0].ParentOK || !rows[1].ParentOK || rows[2].ParentOK {
		t.Errorf("ParentOK: %v %v %v", rows[0].ParentOK, rows[1].ParentOK, rows[2].ParentOK)
	}
	if !strings.Contains(rows[4].Detail, "Connection refused") || !strings.Contains(rows[3].Detail, "no daemon") {
		t.Errorf("details: %q, %q", rows[4].Detail, rows[3].Detail)
	}
}
