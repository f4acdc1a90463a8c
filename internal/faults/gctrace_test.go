package faults

import (
	"errors"
	"testing"
)

func TestParseGCTrace(t *testing.T) {
	for _, c := range []struct {
		line string
		want GCTrace
	}{
		{"gc 1 @0.012s 2%: 0.015+1.2+0.003 ms clock, 0.030+0.5/1.0/0+0.006 ms cpu, 4->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P",
			GCTrace{N: 1, Start: 4, End: 4, Live: 1, Goal: 4}},
		{"gc 123 @45.678s 0%: 0.10+3.4+0.05 ms clock, 0.20+0.3/2.1/0.4+0.10 ms cpu, 40->42->21 MB, 44 MB goal, 1 MB stacks, 0 MB globals, 2 P (forced)",
			GCTrace{N: 123, Start: 40, End: 42, Live: 21, Goal: 44}},
	} {
		got, err := ParseGCTrace(c.line)
		if err != nil || got != c.want {
			t.Errorf("ParseGCTrace(%q) = %+v, %v; want %+v", c.line, got, err, c.want)
		}
	}
	for _, bad := range []string{
		"", "gc", "gc 1", "time=... level=INFO msg=gc", "gc x @1s: 4->4->1 MB, 4 MB goal",
		"gc 1 @0.1s 1%: 4->4 MB, 4 MB goal", "gc 1 @0.1s 1%: 4->4->1 MB", "gc 1 @0.1s 1%: 4->-4->1 MB, 4 MB goal",
		"gc 1 @0.1s 1%: 4->4->1 MB, x MB goal",
	} {
		if _, err := ParseGCTrace(bad); !errors.Is(err, ErrNotGCTrace) {
			t.Errorf("ParseGCTrace(%q): err %v, want ErrNotGCTrace", bad, err)
		}
	}
}

func FuzzParseGCTrace(f *testing.F) {
	f.Add("gc 1 @0.012s 2%: 0.015+1.2+0.003 ms clock, 0.030+0.5/1.0/0+0.006 ms cpu, 4->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P")
	f.Add("gc 7 @1s 0%: 1->2->3 MB, 9 MB goal")
	f.Add("gc 1 @0.1s 1%: 4->4 MB, 4 MB goal")
	f.Add("")
	f.Fuzz(func(t *testing.T, line string) {
		g, err := ParseGCTrace(line)
		if err != nil {
			if !errors.Is(err, ErrNotGCTrace) {
				t.Fatalf("error %v does not wrap ErrNotGCTrace", err)
			}
			return
		}
		if g.N < 0 || g.Start < 0 || g.End < 0 || g.Live < 0 || g.Goal < 0 {
			t.Fatalf("negative figure in %+v from %q", g, line)
		}
	})
}
