package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's times
// (100 on every Linux architecture Go supports).
const clockTicks = 100

// cpuSeconds returns the CPU time (user + system) process pid has used so
// far, from /proc/PID/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time of pid %d: %w", pid, err)
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/PID/stat line. The command name (field 2) is in parentheses and
// may hold spaces and parentheses itself: fields are counted after its last
// ')'.
func parseStatCPU(b []byte) (float64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat line %.40q: no ')' after the command", b)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat line %.40q: %d fields after the command, want >= 13", b, len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(string(s), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat line: cpu time %q: %w", s, err)
		}
		ticks += n
	}
	return float64(ticks) / clockTicks, nil
}

// cpuOf returns d's CPU seconds so far, or NaN when they cannot be read
// (the figure is informative; a run does not fail for it).
func cpuOf(d *daemon) float64 {
	s, err := cpuSeconds(d.proc.cmd.Process.Pid)
	if err != nil {
		logf("%v", err)
		return math.NaN()
	}
	return s
}
