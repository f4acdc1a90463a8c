package wanemu

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Step is one command line that builds part of the topology. Argv[0] is
// "ip", "tc" or "iptables"-under-"ip netns exec"; every command names the
// namespace it acts in, so steps never touch the host namespace.
type Step struct {
	Argv []string
}

// String is the command line as a shell would show it.
func (s Step) String() string { return strings.Join(s.Argv, " ") }

// Interface names inside namespaces. Only the namespace names carry the run
// ID, interface names are local to their namespace.
const (
	lanIface    = "eth0"   // a head's or worker's LAN port
	wanIface    = "wan"    // a head's WAN port
	bridgeIface = "br0"    // a site switch
	rootWANPfx  = "wan"    // root's WAN port to site s: wan<s>
	headPort    = "phead"  // the switch's port to the head
	workerPort  = "pw"     // the switch's port to worker k: pw<k>
	lanQueueNum = 1        // NFQUEUE number for LAN delay (heads, workers)
	wanQueueNum = 0        // NFQUEUE number for WAN delay at a head; the root uses s
	maxQueue    = 1 << 16  // queue numbers are 16 bits
	minFIFO     = 64 << 10 // smallest bottleneck buffer, bytes
)

// Shaping choices, measured on this machine's kernel (no netem, htb and tbf
// present):
//   - htb with one class: rate and ceil both the link rate; burst of 2 ms
//     at the rate (at least 32 KiB) so that GSO packets of up to 64 KiB do
//     not stall the class at high rates; quantum fixed to keep tc quiet.
//   - a bfifo leaf holding one round trip of the link at its rate (twice the
//     one-way delay, at least 20 ms, at least 64 KiB): the bottleneck buffer
//     of a router sized to one BDP. Without it the veth's pfifo would hold
//     1000 packets of up to 64 KiB each (GSO) and add seconds of queueing.
//   - offloads (GSO/TSO) left on: htb and the delayer handle GSO packets
//     (the delayer asks the kernel not to segment them), which keeps the
//     per-packet cost of the userspace delayer low.
func shapeSteps(ns, dev string, l Link) []Step {
	if l.Rate == 0 {
		return nil
	}
	burst := max(l.Rate.BytesPer(2*time.Millisecond), 32<<10)
	fifo := max(l.Rate.BytesPer(max(2*l.Delay, 20*time.Millisecond)), minFIFO)
	rate := l.Rate.String()
	return []Step{
		{Argv: []string{"tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1"}},
		{Argv: []string{"tc", "-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb",
			"rate", rate, "ceil", rate, "burst", strconv.FormatUint(burst, 10), "cburst", strconv.FormatUint(burst, 10),
			"quantum", "60000"}},
		{Argv: []string{"tc", "-n", ns, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "bfifo",
			"limit", strconv.FormatUint(fifo, 10)}},
	}
}

// delaySteps queues packets arriving on dev in ns to NFQUEUE num. mangle
// PREROUTING sees both packets for the host and packets it forwards. No
// --queue-bypass: if the delayer dies the link goes dark rather than
// silently losing its latency.
func delaySteps(ns, dev string, num uint16) []Step {
	return []Step{{Argv: []string{"ip", "netns", "exec", ns, "iptables", "-w", "5", "-t", "mangle", "-A", "PREROUTING",
		"-i", dev, "-j", "NFQUEUE", "--queue-num", strconv.Itoa(int(num))}}}
}

func ipn(ns string, args ...string) Step {
	return Step{Argv: append([]string{"ip", "-n", ns}, args...)}
}

// sysctlStep sets kernel parameters inside ns.
func sysctlStep(ns string, kv ...string) Step {
	return Step{Argv: append([]string{"ip", "netns", "exec", ns, "sysctl", "-q", "-w"}, kv...)}
}

func buildSteps(p *Plan) ([]Step, []DelayQueue) {
	c := p.Config
	var steps []Step
	var queues []DelayQueue
	add := func(s ...Step) { steps = append(steps, s...) }

	// Every namespace: loopback up, no IPv6 (nothing uses it, and its
	// neighbour discovery would be noise on the links); routers forward.
	for _, ns := range p.Namespaces {
		add(ipn(ns, "link", "set", "lo", "up"))
		kv := []string{"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"}
		if h, ok := p.hostByNetns(ns); ok {
			if h.Role == RoleRoot || h.Role == RoleHead {
				kv = append(kv, "net.ipv4.ip_forward=1")
			}
			buf := strconv.FormatUint(tcpBufMax(c), 10)
			kv = append(kv, "net.ipv4.tcp_rmem=4096 131072 "+buf, "net.ipv4.tcp_wmem=4096 16384 "+buf)
			kv = append(kv, c.Sysctls...)
		}
		add(sysctlStep(ns, kv...))
	}
	root := p.Hosts[0]
	add(ipn(root.Netns, "addr", "add", p.RootIP.String()+"/32", "dev", "lo"))

	for s := 0; s < c.Sites; s++ {
		sw := p.SwitchNetns(s)
		add(ipn(sw, "link", "add", bridgeIface, "type", "bridge"),
			ipn(sw, "link", "set", bridgeIface, "up"))
		wan := c.WANLink(s)
		for _, h := range p.Hosts {
			if h.Site != s {
				continue
			}
			port := headPort
			if h.Role == RoleWorker {
				port = workerPort + strconv.Itoa(h.Worker)
			}
			// LAN port: veth from the host to its site switch.
			add(ipn(h.Netns, "link", "add", lanIface, "type", "veth", "peer", "name", port, "netns", sw),
				ipn(sw, "link", "set", port, "master", bridgeIface),
				ipn(sw, "link", "set", port, "up"),
				ipn(h.Netns, "addr", "add", h.IP.String()+"/24", "dev", lanIface),
				ipn(h.Netns, "link", "set", lanIface, "up"))
			add(shapeSteps(h.Netns, lanIface, c.LAN)...)
			add(shapeSteps(sw, port, c.LAN)...)
			if c.LAN.Delay > 0 {
				add(delaySteps(h.Netns, lanIface, lanQueueNum)...)
				queues = append(queues, DelayQueue{Netns: h.Netns, Iface: lanIface, Num: lanQueueNum, Delay: c.LAN.Delay, Rate: c.LAN.Rate})
			}
			if h.Role == RoleWorker {
				add(ipn(h.Netns, "route", "add", "default", "via", h.HeadIP.String(), "dev", lanIface))
				continue
			}
			// The head: WAN link to the root.
			rootPort := rootWANPfx + strconv.Itoa(s)
			rootEnd, headEnd := wanIP(s, 1), wanIP(s, 2)
			add(ipn(root.Netns, "link", "add", rootPort, "type", "veth", "peer", "name", wanIface, "netns", h.Netns),
				ipn(root.Netns, "addr", "add", rootEnd.String()+"/30", "dev", rootPort),
				ipn(root.Netns, "link", "set", rootPort, "up"),
				ipn(h.Netns, "addr", "add", headEnd.String()+"/30", "dev", wanIface),
				ipn(h.Netns, "link", "set", wanIface, "up"))
			add(shapeSteps(root.Netns, rootPort, wan)...)
			add(shapeSteps(h.Netns, wanIface, wan)...)
			if wan.Delay > 0 {
				add(delaySteps(root.Netns, rootPort, uint16(s))...)
				add(delaySteps(h.Netns, wanIface, wanQueueNum)...)
				queues = append(queues,
					DelayQueue{Netns: root.Netns, Iface: rootPort, Num: uint16(s), Delay: wan.Delay, Rate: wan.Rate},
					DelayQueue{Netns: h.Netns, Iface: wanIface, Num: wanQueueNum, Delay: wan.Delay, Rate: wan.Rate})
			}
			site := fmt.Sprintf("10.%d.0.0/24", s+1)
			add(ipn(root.Netns, "route", "add", site, "via", headEnd.String(), "dev", rootPort, "src", p.RootIP.String()),
				ipn(h.Netns, "route", "add", "default", "via", rootEnd.String(), "dev", wanIface, "src", h.IP.String()))
		}
	}
	return steps, queues
}

func (p *Plan) hostByNetns(ns string) (Host, bool) {
	for _, h := range p.Hosts {
		if h.Netns == ns {
			return h, true
		}
	}
	return Host{}, false
}

// QueueLen is how many packets q's kernel queue may hold: the packets of
// four times the delay at the link rate, counted at a pessimistic 1500
// bytes each (GSO packets are larger, so fewer), at least 1024.
func (q DelayQueue) QueueLen() uint32 {
	rate := q.Rate
	if rate == 0 {
		rate = 10 * Gbit
	}
	n := rate.BytesPer(4*q.Delay) / 1500
	return uint32(min(max(n, 1024), maxQueue*4))
}

// tcpBufMax is the largest TCP buffer autotuning may grow to in the hosts:
// four round trips of the fastest link at its rate (the longest WAN round
// trip, at least 20 ms), at least Linux's default of 6 MiB, at most 256 MiB.
// With the default, one TCP connection over 1gbit with 40 ms RTT stops at
// ~590 Mbit/s (the receive window, not the link); the harness emulates
// links, not untuned hosts.
func tcpBufMax(c Config) uint64 {
	fastest, longest := c.LAN.Rate, 2*c.LAN.Delay
	for s := 0; s < c.Sites; s++ {
		l := c.WANLink(s)
		fastest = max(fastest, l.Rate)
		longest = max(longest, 2*l.Delay)
	}
	if fastest == 0 {
		fastest = 10 * Gbit
	}
	return min(max(fastest.BytesPer(4*max(longest, 20*time.Millisecond)), 6<<20), 256<<20)
}
