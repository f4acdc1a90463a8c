package peerrate

import (
	"math"
	"time"
)

// Drain measures how fast a sender's queue of replies empties: the bytes
// it handed on per second over intervals in which it had bytes queued
// from start to end (an idle sender's rate says nothing of its port).
// Fed with the clock: Note(now, sent so far, queued now). A relay reads
// from it how long what is queued to its children takes to leave
// (Time): a BUSY's retry-after (fetch 1.4.0). Not safe for concurrent
// use. The zero Drain is ready and has measured nothing.
type Drain struct {
	last     time.Time // the interval's start (zero: none)
	lastSent int64     // bytes sent by then
	busy     bool      // bytes were queued at last
	measured bool      // a sample was folded in
	rate     float64   // smoothed bytes per second
}

// drainInterval is the shortest interval folded into a Drain: shorter
// ones measure timer and write granularity, not the port.
const drainInterval = 50 * time.Millisecond

// Note folds in that by now the sender had handed on sent bytes in all
// (a count that only grows) and has queued bytes still to send. An
// interval of at least drainInterval that began with bytes queued and
// ends with bytes queued is a sample of the port's rate (gain 1/4).
func (d *Drain) Note(now time.Time, sent, queued int64) {
	if !d.last.IsZero() && now.Sub(d.last) < drainInterval {
		if queued == 0 {
			d.busy = false // it emptied within the interval: no sample
		}
		return
	}
	if !d.last.IsZero() && d.busy && queued > 0 && sent >= d.lastSent {
		r := float64(sent-d.lastSent) / now.Sub(d.last).Seconds()
		if !d.measured {
			d.rate, d.measured = r, true
		} else {
			d.rate += (r - d.rate) / 4
		}
	}
	d.last, d.lastSent, d.busy = now, sent, queued > 0
}

// Rate is the bytes per second measured, and whether anything was (a
// port that moved nothing while busy measures 0: a write in progress
// hands its bytes on in parts, e.g. an upload limit's bursts).
func (d *Drain) Rate() (float64, bool) { return d.rate, d.measured }

// Time is how long n bytes take to leave at the rate measured (at a rate
// of 0, as long as a Duration holds), and whether one was measured.
func (d *Drain) Time(n int64) (time.Duration, bool) {
	switch {
	case !d.measured:
		return 0, false
	case d.rate <= 0:
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(min(float64(max(n, 0))/d.rate*float64(time.Second), math.MaxInt64/2)), true
}
