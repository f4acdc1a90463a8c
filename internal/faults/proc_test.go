package faults

import (
	"fmt"
	"net"
	"testing"
)

// TestFreePortsBelowEphemeral: FreePorts' ports are distinct, bindable
// and, where the kernel's ephemeral range leaves room below it, under it,
// so that no daemon's port-0 listener is handed one of them.
func TestFreePortsBelowEphemeral(t *testing.T) {
	ports, err := FreePorts(40)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	low := ephemeralLow()
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice", p)
		}
		seen[p] = true
		if low-portFloor >= 160 && (p < portFloor || p >= low) {
			t.Errorf("port %d outside [%d, %d)", p, portFloor, low)
		}
		l, err := net.Listen("tcp4", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Errorf("port %d: %v", p, err)
			continue
		}
		l.Close()
	}
}
