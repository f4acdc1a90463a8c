package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

// parseStatCPU sums utime and stime counted after the command's last ')',
// whatever the command holds, and names what is wrong with a bad line.
func TestParseStatCPU(t *testing.T) {
	line := "4242 (omst (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0 100 1000 10\n"
	got, err := parseStatCPU([]byte(line))
	if err != nil || got != 3.25 {
		t.Fatalf("parseStatCPU = %v, %v; want 3.25 s (325 ticks)", got, err)
	}
	for _, bad := range []struct{ line, want string }{
		{"4242 omst S 1", "no ')'"},
		{"4242 (omst) S 1 2 3", "fields after the command"},
		{"4242 (omst) S 1 4242 4242 0 -1 4194560 100 0 0 0 x 75 0", `cpu time "x"`},
	} {
		if _, err := parseStatCPU([]byte(bad.line)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("parseStatCPU(%q) = %v, want an error saying %q", bad.line, err, bad.want)
		}
	}
}

// cpuSeconds reads this process's own CPU time, which grows as it works.
func TestCPUSecondsOwnProcess(t *testing.T) {
	before, err := cpuSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until it has grown by 0.1 s (clock ticks of 10 ms), for at most
	// 10 s of wall time: on a loaded machine 300 ms of wall time gave
	// less than 0.1 s of CPU.
	x, after := 0, before
	for deadline := time.Now().Add(10 * time.Second); after-before < 0.1 && time.Now().Before(deadline); {
		for range 1 << 20 {
			x++
		}
		if after, err = cpuSeconds(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if after-before < 0.1 {
		t.Fatalf("CPU seconds grew by %.2f over 10 s of spinning (%d loops), want >= 0.1", after-before, x)
	}
	if _, err := cpuSeconds(-1); err == nil {
		t.Fatal("cpuSeconds(-1): no error")
	}
}
