// Package peerrate estimates, per peer, how long its replies take, so that
// the in-site exchange's timers (a hedge's delay, the give-up on a
// sibling, a relay's hedge grace and slow backoff) follow the rates a node
// measures instead of constants tuned at one link speed.
//
// A Table keeps, for each peer it is told about:
//
//   - a smoothed round trip and its mean deviation (RFC 6298's srtt and
//     rttvar, gains 1/8 and 1/4), from replies a peer makes at once (a
//     REDIRECT, a declined hedge): Answered;
//   - a smoothed time per byte of chunk replies (the inverse of the
//     throughput), from each reply's size and the time from its request to
//     its last byte, less a round trip; when requests to the peer overlap,
//     from the previous reply's last byte instead, so that replies queued
//     behind each other count their own bytes only: Replied;
//   - the mean deviation of a reply's time from what was expected of it
//     when it was asked (round trip + (requests ahead + 1) x size x time
//     per byte), gain 1/4: what measurement does not see (another
//     asker's replies queued at the same peer, a peer waiting for the
//     chunk itself) shows here;
//   - the requests outstanding (Sent and not yet Replied, Answered or
//     Lost), the queue a new request joins.
//
// The site's figures, for a peer, are the (lower) medians of the other
// measured peers' (each figure on its own), so that one slow peer moves
// neither them nor what is expected of it by the site's pace; they are the prior
// for a peer never measured. Expect turns these into what a reply of a
// given size is expected to take (a mean and a deviation), from the
// peer's own figures or, for a peer never measured, the site's. Plain code: the time is passed in;
// there is no clock, goroutine or lock inside, and the caller serialises
// calls. Samples are clipped to sane bounds (minPerByte..maxPerByte,
// maxSample), and the peers remembered are bounded (maxPeers idle ones).
package peerrate

import (
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Gains and bounds.
const (
	// paceGain is the weight of a new chunk reply in the time per byte and
	// its deviation: faster than TCP's 1/8, so that a peer that slows
	// down mid-blob is seen within a few chunks.
	paceGain = 4 // 1/4
	// minPerByte and maxPerByte bound a sample's time per byte, in
	// nanoseconds: 10 GB/s and 1 kB/s.
	minPerByte = 0.1
	maxPerByte = 1e6
	// maxSample bounds a sample's time (a reply that took longer counts
	// as this long).
	maxSample = 10 * time.Minute
	// maxPeers is the number of idle peers (no request outstanding)
	// remembered; past it the least recently used idle one is forgotten.
	maxPeers = 256
)

// Source says whose figures an Expectation comes from.
type Source uint8

const (
	// None: nothing was measured; the caller's prior applies.
	None Source = iota
	// Site: the peer was never measured; the figures of all peers together.
	Site
	// Peer: the peer's own figures (its round trip from the site's until
	// it answered at once).
	Peer
)

func (s Source) String() string {
	switch s {
	case Site:
		return "site"
	case Peer:
		return "peer"
	}
	return "none"
}

// Expectation is what a Table expects of one reply.
type Expectation struct {
	// Time is the mean: round trip + (Ahead + 1) x size x time per byte.
	Time time.Duration
	// Dev is its mean deviation: that of chunk replies' times from their
	// expectation, plus that of the round trip.
	Dev time.Duration
	// Ahead is the number of requests outstanding to the peer, which the
	// new one queues behind.
	Ahead int
	From  Source
}

// Pending is a request Sent and not yet ended (Replied, Answered or Lost).
// The zero Pending ends nothing.
type Pending struct {
	peer  peer.ID
	sent  time.Time
	ahead int
	ok    bool
}

// Started reports whether r is a request Sent (not the zero Pending).
func (r Pending) Started() bool { return r.ok }

// est is one peer's figures, or the site's.
type est struct {
	srtt, rttvar time.Duration
	rtts         int     // round trips measured; 0: srtt unknown
	perByte      float64 // ns per byte of chunk replies; 0: unknown
	dev          time.Duration
	chunks       int // chunk replies measured
	out          int // requests outstanding (peers only)
	lastDone     time.Time
	lastUse      time.Time
}

// Table is the estimates of one node. Not safe for concurrent use.
type Table struct {
	peers map[peer.ID]*est
	size  float64 // smoothed size of chunk replies, bytes; 0: none seen
	// sorted holds every measured peer's figures sorted, for the site's
	// medians (siteFigures); built at the first need, then kept up to
	// date as figures change (unsort, resort).
	sorted *sortedFigures
}

// sortedFigures are the figures of every measured peer, each sorted on its
// own: the round trips and their deviations over the peers with a round
// trip measured, the times per byte and their deviations over those with
// a chunk reply measured. The median without one peer's figures is read
// from them by index (medianExcept): a site's figures cost O(log n), not
// O(n log n), per Expect (the simulator's 1,000-worker sites asked them
// for every redirect followed: a fifth of its time).
type sortedFigures struct {
	srtt, rttvar, dev []time.Duration
	perByte           []float64
}

// New returns an empty Table.
func New() *Table { return &Table{peers: map[peer.ID]*est{}} }

// Sent records that a request was sent to p at now, and returns what its
// end (Replied, Answered or Lost: exactly one) needs. The requests
// outstanding to p then are the ones it queues behind.
func (t *Table) Sent(now time.Time, p peer.ID) Pending {
	e := t.peers[p]
	if e == nil {
		t.evict()
		e = &est{}
		t.peers[p] = e // no figures yet: the sorted ones stand
	}
	e.lastUse = now
	r := Pending{peer: p, sent: now, ahead: e.out, ok: true}
	e.out++
	return r
}

// end ends r and returns its peer's figures (nil for the zero Pending).
func (t *Table) end(r Pending) *est {
	if !r.ok {
		return nil
	}
	e := t.peers[r.peer]
	if e == nil { // cannot happen: a peer with a request out is never evicted
		e = &est{}
		t.peers[r.peer] = e
	}
	if e.out > 0 {
		e.out--
	}
	return e
}

// Replied records that r's reply, a chunk of size bytes, was received
// whole at now.
func (t *Table) Replied(now time.Time, r Pending, size int) {
	e := t.end(r)
	if e == nil || size <= 0 || now.Before(r.sent) {
		return
	}
	start, rttIn := r.sent, true
	if e.lastDone.After(r.sent) {
		// Replies overlap: this one's bytes came after the last one's.
		start, rttIn = e.lastDone, false
	}
	if now.After(e.lastDone) {
		e.lastDone = now
	}
	latency := min(now.Sub(r.sent), maxSample)
	xfer := min(now.Sub(start), maxSample)
	if rttIn {
		xfer = max(xfer-t.rtt(r.peer, e), xfer/2)
	}
	if xfer > 0 {
		perByte := min(max(float64(xfer)/float64(size), minPerByte), maxPerByte)
		rtt := t.rtt(r.peer, e)
		t.unsort(e)
		e.foldChunk(perByte, latency, r.ahead, size, rtt)
		t.resort(e)
	}
	if t.size == 0 {
		t.size = float64(size)
	} else {
		t.size += (float64(size) - t.size) / paceGain
	}
}

// Answered records that r was answered at now by a reply the peer makes
// at once (a REDIRECT, a declined hedge): a round trip.
func (t *Table) Answered(now time.Time, r Pending) {
	e := t.end(r)
	if e == nil || now.Before(r.sent) {
		return
	}
	t.unsort(e)
	e.foldRTT(min(now.Sub(r.sent), maxSample))
	t.resort(e)
}

// Lost ends r without a measure: it failed, was cancelled, or its answer
// says nothing of the peer's pace (a NOT_FOUND after a fetch upstream).
func (t *Table) Lost(r Pending) { t.end(r) }

// Expect returns what a reply of size bytes (0: the size of the chunk
// replies measured lately) from p, asked now, is expected to take: own,
// from p's figures (From Peer) or, p never measured, the site's (From
// Site); and site, from the site's figures without p's. Both count the
// requests outstanding to p as queued ahead of it. From None: nothing to
// go by.
func (t *Table) Expect(p peer.ID, size int) (own, site Expectation) {
	if size <= 0 {
		size = int(t.size)
	}
	e := t.peers[p]
	ahead := 0
	if e != nil {
		ahead = e.out
	}
	s := t.siteFigures(p)
	site = s.expect(size, ahead, s.srtt, s.rttvar, Site)
	own = site
	if e != nil && e.perByte > 0 {
		srtt, rttvar := e.srtt, e.rttvar
		if e.rtts == 0 {
			srtt, rttvar = s.srtt, s.rttvar
		}
		own = e.expect(size, ahead, srtt, rttvar, Peer)
	}
	return own, site
}

// siteFigures returns the medians of the figures of the measured peers
// other than except: the round trip and its deviation over the peers with
// a round trip measured, the time per byte and the deviation over those
// with a chunk reply measured (each the lower median, on its own: of two
// peers, the faster one's).
func (t *Table) siteFigures(except peer.ID) *est {
	if t.sorted == nil {
		t.sorted = t.sortFigures()
	}
	sf := t.sorted
	e := t.peers[except]
	hasRTT := e != nil && e.rtts > 0
	hasChunk := e != nil && e.perByte > 0
	var x est // except's figures, left out of the medians it is in
	if e != nil {
		x = *e
	}
	nRTT, nChunk := len(sf.srtt), len(sf.perByte)
	if hasRTT {
		nRTT--
	}
	if hasChunk {
		nChunk--
	}
	return &est{
		srtt:    medianExcept(sf.srtt, x.srtt, hasRTT),
		rttvar:  medianExcept(sf.rttvar, x.rttvar, hasRTT),
		perByte: medianExcept(sf.perByte, x.perByte, hasChunk),
		dev:     medianExcept(sf.dev, x.dev, hasChunk),
		rtts:    nRTT,
		chunks:  nChunk,
	}
}

// unsort takes e's figures out of the sorted ones (before they change, or
// e is forgotten); resort puts them back in (after). Each costs a copy of
// the slices, not a sort.
func (t *Table) unsort(e *est) {
	if sf := t.sorted; sf != nil {
		if e.rtts > 0 {
			sf.srtt, sf.rttvar = without(sf.srtt, e.srtt), without(sf.rttvar, e.rttvar)
		}
		if e.perByte > 0 {
			sf.perByte, sf.dev = without(sf.perByte, e.perByte), without(sf.dev, e.dev)
		}
	}
}

func (t *Table) resort(e *est) {
	if sf := t.sorted; sf != nil {
		if e.rtts > 0 {
			sf.srtt, sf.rttvar = with(sf.srtt, e.srtt), with(sf.rttvar, e.rttvar)
		}
		if e.perByte > 0 {
			sf.perByte, sf.dev = with(sf.perByte, e.perByte), with(sf.dev, e.dev)
		}
	}
}

// without returns sorted less one occurrence of x (which it holds).
func without[T time.Duration | float64](sorted []T, x T) []T {
	if i, ok := slices.BinarySearch(sorted, x); ok {
		return slices.Delete(sorted, i, i+1)
	}
	return sorted
}

// with returns sorted with x inserted in order.
func with[T time.Duration | float64](sorted []T, x T) []T {
	i, _ := slices.BinarySearch(sorted, x)
	return slices.Insert(sorted, i, x)
}

// sortFigures collects and sorts every measured peer's figures.
func (t *Table) sortFigures() *sortedFigures {
	sf := &sortedFigures{}
	for _, e := range t.peers {
		if e.rtts > 0 {
			sf.srtt, sf.rttvar = append(sf.srtt, e.srtt), append(sf.rttvar, e.rttvar)
		}
		if e.perByte > 0 {
			sf.perByte, sf.dev = append(sf.perByte, e.perByte), append(sf.dev, e.dev)
		}
	}
	slices.Sort(sf.srtt)
	slices.Sort(sf.rttvar)
	slices.Sort(sf.perByte)
	slices.Sort(sf.dev)
	return sf
}

// medianExcept returns the lower median of sorted (ascending) without one
// occurrence of x when leave is set (x is then one of its values): what
// median returns for the values less that one; zero for none.
func medianExcept[T time.Duration | float64](sorted []T, x T, leave bool) T {
	n := len(sorted)
	if !leave {
		if n == 0 {
			return 0
		}
		return sorted[(n-1)/2]
	}
	if n <= 1 {
		return 0
	}
	k := (n - 2) / 2 // the lower median's index among the n-1 left
	pos, _ := slices.BinarySearch(sorted, x)
	if k < pos {
		return sorted[k]
	}
	return sorted[k+1]
}

// Figures are a Table's estimates for one peer or the site, for logs and
// tests.
type Figures struct {
	RTT, RTTVar time.Duration // zero: no round trip measured
	Rate        float64       // bytes per second of chunk replies; 0: none measured
	Dev         time.Duration // chunk replies' mean deviation from their expectation
	Outstanding int
}

func (f Figures) String() string {
	s := "rtt -"
	if f.RTT > 0 || f.RTTVar > 0 {
		s = fmt.Sprintf("rtt %v±%v", f.RTT.Round(time.Microsecond), f.RTTVar.Round(time.Microsecond))
	}
	if f.Rate > 0 {
		s += fmt.Sprintf(", %.3g MB/s ±%v", f.Rate/1e6, f.Dev.Round(time.Microsecond))
	} else {
		s += ", rate -"
	}
	if f.Outstanding > 0 {
		s += fmt.Sprintf(", %d out", f.Outstanding)
	}
	return s
}

// Peer returns p's figures (zero if never measured).
func (t *Table) Peer(p peer.ID) Figures {
	if e := t.peers[p]; e != nil {
		return e.figures()
	}
	return Figures{}
}

// Site returns the site's figures without except's: the medians of the
// other measured peers' ("" for all).
func (t *Table) Site(except peer.ID) Figures { return t.siteFigures(except).figures() }

func (e *est) figures() Figures {
	f := Figures{Dev: e.dev, Outstanding: e.out}
	if e.rtts > 0 {
		f.RTT, f.RTTVar = e.srtt, e.rttvar
	}
	if e.perByte > 0 {
		f.Rate = 1e9 / e.perByte
	}
	return f
}

// rtt is p's smoothed round trip (e: its figures), or the site's while it
// has none.
func (t *Table) rtt(p peer.ID, e *est) time.Duration {
	if e.rtts > 0 {
		return e.srtt
	}
	return t.siteFigures(p).srtt
}

// foldRTT folds a round trip d into e (RFC 6298: the first sets srtt to d
// and rttvar to d/2).
func (e *est) foldRTT(d time.Duration) {
	if e.rtts == 0 {
		e.srtt, e.rttvar = d, d/2
	} else {
		e.rttvar += (absDur(e.srtt-d) - e.rttvar) / 4
		e.srtt += (d - e.srtt) / 8
	}
	e.rtts++
}

// foldChunk folds a chunk reply into e: its time per byte, and how far its
// time from the request (latency) was from what e expected of it then,
// with ahead requests before it and a round trip rtt. The first sets the
// deviation to half the latency (as RFC 6298's first rttvar).
func (e *est) foldChunk(perByte float64, latency time.Duration, ahead, size int, rtt time.Duration) {
	if e.chunks == 0 || e.perByte == 0 {
		e.perByte, e.dev = perByte, latency/2
	} else {
		expected := rtt + time.Duration(float64(ahead+1)*float64(size)*e.perByte)
		e.dev += (absDur(latency-expected) - e.dev) / paceGain
		e.perByte += (perByte - e.perByte) / paceGain
	}
	e.chunks++
}

// expect is what e's figures expect of a reply of size bytes behind ahead
// others, with round trip srtt (deviation rttvar).
func (e *est) expect(size, ahead int, srtt, rttvar time.Duration, from Source) Expectation {
	if e.perByte == 0 || size <= 0 {
		return Expectation{Ahead: ahead}
	}
	return Expectation{
		Time:  srtt + time.Duration(float64(ahead+1)*float64(size)*e.perByte),
		Dev:   e.dev + rttvar,
		Ahead: ahead,
		From:  from,
	}
}

// evict makes room for one more peer: past maxPeers, the least recently
// used peer with no request outstanding is forgotten.
func (t *Table) evict() {
	if len(t.peers) < maxPeers {
		return
	}
	var oldest peer.ID
	var at time.Time
	found := false
	for p, e := range t.peers {
		if e.out == 0 && (!found || e.lastUse.Before(at)) {
			oldest, at, found = p, e.lastUse, true
		}
	}
	if found {
		t.unsort(t.peers[oldest])
		delete(t.peers, oldest)
	}
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
