package node

import (
	"os"
	"strings"
)

// slowStartPath is the kernel setting that restarts a TCP connection's
// congestion window after it sat idle (per network namespace).
const slowStartPath = "/proc/sys/net/ipv4/tcp_slow_start_after_idle"

// hostWarnings reads the host settings that slow omst down and says what
// to change; settings it cannot read are not reported.
func hostWarnings() []string {
	var out []string
	if b, err := os.ReadFile(slowStartPath); err == nil {
		out = append(out, slowStartWarning(strings.TrimSpace(string(b)))...)
	}
	return out
}

// slowStartWarning is the warning for a value of
// net.ipv4.tcp_slow_start_after_idle, if it calls for one.
func slowStartWarning(v string) []string {
	if v != "1" {
		return nil
	}
	return []string{"net.ipv4.tcp_slow_start_after_idle=1: a connection that sat idle restarts from TCP's initial window, " +
		"so every cold get over a WAN link ramps up again (about 6 round trips on a 100 Mbit/s, 40 ms path); " +
		"set it to 0 on WAN-facing hosts (see docs/operations.md)"}
}
