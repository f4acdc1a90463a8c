package main

import (
	"os"
	"strings"
	"testing"
)

func TestParseProcStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, utime 250, stime 50.
	line := "1234 (om st) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 100 0 0\n"
	got, err := parseProcStatCPU(line)
	if err != nil || got != 3.0 {
		t.Fatalf("parseProcStatCPU = %v, %v; want 3, nil", got, err)
	}
	for _, bad := range []string{"", "1234 omst S 1", "1234 (omst) S 1 2 3", "1234 (omst) S 1 1 1 0 -1 0 0 0 0 0 x 50 0"} {
		if _, err := parseProcStatCPU(bad); err == nil || !strings.Contains(err.Error(), "proc stat") {
			t.Errorf("parseProcStatCPU(%q) err = %v, want one naming the proc stat", bad, err)
		}
	}
	// This process has run some code by now.
	if s, err := procCPUSeconds(os.Getpid()); err != nil || s < 0 {
		t.Fatalf("procCPUSeconds(self) = %v, %v", s, err)
	}
}

func TestWasteBySite(t *testing.T) {
	const size = 1 << 20
	cfg := &config{sites: 2}
	all := []record{
		{Role: roleRoot, Site: -1, CPUSeconds: 9},
		{Role: roleHead, Site: 0, HedgesDeclined: 10, HedgesBusy: 4, HedgesServed: 3, DirectsServed: 2, CPUSeconds: 4},
		{Role: roleWorker, Site: 0, Hedges: 12, HedgesDeferred: 5, Directs: 2, SiblingFailures: 2, DuplicateBytes: size / 2, CPUSeconds: 1},
		{Role: roleWorker, Site: 0, Hedges: 1, DuplicateBytes: size, CPUSeconds: 1},
		{Role: roleWorker, Site: 1, Hedges: 7, CPUSeconds: 2},
		{Role: roleWorker, Site: 5}, // out of range: ignored
	}
	w := wasteBySite(cfg, all, size)
	if len(w) != 2 {
		t.Fatalf("%d sites, want 2", len(w))
	}
	s0 := w[0]
	if s0.Hedges != 13 || s0.HedgesDeferred != 5 || s0.HedgesDeclined != 10 || s0.HedgesBusy != 4 || s0.HedgesServed != 3 ||
		s0.Directs != 2 || s0.DirectsServed != 2 || s0.SiblingFailures != 2 {
		t.Errorf("site 0 counters %+v", s0)
	}
	if s0.DuplicateBlobs != 1.5 || s0.MaxDuplicate != 1 {
		t.Errorf("site 0 duplicates %v (most %v), want 1.5 (1)", s0.DuplicateBlobs, s0.MaxDuplicate)
	}
	if s0.CPUMean != 2 || s0.CPUMax != 4 {
		t.Errorf("site 0 CPU mean %v most %v, want 2 and 4 (the root not counted)", s0.CPUMean, s0.CPUMax)
	}
	if w[1].Hedges != 7 || w[1].CPUMean != 2 {
		t.Errorf("site 1 %+v", w[1])
	}
	if wasteBySite(cfg, all, 0) != nil {
		t.Error("no blob measured: want no waste")
	}
}

func TestDuplicateBytes(t *testing.T) {
	in := map[string]uint64{"parent": 3 << 20, "sibling": 62 << 20}
	if got := duplicateBytes(in, 64<<20); got != 1<<20 {
		t.Errorf("duplicateBytes = %d, want one MiB", got)
	}
	if got := duplicateBytes(map[string]uint64{"sibling": 10}, 64<<20); got != 0 {
		t.Errorf("duplicateBytes of a short count = %d, want 0", got)
	}
}

func TestCPUByRole(t *testing.T) {
	all := []record{
		{Role: roleRoot, Site: -1, CPUSeconds: 9, IdleCPUSeconds: 0.5},
		{Role: roleHead, Site: 0, CPUSeconds: 4, IdleCPUSeconds: 0.25},
		{Role: roleHead, Site: 1, CPUSeconds: 2},
		{Role: roleWorker, Site: 0, CPUSeconds: 1, IdleCPUSeconds: 0.1},
		{Role: roleWorker, Site: 0, CPUSeconds: 3, IdleCPUSeconds: 0.3},
		{Role: roleWorker, Site: 1}, // unreadable: not counted
		{Role: "root-fetch", Site: 0},
	}
	got := cpuByRole(all, func(r record) float64 { return r.CPUSeconds })
	want := map[string]roleCPU{roleRoot: {1, 9, 9}, roleHead: {2, 3, 4}, roleWorker: {2, 2, 3}}
	if len(got) != len(want) {
		t.Fatalf("cpuByRole = %v, want %v", got, want)
	}
	for role, w := range want {
		if got[role] != w {
			t.Errorf("%s: %+v, want %+v", role, got[role], w)
		}
	}
	idle := cpuByRole(all, func(r record) float64 { return r.IdleCPUSeconds })
	if idle[roleHead] != (roleCPU{1, 0.25, 0.25}) || idle[roleWorker].Daemons != 2 || idle[roleWorker].Max != 0.3 {
		t.Errorf("idle cpuByRole = %v", idle)
	}
	if m := cpuByRole(all[5:], func(r record) float64 { return r.CPUSeconds }); m != nil {
		t.Errorf("no figures: %v, want nil", m)
	}
}
