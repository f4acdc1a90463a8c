// Package ifstat reads a network interface's byte and packet counters as
// the kernel counts them (/proc/net/dev), in the network namespace of the
// calling thread. Bytes are what crossed the interface: payload plus TCP,
// IP and Ethernet headers, TLS records, retransmissions and everything
// else that used the link.
//
// The namespace harness (cmd/omst-wan) tells each head the name of its WAN
// link's interface in OMST_WAN_WAN_IFACE; the difference of its received
// bytes between two instants is what entered the site from outside in
// that time. Standard library only, so that the test plans' module can
// import it without new dependencies.
package ifstat

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Counters are an interface's totals since it was created.
type Counters struct {
	RxBytes, RxPackets uint64
	TxBytes, TxPackets uint64
}

// Sub is c - earlier, field by field.
func (c Counters) Sub(earlier Counters) Counters {
	return Counters{
		RxBytes: c.RxBytes - earlier.RxBytes, RxPackets: c.RxPackets - earlier.RxPackets,
		TxBytes: c.TxBytes - earlier.TxBytes, TxPackets: c.TxPackets - earlier.TxPackets,
	}
}

// devFiles are tried in order: the calling thread's namespace (a Go program
// that entered a namespace on one locked thread sees it only there), then
// the process's.
var devFiles = []string{"/proc/thread-self/net/dev", "/proc/net/dev"}

// Read returns the counters of interface iface in the calling thread's
// network namespace.
func Read(iface string) (Counters, error) {
	var last error
	for _, path := range devFiles {
		b, err := os.ReadFile(path)
		if err != nil {
			last = err
			continue
		}
		return Parse(bytes.NewReader(b), iface)
	}
	return Counters{}, fmt.Errorf("ifstat: %w", last)
}

// Parse finds iface in the text of /proc/net/dev.
func Parse(r io.Reader, iface string) (Counters, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(name) != iface {
			continue
		}
		// Receive: bytes packets errs drop fifo frame compressed multicast;
		// transmit: bytes packets ...
		f := strings.Fields(rest)
		if len(f) < 10 {
			return Counters{}, fmt.Errorf("ifstat: %s: %d fields, want 16", iface, len(f))
		}
		var v [4]uint64
		for i, idx := range []int{0, 1, 8, 9} {
			n, err := strconv.ParseUint(f[idx], 10, 64)
			if err != nil {
				return Counters{}, fmt.Errorf("ifstat: %s: %w", iface, err)
			}
			v[i] = n
		}
		return Counters{RxBytes: v[0], RxPackets: v[1], TxBytes: v[2], TxPackets: v[3]}, nil
	}
	if err := sc.Err(); err != nil {
		return Counters{}, fmt.Errorf("ifstat: %w", err)
	}
	return Counters{}, fmt.Errorf("ifstat: no interface %q in this network namespace", iface)
}
