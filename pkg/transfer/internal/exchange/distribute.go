package exchange

import (
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
)

// This file holds the relay's in-site distribution decisions as plain code:
// requests in (a child asks for chunk i of a blob), decisions out (send the
// chunk, or redirect the child to a sibling that holds it or is receiving
// it). The clock is passed in. ServeState drives it; the edge is the
// engine's server.
//
// The aim is that each chunk crosses the relay's port about once per site:
// the first children to ask for a chunk get it from the relay (Direct
// copies), later ones are sent to a sibling that asked for it before them,
// each holder taking at most Fanout siblings per chunk: the holder that has
// fed the fewest siblings so far for this blob, so that feeding the site is
// spread over every worker's port (a worker that is always the first to ask
// would otherwise feed Fanout siblings of every chunk, and with a LAN twice
// as fast as the WAN that is its whole port). The relay's port carries one
// copy.

// DistributorConfig tunes a Distributor.
type DistributorConfig struct {
	// Direct is the number of copies of a chunk the relay sends itself
	// before it redirects (default 1).
	Direct int
	// Fanout is the number of siblings one holder of a chunk is sent per
	// chunk (default 2).
	Fanout int
	// MaxFailures is the number of failures reported against a holder,
	// per blob, after which it is no longer a redirect target for that
	// blob (default 2).
	MaxFailures int
	// Idle is how long a blob's state is kept after its last request
	// (default 10 minutes).
	Idle time.Duration
}

// Distributor decides, at a relay, how its children's chunk requests are
// answered. Children are grouped (by site): a child is only ever sent to a
// sibling of its own group. Not safe for concurrent use.
type Distributor struct {
	cfg   DistributorConfig
	blobs map[cid.Cid]*blobDist
}

type blobDist struct {
	chunks   map[uint32]*chunkDist
	failures map[peer.ID]int       // failures reported against each holder
	fed      map[peer.ID]int       // siblings sent to each holder, over all chunks
	slow     map[peer.ID]time.Time // holders reported slow: a target of last resort until then
	lastUse  time.Time
}

// chunkDist is who holds (or is receiving) one chunk.
type chunkDist struct {
	direct  int         // copies the relay sent itself
	holders []holderRef // in the order they were assigned
	sent    time.Time   // when the relay first had the chunk to send into the site
}

type holderRef struct {
	peer  peer.ID
	group string
	fed   int // siblings sent to it for this chunk
}

// NewDistributor returns a Distributor; zero fields of cfg take defaults.
func NewDistributor(cfg DistributorConfig) *Distributor {
	if cfg.Direct <= 0 {
		cfg.Direct = 1
	}
	if cfg.Fanout <= 0 {
		cfg.Fanout = 2
	}
	if cfg.MaxFailures <= 0 {
		cfg.MaxFailures = 2
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 10 * time.Minute
	}
	return &Distributor{cfg: cfg, blobs: map[cid.Cid]*blobDist{}}
}

// Ask is a peer's request for a chunk, as the relay's decisions see it
// (ServeState; the Distributor's take only a connected child's).
type Ask struct {
	Blob  cid.Cid
	Index uint32
	Child peer.ID // the asker
	// Grouped: the asker is a connected child of this node, of Group (its
	// site); any other asker is served, never redirected, and is no
	// holder (ServeState).
	Grouped bool
	Group   string
	// Direct: a retry that must not be redirected (GET_DIRECT).
	Direct bool
	// Hedge: a GET_DIRECT if-present, the asker's second request for a
	// chunk it asked a sibling for: served only if the chunk is here, or
	// declined for HedgeGrace; never redirected, and no holder changes
	// (ServeState). Its Slow names the sibling it found slow.
	Hedge bool
	// Failed is the sibling the child was sent to that could not deliver
	// (it counts against it: MaxFailures make it no target for the blob);
	// Slow one that was only slow (the child hedged): for SlowBackoff it is
	// a target only when no other holder is, then one as before.
	Failed, Slow peer.ID
}

// SlowBackoff is how long a sibling reported slow is a redirect target of
// last resort only.
const SlowBackoff = 5 * time.Second

// Decide answers a child's request a at now: the sibling to redirect the
// child to, or "" for the relay to send the chunk itself. Either way the
// child becomes a holder of the chunk. A target that turns out to be gone
// is reported with Redecide.
func (d *Distributor) Decide(now time.Time, a Ask) peer.ID {
	id, index, child, group, direct, failed := a.Blob, a.Index, a.Child, a.Group, a.Direct, a.Failed
	b := d.blobs[id]
	if b == nil {
		b = &blobDist{chunks: map[uint32]*chunkDist{}, failures: map[peer.ID]int{}, fed: map[peer.ID]int{}, slow: map[peer.ID]time.Time{}}
		d.blobs[id] = b
	}
	b.lastUse = now
	c := b.chunks[index]
	if c == nil {
		c = &chunkDist{}
		b.chunks[index] = c
	}
	if failed != "" {
		b.failures[failed]++
		c.remove(failed)
	}
	if a.Slow != "" {
		b.slow[a.Slow] = now.Add(SlowBackoff)
	}
	if i := c.find(child); i >= 0 {
		// A holder asks again: it lost the chunk (or never got it). It
		// is no holder any more, and it is served directly.
		c.remove(child)
		direct = true
	}
	target := peer.ID("")
	if !direct && c.direct >= d.cfg.Direct {
		// Among the holders with room for this chunk, one not reported
		// slow, else a slow one (the relay serving the child itself
		// would load the port the exchange spares, and when every holder
		// is slow the whole site is); then the one that has fed the
		// fewest siblings of this blob (the earliest on a tie).
		best, bestSlow := -1, false
		for i := range c.holders {
			h := &c.holders[i]
			if h.group != group || h.fed >= d.cfg.Fanout || b.failures[h.peer] >= d.cfg.MaxFailures {
				continue
			}
			slow := now.Before(b.slow[h.peer])
			if best >= 0 && (slow && !bestSlow || slow == bestSlow && b.fed[h.peer] >= b.fed[c.holders[best].peer]) {
				continue
			}
			best, bestSlow = i, slow
		}
		if best >= 0 {
			h := &c.holders[best]
			h.fed++
			b.fed[h.peer]++
			target = h.peer
		}
	}
	if target == "" {
		c.direct++
	}
	c.holders = append(c.holders, holderRef{peer: child, group: group})
	if len(c.holders) > maxHolders {
		// Forget a holder that has no room left (the oldest, else the
		// first): the state of a chunk stays bounded however many ask.
		drop := 0
		for i, h := range c.holders {
			if h.fed >= d.cfg.Fanout {
				drop = i
				break
			}
		}
		c.holders = append(c.holders[:drop], c.holders[drop+1:]...)
	}
	return target
}

// Redecide answers a's request again: the target Decide chose for it,
// gone, is no connected child any more. gone is forgotten (DropPeer), the
// child is no holder by that decision, and it is decided again, its
// reports (Failed, Slow) already counted. So a child is sent to the holder
// it would have been sent to had gone not been one.
func (d *Distributor) Redecide(now time.Time, a Ask, gone peer.ID) peer.ID {
	d.DropPeer(gone)
	if b := d.blobs[a.Blob]; b != nil {
		if c := b.chunks[a.Index]; c != nil {
			c.remove(a.Child)
		}
	}
	a.Failed, a.Slow = "", ""
	return d.Decide(now, a)
}

// maxHolders bounds the holders a Distributor remembers per chunk.
const maxHolders = 64

func (c *chunkDist) find(p peer.ID) int {
	for i, h := range c.holders {
		if h.peer == p {
			return i
		}
	}
	return -1
}

func (c *chunkDist) remove(p peer.ID) {
	if i := c.find(p); i >= 0 {
		c.holders = append(c.holders[:i], c.holders[i+1:]...)
	}
}

// NoteSlow records that a child found sibling p slow for blob id (it
// hedged): for SlowBackoff, p is a redirect target only when every other
// holder with room is slow too.
func (d *Distributor) NoteSlow(now time.Time, id cid.Cid, p peer.ID) {
	if b := d.blobs[id]; b != nil {
		b.slow[p] = now.Add(SlowBackoff)
	}
}

// HedgeGrace is how long after a relay first sent a chunk into a site it
// declines hedges for it (GET_DIRECT if-present): the chunk is then still
// moving from sibling to sibling, and the child's sibling has it or gets it
// soon. A copy from the relay would only load the port the exchange
// spares; when every child's sibling is behind, such copies are most of
// what the port carries. A child whose sibling is stuck hedges again later.
const HedgeGrace = 4 * time.Second

// NoteSent records that the relay has chunk index of blob id to send to a
// child now (the first time counts).
func (d *Distributor) NoteSent(now time.Time, id cid.Cid, index uint32) {
	if b := d.blobs[id]; b != nil {
		if c := b.chunks[index]; c != nil && c.sent.IsZero() {
			c.sent = now
		}
	}
}

// HedgeWait reports how much longer a hedge for chunk index of blob id is
// declined (0: serve it if the chunk is here). Chunks the relay never sent
// into the site (held from before, or not here yet) are not declined.
func (d *Distributor) HedgeWait(now time.Time, id cid.Cid, index uint32) time.Duration {
	b := d.blobs[id]
	if b == nil {
		return 0
	}
	c := b.chunks[index]
	if c == nil || c.sent.IsZero() {
		return 0
	}
	return max(c.sent.Add(HedgeGrace).Sub(now), 0)
}

// DropPeer forgets p as a holder of anything (it left: its tree session
// ended, Engine.ChildLeft), so that no child is sent to it, even once it
// is back, for what it held before.
func (d *Distributor) DropPeer(p peer.ID) {
	for _, b := range d.blobs {
		delete(b.failures, p)
		delete(b.fed, p)
		delete(b.slow, p)
		for _, c := range b.chunks {
			c.remove(p)
		}
	}
}

// Sweep forgets blobs not requested since now - Idle.
func (d *Distributor) Sweep(now time.Time) {
	for id, b := range d.blobs {
		if now.Sub(b.lastUse) > d.cfg.Idle {
			delete(d.blobs, id)
		}
	}
}
