package topology

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// full exercises inheritance: global defaults, site defaults, host tables,
// per-worker overrides (one with a range of addresses), jump chains and
// fallbacks.
const full = `
[defaults]
ssh_user = "omst"
ssh_key = "~/.ssh/grid"
dir = "/opt/omst"
cache_size = "20G"
chunk_size = 4194304
relay_mode = "store-forward"

[root]
host = "master"
address = "192.0.2.1"
port = 5000
cache_size = "1T"

[[site]]
name = "a"
workers = ["a-n[01-03]", "a-big"]

[site.head]
host = "head-a"
address = "10.1.0.1"
ssh_jump = "admin@bastion:2222"
ssh_port = 2200

[[site.worker]]
host = "a-big"
cache_size = "2T"
daemon_args = ["--window", "64"]

[[site.worker]]
host = "a-n[02-03]"
address = "10.1.1.[2-3]"
fallback_to_root = false

[[site]]
name = "b"
workers = [
  "b[1-2]",
]
[site.defaults]
ssh_user = "grid"
port = 4100
listen = ["/ip4/0.0.0.0/tcp/4100"]
fallback_to_root = false
[site.head]
host = "head-b"
relay_mode = "cut-through"
[[site.worker]]
host = "b2"
ssh_jump = ""
fallback_to_root = true
`

func TestParseFull(t *testing.T) {
	top, err := Parse([]byte(full))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, h := range top.Hosts {
		names = append(names, h.Host)
	}
	if want := []string{"master", "head-a", "a-n01", "a-n02", "a-n03", "a-big", "head-b", "b1", "b2"}; !slices.Equal(names, want) {
		t.Fatalf("hosts %v, want %v", names, want)
	}
	if len(top.Sites) != 2 || top.Sites[0].Name != "a" || top.Sites[0].Head != "head-a" || top.Sites[0].Line != 16 ||
		!slices.Equal(top.Sites[1].Workers, []string{"b1", "b2"}) {
		t.Fatalf("sites %+v", top.Sites)
	}
	if top.Root().Host != "master" || top.Host("HEAD-A") != top.Hosts[1] || top.Host("nope") != nil {
		t.Fatal("Root or Host")
	}
	var kids []string
	for _, h := range top.Children("head-a") {
		kids = append(kids, h.Host)
	}
	if !slices.Equal(kids, []string{"a-n01", "a-n02", "a-n03", "a-big"}) {
		t.Fatalf("children of head-a: %v", kids)
	}

	const gib = 1 << 30
	headA := Hop{User: "omst", Host: "head-a", Port: 2200, Key: "~/.ssh/grid"}
	bastion := Hop{User: "admin", Host: "bastion", Port: 2222}
	headB := Hop{User: "grid", Host: "head-b", Key: "~/.ssh/grid"}
	listenB := []string{"/ip4/0.0.0.0/tcp/4100"}
	for _, tc := range []struct {
		host, parent, site, address string
		role                        Role
		fallbacks                   []string
		user                        string
		port                        int
		jump                        []Hop
		cache, chunk                int64
		relay                       string
		listen, extra               []string
		line                        int
	}{
		{"master", "", "", "192.0.2.1", RoleRoot, nil, "omst", 5000, nil, 1 << 40, 4 << 20, "store-forward",
			[]string{"/ip4/0.0.0.0/tcp/5000", "/ip4/0.0.0.0/udp/5000/quic-v1"}, nil, 11},
		{"head-a", "master", "a", "10.1.0.1", RoleHead, nil, "omst", 4040, []Hop{bastion}, 20 * gib, 4 << 20, "store-forward", nil, nil, 21},
		{"a-n01", "head-a", "a", "a-n01", RoleWorker, []string{"master"}, "omst", 4040, []Hop{bastion, headA}, 20 * gib, 4 << 20, "store-forward", nil, nil, 18},
		{"a-n02", "head-a", "a", "10.1.1.2", RoleWorker, nil, "omst", 4040, []Hop{bastion, headA}, 20 * gib, 4 << 20, "store-forward", nil, nil, 18},
		{"a-n03", "head-a", "a", "10.1.1.3", RoleWorker, nil, "omst", 4040, []Hop{bastion, headA}, 20 * gib, 4 << 20, "store-forward", nil, nil, 18},
		{"a-big", "head-a", "a", "a-big", RoleWorker, []string{"master"}, "omst", 4040, []Hop{bastion, headA}, 2048 * gib, 4 << 20, "store-forward",
			nil, []string{"--window", "64"}, 18},
		{"head-b", "master", "b", "head-b", RoleHead, nil, "grid", 4100, nil, 20 * gib, 4 << 20, "cut-through", listenB, nil, 47},
		{"b1", "head-b", "b", "b1", RoleWorker, nil, "grid", 4100, []Hop{headB}, 20 * gib, 4 << 20, "store-forward", listenB, nil, 39},
		{"b2", "head-b", "b", "b2", RoleWorker, []string{"master"}, "grid", 4100, nil, 20 * gib, 4 << 20, "store-forward", listenB, nil, 39},
	} {
		h := top.Host(tc.host)
		if tc.listen == nil {
			tc.listen = []string{"/ip4/0.0.0.0/tcp/4040", "/ip4/0.0.0.0/udp/4040/quic-v1"}
		}
		if h.Parent != tc.parent || h.Site != tc.site || h.Address != tc.address || h.Role != tc.role ||
			!slices.Equal(h.Fallbacks, tc.fallbacks) || h.SSH.User != tc.user || h.SSH.Host != tc.host || h.SSH.Key != "~/.ssh/grid" ||
			h.Daemon.Port != tc.port || !slices.Equal(h.SSH.Jump, tc.jump) || h.Daemon.CacheSize != tc.cache ||
			h.Daemon.ChunkSize != tc.chunk || h.Daemon.RelayMode != tc.relay || !slices.Equal(h.Daemon.Listen, tc.listen) ||
			!slices.Equal(h.Daemon.ExtraArgs, tc.extra) || h.Dir != "/opt/omst" || h.Line != tc.line {
			t.Errorf("%s: %+v", tc.host, *h)
		}
	}
	if p := top.Host("head-a").SSH.Port; p != 2200 {
		t.Errorf("head-a ssh port %d", p)
	}
	if p := top.Host("a-n01").SSH.Port; p != 0 {
		t.Errorf("a-n01 ssh port %d, want ssh's default", p)
	}
}

func TestDefaults(t *testing.T) {
	top, err := Parse([]byte("[root]\nhost = \"r\"\n[[site]]\nname = \"s\"\nhead = { host = \"h\" }\nworkers = [\"w\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	w := top.Host("w")
	want := Host{Host: "w", Role: RoleWorker, Site: "s", Address: "w", Parent: "h", Fallbacks: []string{"r"},
		SSH: SSH{Host: "w", Jump: []Hop{{Host: "h"}}}, Dir: DefaultDir, Line: 6,
		Daemon: Daemon{Port: DefaultPort, Listen: []string{"/ip4/0.0.0.0/tcp/4040", "/ip4/0.0.0.0/udp/4040/quic-v1"}, RelayMode: RelayCutThrough}}
	w.addressAt = ""
	if w.Role != want.Role || w.Parent != want.Parent || !slices.Equal(w.Fallbacks, want.Fallbacks) || !slices.Equal(w.SSH.Jump, want.SSH.Jump) ||
		w.SSH.User != "" || w.Dir != want.Dir || w.Daemon.Port != want.Daemon.Port || !slices.Equal(w.Daemon.Listen, want.Daemon.Listen) ||
		w.Daemon.RelayMode != want.Daemon.RelayMode || w.Daemon.CacheSize != 0 || w.Daemon.ChunkSize != 0 || w.Line != want.Line {
		t.Errorf("got %+v\nwant %+v", *w, want)
	}
	if got := w.DaemonArgs(); !slices.Equal(got, []string{"daemon", "--home", "omst/home", "--site", "s",
		"--listen", "/ip4/0.0.0.0/tcp/4040", "--listen", "/ip4/0.0.0.0/udp/4040/quic-v1", "--relay-mode", "cut-through"}) {
		t.Errorf("DaemonArgs %q", got)
	}
	if r := top.Root(); r.Parent != "" || r.Fallbacks != nil || r.SSH.Jump != nil || r.Site != "" {
		t.Errorf("root %+v", *r)
	}
}

func TestHostHelpers(t *testing.T) {
	h := &Host{Host: "n1", Site: "s", Address: "10.0.0.7", Dir: "/opt/omst",
		SSH:    SSH{User: "u", Host: "n1", Jump: []Hop{{User: "a", Host: "gw", Port: 2222}, {Host: "fe80::1", Port: 22}, {Host: "h"}}},
		Daemon: Daemon{Port: 4040, Listen: []string{"/ip4/0.0.0.0/tcp/4040"}, CacheSize: 1 << 30, ChunkSize: 1 << 20, RelayMode: RelayStoreForward, ExtraArgs: []string{"--window", "8"}}}
	for _, tc := range []struct{ got, want string }{
		{h.Bin(), "/opt/omst/bin/omst"},
		{h.Home(), "/opt/omst/home"},
		{h.DialAddr(), "/ip4/10.0.0.7/tcp/4040"},
		{(&Host{Address: "fd00::1", Daemon: Daemon{Port: 1}}).DialAddr(), "/ip6/fd00::1/tcp/1"},
		{(&Host{Address: "n1.example.org", Daemon: Daemon{Port: 1}}).DialAddr(), "/dns/n1.example.org/tcp/1"},
		{h.SSH.Target(), "u@n1"},
		{SSH{Host: "n1"}.Target(), "n1"},
		{h.SSH.JumpSpec(), "a@gw:2222,[fe80::1]:22,h"},
		{SSH{Host: "x"}.JumpSpec(), ""},
		{strings.Join(h.DaemonArgs(), " "), "daemon --home /opt/omst/home --site s --listen /ip4/0.0.0.0/tcp/4040 --relay-mode store-forward " +
			"--cache-size 1073741824 --chunk-size 1048576 --window 8"},
		{strings.Join((&Host{Dir: "d", Daemon: Daemon{RelayMode: "cut-through"}}).DaemonArgs(), " "), "daemon --home d/home --relay-mode cut-through"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// lineMark is a comment that marks the line an error is expected at.
const lineMark = "#<"

func TestParseErrors(t *testing.T) {
	const root = "[root]\nhost = \"master\"\n"
	const site = "[[site]]\nname = \"s\"\nworkers = [\"n[1-4]\"]\n[site.head]\nhost = \"head\"\n"
	for _, tc := range []struct {
		name     string
		doc      string // the line with lineMark is the error's (none: line 1)
		key, msg string // msg: in the error's Msg
	}{
		// Syntax and schema, found by the decoder.
		{"syntax", root + "[site #<\n", "", "expected"},
		{"unknown key", "[defaults]\ncache_siz = \"1G\" #<\n" + root, "defaults.cache_siz", "did you mean cache_size"},
		{"unknown table", root + "[[sites]] #<\nname = \"a\"\n", "sites", "did you mean site"},
		{"unknown host key", root + site + "cores = 8 #<\n", "site.head.cores", "unknown key (this table has host, address"},
		{"site key after a site table", root + "[[site]]\nname = \"s\"\n[site.head]\nhost = \"h\"\nworkers = [\"n1\"] #<\n", "site.head.workers", "goes right after its [[site]] line"},
		{"explicit parent", root + site + "parent = \"master\" #<\n", "site.head.parent", "parents are not written"},
		{"unknown key inline", root + "[[site]]\nname = \"s\"\nworkers = [\"n1\"]\nhead = { host = \"h\", size = 3 } #<\n", "site.head.size", "unknown key"},
		{"wrong type", "[defaults]\nport = \"4040\" #<\n" + root, "defaults.port", "want an integer, not a string"},
		{"workers not a list", root + "[[site]]\nname = \"s\"\nworkers = \"n[1-4]\" #<\n", "site.workers", "want a list of strings"},
		{"head not a table", root + "[[site]]\nname = \"s\"\nhead = \"h\" #<\n", "site.head", "want a table"},
		{"too large an integer", "[defaults]\nport = 99999999999999999999 #<\n" + root, "defaults.port", "too large"},
		{"duplicate key", root + "host = \"again\" #<\n", "root.host", "already"},

		// Missing pieces.
		{"no root", "[defaults]\nport = 1\n", "root", "missing"},
		{"root without host", "[root] #<\nport = 4041\n", "root", "has no host"},
		{"site without head", root + "[[site]] #<\nname = \"s\"\nworkers = [\"n1\"]\n", "site", "has no head"},
		{"site without head, inline", "site = [\n  { name = \"s\", workers = [\"n1\"] }, #<\n]\n" + root, "site", "has no head"},
		{"site without workers", root + "[[site]] #<\nname = \"s\"\n[site.head]\nhost = \"h\"\n", "site", "has no workers"},
		{"empty workers", root + "[[site]]\nname = \"s\"\nworkers = [] #<\n[site.head]\nhost = \"h\"\n", "site.workers", "empty list"},
		{"site without name", root + "[[site]] #<\nworkers = [\"n1\"]\n[site.head]\nhost = \"h\"\n", "site", "without a name"},
		{"worker table without host", root + site + "[[site.worker]] #<\ncache_size = \"1G\"\n", "site.worker", "without host"},

		// Hosts and ranges.
		{"descending range", root + "[[site]]\nname = \"s\"\nworkers = [\n  \"n1\",\n  \"node[64-01]\", #<\n]\n[site.head]\nhost = \"h\"\n", "site.workers", "runs backwards"},
		{"open range", root + "[[site]]\nname = \"s\"\nworkers = [\"node[1-]\"] #<\n[site.head]\nhost = \"h\"\n", "site.workers", "upper bound"},
		{"letters in range", root + "[[site]]\nname = \"s\"\nworkers = [\"node[a-c]\"] #<\n[site.head]\nhost = \"h\"\n", "site.workers", "not a number"},
		{"empty host", root + "[[site]]\nname = \"s\"\nworkers = [\"\"] #<\n[site.head]\nhost = \"h\"\n", "site.workers", "empty"},
		{"range as head", root + "[[site]]\nname = \"s\"\nworkers = [\"n1\"]\n[site.head]\nhost = \"h[1-2]\" #<\n", "site.head.host", "range is for workers only"},
		{"bad root host", "[root]\nhost = \"omst@master\" #<\n", "root.host", "ssh_user"},
		{"bad address", root + site + "address = \"10.0.0.1 \" #<\n", "site.head.address", "not allowed"},
		{"duplicate host root and head", root + "[[site]]\nname = \"s\"\nworkers = [\"n1\"]\n[site.head]\nhost = \"MASTER\" #<\n", "site.head.host", `already declared at line 2 (the root)`},
		{"duplicate worker via overlapping ranges", root + site + "[[site]]\nname = \"t\"\nworkers = [\"m1\", \"n[4-9]\"] #<\n[site.head]\nhost = \"head-t\"\n",
			"site.workers", `"n4" is already declared at line 5 (a worker of site "s")`},
		{"duplicate within one entry", root + "[[site]]\nname = \"s\"\nworkers = [\"n[1-3,2]\"] #<\n[site.head]\nhost = \"h\"\n", "site.workers", "listed twice"},
		{"worker is a head", root + site + "[[site]]\nname = \"t\"\nworkers = [\"head\"] #<\n[site.head]\nhost = \"head-t\"\n", "site.workers", "the head of site"},
		{"override of no worker", root + site + "[[site.worker]]\nhost = \"n7\" #<\ncache_size = \"1G\"\n", "site.worker.host", `host "n7" is not among the workers of site "s"`},
		{"override of no workers", root + site + "[[site.worker]]\nhost = \"n[1-9]\" #<\ncache_size = \"1G\"\n", "site.worker.host", `5 hosts ("n5", "n6", ... "n9") are not among`},
		{"override of a bad worker entry", root + "[[site]]\nname = \"s\"\nworkers = [\"n[2-1]\"] #<\n[site.head]\nhost = \"h\"\n[[site.worker]]\nhost = \"n1\"\n", "site.workers", "backwards"},
		{"override twice", root + site + "[[site.worker]]\nhost = \"n[1-2]\"\nport = 4100\n[[site.worker]]\nhost = \"n2\" #<\nport = 4200\n", "site.worker.host", `host "n2" is already given settings at line 9`},
		{"address range mismatch", root + site + "[[site.worker]]\nhost = \"n[1-2]\"\naddress = \"10.0.0.9\" #<\n", "site.worker.address", "1 addresses for 2 hosts"},
		{"duplicate address", root + site + "[[site.worker]]\nhost = \"n3\"\naddress = \"HEAD\" #<\n", "site.worker.address", `as "head" at line 7 does`},

		// Sites.
		{"duplicate site", root + site + "[[site]]\nname = \"s\" #<\nworkers = [\"m1\"]\n[site.head]\nhost = \"h2\"\n", "site.name", `site "s" is already defined at line 4`},
		{"bad site name", root + "[[site]]\nname = \"a b\" #<\nworkers = [\"n1\"]\n[site.head]\nhost = \"h\"\n", "site.name", "want 1 to 64 letters"},

		// Values.
		{"negative cache size", "[defaults]\ncache_size = -5 #<\n" + root, "defaults.cache_size", "negative"},
		{"negative cache size string", root + site + "cache_size = \"-5G\" #<\n", "site.head.cache_size", "negative"},
		{"zero cache size", "[defaults]\ncache_size = 0 #<\n" + root, "defaults.cache_size", "leave the key out"},
		{"fractional cache size", "[defaults]\ncache_size = 1.5 #<\n" + root, "defaults.cache_size", "whole number"},
		{"cache size table", "[defaults.cache_size] #<\nx = 1\n" + root, "defaults.cache_size", "want a size"},
		{"unparsable cache size", root + "cache_size = \"lots\" #<\n", "root.cache_size", "want a number of bytes"},
		{"chunk size too large", root + site + "[site.defaults]\nchunk_size = \"128M\" #<\n", "site.defaults.chunk_size", "outside"},
		{"chunk size too small", "[defaults]\nchunk_size = 1 #<\n" + root, "defaults.chunk_size", "outside"},
		{"unknown relay mode", root + site + "[[site.worker]]\nhost = \"n1\"\nrelay_mode = \"fast\" #<\n", "site.worker.relay_mode", "want cut-through or store-forward"},
		{"port 0", "[defaults]\nport = 0 #<\n" + root, "defaults.port", "out of range"},
		{"port too large", root + "port = 65536 #<\n", "root.port", "out of range"},
		{"ssh port negative", root + site + "ssh_port = -22 #<\n", "site.head.ssh_port", "out of range"},
		{"fallback on root", root + "fallback_to_root = false #<\n", "root.fallback_to_root", "workers only"},
		{"fallback on head", root + site + "fallback_to_root = false #<\n", "site.head.fallback_to_root", "workers only"},
		{"bad listen", "[defaults]\nlisten = [\"0.0.0.0:4040\"] #<\n" + root, "defaults.listen", "not a multiaddr"},
		{"empty listen", "[defaults]\nlisten = [] #<\n" + root, "defaults.listen", "empty list"},
		{"listen without the port", "[defaults]\nlisten = [\"/ip4/0.0.0.0/tcp/5000\"] #<\n" + root, "defaults.listen", "no /tcp/4040 address"},
		{"daemon args set the parent", root + "daemon_args = [\"--parent\", \"x\"] #<\n", "root.daemon_args", "sets --parent itself"},
		{"daemon args set the cache", "[defaults]\ndaemon_args = [\"--window\", \"8\", \"--cache-size=1G\"] #<\n" + root, "defaults.daemon_args", "use cache_size"},
		{"dir with a space", "[defaults]\ndir = \"/opt/my omst\" #<\n" + root, "defaults.dir", "no spaces"},
		{"dir with tilde", "[defaults]\ndir = \"~/omst\" #<\n" + root, "defaults.dir", "without ~"},
		{"dir too long", "[defaults]\ndir = \"/" + strings.Repeat("d", 100) + "\" #<\n" + root, "defaults.dir", "too long"},
		{"bad ssh user", root + "ssh_user = \"-oProxyCommand=x\" #<\n", "root.ssh_user", "user"},
		{"bad ssh jump", root + site + "[site.defaults]\nssh_jump = \"gw:x\" #<\n", "site.defaults.ssh_jump", "want 1 to 65535"},
		{"empty ssh key", "[defaults]\nssh_key = \"\" #<\n" + root, "defaults.ssh_key", "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantLine := 1
			for i, l := range strings.Split(tc.doc, "\n") {
				if strings.Contains(l, lineMark) {
					wantLine = i + 1
				}
			}
			top, err := Parse([]byte(tc.doc))
			var l ErrorList
			if !errors.As(err, &l) {
				t.Fatalf("Parse = %v, %v; want an ErrorList", top, err)
			}
			if len(l) != 1 {
				t.Fatalf("%d errors, want 1:\n%v", len(l), err)
			}
			e := l[0]
			if e.Line != wantLine || e.Key != tc.key || !strings.Contains(e.Msg, tc.msg) || e.File != "" {
				t.Fatalf("error %q (line %d, key %q); want line %d, key %q, %q", e, e.Line, e.Key, wantLine, tc.key, tc.msg)
			}
			if want := "line "; !strings.HasPrefix(e.Error(), want) {
				t.Fatalf("Error() = %q", e.Error())
			}
		})
	}
}

func TestParseManyErrors(t *testing.T) {
	doc := `[defaults]
cache_size = -1
[root]
host = "r"
[[site]]
name = "s"
workers = ["n[1-]", "n[1-200]"]
[site.head]
host = "h"
port = 0
[[site]]
name = "t"
workers = ["n[150-300]"]
`
	_, err := Parse([]byte(doc))
	var l ErrorList
	if !errors.As(err, &l) {
		t.Fatal(err)
	}
	var lines []int
	for _, e := range l {
		lines = append(lines, e.Line)
	}
	// By line: the cache size, the open range, the port, the missing head,
	// then the overlap of n[150-200], once.
	if !slices.Equal(lines, []int{2, 7, 10, 11, 13}) ||
		!strings.Contains(l[4].Msg, `51 hosts ("n150", "n151", ... "n200") are already declared at line 7 (a worker of site "s")`) {
		t.Fatalf("errors at lines %v:\n%v", lines, err)
	}
	if len(l) > maxErrors {
		t.Fatalf("%d errors", len(l))
	}
	var first *Error
	if !errors.As(err, &first) || first != l[0] {
		t.Fatal("errors.As(*Error) does not find the first error")
	}
}

func TestMaxHosts(t *testing.T) {
	doc := "[root]\nhost = \"r\"\n[[site]]\nname = \"s\"\nhead = { host = \"h\" }\nworkers = [\"a[0-65535]\", \"b[0-65535]\",\n  \"c[0-65535]\",\n  \"d[0-65535]\"]\n"
	_, err := Parse([]byte(doc))
	var l ErrorList
	if !errors.As(err, &l) || len(l) != 1 || l[0].Line != 6 || !strings.Contains(l[0].Msg, "more than 131072 hosts") {
		t.Fatalf("Parse: %v", err)
	}
}

func TestParseFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[root]\nhost = \"r\"\nport = 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ParseFile(bad)
	if err == nil || err.Error() != bad+":3: root.port: port 0 out of range: want 1 to 65535" {
		t.Fatalf("ParseFile: %v", err)
	}
	if _, err := ParseFile(filepath.Join(dir, "missing.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ParseFile of a missing file: %v", err)
	}
	top, err := ParseFile("../../examples/grid/grid.toml")
	if err != nil {
		t.Fatalf("the example: %v", err)
	}
	if len(top.Sites) != 2 || len(top.Hosts) != 1+2+32+16 {
		t.Fatalf("the example: %d sites, %d hosts", len(top.Sites), len(top.Hosts))
	}
}

// FuzzParse checks that Parse never panics, that its errors have lines
// within the document, and that what it accepts is a consistent tree.
func FuzzParse(f *testing.F) {
	f.Add([]byte(full))
	if b, err := os.ReadFile("../../examples/grid/grid.toml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("[root]\nhost = \"r\"\n[[site]]\nname = \"s\"\nhead = { host = \"h\" }\nworkers = [\"n[1-3]\"]\n"))
	f.Add([]byte("[root]\nhost = \"r\"\n[[site]]\nname = \"s\"\nworkers = [\"n[3-1]\"]\n[[site.worker]]\nhost = \"x\"\n"))
	f.Add([]byte("site = [{name = \"a\", head = {host = \"h\"}, workers = [\"w\"]}]\n[root]\nhost = \"r\"\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		top, err := Parse(doc)
		if err != nil {
			var l ErrorList
			if !errors.As(err, &l) || len(l) == 0 || len(l) > maxErrors {
				t.Fatalf("error %v is not an ErrorList", err)
			}
			lines := 1 + strings.Count(string(doc), "\n")
			for _, e := range l {
				if e.Line < 1 || e.Line > lines || e.Msg == "" {
					t.Fatalf("error %q at line %d of %d", e.Msg, e.Line, lines)
				}
			}
			return
		}
		if len(top.Hosts) == 0 || top.Root().Role != RoleRoot || top.Root().Parent != "" {
			t.Fatalf("no root: %+v", top.Hosts)
		}
		seen := map[string]*Host{}
		for _, h := range top.Hosts {
			k := strings.ToLower(h.Host)
			if seen[k] != nil || ValidateHost(h.Host) != nil || top.Host(h.Host) != h {
				t.Fatalf("host %q twice or invalid", h.Host)
			}
			seen[k] = h
		}
		for _, h := range top.Hosts[1:] {
			p := seen[strings.ToLower(h.Parent)]
			switch {
			case p == nil:
				t.Fatalf("%s: parent %q is not a host", h.Host, h.Parent)
			case h.Role == RoleHead && p.Role != RoleRoot, h.Role == RoleWorker && (p.Role != RoleHead || p.Site != h.Site):
				t.Fatalf("%s (%s) under %s (%s)", h.Host, h.Role, p.Host, p.Role)
			case h.Daemon.Port < 1 || h.Daemon.Port > 65535 || len(h.Daemon.Listen) == 0:
				t.Fatalf("%s: daemon %+v", h.Host, h.Daemon)
			}
		}
	})
}

func TestNearest(t *testing.T) {
	for w, want := range map[string]string{
		"cache_siz": "cache_size", "Cache_Size": "cache_size", "relay": "relay_mode", "relaymode": "relay_mode",
		"ssh": "", "workers": "", "fallback_root": "fallback_to_root", "prt": "port", "xyz": "",
	} {
		known := settingKeys
		if w == "workers" {
			known = tableKeys[""]
		}
		if got := nearest(w, known); got != want {
			t.Errorf("nearest(%q) = %q, want %q", w, got, want)
		}
	}
}

func TestErrorList(t *testing.T) {
	e := func(line int, key, msg string) *Error { return &Error{Line: line, Key: key, Msg: msg} }
	l := ErrorList{e(9, "b", "x"), e(2, "a", "y"), e(9, "b", "x"), e(9, "a", "z")}.sorted()
	if got := l.Error(); got != "line 2: a: y\nline 9: a: z\nline 9: b: x" {
		t.Fatalf("sorted: %q", got)
	}
	if got := l.withFile("g.toml")[0].Error(); got != "g.toml:2: a: y" {
		t.Fatalf("with file: %q", got)
	}
	if got := (&Error{Line: 3, Msg: "bad"}).Error(); got != "line 3: bad" {
		t.Fatalf("no key: %q", got)
	}
	var many ErrorList
	for i := range 2 * maxErrors {
		many = append(many, e(i+1, "k", "m"))
	}
	if n := len(many.sorted()); n != maxErrors {
		t.Fatalf("%d errors kept", n)
	}
}

// TestDocExample: docs/topology.md shows the example file as it is.
func TestDocExample(t *testing.T) {
	ex, err := os.ReadFile("../../examples/grid/grid.toml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/topology.md")
	if err != nil {
		t.Fatal(err)
	}
	// The example without its opening comment (how to run it).
	body := string(ex)
	for strings.HasPrefix(body, "#") {
		_, body, _ = strings.Cut(body, "\n")
	}
	body = strings.TrimLeft(body, "\n")
	if !strings.Contains(string(doc), "```toml\n"+body+"```\n") {
		t.Fatal("docs/topology.md does not show examples/grid/grid.toml as it is")
	}
}

// TestTrustedLAN: trusted_lan in a site's defaults makes its hosts'
// daemons run with --trusted-lan; a host may say otherwise; the root and
// other sites are untouched.
func TestTrustedLAN(t *testing.T) {
	top, err := Parse([]byte("[root]\nhost = \"r\"\n[[site]]\nname = \"s\"\nworkers = [\"w1\", \"w2\", \"w3\"]\n[site.defaults]\ntrusted_lan = true\n" +
		"[site.head]\nhost = \"h\"\n[[site.worker]]\nhost = \"w3\"\ntrusted_lan = false\n" +
		"[[site]]\nname = \"t\"\nhead = { host = \"h2\" }\nworkers = [\"x\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for h, want := range map[string]bool{"r": false, "h": true, "w1": true, "w2": true, "w3": false, "h2": false, "x": false} {
		host := top.Host(h)
		if host.Daemon.TrustedLAN != want || slices.Contains(host.DaemonArgs(), "--trusted-lan") != want {
			t.Errorf("%s: trusted %v, args %q; want %v", h, host.Daemon.TrustedLAN, host.DaemonArgs(), want)
		}
	}
	if _, err := Parse([]byte("[defaults]\ntrusted_lan = \"yes\"\n[root]\nhost = \"r\"\n")); err == nil || !strings.Contains(err.Error(), "true or false") {
		t.Errorf("trusted_lan = \"yes\": %v", err)
	}
}

// TestBulkSendfile: bulk_sendfile = false in a site's defaults makes its
// hosts' daemons run with --bulk-sendfile=false; a host may say otherwise;
// unset, no flag (the daemon's default: on). A value that is not a
// boolean is refused, naming the type wanted.
func TestBulkSendfile(t *testing.T) {
	top, err := Parse([]byte("[root]\nhost = \"r\"\n[[site]]\nname = \"s\"\nworkers = [\"w1\", \"w2\"]\n[site.defaults]\nbulk_sendfile = false\n" +
		"[site.head]\nhost = \"h\"\n[[site.worker]]\nhost = \"w2\"\nbulk_sendfile = true\n"))
	if err != nil {
		t.Fatal(err)
	}
	for h, off := range map[string]bool{"r": false, "h": true, "w1": true, "w2": false} {
		host := top.Host(h)
		if host.Daemon.BulkNoSendfile != off || slices.Contains(host.DaemonArgs(), "--bulk-sendfile=false") != off {
			t.Errorf("%s: sendfile off %v, args %q; want %v", h, host.Daemon.BulkNoSendfile, host.DaemonArgs(), off)
		}
	}
	if _, err := Parse([]byte("[defaults]\nbulk_sendfile = \"no\"\n[root]\nhost = \"r\"\n")); err == nil || !strings.Contains(err.Error(), "true or false") {
		t.Errorf("bulk_sendfile = \"no\": %v", err)
	}
	if _, err := Parse([]byte("[defaults]\ndaemon_args = [\"--bulk-sendfile=false\"]\n[root]\nhost = \"r\"\n")); err == nil || !strings.Contains(err.Error(), "bulk_sendfile") {
		t.Errorf("daemon_args with --bulk-sendfile: %v", err)
	}
}
