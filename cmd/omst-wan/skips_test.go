//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// pathWithout returns $PATH with the named commands hidden: each
// directory holding one is replaced by a directory of links to all its
// other entries.
func pathWithout(t *testing.T, hide ...string) string {
	t.Helper()
	var dirs []string
	for i, d := range filepath.SplitList(os.Getenv("PATH")) {
		holds := false
		for _, h := range hide {
			if _, err := os.Stat(filepath.Join(d, h)); err == nil {
				holds = true
			}
		}
		if !holds {
			dirs = append(dirs, d)
			continue
		}
		shadow := filepath.Join(t.TempDir(), "path", strings.Repeat("x", i+1))
		if err := os.MkdirAll(shadow, 0o755); err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			hidden := false
			for _, h := range hide {
				hidden = hidden || e.Name() == h
			}
			if !hidden {
				os.Symlink(filepath.Join(d, e.Name()), filepath.Join(shadow, e.Name()))
			}
		}
		dirs = append(dirs, shadow)
	}
	return strings.Join(dirs, string(filepath.ListSeparator))
}

// TestWanSmallRecordsSkip: scripts/wan-small.sh on a machine without
// iptables exits 0, says SKIPPED and records why in $OMST_SKIPS, and
// scripts/test-summary.sh (make test's last line) then names it instead of
// a plain "all passed".
func TestWanSmallRecordsSkip(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the omst binaries: not in -short mode")
	}
	goBin := os.Getenv("GO") // the Makefile's toolchain
	if goBin == "" {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go") // the one running this test
	}
	if _, err := os.Stat(goBin); err != nil {
		t.Skipf("no go toolchain at %s", goBin)
	}
	skips := filepath.Join(t.TempDir(), "skips")
	cmd := exec.Command("../../scripts/wan-small.sh")
	cmd.Env = append(os.Environ(), "PATH="+pathWithout(t, "iptables"), "OMST_SKIPS="+skips, "GO="+goBin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("wan-small.sh without iptables: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "SKIPPED") {
		t.Fatalf("wan-small.sh without iptables did not say SKIPPED:\n%s", out)
	}
	rec, _ := os.ReadFile(skips)
	if !strings.HasPrefix(string(rec), "wan-small: ") || !strings.Contains(string(rec), "iptables") {
		t.Fatalf("OMST_SKIPS holds %q, want a wan-small line naming iptables", rec)
	}
	sum, err := exec.Command("../../scripts/test-summary.sh", skips).Output()
	if err != nil {
		t.Fatal(err)
	}
	if line := strings.TrimSpace(string(sum)); !strings.HasPrefix(line, "make test: all passed (skipped: wan-small: ") || !strings.Contains(line, "iptables") {
		t.Fatalf("summary %q, want it to name the skipped wan-small", line)
	}
	sum, _ = exec.Command("../../scripts/test-summary.sh", filepath.Join(t.TempDir(), "none")).Output()
	if strings.TrimSpace(string(sum)) != "make test: all passed" {
		t.Fatalf("summary with nothing skipped: %q", sum)
	}
}
