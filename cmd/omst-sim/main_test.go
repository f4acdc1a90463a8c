package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestBadFlags: bad input exits 2 with a message naming the flag.
func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-workers", "0"}, "-workers"},
		{[]string{"-workers", "8,x"}, "-workers"},
		{[]string{"-blob", "12XB"}, "-blob"},
		{[]string{"-chunk", "-1MiB"}, "-chunk"},
		{[]string{"-piece", "chunk,half"}, "-piece"},
		{[]string{"-wan-rate", "100mbps"}, "-wan-rate"},
		{[]string{"-lan-rate", "0"}, "-lan-rate"},
		{[]string{"-push", "lots"}, "-push"},
		{[]string{"-runs", "0"}, "-runs"},
		{[]string{"-sites", "0"}, "sites"},
		{[]string{"stray"}, "stray"},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		if code == 0 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want failure naming %q", tc.args, code, errOut.String(), tc.want)
		}
	}
}

// TestJSONAndTable: a small run writes JSON with one row per combination
// and every run, and a table with a line per row.
func TestJSONAndTable(t *testing.T) {
	args := []string{"-sites", "2", "-workers", "2,3", "-blob", "4MiB", "-piece", "chunk,64KiB", "-runs", "2"}
	var out, errOut bytes.Buffer
	if code := run(append(args, "-json"), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rep report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out.String())
	}
	if len(rep.Rows) != 4 || len(rep.Rows[0].Runs) != 2 || rep.Rows[1].PieceName != "64KiB" || rep.Rows[2].Workers != 3 {
		t.Fatalf("rows %+v", rep.Rows)
	}
	for _, r := range rep.Rows {
		if !(r.Median.Last >= r.Median.First && r.Median.First > 0 && r.Median.HeadCopies >= 1) {
			t.Errorf("row %d/%s: first %v, last %v, head copies %v", r.Workers, r.PieceName, r.Median.First, r.Median.Last, r.Median.HeadCopies)
		}
	}
	out.Reset()
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if lines := strings.Count(out.String(), "\n"); lines != 2+4 {
		t.Fatalf("table has %d lines, want a header, column names and 4 rows:\n%s", lines, out.String())
	}
}

func TestParseSizeAndRate(t *testing.T) {
	sizes := map[string]int64{"64MiB": 64 << 20, "16KiB": 16 << 10, "1GiB": 1 << 30, "4096": 4096, "10B": 10}
	for in, want := range sizes {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	rates := map[string]float64{"100mbit": 100e6, "1gbit": 1e9, "25Mbit": 25e6, "640kbit": 640e3, "1e6": 1e6}
	for in, want := range rates {
		if got, err := parseRate(in); err != nil || got != want {
			t.Errorf("parseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "1.5MiB", "0", "-4KiB"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q): no error", bad)
		}
	}
	for _, bad := range []string{"", "fast", "0mbit", "-1gbit", "NaN"} {
		if _, err := parseRate(bad); err == nil {
			t.Errorf("parseRate(%q): no error", bad)
		}
	}
}
