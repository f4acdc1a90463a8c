package ifstat

import (
	"strings"
	"testing"
)

const sample = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo: 56801388669 4045683    0    0    0     0          0         0 56801388669 4045683    0    0    0     0       0          0
   wan: 70123456   48211    0    0    0     0          0         0  1234567   20001    0    0    0     0       0          0
  eth0:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
`

func TestParse(t *testing.T) {
	c, err := Parse(strings.NewReader(sample), "wan")
	if err != nil {
		t.Fatal(err)
	}
	want := Counters{RxBytes: 70123456, RxPackets: 48211, TxBytes: 1234567, TxPackets: 20001}
	if c != want {
		t.Fatalf("got %+v, want %+v", c, want)
	}
	if d := c.Sub(Counters{RxBytes: 123456, TxBytes: 567}); d.RxBytes != 70000000 || d.TxBytes != 1234000 {
		t.Fatalf("Sub: %+v", d)
	}
	if _, err := Parse(strings.NewReader(sample), "wan0"); err == nil {
		t.Fatal("wan0: no error")
	}
	if _, err := Parse(strings.NewReader("  wan: 1 2 3\n"), "wan"); err == nil {
		t.Fatal("short line: no error")
	}
}

func TestReadLoopback(t *testing.T) {
	if _, err := Read("lo"); err != nil {
		t.Skipf("no /proc/net/dev here: %v", err)
	}
}
