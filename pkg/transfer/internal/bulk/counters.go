package bulk

import (
	"sync/atomic"
)

// Counters count a node's bulk path at both ends: its Listener's and its
// Dialer's connections share one (ListenerConfig.Counters,
// Dialer.Counters). A nil *Counters counts nothing. Safe for concurrent
// use.
type Counters struct {
	// Open is the bulk connections open now, opened by this node or
	// accepted by its listener.
	Open atomic.Int64
	// TicketsRedeemed counts the tickets this node's listener took for a
	// connection; TicketsRefused the hellos whose ticket it refused
	// (unknown, expired, replayed, or its peer no longer a member);
	// RequestsRefused the ticket requests it answered UNAVAILABLE (not a
	// member, another site, too many outstanding, malformed). Tickets
	// issued are Stats.Granted.
	TicketsRedeemed, TicketsRefused, RequestsRefused atomic.Uint64
	// Sent and Received count the bytes this node's bulk connections
	// carried, by Mode: the fetch protocol's frames as the connection's
	// user wrote and read them (a sealed connection's AES-GCM framing is
	// not counted).
	SentPlain, SentSealed, ReceivedPlain, ReceivedSealed atomic.Uint64
}

// opened counts a new open connection.
func (k *Counters) opened() {
	if k != nil {
		k.Open.Add(1)
	}
}

// closed counts an open connection closed.
func (k *Counters) closed() {
	if k != nil {
		k.Open.Add(-1)
	}
}

// count adds n bytes moved in mode m, sent or received.
func (k *Counters) count(m Mode, sent bool, n int) {
	if k == nil || n <= 0 {
		return
	}
	switch {
	case sent && m == ModePlain:
		k.SentPlain.Add(uint64(n))
	case sent:
		k.SentSealed.Add(uint64(n))
	case m == ModePlain:
		k.ReceivedPlain.Add(uint64(n))
	default:
		k.ReceivedSealed.Add(uint64(n))
	}
}

// redeemed counts a hello's ticket taken (ok) or refused.
func (k *Counters) redeemed(ok bool) {
	switch {
	case k == nil:
	case ok:
		k.TicketsRedeemed.Add(1)
	default:
		k.TicketsRefused.Add(1)
	}
}

// requestRefused counts a ticket request answered UNAVAILABLE.
func (k *Counters) requestRefused() {
	if k != nil {
		k.RequestsRefused.Add(1)
	}
}
