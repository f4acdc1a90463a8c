package tree

import (
	"fmt"
	"time"
)

// This file holds the parent keeper's decisions as plain code: events in
// (a session ended after it had been up so long; an earlier parent answered
// a probe), actions out (which parent next, after how long a wait). The
// durations are measured by the edge (keeper.go) and passed in; no clocks,
// no sockets. Scripted tests: testdata/keeper/*.txt.

// Backoff of the parent keeper between connection attempts.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// switchAfter is the number of failed sessions in a row after which the
// keeper moves on to the next parent (when fallbacks are configured).
const switchAfter = 2

// BackoffDelay returns the wait before reconnect attempt n (0-based):
// backoffMin doubling up to backoffMax, scaled by jitter in [0.5, 1.5).
func BackoffDelay(n int, jitter float64) time.Duration {
	d := backoffMin
	for i := 0; i < n && d < backoffMax; i++ {
		d *= 2
	}
	d = min(d, backoffMax)
	return time.Duration(float64(d) * (0.5 + jitter))
}

// NextParent decides the keeper's next parent index: after switchAfter
// failures in a row on parent cur of n, the next one (wrapping around),
// else cur. It reports whether it switched.
func NextParent(cur, n, failures int) (int, bool) {
	if n > 1 && failures >= switchAfter {
		return (cur + 1) % n, true
	}
	return cur, false
}

// ParentChoice decides which of a node's parents (index 0 preferred, then
// the fallbacks in order) the keeper holds a session with. A session that
// stays up at least GoodAfter resets the failure count and the backoff;
// after switchAfter failed sessions in a row the keeper moves on to the next
// parent; while on a fallback it probes the earlier parents every
// RetryPreferred and returns to the first that answers. Not safe for
// concurrent use.
type ParentChoice struct {
	n              int
	goodAfter      time.Duration
	retryPreferred time.Duration

	cur      int
	attempt  int // backoff step
	failures int // failed sessions in a row on cur
}

// KeeperAction is what the keeper does next: connect to Parent after Wait.
type KeeperAction struct {
	Parent   int
	Wait     time.Duration
	Switched bool   // Parent is not the parent of the session that ended
	Reason   string // for the log
}

func (a KeeperAction) String() string {
	s := fmt.Sprintf("parent %d wait %v", a.Parent, a.Wait)
	if a.Switched {
		s += " switched"
	}
	return s + ": " + a.Reason
}

// NewParentChoice returns the choice among n parents, starting with the
// preferred one. goodAfter is how long a session must have been up to
// count as good (three keepalives); retryPreferred <= 0 never probes.
func NewParentChoice(n int, goodAfter, retryPreferred time.Duration) *ParentChoice {
	return &ParentChoice{n: n, goodAfter: goodAfter, retryPreferred: retryPreferred}
}

// Current returns the index of the parent to hold a session with.
func (c *ParentChoice) Current() int { return c.cur }

// ProbeEvery returns how often to probe the parents before the current one
// (0: do not probe, on the preferred parent or with probing off).
func (c *ParentChoice) ProbeEvery() time.Duration {
	if c.cur == 0 || c.retryPreferred <= 0 {
		return 0
	}
	return c.retryPreferred
}

// SessionEnded records that the session (or the attempt to open one) with
// the current parent ended, after it had been up for up (0 if it never came
// up); jitter in [0, 1) spreads the backoff. It returns what to do next.
func (c *ParentChoice) SessionEnded(up time.Duration, jitter float64) KeeperAction {
	c.failures++
	if up >= c.goodAfter && up > 0 {
		c.attempt, c.failures = 0, 1 // it was up for a while: start over
	}
	if next, switched := NextParent(c.cur, c.n, c.failures); switched {
		c.cur, c.attempt, c.failures = next, 0, 0
		return KeeperAction{Parent: next, Switched: true, Reason: fmt.Sprintf("%d failed sessions in a row: next parent", switchAfter)}
	}
	d := BackoffDelay(c.attempt, jitter)
	c.attempt++
	return KeeperAction{Parent: c.cur, Wait: d, Reason: "retry after backoff"}
}

// EarlierReachable records that parent i, earlier in the list than the
// current one, answered a probe: the keeper ends the current session and
// goes back to it at once. A stale i (not before the current parent) is
// ignored: the current parent stays, with no wait.
func (c *ParentChoice) EarlierReachable(i int) KeeperAction {
	if i < 0 || i >= c.cur {
		return KeeperAction{Parent: c.cur, Reason: "stale probe result"}
	}
	c.cur, c.attempt, c.failures = i, 0, 0
	return KeeperAction{Parent: i, Switched: true, Reason: "earlier parent reachable again"}
}
