package wanemu

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Rate
		bad  bool
	}{
		{"100mbit", 100 * Mbit, false},
		{"1gbit", Gbit, false},
		{"1.5Gbit", 1500 * Mbit, false},
		{"500kbit", 500 * Kbit, false},
		{"64000bit", 64 * Kbit, false},
		{"", 0, false},
		{"0", 0, false},
		{"none", 0, false},
		{"100mbps", 0, true},
		{"100", 0, true},
		{"fastmbit", 0, true},
		{"-1mbit", 0, true},
		{"1bit", 0, true},
	} {
		got, err := ParseRate(tc.in)
		if tc.bad {
			if !errors.Is(err, ErrBadRate) {
				t.Errorf("ParseRate(%q) = %v, %v; want ErrBadRate", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestRateString(t *testing.T) {
	for r, want := range map[Rate]string{100 * Mbit: "100mbit", Gbit: "1gbit", 1500 * Mbit: "1500mbit", 0: "unshaped", 12345: "12345bit"} {
		if got := r.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint64(r), got, want)
		}
		if r == 0 {
			continue
		}
		if back, err := ParseRate(r.String()); err != nil || back != r {
			t.Errorf("ParseRate(%q) = %v, %v; want %d", r.String(), back, err, uint64(r))
		}
	}
}

func TestParseDelays(t *testing.T) {
	got, err := ParseDelays("20ms, 40ms,0")
	if err != nil || !slices.Equal(got, []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 0}) {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"20", "-1ms", "1h"} {
		if _, err := ParseDelays(bad); err == nil {
			t.Errorf("ParseDelays(%q) accepted", bad)
		}
	}
}

func TestSiteName(t *testing.T) {
	for s, want := range map[int]string{0: "a", 1: "b", 25: "z", 26: "aa", 27: "ab", 51: "az", 52: "ba", 701: "zz", 702: "aaa"} {
		if got := SiteName(s); got != want {
			t.Errorf("SiteName(%d) = %q, want %q", s, got, want)
		}
	}
}

func testConfig() Config {
	return Config{
		RunID: "omstw42", Sites: 2, Workers: 2,
		WAN: []Link{{Rate: 100 * Mbit, Delay: 20 * time.Millisecond}, {Rate: 50 * Mbit, Delay: 40 * time.Millisecond}},
		LAN: Link{Rate: Gbit},
	}
}

func TestConfigValidate(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"bad run id":      func(c *Config) { c.RunID = "Omst-1" },
		"long run id":     func(c *Config) { c.RunID = strings.Repeat("a", 21) },
		"no sites":        func(c *Config) { c.Sites = 0 },
		"too many sites":  func(c *Config) { c.Sites = MaxSites + 1 },
		"negative":        func(c *Config) { c.Workers = -1 },
		"too many":        func(c *Config) { c.Workers = MaxWorkersPerSite + 1 },
		"no wan":          func(c *Config) { c.WAN = nil },
		"more wan shapes": func(c *Config) { c.Sites = 1 },
	} {
		c := testConfig()
		mod(&c)
		if _, err := NewPlan(c); err == nil {
			t.Errorf("%s: NewPlan accepted %+v", name, c)
		}
	}
}

func TestPlanHosts(t *testing.T) {
	p, err := NewPlan(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ name, role, ns, ip, head, group string }
	var got []row
	for _, h := range p.Hosts {
		head := ""
		if h.HeadIP.IsValid() {
			head = h.HeadIP.String()
		}
		got = append(got, row{h.Name, string(h.Role), h.Netns, h.IP.String(), head, h.Group()})
	}
	want := []row{
		{"root", "root", "omstw42-root", "10.0.0.1", "", "root"},
		{"a-head", "head", "omstw42-a-head", "10.1.0.1", "10.1.0.1", "heads"},
		{"a-w1", "worker", "omstw42-a-w1", "10.1.0.2", "10.1.0.1", "workers"},
		{"a-w2", "worker", "omstw42-a-w2", "10.1.0.3", "10.1.0.1", "workers"},
		{"b-head", "head", "omstw42-b-head", "10.2.0.1", "10.2.0.1", "heads"},
		{"b-w1", "worker", "omstw42-b-w1", "10.2.0.2", "10.2.0.1", "workers"},
		{"b-w2", "worker", "omstw42-b-w2", "10.2.0.3", "10.2.0.1", "workers"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("hosts:\n got %v\nwant %v", got, want)
	}
	wantNS := []string{"omstw42-root", "omstw42-a-head", "omstw42-a-w1", "omstw42-a-w2", "omstw42-b-head",
		"omstw42-b-w1", "omstw42-b-w2", "omstw42-a-sw", "omstw42-b-sw", "omstw42-ctl"}
	if !slices.Equal(p.Namespaces, wantNS) {
		t.Errorf("namespaces %v, want %v", p.Namespaces, wantNS)
	}
	for _, h := range p.Hosts {
		if !p.DataNet.Contains(h.IP) {
			t.Errorf("%s: %v outside the data network", h.Name, h.IP)
		}
	}
}

func hasStep(p *Plan, cmd string) bool {
	return slices.ContainsFunc(p.Steps, func(s Step) bool { return s.String() == cmd })
}

func TestPlanSteps(t *testing.T) {
	p, err := NewPlan(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ip -n omstw42-root addr add 10.0.0.1/32 dev lo",
		// 1gbit LAN, 80 ms longest RTT: 4 x 10 MB of TCP buffer.
		"ip netns exec omstw42-root sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 net.ipv4.ip_forward=1 net.ipv4.tcp_rmem=4096 131072 40000000 net.ipv4.tcp_wmem=4096 16384 40000000",
		"ip netns exec omstw42-a-w1 sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 net.ipv4.tcp_rmem=4096 131072 40000000 net.ipv4.tcp_wmem=4096 16384 40000000",
		"ip netns exec omstw42-a-sw sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
		"ip -n omstw42-a-sw link add br0 type bridge",
		"ip -n omstw42-a-w2 link add eth0 type veth peer name pw2 netns omstw42-a-sw",
		"ip -n omstw42-a-sw link set pw2 master br0",
		"ip -n omstw42-a-head link add eth0 type veth peer name phead netns omstw42-a-sw",
		"ip -n omstw42-root link add wan1 type veth peer name wan netns omstw42-b-head",
		"ip -n omstw42-root route add 10.2.0.0/24 via 172.16.1.2 dev wan1 src 10.0.0.1",
		"ip -n omstw42-b-head route add default via 172.16.1.1 dev wan src 10.2.0.1",
		"ip -n omstw42-a-w1 route add default via 10.1.0.1 dev eth0",
		// WAN b: 50mbit both ways, one round trip (80 ms) of buffer.
		"tc -n omstw42-root qdisc add dev wan1 root handle 1: htb default 1",
		"tc -n omstw42-root class add dev wan1 parent 1: classid 1:1 htb rate 50mbit ceil 50mbit burst 32768 cburst 32768 quantum 60000",
		"tc -n omstw42-root qdisc add dev wan1 parent 1:1 handle 10: bfifo limit 500000",
		"tc -n omstw42-b-head class add dev wan parent 1: classid 1:1 htb rate 50mbit ceil 50mbit burst 32768 cburst 32768 quantum 60000",
		// LAN: 1gbit on both ends of every port.
		"tc -n omstw42-a-w1 class add dev eth0 parent 1: classid 1:1 htb rate 1gbit ceil 1gbit burst 250000 cburst 250000 quantum 60000",
		"tc -n omstw42-a-sw class add dev pw1 parent 1: classid 1:1 htb rate 1gbit ceil 1gbit burst 250000 cburst 250000 quantum 60000",
		"tc -n omstw42-a-sw class add dev phead parent 1: classid 1:1 htb rate 1gbit ceil 1gbit burst 250000 cburst 250000 quantum 60000",
		// WAN delay on the receiving side of both ends.
		"ip netns exec omstw42-root iptables -w 5 -t mangle -A PREROUTING -i wan1 -j NFQUEUE --queue-num 1",
		"ip netns exec omstw42-b-head iptables -w 5 -t mangle -A PREROUTING -i wan -j NFQUEUE --queue-num 0",
	} {
		if !hasStep(p, want) {
			t.Errorf("missing step: %s", want)
		}
	}
	// No LAN delay configured: no LAN queue, no rule on eth0.
	for _, s := range p.Steps {
		str := s.String()
		if strings.Contains(str, "NFQUEUE") && strings.Contains(str, "-i eth0") {
			t.Errorf("unexpected LAN delay step: %s", str)
		}
		// Every command acts inside a namespace of the run.
		if !strings.Contains(str, " omstw42-") {
			t.Errorf("step outside the run's namespaces: %s", str)
		}
	}
	wantQ := []DelayQueue{
		{Netns: "omstw42-root", Iface: "wan0", Num: 0, Delay: 20 * time.Millisecond, Rate: 100 * Mbit},
		{Netns: "omstw42-a-head", Iface: "wan", Num: 0, Delay: 20 * time.Millisecond, Rate: 100 * Mbit},
		{Netns: "omstw42-root", Iface: "wan1", Num: 1, Delay: 40 * time.Millisecond, Rate: 50 * Mbit},
		{Netns: "omstw42-b-head", Iface: "wan", Num: 0, Delay: 40 * time.Millisecond, Rate: 50 * Mbit},
	}
	if !slices.Equal(p.Queues, wantQ) {
		t.Errorf("queues:\n got %+v\nwant %+v", p.Queues, wantQ)
	}
}

func TestPlanLANDelayAndUnshaped(t *testing.T) {
	c := testConfig()
	c.LAN = Link{Delay: time.Millisecond} // delay, no rate
	c.WAN = []Link{{Rate: 10 * Mbit}}     // rate, no delay
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	if !hasStep(p, "ip netns exec omstw42-b-w2 iptables -w 5 -t mangle -A PREROUTING -i eth0 -j NFQUEUE --queue-num 1") {
		t.Error("no LAN delay rule for b-w2")
	}
	for _, s := range p.Steps {
		if strings.Contains(s.String(), "dev eth0") && s.Argv[0] == "tc" {
			t.Errorf("unshaped LAN got a qdisc: %s", s)
		}
		if strings.Contains(s.String(), "-i wan") {
			t.Errorf("WAN without delay got a queue: %s", s)
		}
	}
	if len(p.Queues) != 2*3 { // heads and workers, LAN side
		t.Errorf("%d queues, want 6: %+v", len(p.Queues), p.Queues)
	}
}

func TestQueueLen(t *testing.T) {
	for _, tc := range []struct {
		q    DelayQueue
		want uint32
	}{
		{DelayQueue{Delay: 20 * time.Millisecond, Rate: 100 * Mbit}, 1024},
		{DelayQueue{Delay: 100 * time.Millisecond, Rate: Gbit}, 33333},
		{DelayQueue{Delay: time.Second, Rate: 10 * Gbit}, maxQueue * 4},
	} {
		if got := tc.q.QueueLen(); got != tc.want {
			t.Errorf("%+v: QueueLen %d, want %d", tc.q, got, tc.want)
		}
	}
}

func TestEnv(t *testing.T) {
	p, err := NewPlan(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	w, _ := p.Host("b-w2")
	env := p.Env(w, EnvOptions{
		TestPlan: "omst", TestCase: "fanout", TestRun: "r1", Params: "size=1MiB|n=2",
		OutDir:    func(h Host) string { return "/out/" + h.Name },
		TmpDir:    func(h Host) string { return "/tmp/omstw42/" + h.Name },
		SharedDir: "/tmp/omstw42/shared",
		SyncHost:  "127.0.0.1", SyncPort: "5050",
	})
	for _, want := range []string{
		"OMST_WAN_HOST=b-w2", "OMST_WAN_ROLE=worker", "OMST_WAN_SITE=1", "OMST_WAN_IP=10.2.0.3",
		"OMST_WAN_ROOT_IP=10.0.0.1", "OMST_WAN_HEAD_IP=10.2.0.1", "OMST_WAN_OUT=/out/b-w2",
		"OMST_WAN_TMP=/tmp/omstw42/b-w2", "OMST_WAN_SHARED=/tmp/omstw42/shared", "OMST_WAN_WAN_IFACE=", "OMST_WAN_WAN_BW=50000000", "OMST_WAN_WAN_DELAY=40ms",
		"SYNC_SERVICE_HOST=127.0.0.1", "SYNC_SERVICE_PORT=5050",
		"TEST_PLAN=omst", "TEST_CASE=fanout", "TEST_RUN=r1", "TEST_INSTANCE_COUNT=7",
		"TEST_GROUP_ID=workers", "TEST_GROUP_INSTANCE_COUNT=4", "TEST_INSTANCE_PARAMS=size=1MiB|n=2",
		"TEST_OUTPUTS_PATH=/out/b-w2", "TEST_SUBNET=10.0.0.0/8", "TEST_DISABLE_METRICS=true",
	} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s", want)
		}
	}
	head, _ := p.Host("a-head")
	if env := p.Env(head, EnvOptions{}); !slices.Contains(env, "OMST_WAN_WAN_IFACE=wan") {
		t.Errorf("head env lacks OMST_WAN_WAN_IFACE=wan")
	}
	root, _ := p.Host("root")
	env = p.Env(root, EnvOptions{})
	for _, want := range []string{"OMST_WAN_SITE=", "OMST_WAN_HEAD_IP=", "TEST_GROUP_ID=root", "TEST_GROUP_INSTANCE_COUNT=1"} {
		if !slices.Contains(env, want) {
			t.Errorf("root env lacks %s", want)
		}
	}
}

func TestPlanSysctls(t *testing.T) {
	c := testConfig()
	c.Sysctls = []string{"net.ipv4.tcp_slow_start_after_idle=0"}
	p, err := NewPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	want := "ip netns exec omstw42-a-w1 sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 net.ipv4.tcp_rmem=4096 131072 40000000 net.ipv4.tcp_wmem=4096 16384 40000000 net.ipv4.tcp_slow_start_after_idle=0"
	if !hasStep(p, want) {
		t.Fatalf("no step %q", want)
	}
	for _, bad := range []string{"kernel.panic=1", "net.ipv4.x=1; rm -rf /", "net.ipv4.x"} {
		c.Sysctls = []string{bad}
		if err := c.Validate(); err == nil {
			t.Errorf("sysctl %q accepted", bad)
		}
	}
}
