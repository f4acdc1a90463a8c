package bulk

import (
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Ticket lifetimes and bounds.
const (
	// DefaultTTL is how long a ticket may wait for its connection.
	DefaultTTL = 10 * time.Second
	// MaxPerPeer bounds the tickets issued to one peer and not yet
	// redeemed or expired; MaxOutstanding those of all peers.
	MaxPerPeer     = 64
	MaxOutstanding = 4096
)

// Table holds the tickets this node issued: each is bound to the peer it
// was issued to (over an admitted libp2p session), to this node (no other
// node knows it), to a mode, and expires TTL after issue; it opens one
// connection. A redeemed ticket is kept, marked used, until it would have
// expired, so that a replay is told from an unknown ticket. Decisions
// only: the clock is Now, no IO. Safe for concurrent use.
type Table struct {
	Now func() time.Time // the clock (time.Now when nil)
	TTL time.Duration    // DefaultTTL when 0

	mu      sync.Mutex
	tickets map[TicketID]*issued
	perPeer map[peer.ID]int // outstanding (not used, not expired)
}

type issued struct {
	peer    peer.ID
	mode    Mode
	key     []byte
	expires time.Time
	used    bool
}

func (t *Table) now() time.Time {
	if t.Now == nil {
		return time.Now()
	}
	return t.Now()
}

func (t *Table) ttl() time.Duration {
	if t.TTL <= 0 {
		return DefaultTTL
	}
	return t.TTL
}

// Issue makes n tickets for p in mode m (with a fresh key each in
// ModeSealed). It fails with ErrBusy when p, or all peers together, hold
// too many outstanding.
func (t *Table) Issue(p peer.ID, m Mode, n int) ([]Ticket, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.sweep(now)
	if t.tickets == nil {
		t.tickets, t.perPeer = map[TicketID]*issued{}, map[peer.ID]int{}
	}
	if t.perPeer[p]+n > MaxPerPeer || len(t.tickets)+n > MaxOutstanding {
		return nil, fmt.Errorf("%w: %d tickets outstanding for %s, %d in all", ErrBusy, t.perPeer[p], p, len(t.tickets))
	}
	out := make([]Ticket, n)
	for i := range out {
		var tk Ticket
		rand.Read(tk.ID[:]) // never fails (crypto/rand)
		if m == ModeSealed {
			tk.Key = make([]byte, KeyLen)
			rand.Read(tk.Key)
		}
		t.tickets[tk.ID] = &issued{peer: p, mode: m, key: tk.Key, expires: now.Add(t.ttl())}
		t.perPeer[p]++
		out[i] = tk
	}
	return out, nil
}

// Redeem takes ticket id for a connection: the peer it was issued to,
// its mode and key. An unknown ticket is ErrUnknownTicket, one past its
// expiry ErrExpiredTicket, one redeemed before ErrReplayedTicket.
func (t *Table) Redeem(id TicketID) (peer.ID, Mode, []byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.sweep(now)
	e := t.tickets[id]
	switch {
	case e == nil:
		return "", 0, nil, ErrUnknownTicket
	case e.used:
		return "", 0, nil, fmt.Errorf("%w (issued to %s)", ErrReplayedTicket, e.peer)
	case !now.Before(e.expires):
		return "", 0, nil, fmt.Errorf("%w (issued to %s, expired %v ago)", ErrExpiredTicket, e.peer, now.Sub(e.expires).Round(time.Millisecond))
	}
	e.used = true
	t.release(e.peer)
	return e.peer, e.mode, e.key, nil
}

// Outstanding is the number of tickets issued to p neither redeemed nor
// expired (as of the last sweep).
func (t *Table) Outstanding(p peer.ID) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.perPeer[p]
}

func (t *Table) release(p peer.ID) {
	if t.perPeer[p]--; t.perPeer[p] <= 0 {
		delete(t.perPeer, p)
	}
}

// sweep forgets the tickets one TTL past their expiry (used ones
// included: a replay of one is then unknown, and refused as such).
func (t *Table) sweep(now time.Time) {
	for id, e := range t.tickets {
		// Keep an expired, unused ticket for one more TTL, so that a late
		// hello is told "expired" rather than "unknown".
		if now.Before(e.expires.Add(t.ttl())) {
			continue
		}
		if !e.used {
			t.release(e.peer)
		}
		delete(t.tickets, id)
	}
}
