//go:build linux

package main

import (
	"flag"
	"fmt"

	"github.com/omst-project/omst/internal/wanemu"
)

// topoFlags are the flags every topology-building command shares.
type topoFlags struct {
	sites, workers  int
	wanBW, wanDelay string
	lanBW, lanDelay string
	sysctls         sysctlFlags
	trace           bool
}

// sysctlFlags collects repeated -sysctl flags.
type sysctlFlags []string

func (s *sysctlFlags) String() string     { return fmt.Sprint(*s) }
func (s *sysctlFlags) Set(v string) error { *s = append(*s, v); return nil }

func (t *topoFlags) register(fs *flag.FlagSet, sites, workers int) {
	fs.IntVar(&t.sites, "sites", sites, "number of sites (a head and -workers workers each)")
	fs.IntVar(&t.workers, "workers", workers, "workers per site")
	fs.StringVar(&t.wanBW, "wan-bw", "100mbit", "WAN link bandwidth, each direction (tc units: kbit, mbit, gbit); a comma list gives one per site, the last repeating")
	fs.StringVar(&t.wanDelay, "wan-delay", "20ms", "WAN link one-way delay (so RTT = 2x); a comma list gives one per site")
	fs.StringVar(&t.lanBW, "lan-bw", "1gbit", "LAN link bandwidth (every switch port, the head's included), each direction")
	fs.StringVar(&t.lanDelay, "lan-delay", "0", "LAN one-way delay host to host (0: none)")
	fs.Var(&t.sysctls, "sysctl", "a net.* kernel setting for every host, e.g. net.ipv4.tcp_slow_start_after_idle=0 (repeatable)")
	fs.BoolVar(&t.trace, "v", false, "log every ip/tc/iptables command")
}

// config turns the flags into a wanemu.Config for run ID id.
func (t *topoFlags) config(id string) (wanemu.Config, error) {
	c := wanemu.Config{RunID: id, Sites: t.sites, Workers: t.workers, Sysctls: t.sysctls}
	rates, err := wanemu.ParseRates(t.wanBW)
	if err != nil {
		return c, fmt.Errorf("-wan-bw: %w", err)
	}
	delays, err := wanemu.ParseDelays(t.wanDelay)
	if err != nil {
		return c, fmt.Errorf("-wan-delay: %w", err)
	}
	n := max(len(rates), len(delays))
	for i := 0; i < n; i++ {
		c.WAN = append(c.WAN, wanemu.Link{Rate: rates[min(i, len(rates)-1)], Delay: delays[min(i, len(delays)-1)]})
	}
	if c.LAN.Rate, err = wanemu.ParseRate(t.lanBW); err != nil {
		return c, fmt.Errorf("-lan-bw: %w", err)
	}
	d, err := wanemu.ParseDelays(t.lanDelay)
	if err != nil || len(d) != 1 {
		return c, fmt.Errorf("-lan-delay: want one duration")
	}
	c.LAN.Delay = d[0]
	return c, c.Validate()
}

func describe(p *wanemu.Plan) string {
	c := p.Config
	s := fmt.Sprintf("%d site(s) x %d worker(s), LAN %s", c.Sites, c.Workers, c.LAN)
	for i := 0; i < c.Sites; i++ {
		if i == 0 || c.WANLink(i) != c.WANLink(i-1) {
			s += fmt.Sprintf(", WAN %s: %s", wanemu.SiteName(i), c.WANLink(i))
		}
	}
	return s
}
