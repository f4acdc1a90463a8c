package member

import (
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/grid"
)

// Bounds of the join protocol (/omst/join), the one protocol served to
// peers that are not members. A request is read (within half the
// timeout, at most maxJoin bytes) and checked before it takes a slot, so
// a peer that sends nothing, or garbage, holds none.
const (
	// JoinSlots bounds the token redemptions served at once (waiting for
	// the root's answer, or at the root for the ledger).
	JoinSlots = 8
	// RenewSlots bounds the renewals served at once. They come from
	// admitted members only and have slots of their own, so that no
	// flood of joins delays a member's renewal.
	RenewSlots = 8
	// MemberJoinStreams bounds the join streams one admitted member may
	// have open at once (a head forwards its workers' requests); a peer
	// that is not admitted gets one.
	MemberJoinStreams = JoinSlots + RenewSlots
	// JoinBurst and JoinEvery bound the requests for one subject (the peer
	// a certificate is asked for): JoinBurst at once, then one every
	// JoinEvery. A member asks once per renewal (at two thirds of its
	// certificate's life) and, after a failure, once a minute.
	JoinBurst = 4
	JoinEvery = 15 * time.Second
	// maxRateEntries bounds the subjects whose rate is remembered.
	maxRateEntries = 4096
)

// ErrBusy wraps the refusal of a join request for want of room: a slot, a
// stream, the subject's rate. The asker may try again later.
var ErrBusy = errors.New("busy")

// joinRate limits requests per peer: a token bucket of burst tokens,
// refilled one per every. It is plain code (the caller passes the time)
// and not safe for concurrent use.
type joinRate struct {
	burst int
	every time.Duration
	max   int
	b     map[peer.ID]bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newJoinRate(burst int, every time.Duration, max int) *joinRate {
	return &joinRate{burst: burst, every: every, max: max, b: map[peer.ID]bucket{}}
}

// refill returns bk's tokens at now.
func (r *joinRate) refill(bk bucket, now time.Time) float64 {
	if d := now.Sub(bk.at); d > 0 {
		return min(float64(r.burst), bk.tokens+float64(d)/float64(r.every))
	}
	return bk.tokens
}

// allow takes a token of p's at now, or reports how long until one is
// there.
func (r *joinRate) allow(p peer.ID, now time.Time) (ok bool, wait time.Duration) {
	bk, known := r.b[p]
	if !known {
		if len(r.b) >= r.max {
			r.evict(now)
		}
		bk = bucket{tokens: float64(r.burst), at: now}
	}
	bk.tokens, bk.at = r.refill(bk, now), now
	if bk.tokens < 1 {
		r.b[p] = bk
		return false, time.Duration((1 - bk.tokens) * float64(r.every))
	}
	bk.tokens--
	r.b[p] = bk
	return true, 0
}

// evict forgets the peers whose bucket is full again (they carry nothing),
// then, if still too many, any.
func (r *joinRate) evict(now time.Time) {
	for p, bk := range r.b {
		if r.refill(bk, now) >= float64(r.burst) {
			delete(r.b, p)
		}
	}
	for p := range r.b {
		if len(r.b) < r.max {
			break
		}
		delete(r.b, p)
	}
}

// checkJoin decides, before any slot is taken, whether request q from
// remote (an admitted member or not) is served here at now: anyone may ask
// for itself, only a member for another peer (it forwards); a renewal
// comes from a member; a token must be this grid's, signed and not
// expired (with the clock skew: the root judges it exactly); a
// certificate to renew must be this grid's, the subject's, valid, not
// revoked by the list held, and half through its life. So garbage costs a
// check here and goes no further up the tree. Plain code: no IO.
func (a *Admission) checkJoin(remote peer.ID, member bool, q joinRequest, now time.Time) error {
	if q.Subject != remote && !member {
		return fmt.Errorf("%s asked for %s but is not a member that may forward", remote, q.Subject)
	}
	if q.Kind == kindRenew && !member {
		return fmt.Errorf("renewal for %s: %s is not an admitted member here (a certificate that no longer holds is not renewed: join again with a token)", q.Subject, remote)
	}
	a.mu.Lock()
	pub, revs := a.pub, a.revs
	a.mu.Unlock()
	if pub == nil {
		return nil // open: nothing to check against; the root checks
	}
	switch q.Kind {
	case kindRedeem:
		t, err := grid.ParseToken(string(q.Payload))
		if err != nil {
			return err
		}
		return t.Redeemable(pub, now.Add(-grid.ClockSkew))
	case kindRenew:
		c, err := grid.DecodeCert(q.Payload, pub)
		if err != nil {
			return fmt.Errorf("renewal: %w", err)
		}
		if err := c.Check(q.Subject, now, revs); err != nil {
			return fmt.Errorf("renewal: %w", err)
		}
		return c.Renewable(now)
	}
	return fmt.Errorf("unknown kind %d", q.Kind)
}
