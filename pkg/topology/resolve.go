package topology

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/bytesize"
)

// resolver validates a decoded file and builds its Topology, collecting
// errors with their lines as it goes.
type resolver struct {
	pos   positions
	errs  ErrorList
	hosts map[string]declared // lower-cased host -> where it was declared
	sites map[string]int      // site name -> line of its name
	// tooMany is set once the file declared more than MaxHosts hosts.
	tooMany bool
}

// MaxHosts bounds the hosts of a grid.
const MaxHosts = 1 << 17

// declared is where a host was declared first.
type declared struct {
	line int
	what string // "the root", `the head of site "a"`, ...
}

// errorf records an error about the key at path (see positions).
func (r *resolver) errorf(path, format string, args ...any) {
	r.errs = append(r.errs, &Error{Line: r.pos.line(path), Key: keyOf(path), Msg: fmt.Sprintf(format, args...)})
}

// settings are the checked settings of one table; a nil field is one the
// table leaves out (or set to a bad value, already reported).
type settings struct {
	sshUser, sshKey, dir, relayMode *string
	sshPort, port                   *int
	sshJump                         *[]Hop // set, maybe empty: direct
	cacheSize, chunkSize            *int64
	listen, daemonArgs              *[]string
	fallbackToRoot                  *bool
	trustedLAN, bulkSendfile        *bool
	listenAt                        string // path of the listen key that is in effect
}

// over returns s overridden by every field o sets.
func (s settings) over(o settings) settings {
	if o.sshUser != nil {
		s.sshUser = o.sshUser
	}
	if o.sshKey != nil {
		s.sshKey = o.sshKey
	}
	if o.dir != nil {
		s.dir = o.dir
	}
	if o.relayMode != nil {
		s.relayMode = o.relayMode
	}
	if o.sshPort != nil {
		s.sshPort = o.sshPort
	}
	if o.port != nil {
		s.port = o.port
	}
	if o.sshJump != nil {
		s.sshJump = o.sshJump
	}
	if o.cacheSize != nil {
		s.cacheSize = o.cacheSize
	}
	if o.chunkSize != nil {
		s.chunkSize = o.chunkSize
	}
	if o.listen != nil {
		s.listen, s.listenAt = o.listen, o.listenAt
	}
	if o.daemonArgs != nil {
		s.daemonArgs = o.daemonArgs
	}
	if o.trustedLAN != nil {
		s.trustedLAN = o.trustedLAN
	}
	if o.bulkSendfile != nil {
		s.bulkSendfile = o.bulkSendfile
	}
	if o.fallbackToRoot != nil {
		s.fallbackToRoot = o.fallbackToRoot
	}
	return s
}

// resolve checks f and builds the topology (meaningful only without
// errors).
func (r *resolver) resolve(f *rawFile) *Topology {
	t := &Topology{}
	global := r.settings(&f.Defaults, "defaults", true)

	var root *Host
	if f.Root == nil {
		r.errs = append(r.errs, &Error{Line: 1, Key: "root", Msg: `missing: the grid needs its root, a [root] table with host = "..."`})
		root = &Host{Role: RoleRoot} // to go on checking the sites
	} else {
		root = r.hostTable(f.Root, "root", RoleRoot, "", global, nil)
	}
	t.Hosts = append(t.Hosts, root)

	for i := range f.Site {
		site, hosts := r.site(&f.Site[i], fmt.Sprintf("site[%d]", i), global, root)
		t.Sites = append(t.Sites, site)
		t.Hosts = append(t.Hosts, hosts...)
	}
	r.checkAddresses(t.Hosts)
	t.byName = make(map[string]*Host, len(t.Hosts))
	for _, h := range t.Hosts {
		t.byName[strings.ToLower(h.Host)] = h
	}
	return t
}

// site checks one [[site]] at path sp and returns it with its hosts, the
// head first.
func (r *resolver) site(s *rawSite, sp string, global settings, root *Host) (Site, []*Host) {
	site := Site{Line: r.pos.line(sp)}
	switch {
	case s.Name == nil:
		r.errorf(sp, `a site without a name: add name = "..."`)
	default:
		site.Name = *s.Name
		if err := validateSiteName(site.Name); err != nil {
			r.errorf(sp+".name", "%v", err)
		} else if l, dup := r.sites[site.Name]; dup {
			r.errorf(sp+".name", "site %q is already defined at line %d", site.Name, l)
		} else {
			r.sites[site.Name] = r.pos.line(sp + ".name")
		}
	}
	label := fmt.Sprintf("site %q", site.Name)
	layer := global.over(r.settings(&s.Defaults, sp+".defaults", true))

	var head *Host
	if s.Head == nil {
		r.errorf(sp, `%s has no head: add [site.head] with host = "..." (the head node its workers connect to)`, label)
		head = &Host{Role: RoleHead, Site: site.Name}
	} else {
		head = r.hostTable(s.Head, sp+".head", RoleHead, site.Name, layer, root)
		site.Head = head.Host
	}
	hosts := []*Host{head}

	// The workers, in order, with the entry that declares each.
	type worker struct {
		host, path string
	}
	var workers []worker
	inSite := map[string]bool{} // every host the site's workers list names
	allExpanded := true
	switch {
	case s.Workers == nil:
		r.errorf(sp, `%s has no workers: add workers = ["node[01-64]", ...]`, label)
	case len(s.Workers) == 0:
		r.errorf(sp+".workers", `%s: an empty list: name at least one worker, e.g. "node[01-64]"`, label)
	}
	for j, pat := range s.Workers {
		wp := fmt.Sprintf("%s.workers[%d]", sp, j)
		names, err := ExpandHosts(pat)
		if err != nil {
			r.errorf(wp, "%v", err)
			allExpanded = false
			continue
		}
		for _, n := range names {
			inSite[strings.ToLower(n)] = true
		}
		for _, n := range r.declare(names, wp, fmt.Sprintf("a worker of %s", label)) {
			workers = append(workers, worker{n, wp})
		}
	}

	// Per-host overrides: [[site.worker]] tables, each for workers listed
	// above.
	type override struct {
		s       settings
		address string
		path    string
	}
	overrides := map[string]override{}
	for j := range s.Worker {
		w := &s.Worker[j]
		op := fmt.Sprintf("%s.worker[%d]", sp, j)
		ws := r.settings(&w.rawSettings, op, true)
		if w.Host == nil {
			r.errorf(op, `a [[site.worker]] without host: add host = "node07" (or a range) naming workers of %s`, label)
			continue
		}
		names, err := ExpandHosts(*w.Host)
		if err != nil {
			r.errorf(op+".host", "%v", err)
			continue
		}
		var addrs []string
		if w.Address != nil {
			if addrs, err = ExpandHosts(*w.Address); err != nil {
				r.errorf(op+".address", "%v", err)
				continue
			}
			if len(addrs) != len(names) {
				r.errorf(op+".address", "%d addresses for %d hosts: give a range of the same length as host's (host = \"node[01-04]\", address = \"10.0.1.[1-4]\")",
					len(addrs), len(names))
				continue
			}
		}
		var strangers []string
		twice := map[int][]string{} // line of the earlier [[site.worker]] -> hosts
		var twiceLines []int
		for k, n := range names {
			key := strings.ToLower(n)
			if !inSite[key] {
				strangers = append(strangers, n)
				continue
			}
			if o, dup := overrides[key]; dup {
				l := r.pos.line(o.path + ".host")
				if twice[l] == nil {
					twiceLines = append(twiceLines, l)
				}
				twice[l] = append(twice[l], n)
				continue
			}
			o := override{s: ws, address: n, path: op}
			if addrs != nil {
				o.address = addrs[k]
			}
			overrides[key] = o
		}
		if len(strangers) > 0 && allExpanded {
			r.errorf(op+".host", "%s not among the workers of %s: [[site.worker]] gives settings to hosts of the site's workers list only", hostList(strangers), label)
		}
		for _, l := range twiceLines {
			r.errorf(op+".host", "%s already given settings at line %d", hostList(twice[l]), l)
		}
	}

	for _, w := range workers {
		s, addr, addrAt := layer, w.host, w.path
		if o, ok := overrides[strings.ToLower(w.host)]; ok {
			s, addr = layer.over(o.s), o.address
			if addr != w.host {
				addrAt = o.path + ".address"
			}
		}
		h := r.build(w.host, addr, r.pos.line(w.path), RoleWorker, site.Name, s)
		h.addressAt = addrAt
		h.Parent = head.Host
		if s.fallbackToRoot == nil || *s.fallbackToRoot {
			if root.Host != "" {
				h.Fallbacks = []string{root.Host}
			}
		}
		if s.sshJump == nil && head.Host != "" {
			h.SSH.Jump = append(slices.Clone(head.SSH.Jump),
				Hop{User: head.SSH.User, Host: head.SSH.Host, Port: head.SSH.Port, Key: head.SSH.Key})
		}
		site.Workers = append(site.Workers, h.Host)
		hosts = append(hosts, h)
	}
	return site, hosts
}

// hostTable checks a [root] or [site.head] table at path and builds its
// host with layer overridden by the table's settings; parent is the root
// for a head, nil for the root.
func (r *resolver) hostTable(t *rawHost, tp string, role Role, site string, layer settings, parent *Host) *Host {
	s := layer.over(r.settings(&t.rawSettings, tp, false))
	what := "the root"
	if role == RoleHead {
		what = fmt.Sprintf("the head of site %q", site)
	}
	var name string
	switch {
	case t.Host == nil:
		r.errorf(tp, `%s has no host: add host = "..." (the name ssh reaches it by)`, what)
	default:
		if err := ValidateHost(*t.Host); err != nil {
			hint := ""
			if strings.ContainsAny(*t.Host, "[]") {
				hint = " (a range is for workers only)"
			}
			r.errorf(tp+".host", "%v%s", err, hint)
		} else if r.declare([]string{*t.Host}, tp+".host", what) != nil {
			name = *t.Host
		}
	}
	addr, addrAt := name, tp+".host"
	if t.Address != nil {
		if err := ValidateHost(*t.Address); err != nil {
			r.errorf(tp+".address", "%v", err)
		} else {
			addr, addrAt = *t.Address, tp+".address"
		}
	}
	h := r.build(name, addr, r.pos.line(tp+".host"), role, site, s)
	h.addressAt = addrAt
	if parent != nil {
		h.Parent = parent.Host
	}
	return h
}

// declare records that the hosts of one entry, at path at, are declared
// there, and returns those that were not declared before; the others are
// reported, once per earlier declaration they collide with.
func (r *resolver) declare(hosts []string, at, what string) []string {
	line := r.pos.line(at)
	if len(r.hosts)+len(hosts) > MaxHosts {
		if !r.tooMany {
			r.errorf(at, "more than %d hosts in the grid", MaxHosts)
			r.tooMany = true
		}
		return nil
	}
	var fresh []string
	var dupLines []int          // earlier lines collided with, in order
	dups := map[int][]string{}  // earlier line -> hosts
	dupWhat := map[int]string{} // earlier line -> what was declared there
	for _, h := range hosts {
		key := strings.ToLower(h)
		if d, dup := r.hosts[key]; dup {
			if _, seen := dups[d.line]; !seen {
				dupLines = append(dupLines, d.line)
			}
			dups[d.line] = append(dups[d.line], h)
			dupWhat[d.line] = d.what
			continue
		}
		r.hosts[key] = declared{line, what}
		fresh = append(fresh, h)
	}
	for _, l := range dupLines {
		subject := hostList(dups[l])
		if l == line {
			r.errorf(at, "%s listed twice here", subject)
		} else {
			r.errorf(at, "%s already declared at line %d (%s): a host runs one daemon, in one place of the tree", subject, l, dupWhat[l])
		}
	}
	return fresh
}

// hostList names hosts (at least one) as the subject of a sentence:
// `host "a" is`, `hosts "a" and "b" are`, `3 hosts ("a", "b", ... "c") are`.
func hostList(hs []string) string {
	switch len(hs) {
	case 1:
		return fmt.Sprintf("host %q is", hs[0])
	case 2:
		return fmt.Sprintf("hosts %q and %q are", hs[0], hs[1])
	}
	return fmt.Sprintf("%d hosts (%q, %q, ... %q) are", len(hs), hs[0], hs[1], hs[len(hs)-1])
}

// build makes a host of the given settings, defaults filling what none
// of the layers set.
func (r *resolver) build(name, addr string, line int, role Role, site string, s settings) *Host {
	h := &Host{Host: name, Role: role, Site: site, Address: addr, Line: line,
		SSH: SSH{User: deref(s.sshUser, ""), Host: name, Port: deref(s.sshPort, 0), Key: deref(s.sshKey, "")},
		Dir: deref(s.dir, DefaultDir),
		Daemon: Daemon{Port: deref(s.port, DefaultPort), CacheSize: deref(s.cacheSize, 0), ChunkSize: deref(s.chunkSize, 0),
			RelayMode: deref(s.relayMode, DefaultRelayMode), TrustedLAN: deref(s.trustedLAN, false),
			BulkNoSendfile: !deref(s.bulkSendfile, true)},
	}
	if s.sshJump != nil {
		h.SSH.Jump = slices.Clone(*s.sshJump)
	}
	if s.daemonArgs != nil {
		h.Daemon.ExtraArgs = slices.Clone(*s.daemonArgs)
	}
	if s.listen != nil {
		h.Daemon.Listen = slices.Clone(*s.listen)
		if !listensOn(h.Daemon.Listen, h.Daemon.Port) {
			r.errorf(s.listenAt, "no /tcp/%d address, but peers dial port %d (the port setting): listen on it too, or set port", h.Daemon.Port, h.Daemon.Port)
		}
	} else {
		p := strconv.Itoa(h.Daemon.Port)
		h.Daemon.Listen = []string{"/ip4/0.0.0.0/tcp/" + p, "/ip4/0.0.0.0/udp/" + p + "/quic-v1"}
	}
	return h
}

// checkAddresses reports hosts whose daemons peers would dial at one
// address and port.
func (r *resolver) checkAddresses(hosts []*Host) {
	seen := map[string]*Host{}
	for _, h := range hosts {
		if h.Host == "" || h.Address == "" {
			continue
		}
		key := strings.ToLower(h.Address) + " " + strconv.Itoa(h.Daemon.Port)
		if o, dup := seen[key]; dup {
			r.errorf(h.addressAt, "host %q has address %s and port %d, as %q at line %d does: peers could not tell them apart",
				h.Host, h.Address, h.Daemon.Port, o.Host, o.Line)
			continue
		}
		seen[key] = h
	}
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// settings checks the settings of the table at tp; fallback_to_root is
// allowed only where workers inherit from (workerLevel).
func (r *resolver) settings(s *rawSettings, tp string, workerLevel bool) settings {
	var out settings
	at := func(k string) string { return tp + "." + k }
	str := func(k string, v *string, check func(string) error) *string {
		if v == nil {
			return nil
		}
		if err := check(*v); err != nil {
			r.errorf(at(k), "%v", err)
			return nil
		}
		return v
	}
	port := func(k string, v *int64) *int {
		if v == nil {
			return nil
		}
		if *v < 1 || *v > 65535 {
			r.errorf(at(k), "port %d out of range: want 1 to 65535", *v)
			return nil
		}
		p := int(*v)
		return &p
	}
	size := func(k string, v any, check func(int64) error) *int64 {
		if v == nil {
			return nil
		}
		n, err := parseSize(v)
		if err == nil && check != nil {
			err = check(n)
		}
		if err != nil {
			r.errorf(at(k), "%v", err)
			return nil
		}
		return &n
	}
	out.sshUser = str("ssh_user", s.SSHUser, validateUser)
	out.sshKey = str("ssh_key", s.SSHKey, validatePath)
	out.dir = str("dir", s.Dir, validateDir)
	out.relayMode = str("relay_mode", s.RelayMode, func(m string) error {
		if m != RelayCutThrough && m != RelayStoreForward {
			return fmt.Errorf("%q: want %s or %s", m, RelayCutThrough, RelayStoreForward)
		}
		return nil
	})
	out.sshPort = port("ssh_port", s.SSHPort)
	out.port = port("port", s.Port)
	if s.SSHJump != nil {
		if hops, err := ParseJump(*s.SSHJump); err != nil {
			r.errorf(at("ssh_jump"), "%v", err)
		} else {
			out.sshJump = &hops
		}
	}
	out.cacheSize = size("cache_size", s.CacheSize, nil)
	out.chunkSize = size("chunk_size", s.ChunkSize, func(n int64) error {
		if n > blob.MaxChunkSize {
			return blob.ValidateChunkSize(blob.MaxChunkSize + 1)
		}
		return blob.ValidateChunkSize(int(n))
	})
	if s.Listen != nil {
		if err := validateListen(s.Listen); err != nil {
			r.errorf(at("listen"), "%v", err)
		} else {
			out.listen, out.listenAt = &s.Listen, at("listen")
		}
	}
	if s.DaemonArgs != nil {
		if err := validateDaemonArgs(s.DaemonArgs); err != nil {
			r.errorf(at("daemon_args"), "%v", err)
		} else {
			out.daemonArgs = &s.DaemonArgs
		}
	}
	out.trustedLAN = s.TrustedLAN
	out.bulkSendfile = s.BulkSendfile
	if s.FallbackToRoot != nil {
		if !workerLevel {
			r.errorf(at("fallback_to_root"), "applies to workers only: set it in [defaults], [site.defaults] or [[site.worker]]")
		} else {
			out.fallbackToRoot = s.FallbackToRoot
		}
	}
	return out
}

// parseSize reads cache_size or chunk_size: a positive whole number of
// bytes, or a string bytesize.Parse reads ("20G").
func parseSize(v any) (int64, error) {
	var n int64
	switch x := v.(type) {
	case int64:
		if x < 0 {
			return 0, fmt.Errorf("%d is negative: want a size such as \"20G\" or a number of bytes", x)
		}
		n = x
	case string:
		if strings.HasPrefix(strings.TrimSpace(x), "-") {
			return 0, fmt.Errorf("%q is negative: want a size such as \"20G\"", x)
		}
		var err error
		if n, err = bytesize.Parse(x); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("%v: want a size such as \"20G\" (a string) or a whole number of bytes", v)
	}
	if n == 0 {
		return 0, fmt.Errorf("zero: leave the key out for the daemon's default")
	}
	return n, nil
}

// ParseJump parses an ssh_jump value as ssh -J reads it: hops
// [user@]host[:port] separated by commas, an IPv6 host in brackets when a
// port follows. "" is no hop at all (reach the host directly).
func ParseJump(s string) ([]Hop, error) {
	hops := []Hop{}
	if s == "" {
		return hops, nil
	}
	for item := range strings.SplitSeq(s, ",") {
		var h Hop
		rest := item
		if u, hp, ok := strings.Cut(rest, "@"); ok {
			if err := validateUser(u); err != nil {
				return nil, fmt.Errorf("jump host %q: %w", item, err)
			}
			h.User, rest = u, hp
		}
		host, portStr := rest, ""
		if strings.HasPrefix(rest, "[") {
			end := strings.Index(rest, "]")
			if end < 0 {
				return nil, fmt.Errorf("jump host %q: '[' without ']'", item)
			}
			host, portStr = rest[1:end], rest[end+1:]
			if portStr != "" && !strings.HasPrefix(portStr, ":") {
				return nil, fmt.Errorf("jump host %q: want [address]:port", item)
			}
			portStr = strings.TrimPrefix(portStr, ":")
			if portStr == "" && end+1 < len(rest) {
				return nil, fmt.Errorf("jump host %q: empty port", item)
			}
		} else if strings.Count(rest, ":") == 1 {
			host, portStr, _ = strings.Cut(rest, ":")
			if portStr == "" {
				return nil, fmt.Errorf("jump host %q: empty port", item)
			}
		}
		if err := ValidateHost(host); err != nil {
			return nil, fmt.Errorf("jump host %q: %w", item, err)
		}
		h.Host = host
		if portStr != "" {
			p, err := strconv.Atoi(portStr)
			if err != nil || p < 1 || p > 65535 {
				return nil, fmt.Errorf("jump host %q: port %q: want 1 to 65535", item, portStr)
			}
			h.Port = p
		}
		hops = append(hops, h)
	}
	return hops, nil
}

var (
	siteNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	userRE     = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$`)
	dirRE      = regexp.MustCompile(`^[A-Za-z0-9._/+@=,:%-]+$`)
)

// validateSiteName accepts a site name as the daemons' --site takes it
// in a grid: 1 to 64 letters, digits, '.', '_' and '-', starting with a
// letter or digit.
func validateSiteName(n string) error {
	if !siteNameRE.MatchString(n) {
		return fmt.Errorf("site name %q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", n)
	}
	return nil
}

func validateUser(u string) error {
	if !userRE.MatchString(u) {
		return fmt.Errorf("user %q: want 1 to 64 letters, digits, '.', '_' or '-', not starting with '-' or '.'", u)
	}
	return nil
}

// validatePath accepts a local file name (the ssh key): not empty, no
// control characters.
func validatePath(p string) error {
	if p == "" {
		return fmt.Errorf("empty: leave it out for ssh's own choice of key")
	}
	for _, c := range p {
		if c < ' ' || c == 0x7f {
			return fmt.Errorf("%q: a control character in a file name", p)
		}
	}
	return nil
}

// maxSocketPath is the longest Unix socket path every platform takes
// (macOS: 104 bytes with the NUL).
const maxSocketPath = 103

// validateDir accepts a remote directory that needs no quoting in a shell
// command, whose daemon socket path fits a Unix socket.
func validateDir(d string) error {
	switch {
	case d == "":
		return fmt.Errorf("empty: leave it out for %q (in the ssh user's home directory)", DefaultDir)
	case strings.HasPrefix(d, "~"):
		return fmt.Errorf("%q: write it without ~: a relative directory is in the ssh user's home directory", d)
	case strings.HasPrefix(d, "-"):
		return fmt.Errorf("%q: starts with '-'", d)
	case !dirRE.MatchString(d):
		return fmt.Errorf("%q: want letters, digits and . _ / + @ = , : %% - only (no spaces or shell characters)", d)
	case path.IsAbs(d) && len(path.Join(d, "home", "omst.sock")) > maxSocketPath:
		return fmt.Errorf("%q: too long: the daemon's socket %s/home/omst.sock would exceed %d bytes", d, d, maxSocketPath)
	}
	return nil
}

// validateListen accepts a non-empty list of multiaddrs.
func validateListen(l []string) error {
	if len(l) == 0 {
		return fmt.Errorf("an empty list: leave it out to listen on TCP and QUIC on port (default %d) on every interface", DefaultPort)
	}
	for _, a := range l {
		if _, err := multiaddr.NewMultiaddr(a); err != nil {
			return fmt.Errorf("%q: not a multiaddr such as /ip4/0.0.0.0/tcp/4040: %v", a, err)
		}
	}
	return nil
}

// listensOn reports whether one of the (valid) multiaddrs is TCP on port.
func listensOn(l []string, port int) bool {
	for _, a := range l {
		m, err := multiaddr.NewMultiaddr(a)
		if err != nil {
			continue
		}
		if p, err := m.ValueForProtocol(multiaddr.P_TCP); err == nil && p == strconv.Itoa(port) {
			return true
		}
	}
	return false
}

// topologyFlags are the daemon flags the topology sets, and the key that
// sets each ("" for those omst grid up derives).
var topologyFlags = map[string]string{
	"home": "dir", "site": "the [[site]] name", "listen": "listen or port", "relay-mode": "relay_mode",
	"cache-size": "cache_size", "chunk-size": "chunk_size", "trusted-lan": "trusted_lan", "bulk-sendfile": "bulk_sendfile", "parent": "", "join": "",
}

// validateDaemonArgs refuses empty arguments and the flags the topology
// sets itself.
func validateDaemonArgs(args []string) error {
	for _, a := range args {
		if a == "" {
			return fmt.Errorf("an empty argument")
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") {
			continue
		}
		key, ok := topologyFlags[name]
		switch {
		case !ok:
		case key == "":
			return fmt.Errorf("%q: the topology sets --%s itself (from the tree)", a, name)
		default:
			return fmt.Errorf("%q: the topology sets --%s itself: use %s", a, name, key)
		}
	}
	return nil
}
