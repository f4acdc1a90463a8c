//go:build linux

package main

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/omst-project/omst/internal/wanemu"
)

func TestTopoFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var tf topoFlags
	tf.register(fs, 2, 2)
	if err := fs.Parse([]string{"-sites", "3", "-wan-bw", "100mbit,50mbit", "-wan-delay", "20ms", "-lan-delay", "1ms"}); err != nil {
		t.Fatal(err)
	}
	c, err := tf.config("omstw1")
	if err != nil {
		t.Fatal(err)
	}
	want := []wanemu.Link{{Rate: 100 * wanemu.Mbit, Delay: 20 * time.Millisecond}, {Rate: 50 * wanemu.Mbit, Delay: 20 * time.Millisecond}}
	if len(c.WAN) != 2 || c.WAN[0] != want[0] || c.WAN[1] != want[1] || c.WANLink(2) != want[1] {
		t.Errorf("WAN %+v, want %+v then the last repeated", c.WAN, want)
	}
	if c.LAN != (wanemu.Link{Rate: wanemu.Gbit, Delay: time.Millisecond}) {
		t.Errorf("LAN %+v", c.LAN)
	}
	for _, bad := range [][]string{{"-wan-bw", "100mbps"}, {"-wan-delay", "20"}, {"-sites", "0"}, {"-sites", "1", "-wan-bw", "1mbit,2mbit"}} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var tf topoFlags
		tf.register(fs, 1, 1)
		if err := fs.Parse(bad); err != nil {
			t.Fatal(err)
		}
		if _, err := tf.config("omstw1"); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestUsageExits(t *testing.T) {
	flag.CommandLine.SetOutput(io.Discard)
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, exitUsage},
		{[]string{"nonsense"}, exitUsage},
		{[]string{"run"}, exitUsage},                                  // no command
		{[]string{"run", "-lan-bw", "fast", "--", "true"}, exitUsage}, // bad rate
		{[]string{"check", "-workers", "0"}, exitUsage},
	} {
		if got := mainCode(tc.args); got != tc.want {
			t.Errorf("omst-wan %v: exit %d, want %d", tc.args, got, tc.want)
		}
	}
}
