package wanemu

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"time"
)

// Limits of the address plan: site s uses 10.(s+1).0.0/24 and 172.16.s.0/30.
const (
	MaxSites          = 200
	MaxWorkersPerSite = 250
)

// Role is what an emulated host is in omst's tree.
type Role string

// The roles, also used as testground group IDs (in plural for heads and
// workers, see Host.Group).
const (
	RoleRoot   Role = "root"
	RoleHead   Role = "head"
	RoleWorker Role = "worker"
)

// Link is the shape of one link: a bandwidth in each direction and a one-way
// delay in each direction.
type Link struct {
	Rate  Rate          // 0: unshaped
	Delay time.Duration // one way; 0: none
}

// String is "100mbit/20ms" or "1gbit".
func (l Link) String() string {
	if l.Delay == 0 {
		return l.Rate.String()
	}
	return l.Rate.String() + "/" + l.Delay.String()
}

// Config describes a topology to emulate.
type Config struct {
	// RunID prefixes every namespace of the run ("omstw1234"); it keeps
	// concurrent runs and leftovers apart. Letters and digits, at most 20.
	RunID string
	// Sites is the number of sites (>= 1), Workers the workers per site (>= 0).
	Sites, Workers int
	// WAN gives each site's WAN link (root <-> head). A shorter list repeats
	// its last element; it must not be empty.
	WAN []Link
	// LAN is every LAN link (switch port), the head's included.
	LAN Link
	// Sysctls are further kernel settings ("net.ipv4.tcp_slow_start_after_idle=0")
	// made in every host's namespace (e.g. a host tuning the docs
	// recommend, to measure it).
	Sysctls []string
}

// Host is one emulated machine: one network namespace, one data IP.
type Host struct {
	Name   string // "root", "a-head", "a-w1"
	Role   Role
	Site   int    // 0-based; -1 for the root
	Worker int    // 1-based for workers, else 0
	Netns  string // namespace name, "<RunID>-<Name>"
	IP     netip.Addr
	// HeadIP is the data IP of the site's head (for heads and workers).
	HeadIP netip.Addr
}

// Group is the testground group ID of the host: root, heads or workers.
func (h Host) Group() string {
	switch h.Role {
	case RoleHead:
		return "heads"
	case RoleWorker:
		return "workers"
	}
	return "root"
}

// WANIface is the name, inside a head's namespace, of the interface of its
// site's WAN link (what it receives there entered the site from outside);
// "" for the root and workers.
func (h Host) WANIface() string {
	if h.Role == RoleHead {
		return wanIface
	}
	return ""
}

// SiteLabel is the site's index as a string, "" for the root.
func (h Host) SiteLabel() string {
	if h.Site < 0 {
		return ""
	}
	return strconv.Itoa(h.Site)
}

// DelayQueue is one NFQUEUE delayer: packets arriving on Iface in Netns are
// queued to queue Num and accepted after Delay.
type DelayQueue struct {
	Netns string
	Iface string
	Num   uint16
	Delay time.Duration
	Rate  Rate // the link's rate, to size the queue
}

// Plan is a topology laid out: hosts, namespaces, the commands that build
// it and the delay queues the emulator must serve. It is pure data.
type Plan struct {
	Config Config
	Hosts  []Host
	// Namespaces lists every namespace of the run in creation order: the
	// hosts, then the site switches, then the control namespace.
	Namespaces []string
	// Control is the namespace for services shared by the run (the sync
	// service when the emulator starts one); it has only a loopback.
	Control string
	// Steps build the topology, in order, once the delay queues listen.
	Steps []Step
	// Queues are the delayers, one per (namespace, receiving link).
	Queues []DelayQueue
	// RootIP is the root's data IP.
	RootIP netip.Addr
	// DataNet holds every data IP (TEST_SUBNET).
	DataNet netip.Prefix
}

var runIDPattern = regexp.MustCompile(`^[a-z][a-z0-9]{0,19}$`)

// SiteName is the name of site s: a..z, then aa, ab, ...
func SiteName(s int) string {
	name := ""
	for s >= 0 {
		name = string(rune('a'+s%26)) + name
		s = s/26 - 1
	}
	return name
}

// WANLink is site s's WAN link: the s-th element of c.WAN, or its last.
func (c Config) WANLink(s int) Link {
	if s < len(c.WAN) {
		return c.WAN[s]
	}
	return c.WAN[len(c.WAN)-1]
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case !runIDPattern.MatchString(c.RunID):
		return fmt.Errorf("run ID %q: want a lowercase letter then up to 19 letters or digits", c.RunID)
	case c.Sites < 1 || c.Sites > MaxSites:
		return fmt.Errorf("sites = %d: want 1 to %d", c.Sites, MaxSites)
	case c.Workers < 0 || c.Workers > MaxWorkersPerSite:
		return fmt.Errorf("workers = %d: want 0 to %d per site", c.Workers, MaxWorkersPerSite)
	case len(c.WAN) == 0:
		return errors.New("no WAN link shape")
	case len(c.WAN) > c.Sites:
		return fmt.Errorf("%d WAN link shapes for %d sites", len(c.WAN), c.Sites)
	}
	for _, kv := range c.Sysctls {
		if !sysctlPattern.MatchString(kv) {
			return fmt.Errorf("sysctl %q: want a net.* key=value", kv)
		}
	}
	return nil
}

// sysctlPattern is a sysctl setting hosts may get: a net.* key and a plain value.
var sysctlPattern = regexp.MustCompile(`^net\.[a-z0-9_.]+=[0-9a-z_ ]+$`)

func siteIP(s, host int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(s + 1), 0, byte(host)})
}

// wanIP is the root's (end 1) or the head's (end 2) address on site s's WAN link.
func wanIP(s, end int) netip.Addr {
	return netip.AddrFrom4([4]byte{172, 16, byte(s), byte(end)})
}

// NewPlan lays out the topology c.
func NewPlan(c Config) (*Plan, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	p := &Plan{
		Config:  c,
		Control: c.RunID + "-ctl",
		RootIP:  netip.AddrFrom4([4]byte{10, 0, 0, 1}),
		DataNet: netip.MustParsePrefix("10.0.0.0/8"),
	}
	add := func(h Host) {
		h.Netns = c.RunID + "-" + h.Name
		p.Hosts = append(p.Hosts, h)
		p.Namespaces = append(p.Namespaces, h.Netns)
	}
	add(Host{Name: "root", Role: RoleRoot, Site: -1, IP: p.RootIP})
	for s := 0; s < c.Sites; s++ {
		head := siteIP(s, 1)
		add(Host{Name: SiteName(s) + "-head", Role: RoleHead, Site: s, IP: head, HeadIP: head})
		for w := 1; w <= c.Workers; w++ {
			add(Host{Name: SiteName(s) + "-w" + strconv.Itoa(w), Role: RoleWorker, Site: s, Worker: w,
				IP: siteIP(s, w+1), HeadIP: head})
		}
	}
	for s := 0; s < c.Sites; s++ {
		p.Namespaces = append(p.Namespaces, p.SwitchNetns(s))
	}
	p.Namespaces = append(p.Namespaces, p.Control)
	p.Steps, p.Queues = buildSteps(p)
	return p, nil
}

// SwitchNetns is the namespace holding site s's bridge.
func (p *Plan) SwitchNetns(s int) string {
	return p.Config.RunID + "-" + SiteName(s) + "-sw"
}

// Host returns the host with the given name.
func (p *Plan) Host(name string) (Host, bool) {
	for _, h := range p.Hosts {
		if h.Name == name {
			return h, true
		}
	}
	return Host{}, false
}

// EnvOptions are the run-wide parts of each host's environment.
type EnvOptions struct {
	TestPlan, TestCase string
	TestRun            string // unique per run
	Params             string // TEST_INSTANCE_PARAMS, "k=v|k=v", passed through
	OutDir             func(Host) string
	TmpDir             func(Host) string
	SharedDir          string // a directory every host may use (they share one file system)
	SyncHost, SyncPort string
}

// Env is the environment a host's command gets, as KEY=VALUE strings: the
// OMST_WAN_* variables and testground's runtime variables, so that a
// testground plan binary runs as one instance per host.
func (p *Plan) Env(h Host, o EnvOptions) []string {
	groupCount := map[string]int{}
	for _, x := range p.Hosts {
		groupCount[x.Group()]++
	}
	out, tmp := "", ""
	if o.OutDir != nil {
		out = o.OutDir(h)
	}
	if o.TmpDir != nil {
		tmp = o.TmpDir(h)
	}
	headIP := ""
	if h.HeadIP.IsValid() {
		headIP = h.HeadIP.String()
	}
	wan := p.Config.WANLink(max(h.Site, 0))
	return []string{
		"OMST_WAN_HOST=" + h.Name,
		"OMST_WAN_ROLE=" + string(h.Role),
		"OMST_WAN_SITE=" + h.SiteLabel(),
		"OMST_WAN_IP=" + h.IP.String(),
		"OMST_WAN_ROOT_IP=" + p.RootIP.String(),
		"OMST_WAN_HEAD_IP=" + headIP,
		"OMST_WAN_OUT=" + out,
		"OMST_WAN_TMP=" + tmp,
		"OMST_WAN_SHARED=" + o.SharedDir,
		"OMST_WAN_WAN_IFACE=" + h.WANIface(),
		"OMST_WAN_SITES=" + strconv.Itoa(p.Config.Sites),
		"OMST_WAN_WORKERS=" + strconv.Itoa(p.Config.Workers),
		"OMST_WAN_WAN_BW=" + strconv.FormatUint(uint64(wan.Rate), 10),
		"OMST_WAN_WAN_DELAY=" + wan.Delay.String(),
		"OMST_WAN_LAN_BW=" + strconv.FormatUint(uint64(p.Config.LAN.Rate), 10),
		"SYNC_SERVICE_HOST=" + o.SyncHost,
		"SYNC_SERVICE_PORT=" + o.SyncPort,
		"TEST_PLAN=" + o.TestPlan,
		"TEST_CASE=" + o.TestCase,
		"TEST_RUN=" + o.TestRun,
		"TEST_INSTANCE_COUNT=" + strconv.Itoa(len(p.Hosts)),
		"TEST_GROUP_ID=" + h.Group(),
		"TEST_GROUP_INSTANCE_COUNT=" + strconv.Itoa(groupCount[h.Group()]),
		"TEST_INSTANCE_PARAMS=" + o.Params,
		"TEST_OUTPUTS_PATH=" + out,
		"TEST_TEMP_PATH=" + tmp,
		"TEST_SUBNET=" + p.DataNet.String(),
		"TEST_SIDECAR=false",
		"TEST_DISABLE_METRICS=true",
	}
}
