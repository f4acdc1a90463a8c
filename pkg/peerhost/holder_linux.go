package peerhost

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// portHolder names the process that has a socket bound to port (network
// "tcp4", "tcp6", "udp4" or "udp6"; a TCP socket only when listening):
// "pid N (its command line)", or "" if none is found (the holder may be
// another user's process, whose descriptors cannot be read).
func portHolder(network string, port int) string {
	files := map[string][]string{
		"tcp4": {"tcp", "tcp6"}, "tcp6": {"tcp6", "tcp"},
		"udp4": {"udp", "udp6"}, "udp6": {"udp6", "udp"},
	}[network]
	inodes := map[string]bool{}
	for _, f := range files {
		socketInodes("/proc/net/"+f, strings.HasPrefix(network, "tcp"), port, inodes)
	}
	if len(inodes) == 0 {
		return ""
	}
	pid := socketOwner(inodes)
	if pid == 0 {
		return ""
	}
	return describePid(pid)
}

// socketInodes adds to inodes the inodes of the sockets in the
// /proc/net table at path bound to port (listening, for TCP).
func socketInodes(path string, tcp bool, port int, inodes map[string]bool) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 {
			continue
		}
		i := strings.LastIndexByte(fs[1], ':')
		if i < 0 {
			continue
		}
		p, err := strconv.ParseUint(fs[1][i+1:], 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		if tcp && fs[3] != "0A" { // TCP_LISTEN
			continue
		}
		if fs[9] != "0" {
			inodes[fs[9]] = true
		}
	}
}

// socketOwner returns the pid of a process holding one of the socket
// inodes, or 0.
func socketOwner(inodes map[string]bool) int {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		fds, err := os.ReadDir(filepath.Join(p, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join(p, "fd", fd.Name()))
			if err != nil || !strings.HasPrefix(l, "socket:[") {
				continue
			}
			if inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] {
				pid, _ := strconv.Atoi(filepath.Base(p))
				return pid
			}
		}
	}
	return 0
}

// describePid returns "pid N (command line)", the command line cut to a
// readable length.
func describePid(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	cmd := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	if err != nil || cmd == "" {
		return fmt.Sprintf("pid %d", pid)
	}
	if len(cmd) > 160 {
		cmd = cmd[:157] + "..."
	}
	return fmt.Sprintf("pid %d (%s)", pid, cmd)
}
