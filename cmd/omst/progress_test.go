package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &progress{label: "get x", total: 10 << 20, start: t0}
	p.done.Store(5 << 20)
	got := p.line(t0.Add(2 * time.Second))
	want := "get x [############            ]  50.0%  5.0 MiB / 10.0 MiB  2.5 MiB/s  ETA 2s"
	if got != want {
		t.Fatalf("line:\n got %q\nwant %q", got, want)
	}
	// The rate follows the last seconds: nothing moved for 10 s.
	for i := 3; i <= 12; i++ {
		p.line(t0.Add(time.Duration(i) * time.Second))
	}
	if got := p.line(t0.Add(13 * time.Second)); !strings.Contains(got, "0 B/s  ETA --") {
		t.Fatalf("stalled transfer: %q, want a zero rate and no ETA", got)
	}
	p.done.Store(10 << 20)
	if got := p.line(t0.Add(14 * time.Second)); !strings.Contains(got, "100.0%  10.0 MiB / 10.0 MiB") || !strings.Contains(got, "ETA 0s") {
		t.Fatalf("finished: %q", got)
	}

	// Unknown total: bytes, rate and time so far.
	u := &progress{label: "put y", start: t0}
	u.done.Store(3 << 30)
	if got, want := u.line(t0.Add(75*time.Second)), "put y  3.0 GiB  41.0 MiB/s  1m15s"; got != want {
		t.Fatalf("unknown total:\n got %q\nwant %q", got, want)
	}

	// Never wider than the terminal.
	p.width = func() int { return 40 }
	if got := p.fit(p.line(t0.Add(15 * time.Second))); len([]rune(got)) != 39 {
		t.Fatalf("fit to 40 columns: %d: %q", len([]rune(got)), got)
	}

	// The last line: total, time, average.
	var out bytes.Buffer
	f := &progress{label: "get x", total: 1 << 20, start: time.Now().Add(-2 * time.Second), out: &out}
	f.done.Store(1 << 20)
	f.drawFinal()
	if got := out.String(); !strings.HasPrefix(got, "\rget x  1.0 MiB in 2s, 512.0 KiB/s") || !strings.HasSuffix(got, "\n") {
		t.Fatalf("final line %q", got)
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		40 * time.Millisecond: "40ms", 4 * time.Second: "4s", 65 * time.Second: "1m05s", 2*time.Hour + 3*time.Minute + 20*time.Second: "2h03m",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
