package exchange

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/peerrate"
)

// This file holds the hedging policy as plain code: what a node does while
// it follows a relay's redirect of a chunk request to a sibling. Events in
// (the request to the sibling was sent, a verified copy arrived, a request
// failed, the clock reached a time the policy asked to be woken at),
// actions out (hedge: ask the relay too, if it holds the chunk; give up on
// the sibling and ask the relay plainly; deliver; fail) and the time to be
// woken next. Every event carries the time: no clock, no goroutines, no
// locks. The IO loop (the engine's follower of a redirect, fromSibling) feeds it and carries its
// actions out. Scripted tests: testdata/hedge/*.txt (hedge_test.go).

// The timers of a followed redirect come from the rates this node
// measured (peerrate.Table, fed by every request it makes): see Timers.
// Before anything was measured they are today's constants, the prior:
// the hedge after hedgeFactor times the moving average of recent sibling
// chunk times, within [minHedge, maxHedge] (initialHedge before any
// sibling delivered), the give-up after the sibling timeout. Those were
// tuned at 200 Mbit/s: the floor is measured there (with 1 s, hedges
// under load named busy siblings slow, the relay served most chunks
// itself, and a 2 x 8 broadcast on the emulated WAN took twice as long),
// and the cap keeps a slow sibling's own times from stretching the wait;
// it stays the ceiling while the relay's pace is not measured.
const (
	hedgeFactor  = 4
	minHedge     = 2 * time.Second
	maxHedge     = 4 * time.Second
	initialHedge = 2 * time.Second
)

// With measurements, the hedge waits for a sibling's expected time for
// the chunk with patience (twice the mean and four deviations), at most
// slowCap times the patience the relay's own pace gives the same chunk:
// a hedge asks the relay, and a sibling slower than that (it may be
// waiting on a slow holder itself, as may every sibling measured) is
// hedged as the relay's pace says, and so named slow; at least
// minMeasuredHedge (timer and scheduling noise). The sibling is given up
// on after giveUpFactor times the site's patience (the prior's ratio: 10 s
// against 2 s), within [minGiveUp, the sibling timeout]: a sibling is
// blamed (MaxFailures make it no target for the blob) for nothing shorter
// than minGiveUp.
const (
	slowCap          = 2
	minMeasuredHedge = 50 * time.Millisecond
	giveUpFactor     = 5
	minGiveUp        = time.Second
)

// Patience is how long to wait for something expected to take e: twice
// its mean and four deviations. The deviations are TCP's RTO
// (srtt + 4 rttvar); the factor 2 on the mean covers what one node's
// measurements do not see, such as other askers' replies queued at the
// same peer.
func Patience(e peerrate.Expectation) time.Duration { return patience(e.Time, e.Dev) }

func patience(mean, dev time.Duration) time.Duration { return 2*mean + 4*dev }

// Naming a slow sibling: at least slowMinHedges hedges, on at least half
// of the requests to it; the counts are halved at statWindow requests, and
// all are forgotten when maxStatPeers siblings are counted.
const (
	slowMinHedges = 3
	statWindow    = 64
	maxStatPeers  = 256
)

// A sibling that answered none of this node's last silentLimit requests to
// it (each ended by a copy from the relay or by the sibling timeout, with
// neither data nor an error from the sibling) is not asked for one sibling
// timeout: a redirect to it is given up on at once, the relay asked
// plainly naming it failed, so that the relay stops sending siblings to it
// (MaxFailures). Otherwise a sibling that takes requests and never answers
// is never named failed (hedges win before its timeout) and stays a
// target, each request to it costing its asker a hedge delay (the fault
// suite's worker-silent case: 2-3 s per chunk, a 7-chunk blob in 16 s).
const silentLimit = 3

// HedgeReq names one of the requests a followed redirect makes.
type HedgeReq uint8

const (
	// ReqSibling is the request to the sibling the relay named.
	ReqSibling HedgeReq = iota
	// ReqHedge is a GET_DIRECT "if present" to the relay while the
	// sibling's request runs: the relay answers NOT_FOUND unless it holds
	// the chunk and has not just sent it into the site (HedgeGrace).
	ReqHedge
	// ReqDirect is the plain GET_DIRECT to the relay, naming the sibling
	// that failed; made at most once per redirect.
	ReqDirect
	// NumHedgeReqs is the number of kinds of requests.
	NumHedgeReqs
)

func (r HedgeReq) String() string {
	switch r {
	case ReqSibling:
		return "sibling"
	case ReqHedge:
		return "hedge"
	case ReqDirect:
		return "direct"
	}
	return "unknown"
}

// siblingStat counts, for one sibling, the redirects to it this node
// followed and those of them that needed a hedge (halved now and then, so
// that it follows the sibling's recent behaviour); the requests in a row it
// left unanswered (silentLimit), and until when it is not asked.
type siblingStat struct {
	asked, hedged int
	silent        int
	skipUntil     time.Time
	lastAnswer    time.Time     // when it last answered a request of this node (data or an error)
	avg           time.Duration // moving average of its chunk times at this node (as Hedger.avg)
}

// Hedger is one node's hedging policy: what it learned from the redirects
// it followed (per sibling, how many it followed and how many needed a
// hedge; the moving average of a sibling chunk's time), the rates it
// reads its timers from, and the decisions for each redirect being
// followed (a SiblingFetch). Not safe for concurrent use: the engine
// holds one mutex around every call to it and to its rates.
type Hedger struct {
	timeout time.Duration   // Config.SiblingTimeout: how long a sibling request may run
	rates   *peerrate.Table // what this node measured of its peers; nil: nothing
	avg     time.Duration   // moving average of a sibling chunk's time; 0 before the first
	stats   map[peer.ID]*siblingStat
	budget  Budget // hedges: earned by the chunks delivered (budget.go)
	giveUps Budget // give-ups for lateness (plain GET_DIRECTs), earned the same, kept apart
}

// NewHedger returns a policy that gives a sibling request at most timeout
// (> 0) and reads its timers from rates (nil, or nothing measured yet:
// the prior constants). The caller feeds rates with its requests and
// serialises calls to both.
//
// Its hedges and give-ups are not budgeted unless SetBudget says so
// (e.g. NewBudget(HedgeShare, HedgeBurst)): budgeted by default, a stuck
// sibling that had answered lately was judged working and its give-ups
// held back until the sibling timeout (TestStuckSiblingMeasuredTimers
// stalled 10 s in 3 runs of 6), and no emulated run showed the budget
// saving copies (docs/benchmarks.md, "Hedge storms"). With a budget,
// hedges, and apart from them give-ups for lateness, are budgeted while
// the sibling is working (it answered lately: paced): a hedge due when its
// budget is spent is not sent (HedgeAction.Deferred) but due again a hedge
// delay later, and a give-up for lateness short of the sibling timeout
// waits another give-up interval (DirectDeferred); every copy delivered
// earns each HedgeShare. The budgets are apart so that hedges, many and
// mostly declined, do not spend what a stuck sibling's first give-ups
// need.
func NewHedger(timeout time.Duration, rates *peerrate.Table) *Hedger {
	return &Hedger{timeout: timeout, rates: rates, stats: map[peer.ID]*siblingStat{}}
}

// SetBudget replaces the hedge budget and the give-up budget, each with a
// copy of b (a zero Budget: neither is budgeted).
func (h *Hedger) SetBudget(b Budget) { h.budget, h.giveUps = b, b }

// Budget returns the hedge budget's tokens now, and the give-up budget's.
func (h *Hedger) Budget() (hedges, giveUps float64) { return h.budget.Tokens(), h.giveUps.Tokens() }

// SiblingFetch is one redirect being followed: made by Follow, changed
// only by the Hedger's methods, owned by the one goroutine that follows
// the redirect.
type SiblingFetch struct {
	sibling  peer.ID
	wait     time.Duration      // the hedge delay, set when followed
	backoff  bool               // measured timers: the delay doubles after a declined hedge
	start    time.Time          // the request to the sibling was sent
	giveUpAt time.Time          // start + the give-up (Timers), later while the budget is spent
	giveUpIn time.Duration      // the give-up (Timers): how much later a paced give-up is due again
	budgeted bool               // measured timers: hedges and give-ups may be paced by the budgets (paced)
	hardAt   time.Time          // start + the sibling timeout: the give-up is not paced past it
	hedgeAt  time.Time          // a hedge is due (zero: none armed)
	open     [NumHedgeReqs]bool // requests that have not answered
	direct   bool               // the relay was asked plainly (at most once per sibling followed)
	done     bool               // delivered or failed: nothing more to do
	// Deflections (fetch 1.4.0): the relay's REDIRECTs and BUSYs in
	// answer to this redirect's plain GET_DIRECTs, and when the one it
	// answered BUSY is to be asked again (zero: none due).
	deflected int
	directAt  time.Time
	late      bool    // the sibling was given up on for lateness (not a failure): asked again on a BUSY
	relay     peer.ID // who redirected: a sibling it names anew is followed with its timers
	size      int
}

// HedgeAction is what the IO loop does after an event: first GiveUp, then
// Hedge, then Direct; Deliver or Fail end the redirect. Wake is when to
// call Tick next (zero: no timer).
type HedgeAction struct {
	// GiveUp stops the sibling's request and counts it as a sibling
	// failure: it failed, or it ran past the sibling timeout (TimedOut),
	// or (Silent, on Follow) the sibling answered none of the last
	// silentLimit requests, and this one is not sent.
	GiveUp, TimedOut, Silent bool
	// Hedge asks the relay for the chunk if it holds it (ReqHedge); Slow
	// names the sibling slow in it (most requests to it needed a hedge).
	Hedge, Slow bool
	// Deferred: a hedge was due but the budget is spent; none is sent, the
	// next is due a hedge delay later. DirectDeferred: the sibling is past
	// its give-up time but the budget is spent; it is waited for another
	// give-up interval, at most until the sibling timeout. (To be
	// counted; nothing to do.)
	Deferred, DirectDeferred bool
	// Direct asks the relay plainly (ReqDirect), naming Failed, the
	// sibling given up on.
	Direct bool
	Failed peer.ID
	// Follow (fetch 1.4.0): the relay answered the plain request with a
	// REDIRECT to this holder of the chunk: ask it (ReqSibling), as the
	// sibling first named was asked (Redirected).
	Follow peer.ID
	// Deliver: the copy that just arrived wins; the redirect is done.
	Deliver bool
	// Fail: nothing is left to wait for; the redirect fails with the error
	// of the request that failed last.
	Fail bool
	Wake time.Time
}

// Follow starts following relay's redirect to sibling p for a chunk of
// size bytes (0: unknown, the size of the chunks measured lately): the
// request to p is sent at now, after Follow (the requests outstanding to
// p are the others). It counts the request against p and arms the hedge
// and the give-up (Timers). A sibling that left silentLimit requests in a
// row unanswered less than a sibling timeout ago is not asked: the action
// gives up on it at once (Silent) and asks the relay plainly.
func (h *Hedger) Follow(now time.Time, p, relay peer.ID, size int) (*SiblingFetch, HedgeAction) {
	st := h.stat(p)
	f := &SiblingFetch{relay: relay, size: size}
	f.arm(now, p, h.Timers(p, relay, size), h.timeout)
	if now.Before(st.skipUntil) {
		h.giveUps.Spend() // a second copy that is not refused
		act := f.giveUp()
		act.Silent = true
		return f, act
	}
	f.open[ReqSibling] = true
	return f, HedgeAction{Wake: f.wake()}
}

// arm points f at sibling p, its request sent at now, with timers tm
// and the sibling timeout.
func (f *SiblingFetch) arm(now time.Time, p peer.ID, tm HedgeTimers, timeout time.Duration) {
	f.sibling, f.wait, f.backoff, f.start = p, tm.Hedge, tm.Measured, now
	f.giveUpAt, f.giveUpIn, f.hardAt = now.Add(tm.GiveUp), tm.GiveUp, now.Add(max(timeout, tm.GiveUp))
	f.hedgeAt, f.budgeted = now.Add(tm.Hedge), tm.Measured
}

// Redirected applies, at now, the relay's REDIRECT to holder p in answer
// to this redirect's plain request (fetch 1.4.0): p is followed as the
// first sibling was (counted, timed, hedged, given up on, at once if it
// left its last requests unanswered), and a new plain request may name
// it. After fetchwire.MaxDeflections REDIRECTs and BUSYs for the chunk
// the relay broke its bound: the plain request failed (and so the
// redirect, unless a hedge is open), and the chunk goes to the caller's
// other sources.
func (h *Hedger) Redirected(f *SiblingFetch, now time.Time, p peer.ID) HedgeAction {
	if f.done || !f.open[ReqDirect] {
		return HedgeAction{Wake: f.wake()}
	}
	if f.deflected++; f.deflected > fetchwire.MaxDeflections {
		return h.Failed(f, now, ReqDirect)
	}
	f.open[ReqDirect], f.direct, f.late = false, false, false
	st := h.stat(p)
	f.arm(now, p, h.Timers(p, f.relay, f.size), h.timeout)
	if now.Before(st.skipUntil) {
		act := f.giveUp()
		act.Silent = true
		act.Wake = f.wake()
		return act
	}
	f.open[ReqSibling] = true
	return HedgeAction{Follow: p, Wake: f.wake()}
}

// Busy applies, at now, the relay's BUSY in answer to this redirect's
// plain request (fetch 1.4.0): the same request is made again after
// retry. A sibling given up on for lateness (not failed) is asked again
// meanwhile (Follow, once), until the sibling timeout: the relay is busy
// because many siblings are late at once, and the late sibling may well
// deliver before the relay would; the first copy wins. After
// fetchwire.MaxDeflections REDIRECTs and BUSYs for the chunk it failed
// (Redirected).
func (h *Hedger) Busy(f *SiblingFetch, now time.Time, retry time.Duration) HedgeAction {
	if f.done || !f.open[ReqDirect] {
		return HedgeAction{Wake: f.wake()}
	}
	if f.deflected++; f.deflected > fetchwire.MaxDeflections {
		return h.Failed(f, now, ReqDirect)
	}
	f.open[ReqDirect] = false
	f.directAt = now.Add(max(retry, 0))
	var act HedgeAction
	if f.late && !f.open[ReqSibling] && now.Before(f.hardAt) {
		f.late = false
		f.open[ReqSibling], f.giveUpAt = true, f.hardAt
		act.Follow = f.sibling
	}
	act.Wake = f.wake()
	return act
}

// stat returns p's counts, made if new, with one more redirect to it.
func (h *Hedger) stat(p peer.ID) *siblingStat {
	st := h.stats[p]
	if st == nil {
		if len(h.stats) >= maxStatPeers {
			clear(h.stats)
		}
		st = &siblingStat{}
		h.stats[p] = st
	}
	st.asked++
	if st.asked >= statWindow {
		st.asked, st.hedged = st.asked/2, st.hedged/2
	}
	return st
}

// answered notes that sibling p answered a request (data or an error): it
// is not silent.
func (h *Hedger) answered(now time.Time, p peer.ID) {
	if st := h.stats[p]; st != nil {
		st.silent, st.skipUntil, st.lastAnswer = 0, time.Time{}, now
	}
}

// paced reports whether f's hedges and give-ups for lateness are paced by
// the budgets at now: its timers were measured, and its sibling answered
// this node within the sibling timeout and has left no request of this
// node unanswered since (a request ended by the relay's copy or a give-up
// counts: silentLimit), so it is working, only late as the whole site is
// (a saturated CPU, a long chain), and a copy from the relay would be one
// more load on the relay's port and CPU; and its chunks took this node
// at most slowCap times as long as the siblings' on average (the moving
// averages). A sibling that left a request unanswered, answered nothing
// for that long (stuck, gone) or is far slower than the others is hedged
// and given up on whatever the budgets: a copy from the relay is what
// cures it. (The site's figures in the rates do not tell the two apart:
// they hold the relay's, which are not a sibling's.)
func (h *Hedger) paced(f *SiblingFetch, now time.Time) bool {
	if !f.budgeted {
		return false
	}
	st := h.stats[f.sibling]
	return st != nil && st.silent == 0 && !st.lastAnswer.IsZero() && now.Sub(st.lastAnswer) <= h.timeout &&
		st.avg <= slowCap*h.avg
}

// unanswered notes at now that a request to sibling p ended without its
// answer (a copy from the relay won, or it timed out); at silentLimit in a
// row p is not asked for a sibling timeout.
func (h *Hedger) unanswered(now time.Time, p peer.ID) {
	st := h.stats[p]
	if st == nil {
		return
	}
	if st.silent++; st.silent >= silentLimit {
		st.silent, st.skipUntil = 0, now.Add(h.timeout)
	}
}

// Arrived applies a verified copy of the chunk from request r at now: the
// first copy wins, whichever request it answers (even one given up on). A
// sibling's time feeds the moving average.
func (h *Hedger) Arrived(f *SiblingFetch, now time.Time, r HedgeReq) HedgeAction {
	if f.done {
		return HedgeAction{}
	}
	h.budget.Earn(1)
	h.giveUps.Earn(1)
	if r == ReqSibling {
		h.noteTime(now.Sub(f.start))
		if st := h.stats[f.sibling]; st != nil {
			st.avg = movingAvg(st.avg, now.Sub(f.start))
		}
		h.answered(now, f.sibling)
	} else if f.open[ReqSibling] {
		h.unanswered(now, f.sibling)
	}
	f.end()
	return HedgeAction{Deliver: true}
}

// Failed applies the failure of request r at now (any failure: NOT_FOUND,
// an error reply, corrupt bytes, a broken stream). A failed sibling is
// replaced by a plain request to the relay at once. A failed hedge, while
// the sibling's request runs, is a relay that does not hold the chunk yet
// or declined to serve it (the sibling waits for it too, or has it on its
// way): the wait goes on, with a new hedge a hedge delay later; with
// measured timers, twice the last delay later (the relay's grace may be
// many of the short delays a fast site measures). The redirect fails when
// no request is left open.
func (h *Hedger) Failed(f *SiblingFetch, now time.Time, r HedgeReq) HedgeAction {
	if f.done {
		return HedgeAction{}
	}
	if !f.open[r] {
		return HedgeAction{Wake: f.wake()} // a request given up on, or a repeat
	}
	f.open[r] = false
	var act HedgeAction
	switch r {
	case ReqSibling:
		h.answered(now, f.sibling)
		if !f.direct {
			h.giveUps.Spend() // the sibling failed: the relay is asked whatever the budget
		}
		act = f.giveUp()
	case ReqHedge:
		if f.open[ReqSibling] {
			if f.backoff {
				f.wait *= 2
			}
			f.hedgeAt = now.Add(f.wait)
		}
	}
	if f.open == [NumHedgeReqs]bool{} && f.directAt.IsZero() {
		f.end()
		return HedgeAction{Fail: true}
	}
	act.Wake = f.wake()
	return act
}

// Tick applies the clock reaching now: a sibling request past its give-up
// time is given up on (and the relay asked plainly) if the budget has a
// token or the sibling timeout has passed (else DirectDeferred: it is
// waited for another give-up interval); else, when a hedge is due,
// the relay is asked if it holds the chunk, naming the sibling slow when
// most requests to it needed a hedge, if the hedge budget has a token
// (else the hedge is Deferred a hedge delay). One hedge at a time, none
// once the relay was asked plainly.
func (h *Hedger) Tick(f *SiblingFetch, now time.Time) HedgeAction {
	if f.done {
		return HedgeAction{}
	}
	var act HedgeAction
	if !f.directAt.IsZero() && !now.Before(f.directAt) {
		// The relay said BUSY: the same plain request again.
		f.directAt, f.open[ReqDirect] = time.Time{}, true
		act.Direct, act.Failed = true, f.sibling
	}
	if f.open[ReqSibling] && !now.Before(f.giveUpAt) {
		if now.Before(f.hardAt) && h.paced(f, now) && !h.giveUps.Take() {
			// Paced like a hedge (budget.go): the sibling is late, not
			// failed; it is waited for another give-up interval, at
			// most until the sibling timeout, when it is given up on
			// whatever the budget.
			f.giveUpAt = minTime(now.Add(f.giveUpIn), f.hardAt)
			act.DirectDeferred = true
		} else {
			if h.paced(f, now) {
				h.giveUps.Spend() // owed: the relay is asked whatever the budget
			}
			f.open[ReqSibling] = false
			direct := act.Direct
			act = f.giveUp()
			f.late = act.Direct // the first give-up, for lateness
			act.Direct = act.Direct || direct
			act.TimedOut = true
			h.unanswered(now, f.sibling)
			act.Wake = f.wake()
			return act
		}
	}
	if !f.hedgeAt.IsZero() && !now.Before(f.hedgeAt) {
		if !h.paced(f, now) || h.budget.Take() {
			f.hedgeAt = time.Time{}
			f.open[ReqHedge] = true
			act.Hedge = true
			act.Slow = h.hedged(f.sibling)
		} else {
			// Spent: second copies stay a share of the first (budget.go).
			f.hedgeAt = now.Add(f.wait)
			act.Deferred = true
		}
	}
	act.Wake = f.wake()
	return act
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// giveUp ends the wait for the sibling (no longer open): the relay is asked
// plainly, once, and no more hedges are made.
func (f *SiblingFetch) giveUp() HedgeAction {
	f.hedgeAt = time.Time{}
	act := HedgeAction{GiveUp: true}
	if !f.direct {
		f.direct, f.open[ReqDirect] = true, true
		act.Direct, act.Failed = true, f.sibling
	}
	return act
}

// end marks f done: no request is waited for, no tick wanted.
func (f *SiblingFetch) end() {
	f.done = true
	f.open = [NumHedgeReqs]bool{}
	f.hedgeAt, f.directAt = time.Time{}, time.Time{}
}

// wake is the next time f needs a tick: the earlier of the hedge due and
// the sibling's timeout (while its request is open); zero for none.
func (f *SiblingFetch) wake() time.Time {
	var w time.Time
	if f.open[ReqSibling] {
		w = f.giveUpAt
	}
	if !f.hedgeAt.IsZero() && (w.IsZero() || f.hedgeAt.Before(w)) {
		w = f.hedgeAt
	}
	if !f.directAt.IsZero() && (w.IsZero() || f.directAt.Before(w)) {
		w = f.directAt
	}
	return w
}

// hedged counts a hedge of a request to p and reports whether p is slow:
// most requests to it needed one.
func (h *Hedger) hedged(p peer.ID) bool {
	st := h.stats[p]
	if st == nil {
		return false
	}
	st.hedged++
	return st.hedged >= slowMinHedges && 2*st.hedged >= st.asked
}

// Timers returns how long a request to sibling p for a chunk of size
// bytes (0: the size measured lately), asked now on relay's redirect,
// runs alone before it is hedged, and before p is given up on. (A hedge
// the relay declines is made again after twice the last delay, with
// measured timers: Failed.)
//
// From the rates measured: the hedge after Patience of p's expected time
// for the chunk (its round trip, its time per byte, the requests already
// outstanding to it, the deviations; the site's figures for a sibling
// never measured), at most slowCap times the patience of the relay's
// (maxHedge while the relay's pace is not measured), at least
// minMeasuredHedge; the give-up after giveUpFactor times the patience of
// the site's figures without p's (p's own while no other peer is
// measured), within [minGiveUp, the sibling timeout]; the hedge never
// after the give-up. With nothing measured, today's constants: the
// moving-average rule (delay) and the sibling timeout.
func (h *Hedger) Timers(p, relay peer.ID, size int) HedgeTimers {
	var own, site, byRelay peerrate.Expectation
	if h.rates != nil {
		own, site = h.rates.Expect(p, size)
		byRelay, _ = h.rates.Expect(relay, size)
	}
	if own.From == peerrate.None {
		return HedgeTimers{Hedge: min(h.delay(), h.timeout), GiveUp: h.timeout}
	}
	ref := site // the site's pace, without p's own figures
	if ref.From == peerrate.None {
		ref = own // p is the only peer measured
	}
	giveUp := min(max(giveUpFactor*Patience(ref), minGiveUp), h.timeout)
	ceiling := maxHedge
	if byRelay.From == peerrate.Peer {
		ceiling = slowCap * Patience(byRelay)
	}
	hedge := min(max(min(Patience(own), ceiling), minMeasuredHedge), giveUp)
	return HedgeTimers{Hedge: hedge, GiveUp: giveUp, Measured: true}
}

// HedgeTimers are a followed redirect's timers (Hedger.Timers): how long
// the sibling's request runs alone before it is hedged, and before the
// sibling is given up on; Measured: from the rates measured, else the
// prior constants.
type HedgeTimers struct {
	Hedge, GiveUp time.Duration
	Measured      bool
}

// delay is the prior hedge delay (nothing measured): how long a sibling
// request runs alone before it is hedged.
func (h *Hedger) delay() time.Duration {
	d := initialHedge
	if h.avg > 0 {
		d = min(max(hedgeFactor*h.avg, minHedge), maxHedge)
	}
	return min(d, h.timeout)
}

// noteTime folds a sibling chunk's time into the moving average (weight
// 1/5; the first time is taken whole).
func (h *Hedger) noteTime(d time.Duration) { h.avg = movingAvg(h.avg, d) }

// movingAvg folds d into the moving average avg (weight 1/5; the first
// time, avg 0, is taken whole).
func movingAvg(avg, d time.Duration) time.Duration {
	if avg == 0 {
		return d
	}
	return avg + (d-avg)/5
}
