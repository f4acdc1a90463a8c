// Package topology reads a grid's topology file: one TOML file that names
// the root, every site's head node and its workers, how ssh reaches each
// of them, and the daemon settings each runs with, given once as defaults
// that sites and hosts inherit and override (docs/topology.md has the
// schema and a complete example).
//
// Parse (or ParseFile, its only IO) validates the whole file and resolves
// it into a Topology: a flat list of hosts, each with its role, site,
// parent, fallback parents, ssh target and jump hosts, and every setting
// resolved (global defaults, then the site's defaults, then the host's
// own). The tree is implied by the file's structure (a head's parent is
// the root, a worker's its site's head), so it cannot hold a cycle. Errors
// name the line and the key at fault.
package topology

import (
	"net"
	"path"
	"strconv"
	"strings"
)

// Role is a host's place in the tree.
type Role string

// The roles.
const (
	RoleRoot   Role = "root"   // the master's machine; parent of every head
	RoleHead   Role = "head"   // a site's head node: parent of its workers, their ssh jump host
	RoleWorker Role = "worker" // a site's compute node
)

// Relay modes, the values of relay_mode (the daemon's --relay-mode).
const (
	RelayCutThrough   = "cut-through"
	RelayStoreForward = "store-forward"
)

// Defaults of the settings a file leaves out.
const (
	DefaultPort      = 4040   // the daemon's listen port (TCP and QUIC)
	DefaultDir       = "omst" // relative: in the ssh user's home directory
	DefaultRelayMode = RelayCutThrough
)

// Topology is a validated, resolved topology file.
type Topology struct {
	// Hosts holds every host once: the root first, then for each site in
	// file order its head followed by its workers in the order written
	// (ranges expanded in place).
	Hosts []*Host `json:"hosts"`
	// Sites lists the sites in file order.
	Sites []Site `json:"sites"`

	byName map[string]*Host // lower-cased Host -> host, when made by Parse
}

// Site is one [[site]] of the file.
type Site struct {
	Name    string   `json:"name"`
	Head    string   `json:"head"`    // the head's Host
	Workers []string `json:"workers"` // the workers' Host, in order
	Line    int      `json:"line"`    // where its [[site]] begins
}

// Host is one host of the grid with every setting resolved.
type Host struct {
	// Host is the name ssh reaches it by (a DNS name, an ssh config alias
	// or an address), unique in the file (compared without case).
	Host string `json:"host"`
	Role Role   `json:"role"`
	// Site is the host's site name; "" for the root.
	Site string `json:"site,omitempty"`
	// Address is what peers dial to reach its daemon (the Host unless the
	// file says otherwise, e.g. a worker's private address).
	Address string `json:"address"`
	// Parent is the Host of its parent: the root for a head, its site's
	// head for a worker; "" for the root.
	Parent string `json:"parent,omitempty"`
	// Fallbacks are the Hosts of the parents to use, in order, when the
	// parent cannot be reached: the root for a worker unless
	// fallback_to_root = false; none for heads and the root.
	Fallbacks []string `json:"fallbacks,omitempty"`
	SSH       SSH      `json:"ssh"`
	// Dir is the directory omst lives in on the host: the binary at
	// Dir/bin/omst, the daemon's home at Dir/home. A relative Dir is
	// relative to the ssh user's home directory.
	Dir    string `json:"dir"`
	Daemon Daemon `json:"daemon"`
	// Line is where the host is declared: its host key, or its entry in a
	// site's workers list.
	Line int `json:"line"`

	addressAt string // position path of the key that gave Address
}

// SSH says how to reach a host with ssh. Empty fields (and a zero Port)
// are left to ssh, i.e. to its configuration and defaults.
type SSH struct {
	User string `json:"user,omitempty"`
	Host string `json:"host"`
	Port int    `json:"port,omitempty"`
	// Key is the private key file on the machine that runs ssh, as
	// written (a leading "~/" is not expanded here).
	Key string `json:"key,omitempty"`
	// Jump lists the jump hosts to go through, the first one first (ssh
	// -J); empty: reach the host directly.
	Jump []Hop `json:"jump,omitempty"`
}

// Hop is one jump host. A hop derived from a head (a worker's default jump)
// carries the head's ssh user, port and key; one written in ssh_jump has
// only what it spells out.
type Hop struct {
	User string `json:"user,omitempty"`
	Host string `json:"host"`
	Port int    `json:"port,omitempty"`
	Key  string `json:"key,omitempty"`
}

// Daemon holds the settings the host's daemon runs with.
type Daemon struct {
	// Port is the port peers dial (TCP, and QUIC on UDP).
	Port int `json:"port"`
	// Listen are the daemon's listen multiaddrs: those of the file, else
	// TCP and QUIC on Port on every IPv4 interface.
	Listen []string `json:"listen"`
	// CacheSize caps the cache in bytes; 0: the daemon's default (25% of
	// the free disk).
	CacheSize int64 `json:"cache_size,omitempty"`
	// ChunkSize is the default chunk size for puts in bytes; 0: the
	// daemon's default.
	ChunkSize int64  `json:"chunk_size,omitempty"`
	RelayMode string `json:"relay_mode"`
	// TrustedLAN: the host's operator trusts its site's LAN (the daemon's
	// --trusted-lan): bulk bytes to and from daemons of the same site that
	// say so too go in plain text.
	TrustedLAN bool `json:"trusted_lan,omitempty"`
	// BulkNoSendfile: bulk_sendfile = false, the daemon's
	// --bulk-sendfile=false (stored chunks on plain bulk connections sent
	// from memory, not with sendfile(2)).
	BulkNoSendfile bool `json:"bulk_no_sendfile,omitempty"`
	// ExtraArgs are further daemon flags, verbatim, after those the
	// topology sets.
	ExtraArgs []string `json:"extra_args,omitempty"`
}

// Root returns the root host.
func (t *Topology) Root() *Host { return t.Hosts[0] }

// Host returns the host named h (compared without case), or nil.
func (t *Topology) Host(h string) *Host {
	if t.byName != nil {
		return t.byName[strings.ToLower(h)]
	}
	for _, x := range t.Hosts {
		if strings.EqualFold(x.Host, h) {
			return x
		}
	}
	return nil
}

// Children returns the hosts whose parent is h, in Hosts order.
func (t *Topology) Children(h string) []*Host {
	var out []*Host
	for _, x := range t.Hosts {
		if x.Parent != "" && strings.EqualFold(x.Parent, h) {
			out = append(out, x)
		}
	}
	return out
}

// Bin is the path of the omst binary on the host.
func (h *Host) Bin() string { return path.Join(h.Dir, "bin", "omst") }

// Home is the daemon's home directory on the host.
func (h *Host) Home() string { return path.Join(h.Dir, "home") }

// DialAddr is the multiaddr (without /p2p/ID) at which peers reach the
// host's daemon over TCP: /ip4/, /ip6/ or /dns/ Address, then /tcp/Port.
func (h *Host) DialAddr() string {
	return hostMultiaddr(h.Address) + "/tcp/" + strconv.Itoa(h.Daemon.Port)
}

// DaemonArgs returns the arguments after the omst binary that start the
// host's daemon with its resolved settings: "daemon", --home, --site
// (heads and workers), each --listen, --relay-mode, --cache-size,
// --chunk-size and --trusted-lan when set, then ExtraArgs. The caller appends what only a
// running grid knows: a --parent for the Parent and then one per Fallback
// (each its DialAddr followed by /p2p/ and its peer ID), and --join.
func (h *Host) DaemonArgs() []string {
	args := []string{"daemon", "--home", h.Home()}
	if h.Site != "" {
		args = append(args, "--site", h.Site)
	}
	for _, l := range h.Daemon.Listen {
		args = append(args, "--listen", l)
	}
	args = append(args, "--relay-mode", h.Daemon.RelayMode)
	if h.Daemon.CacheSize > 0 {
		args = append(args, "--cache-size", strconv.FormatInt(h.Daemon.CacheSize, 10))
	}
	if h.Daemon.ChunkSize > 0 {
		args = append(args, "--chunk-size", strconv.FormatInt(h.Daemon.ChunkSize, 10))
	}
	if h.Daemon.TrustedLAN {
		args = append(args, "--trusted-lan")
	}
	if h.Daemon.BulkNoSendfile {
		args = append(args, "--bulk-sendfile=false")
	}
	return append(args, h.Daemon.ExtraArgs...)
}

// Target is the ssh destination: [user@]host.
func (s SSH) Target() string {
	if s.User != "" {
		return s.User + "@" + s.Host
	}
	return s.Host
}

// JumpSpec is the value of ssh's -J (ProxyJump) option: the hops
// separated by commas; "" when the host is reached directly.
func (s SSH) JumpSpec() string {
	hops := make([]string, len(s.Jump))
	for i, h := range s.Jump {
		hops[i] = h.String()
	}
	return strings.Join(hops, ",")
}

// String formats the hop as ssh -J reads it: [user@]host[:port], an IPv6
// host in brackets when a port follows.
func (h Hop) String() string {
	s := h.Host
	if h.Port != 0 {
		if strings.Contains(s, ":") {
			s = "[" + s + "]"
		}
		s += ":" + strconv.Itoa(h.Port)
	}
	if h.User != "" {
		s = h.User + "@" + s
	}
	return s
}

// hostMultiaddr is the multiaddr prefix naming address a: /ip4/, /ip6/
// or /dns/.
func hostMultiaddr(a string) string {
	if ip := net.ParseIP(a); ip != nil {
		if ip.To4() != nil {
			return "/ip4/" + ip.String()
		}
		return "/ip6/" + ip.String()
	}
	return "/dns/" + a
}
