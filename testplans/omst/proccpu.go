package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture this runs on (sysconf(_SC_CLK_TCK)).
const clockTicks = 100

// procCPUSeconds returns the user and system CPU seconds process pid has
// used, from /proc/PID/stat.
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStatCPU(string(b))
}

// parseProcStatCPU reads utime and stime (fields 14 and 15) from the text
// of a /proc/PID/stat, in seconds. The command name (field 2) is in
// parentheses and may hold spaces and parentheses itself: fields are
// counted from after its last ')'.
func parseProcStatCPU(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat %.40q: no command name in parentheses", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state): utime is field 14, f[11]; stime f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat %.40q: %d fields after the command name, want at least 13", stat, len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc stat: utime or stime %q: %w", s, err)
		}
		ticks += n
	}
	return float64(ticks) / clockTicks, nil
}
