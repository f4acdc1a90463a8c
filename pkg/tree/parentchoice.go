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

// RefusedRetry is how long the keeper waits, once every parent has refused
// this node as a child (tree 1.1.0 REFUSED), before it asks them again,
// the preferred one first (scaled by the jitter like a backoff).
const RefusedRetry = time.Minute

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
// RetryPreferred and returns to the first that answers. A parent that
// refused this node as a child is left at once for the next one that did
// not, and is neither probed nor returned to until every parent has
// refused; then the keeper waits RefusedRetry and starts over with the
// preferred one. Not safe for concurrent use.
type ParentChoice struct {
	n              int
	goodAfter      time.Duration
	retryPreferred time.Duration

	cur      int
	attempt  int    // backoff step
	failures int    // failed sessions in a row on cur
	refused  []bool // parents that refused this node since the last start over
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
	return &ParentChoice{n: n, goodAfter: goodAfter, retryPreferred: retryPreferred, refused: make([]bool, n)}
}

// Current returns the index of the parent to hold a session with.
func (c *ParentChoice) Current() int { return c.cur }

// ProbeEvery returns how often to probe the parents before the current one
// (0: do not probe, on the preferred parent, with probing off, or when
// every earlier parent refused this node).
func (c *ParentChoice) ProbeEvery() time.Duration {
	if len(c.Probe()) == 0 || c.retryPreferred <= 0 {
		return 0
	}
	return c.retryPreferred
}

// Probe returns the parents to probe, in order: those before the current
// one that have not refused this node.
func (c *ParentChoice) Probe() []int {
	var out []int
	for i := range c.cur {
		if !c.refused[i] {
			out = append(out, i)
		}
	}
	return out
}

// SessionRefused records that the current parent refused this node as a
// child. It moves on at once to the next parent (wrapping around) that has
// not refused it; when every parent has, it forgets the refusals and waits
// RefusedRetry (scaled by jitter in [0, 1) to [0.5, 1.5)) before it asks
// the preferred parent again.
func (c *ParentChoice) SessionRefused(jitter float64) KeeperAction {
	c.refused[c.cur] = true
	c.attempt, c.failures = 0, 0
	for k := 1; k < c.n; k++ {
		if i := (c.cur + k) % c.n; !c.refused[i] {
			c.cur = i
			return KeeperAction{Parent: i, Switched: true, Reason: "refused as a child: next parent"}
		}
	}
	clear(c.refused)
	prev := c.cur
	c.cur = 0
	return KeeperAction{Parent: 0, Wait: time.Duration(float64(RefusedRetry) * (0.5 + jitter)), Switched: prev != 0,
		Reason: "refused as a child by every parent: ask again later"}
}

// SessionEnded records that the session (or the attempt to open one) with
// the current parent ended, after it had been up for up (0 if it never came
// up); jitter in [0, 1) spreads the backoff. It returns what to do next.
func (c *ParentChoice) SessionEnded(up time.Duration, jitter float64) KeeperAction {
	c.failures++
	if up >= c.goodAfter && up > 0 {
		c.attempt, c.failures = 0, 1 // it was up for a while: start over
	}
	if _, switched := NextParent(c.cur, c.n, c.failures); switched {
		// The next parent that has not refused this node, if any.
		for k := 1; k < c.n; k++ {
			if next := (c.cur + k) % c.n; !c.refused[next] {
				c.cur, c.attempt, c.failures = next, 0, 0
				return KeeperAction{Parent: next, Switched: true, Reason: fmt.Sprintf("%d failed sessions in a row: next parent", switchAfter)}
			}
		}
	}
	d := BackoffDelay(c.attempt, jitter)
	c.attempt++
	return KeeperAction{Parent: c.cur, Wait: d, Reason: "retry after backoff"}
}

// EarlierReachable records that parent i, earlier in the list than the
// current one, answered a probe: the keeper ends the current session and
// goes back to it at once. A stale i (not before the current parent, or
// one that refused this node) is ignored: the current parent stays, with
// no wait.
func (c *ParentChoice) EarlierReachable(i int) KeeperAction {
	if i < 0 || i >= c.cur || c.refused[i] {
		return KeeperAction{Parent: c.cur, Reason: "stale probe result"}
	}
	c.cur, c.attempt, c.failures = i, 0, 0
	return KeeperAction{Parent: i, Switched: true, Reason: "earlier parent reachable again"}
}
