package peerrate

import (
	"testing"
	"time"
)

// TestDrain: only intervals busy from start to end are samples; the rate
// then converges to what the port moves, and Time follows it.
func TestDrain(t *testing.T) {
	var d Drain
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	if _, ok := d.Time(1 << 20); ok {
		t.Fatal("a rate before any sample")
	}
	// Idle: 10 MB moved with nothing queued at either end: no sample.
	d.Note(t0, 0, 0)
	d.Note(t0.Add(time.Second), 10e6, 0)
	if _, ok := d.Rate(); ok {
		t.Fatal("idle interval measured")
	}
	// Busy at 1 MB/s for a second, in 100 ms steps.
	sent := int64(10e6)
	for i := range 10 {
		sent += 100e3
		d.Note(t0.Add(time.Second+time.Duration(i+1)*100*time.Millisecond), sent, 4<<20)
	}
	// The first busy interval started idle: nine samples of 1 MB/s.
	if r, _ := d.Rate(); r < 0.99e6 || r > 1.01e6 {
		t.Fatalf("rate %v, want 1e6", r)
	}
	if got, ok := d.Time(2e6); !ok || got < 1990*time.Millisecond || got > 2010*time.Millisecond {
		t.Fatalf("Time(2 MB) = %v %v", got, ok)
	}
	// Notes closer than drainInterval are not samples.
	before, _ := d.Rate()
	d.Note(t0.Add(2*time.Second+10*time.Millisecond), sent+1e6, 4<<20)
	if r, _ := d.Rate(); r != before {
		t.Fatal("a 10 ms interval was folded in")
	}
	// A busy port that moved nothing (a write waiting on its limit)
	// measures 0: what is queued takes as long as can be.
	var z Drain
	z.Note(t0, 0, 1<<20)
	z.Note(t0.Add(time.Second), 0, 1<<20)
	if got, ok := z.Time(1); !ok || got < time.Hour {
		t.Fatalf("a stalled port: Time = %v %v", got, ok)
	}
}
