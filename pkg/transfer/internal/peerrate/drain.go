package peerrate

import "time"

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
	rate     float64   // smoothed bytes per second (0: not measured)
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
		if d.rate == 0 {
			d.rate = r
		} else {
			d.rate += (r - d.rate) / 4
		}
	}
	d.last, d.lastSent, d.busy = now, sent, queued > 0
}

// Rate is the bytes per second measured (0: nothing yet).
func (d *Drain) Rate() float64 { return d.rate }

// Time is how long n bytes take to leave at the rate measured, and
// whether there is one.
func (d *Drain) Time(n int64) (time.Duration, bool) {
	if d.rate <= 0 {
		return 0, false
	}
	return time.Duration(float64(max(n, 0)) / d.rate * float64(time.Second)), true
}
