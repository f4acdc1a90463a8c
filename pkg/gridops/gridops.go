// Package gridops decides what `omst grid up`, `omst grid status` and
// `omst grid down` do on each host of a topology (pkg/topology), given what
// was observed there over ssh. It is plain code: the commands in cmd/omst
// run the ssh clients; this package builds their command lines and the
// remote shell scripts, parses what the scripts print, and makes every
// decision (copy the binary or not, write the configuration, issue a join
// token, start, restart, skip a subtree) as functions of what was seen.
package gridops

import (
	"fmt"
	"strings"

	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/topology"
)

// Phases returns the hosts in the order `grid up` brings them up: the
// root, then every head, then every worker (each phase's hosts may go in
// parallel: their parents are in earlier phases). `grid down` walks them
// in reverse. Empty phases are left out.
func Phases(t *topology.Topology) [][]*topology.Host {
	var heads, workers []*topology.Host
	for _, h := range t.Hosts[1:] {
		switch h.Role {
		case topology.RoleHead:
			heads = append(heads, h)
		case topology.RoleWorker:
			workers = append(workers, h)
		}
	}
	out := [][]*topology.Host{{t.Root()}}
	for _, p := range [][]*topology.Host{heads, workers} {
		if len(p) > 0 {
			out = append(out, p)
		}
	}
	return out
}

// Blocked says why host h cannot be brought up when the hosts in failed
// (by Host) failed or were skipped: its parent is among them. "" if it can.
// A worker whose head failed is skipped even though it has the root as a
// fallback: ssh reaches it through its head, and its daemon's first parent
// would be missing.
func Blocked(h *topology.Host, failed map[string]bool) string {
	if h.Parent == "" || !failed[strings.ToLower(h.Parent)] {
		return ""
	}
	role := "parent"
	if h.Role == topology.RoleWorker {
		role = "head"
	} else if h.Role == topology.RoleHead {
		role = "root"
	}
	return fmt.Sprintf("skipped: its %s %s is not up", role, h.Parent)
}

// ParentAddrs returns the --parent values of host h: its parent's dial
// address and peer ID, then each fallback's, given the peer IDs of the
// hosts already up (by lower-cased Host). None for the root.
func ParentAddrs(t *topology.Topology, h *topology.Host, ids map[string]string) ([]string, error) {
	if h.Parent == "" {
		return nil, nil
	}
	var out []string
	for _, name := range append([]string{h.Parent}, h.Fallbacks...) {
		p := t.Host(name)
		if p == nil {
			return nil, fmt.Errorf("parent %s is not in the topology", name)
		}
		id := ids[strings.ToLower(p.Host)]
		if id == "" {
			return nil, fmt.Errorf("the peer ID of %s (its parent or fallback) is unknown", p.Host)
		}
		out = append(out, p.DialAddr()+"/p2p/"+id)
	}
	return out, nil
}

// TokenRequest is a join token to issue for one host: `omst grid token
// --role Role --prefix Prefix` on the root.
type TokenRequest struct {
	Host   string
	Role   string // "head" or "worker"
	Prefix string
}

// TokenFor is the token host h needs in a closed grid: a head writes under
// results/SITE/, a worker under results/SITE/HOST/ (the root needs none:
// it holds the grid key).
func TokenFor(h *topology.Host) TokenRequest {
	r := TokenRequest{Host: h.Host, Role: string(h.Role), Prefix: "results/" + h.Site + "/"}
	if h.Role == topology.RoleWorker {
		r.Prefix += h.Host + "/"
	}
	return r
}

// Observation is what a probe of a host found (ParseProbe).
type Observation struct {
	// OS and Machine are `uname -s` and `uname -m`.
	OS, Machine string
	// HasBinary: DIR/bin/omst exists; BinSHA256 is its SHA-256 in hex
	// ("" when no tool on the host could compute it).
	HasBinary bool
	BinSHA256 string
	// HasConfig: HOME/config.toml exists, holding Config.
	HasConfig bool
	Config    string
	// HasCert: HOME/grid/member.cert exists (the node is a member of a
	// closed grid); HasGridKey: HOME/grid/grid.key exists (this home is
	// the root of a closed grid).
	HasCert, HasGridKey bool
	// Pid is the pid in HOME/lock when it is a live omst daemon; 0: none.
	Pid int
	// Status is the daemon's status when it answered; nil otherwise, with
	// StatusErr saying why when the binary is there.
	Status    *rpcbridge.Status
	StatusErr string
}

// Up reports whether a daemon answered.
func (o Observation) Up() bool { return o.Status != nil }

// Want is what a host should have.
type Want struct {
	// Platform is the binary's GOOS/GOARCH ("linux/amd64"); "" unknown.
	Platform string
	// BinSHA256 is the binary's SHA-256 in hex.
	BinSHA256 string
	// Config is the daemon's HOME/config.toml, without a join key.
	Config string
	// Closed: the grid's root holds a grid key, so other hosts need a
	// certificate.
	Closed bool
}

// Action is what to do on one host.
type Action struct {
	Copy        bool // copy the binary (missing or different)
	Token       bool // issue a join token; the configuration gets join = TOKEN
	WriteConfig bool // write HOME/config.toml
	Stop        bool // stop the daemon that runs (a restart when Start is set too)
	Start       bool // start the daemon (detached) and wait until it answers
}

// Decide returns what to do on a host of role given what o observed there.
// The binary is copied when missing or different; a join token is issued
// in a closed grid for a host other than the root that has no certificate;
// the configuration is written when it differs from w.Config (a join line
// aside: a token once redeemed stays in the file, harmless) or a token is
// needed; a daemon that answers is left alone unless the binary or the
// configuration changed (then restarted), one that holds the home's lock
// without answering is restarted, and one that does not run is started.
// It fails when the binary cannot run on the host.
func Decide(role topology.Role, w Want, o Observation) (Action, error) {
	if p := RemotePlatform(o.OS, o.Machine); p != "" && w.Platform != "" && p != w.Platform {
		return Action{}, fmt.Errorf("the binary is for %s but the host is %s (uname %s %s): give --binary with a %s build (GOOS=%s GOARCH=%s CGO_ENABLED=0 go build ./cmd/omst)",
			w.Platform, p, o.OS, o.Machine, p, strings.Split(p, "/")[0], strings.Split(p, "/")[1])
	}
	var a Action
	a.Copy = !o.HasBinary || o.BinSHA256 == "" || o.BinSHA256 != w.BinSHA256
	a.Token = w.Closed && role != topology.RoleRoot && !o.HasCert
	a.WriteConfig = a.Token || !o.HasConfig || !SameConfig(o.Config, w.Config)
	switch {
	case o.Up() && !a.Copy && !a.WriteConfig:
		// up and current: nothing to do
	case o.Up() || o.Pid != 0:
		a.Stop, a.Start = true, true
	default:
		a.Start = true
	}
	return a, nil
}

// SameConfig reports whether two configuration files are the same but for
// their join lines.
func SameConfig(a, b string) bool {
	return withoutJoin(a) == withoutJoin(b)
}

func withoutJoin(s string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		t := strings.TrimSpace(l)
		if k, _, ok := strings.Cut(t, "="); ok && strings.Trim(strings.TrimSpace(k), `"'`) == "join" {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// Words for the progress lines of `grid up`.
const (
	Copied    = "copied"
	UpToDate  = "up-to-date"
	Started   = "started"
	Restarted = "restarted"
	Running   = "running"
)

// Words returns the binary's and the daemon's word for a's progress line.
func (a Action) Words() (binary, daemon string) {
	binary = UpToDate
	if a.Copy {
		binary = Copied
	}
	switch {
	case a.Stop && a.Start:
		daemon = Restarted
	case a.Start:
		daemon = Started
	default:
		daemon = Running
	}
	return binary, daemon
}

// Columns pads the host, role and site columns of progress lines to the
// widest of a topology.
type Columns struct{ host, role, site int }

// NewColumns measures t's hosts.
func NewColumns(t *topology.Topology) Columns {
	c := Columns{role: len("worker"), site: 1}
	for _, h := range t.Hosts {
		c.host = max(c.host, len(h.Host))
		c.site = max(c.site, len(h.Site))
	}
	return c
}

// Line formats one progress line: host, role, site ("-" for the root),
// then the fields, separated by two spaces.
func (c Columns) Line(h *topology.Host, fields ...string) string {
	site := h.Site
	if site == "" {
		site = "-"
	}
	s := fmt.Sprintf("%-*s  %-*s  %-*s", c.host, h.Host, c.role, h.Role, c.site, site)
	if len(fields) > 0 {
		s += "  " + strings.Join(fields, "  ")
	}
	return strings.TrimRight(s, " ")
}

// RemotePlatform maps `uname -s` and `uname -m` to Go's GOOS/GOARCH
// ("linux/amd64"); "" when unknown.
func RemotePlatform(osName, machine string) string {
	goos := map[string]string{"Linux": "linux", "Darwin": "darwin", "FreeBSD": "freebsd", "OpenBSD": "openbsd", "NetBSD": "netbsd"}[osName]
	arch := map[string]string{
		"x86_64": "amd64", "amd64": "amd64",
		"aarch64": "arm64", "arm64": "arm64",
		"i386": "386", "i486": "386", "i586": "386", "i686": "386",
		"armv6l": "arm", "armv7l": "arm", "armv8l": "arm",
		"ppc64le": "ppc64le", "ppc64": "ppc64",
		"s390x": "s390x", "riscv64": "riscv64", "loongarch64": "loong64",
		"mips64": "mips64", "mips64el": "mips64le",
	}[machine]
	if goos == "" || arch == "" {
		return ""
	}
	return goos + "/" + arch
}
