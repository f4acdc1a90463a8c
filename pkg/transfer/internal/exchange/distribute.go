package exchange

import (
	"slices"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
)

// This file holds the relay's in-site distribution decisions as plain code:
// requests in (a child asks for chunk i of a blob), decisions out (send the
// chunk, or redirect the child to a sibling that holds it or is receiving
// it). The clock is passed in. ServeState drives it; the edge is the
// engine's server.
//
// The aim is that each chunk crosses the relay's port about once per site
// and reaches every child through few hops: the first children to ask for
// a chunk get it from the relay (Direct copies), later ones are sent to a
// sibling that asked for it before them, each holder taking at most Fanout
// siblings per chunk: of the holders with room fewer than MaxDepth hops
// from the relay, the one that has fed the fewest siblings so far for this
// blob, so that feeding the site is spread over the workers' ports (each
// carries about one copy: half of it with a LAN twice as fast as the WAN);
// when none has room there, the shallowest. A chunk's tree is so a chain
// up to MaxDepth (32) hops and branches above that level past it: no copy
// is more than MaxDepth hops from the relay however many ask. (Picking the
// fewest fed at any depth made chains as long as the site, a chunk passing
// N/2 workers on average: 1.8 x S/B at 1,000 workers in the simulator;
// filling each tree breadth-first, about log2 N deep, gave 1.13 x there
// but cost 2 x 16 workers on the emulated grid 30% more time, the first
// askers' ports full; docs/benchmarks.md, "Simulated sites".)
// The relay's port carries one copy.

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
	// MaxDepth bounds the hops from the relay a child is sent down
	// (default 32): short of it a holder is picked by the siblings it fed
	// (trees are chains, each worker's port carrying about one copy),
	// past it by its depth (trees branch). Measured (docs/benchmarks.md):
	// breadth-first trees at any size cost 2 x 16 workers a third more
	// time on the emulated grid (the first askers' ports full); chains
	// as deep as the site cost 1,000 workers 1.8 x S/B in the simulator;
	// capped at 16, 2 x 32 on the emulated grid lost to the uncapped
	// chains (their branches' ports full) and 1,000 workers gained
	// little over 32 (1.10 against 1.11 x S/B, one seed).
	MaxDepth int
	// Idle is how long a blob's state is kept after its last request
	// (default 10 minutes).
	Idle time.Duration
	// MaxDeflect is how many of one child's deflectable GET_DIRECTs for
	// one chunk (fetch 1.4.0, Ask.Deflect) the relay answers with a
	// REDIRECT to a complete holder or a BUSY before it serves the chunk
	// itself (default DefaultMaxDeflect, at most fetchwire.MaxDeflections;
	// < 0: none, every GET_DIRECT served as in 1.3.0).
	MaxDeflect int
}

// DefaultMaxDeflect is DistributorConfig.MaxDeflect's default.
const DefaultMaxDeflect = 2

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
	// deflects: per child, its GET_DIRECTs for this chunk deflected so
	// far and the holders it named failed (nil until the first; at most
	// maxHolders children).
	deflects map[peer.ID]*deflectRec
}

// deflectRec is what a relay remembers of one child's GET_DIRECTs for one
// chunk: how many it deflected, and the holders the child named failed
// (never a target for it again; each counted against its holder once).
type deflectRec struct {
	n     int
	avoid []peer.ID
}

type holderRef struct {
	peer  peer.ID
	group string
	fed   int32 // siblings sent to it for this chunk
	depth int32 // hops from the relay: 1 for a copy it sent, its feeder's + 1
	// complete: the relay wrote the whole chunk to it and its stream took
	// the last byte (NoteComplete): it holds the chunk, not only asked.
	complete bool
}

// DefaultMaxDepth is DistributorConfig.MaxDepth's default.
const DefaultMaxDepth = 32

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
	if cfg.MaxDepth <= 0 {
		cfg.MaxDepth = DefaultMaxDepth
	}
	switch {
	case cfg.MaxDeflect == 0:
		cfg.MaxDeflect = DefaultMaxDeflect
	case cfg.MaxDeflect < 0:
		cfg.MaxDeflect = 0
	}
	cfg.MaxDeflect = min(cfg.MaxDeflect, fetchwire.MaxDeflections)
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
	// Deflect: a plain GET_DIRECT (not a hedge) that takes a REDIRECT to
	// a complete holder or a BUSY in reply (fetch 1.4.0; Deflect).
	Deflect bool
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
// last resort only, while the site's pace is not measured (Pace; with it,
// SlowBackoffFor).
const SlowBackoff = 5 * time.Second

// Pace is what a relay measured of how fast chunks move through its site
// (ServeEvent.Pace): Hop, the time one chunk reply of the blob is expected
// to take to reach a child at the rates the relay measured of its
// children's replies, and Dev its mean deviation. The zero Pace: not
// measured; the constants HedgeGrace and SlowBackoff apply.
type Pace struct{ Hop, Dev time.Duration }

// Measured reports whether p holds a measure.
func (p Pace) Measured() bool { return p.Hop > 0 }

// Bounds of the grace derived from a Pace: a chunk is not counted to take
// less than minGrace to reach a child (timer and scheduling noise), nor
// more than maxGrace (transfer.DefaultSiblingTimeout: by then a child has
// given up on its sibling and asked plainly, which no grace declines).
const (
	minGrace = 100 * time.Millisecond
	maxGrace = 10 * time.Second
)

// HedgeGraceFor is how long hedges for a chunk are declined after the
// relay first sent it into the site, for a child depth hops from the relay
// in the chunk's fanout tree: with pace measured, the patience (twice the
// mean and four deviations, as a hedge's) of depth hops, within [minGrace,
// maxGrace]; else HedgeGrace. The chunk is still moving from sibling to
// sibling until then.
func HedgeGraceFor(pace Pace, depth int) time.Duration {
	if !pace.Measured() {
		return HedgeGrace
	}
	return min(max(time.Duration(max(depth, 1))*patience(pace.Hop, pace.Dev), minGrace), maxGrace)
}

// SlowBackoffFor is how long a sibling reported slow is a target of last
// resort, for a chunk depth hops deep: with pace measured, the grace for
// that depth and a quarter more (SlowBackoff against HedgeGrace), so that
// the chunks in flight move through the site before the slow sibling is
// given new ones; else SlowBackoff.
func SlowBackoffFor(pace Pace, depth int) time.Duration {
	if !pace.Measured() {
		return SlowBackoff
	}
	return HedgeGraceFor(pace, depth) * 5 / 4
}

// blob returns id's state, made if new, used at now.
func (d *Distributor) blob(now time.Time, id cid.Cid) *blobDist {
	b := d.blobs[id]
	if b == nil {
		b = &blobDist{chunks: map[uint32]*chunkDist{}, failures: map[peer.ID]int{}, fed: map[peer.ID]int{}, slow: map[peer.ID]time.Time{}}
		d.blobs[id] = b
	}
	b.lastUse = now
	return b
}

// chunk returns chunk index's state in b, made if new.
func (b *blobDist) chunk(index uint32) *chunkDist {
	c := b.chunks[index]
	if c == nil {
		c = &chunkDist{}
		b.chunks[index] = c
	}
	return c
}

// Deflection is Deflect's answer to a child's GET_DIRECT: send it to
// Target (a holder with the chunk complete), or, Busy, tell it to ask
// again later; neither: serve it (Decide).
type Deflection struct {
	Target peer.ID
	Busy   bool
}

// Deflect decides a child's deflectable GET_DIRECT a (a.Deflect, fetch
// 1.4.0) before Decide, at now; busy says the relay's port has more than
// its bound to write to its children, and canWait that it can say when to
// ask again (it measured how fast the port drains). The holder a names
// failed is counted against it once per child and chunk (however often
// the child asks again) and is never its target. Only while busy (many
// siblings late at once: serving them would share the port with the first
// copies) and fewer than MaxDeflect of the child's GET_DIRECTs for the
// chunk were deflected: to a holder of its group that has the chunk
// complete (NoteComplete), other than the child and those it named failed,
// not reported slow, the one that fed the fewest siblings of the blob
// (then the earliest), whatever its fanout and the failures reported
// against it for the blob (a holder named failed for this chunk is no
// holder of it; in a storm every worker is given up on for lateness now
// and then, and with them excluded the emulated grid's 2 x 32 redirected
// none of 1,836 GET_DIRECTs), which then feeds the child (the child is a
// holder one hop below it); else, canWait, Busy. Otherwise (the zero Deflection) the
// chunk is served, as in 1.3.0: the caller then calls Decide with
// a.Failed cleared (counted here). (Deflected while the port is idle too,
// a child whose sibling was stuck was sent to another holder that might be
// stuck as well, a give-up's time each: the stuck-sibling tests took up
// to 3.7 s against 1.1-2.5 s.)
func (d *Distributor) Deflect(now time.Time, a Ask, busy, canWait bool) Deflection {
	b := d.blob(now, a.Blob)
	c := b.chunk(a.Index)
	rec := c.deflects[a.Child]
	if rec == nil {
		if len(c.deflects) >= maxHolders {
			if a.Failed != "" {
				b.failures[a.Failed]++
				c.remove(a.Failed)
			}
			return Deflection{} // bounded: served
		}
		if c.deflects == nil {
			c.deflects = map[peer.ID]*deflectRec{}
		}
		rec = &deflectRec{}
		c.deflects[a.Child] = rec
	}
	if a.Failed != "" && !slices.Contains(rec.avoid, a.Failed) {
		rec.avoid = append(rec.avoid, a.Failed)
		b.failures[a.Failed]++
		c.remove(a.Failed)
	}
	if !busy || rec.n >= d.cfg.MaxDeflect {
		return Deflection{}
	}
	best := -1
	for i := range c.holders {
		h := &c.holders[i]
		if !h.complete || h.group != a.Group || h.peer == a.Child || slices.Contains(rec.avoid, h.peer) ||
			now.Before(b.slow[h.peer]) {
			continue
		}
		if best < 0 || b.fed[h.peer] < b.fed[c.holders[best].peer] {
			best = i
		}
	}
	if best >= 0 {
		h := &c.holders[best]
		h.fed++
		b.fed[h.peer]++
		t, depth := h.peer, h.depth+1
		rec.n++
		if i := c.find(a.Child); i >= 0 {
			c.holders[i].depth, c.holders[i].complete = depth, false
		} else {
			c.holders = append(c.holders, holderRef{peer: a.Child, group: a.Group, depth: depth})
			c.trim(d.cfg.Fanout)
		}
		return Deflection{Target: t}
	}
	if canWait {
		rec.n++
		return Deflection{Busy: true}
	}
	return Deflection{}
}

// NoteComplete records at now that the relay wrote the whole of chunk
// index of blob id to child p (of group) and p's stream took its last
// byte: p holds the chunk complete, a target for deflected GET_DIRECTs
// (Deflect) until it leaves (DropPeer), is reported failed by a child
// sent to it, or asks for the chunk again (it lost it).
func (d *Distributor) NoteComplete(now time.Time, id cid.Cid, index uint32, p peer.ID, group string) {
	b := d.blob(now, id)
	c := b.chunk(index)
	if i := c.find(p); i >= 0 {
		c.holders[i].complete = true
		return
	}
	c.holders = append(c.holders, holderRef{peer: p, group: group, depth: 1, complete: true})
	c.trim(d.cfg.Fanout)
}

// Decide answers a child's request a at now: the sibling to redirect the
// child to, or "" for the relay to send the chunk itself. Either way the
// child becomes a holder of the chunk. A sibling a names slow is a target
// of last resort for SlowBackoffFor(pace, the chunk's depth). A target
// that turns out to be gone is reported with Redecide.
func (d *Distributor) Decide(now time.Time, a Ask, pace Pace) peer.ID {
	index, child, group, direct, failed := a.Index, a.Child, a.Group, a.Direct, a.Failed
	b := d.blob(now, a.Blob)
	c := b.chunk(index)
	if failed != "" {
		b.failures[failed]++
		c.remove(failed)
	}
	if a.Slow != "" {
		b.slow[a.Slow] = now.Add(SlowBackoffFor(pace, c.depth()))
	}
	if i := c.find(child); i >= 0 {
		// A holder asks again: it lost the chunk (or never got it). It
		// is no holder any more, and it is served directly.
		c.remove(child)
		direct = true
	}
	target, depth := peer.ID(""), 1
	if !direct && c.direct >= d.cfg.Direct {
		// Among the holders with room for this chunk, one not reported
		// slow, else a slow one (the relay serving the child itself
		// would load the port the exchange spares, and when every holder
		// is slow the whole site is); then one fewer than MaxDepth hops
		// from the relay, else the shallowest; of those, the one that has
		// fed the fewest siblings of this blob (a worker feeds about one
		// sibling per chunk, half its port with a LAN twice as fast as
		// the WAN), the earliest on a tie. Short of MaxDepth the trees are
		// chains; past it they branch at every level above it, so that no
		// copy is more than MaxDepth hops from the relay however many ask.
		rank := func(h *holderRef) int32 {
			if int(h.depth) < d.cfg.MaxDepth {
				return 0
			}
			return h.depth
		}
		best, bestSlow := -1, false
		for i := range c.holders {
			h := &c.holders[i]
			if h.group != group || int(h.fed) >= d.cfg.Fanout || b.failures[h.peer] >= d.cfg.MaxFailures {
				continue
			}
			slow := now.Before(b.slow[h.peer])
			if best >= 0 {
				bh := &c.holders[best]
				if slow != bestSlow {
					if slow {
						continue
					}
				} else if rank(h) != rank(bh) {
					if rank(h) > rank(bh) {
						continue
					}
				} else if b.fed[h.peer] >= b.fed[bh.peer] {
					continue
				}
			}
			best, bestSlow = i, slow
		}
		if best >= 0 {
			h := &c.holders[best]
			h.fed++
			b.fed[h.peer]++
			target, depth = h.peer, int(h.depth)+1
		}
	}
	if target == "" {
		c.direct++
	}
	c.holders = append(c.holders, holderRef{peer: child, group: group, depth: int32(depth)})
	c.trim(d.cfg.Fanout)
	return target
}

// trim keeps c's holders within maxHolders: it forgets a holder that has
// no room left (the oldest), else the deepest (the newest of them), so
// that the state of a chunk stays bounded however many ask, and the
// holders nearest the relay, which the next askers are sent to, are kept.
func (c *chunkDist) trim(fanout int) {
	if len(c.holders) <= maxHolders {
		return
	}
	drop := -1
	for i, h := range c.holders {
		if int(h.fed) >= fanout {
			drop = i
			break
		}
	}
	if drop < 0 {
		drop = 0
		for i, h := range c.holders {
			if h.depth >= c.holders[drop].depth {
				drop = i
			}
		}
	}
	c.holders = append(c.holders[:drop], c.holders[drop+1:]...)
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
	return d.Decide(now, a, Pace{})
}

// maxHolders bounds the holders a Distributor remembers per chunk: about
// 48 bytes each, 12 KiB per chunk at most (12 MiB for a 1 GiB blob of 1
// MiB chunks asked for by a site of 256 workers or more, forgotten Idle
// after its last request). Holders with no room are forgotten first, so
// the holders remembered are those the next askers can be sent to
// (TestDistributorShallowTrees: 2,000 askers, no copy deeper than
// MaxDepth).
const maxHolders = 256

func (c *chunkDist) find(p peer.ID) int {
	for i, h := range c.holders {
		if h.peer == p {
			return i
		}
	}
	return -1
}

// depth is the depth of the chunk's fanout tree: the most hops from the
// relay of any holder (1 with none).
func (c *chunkDist) depth() int {
	n := 1
	for _, h := range c.holders {
		n = max(n, int(h.depth))
	}
	return n
}

func (c *chunkDist) remove(p peer.ID) {
	if i := c.find(p); i >= 0 {
		c.holders = append(c.holders[:i], c.holders[i+1:]...)
	}
}

// NoteSlow records that a child found sibling p slow for chunk index of
// blob id (it hedged): for SlowBackoffFor(pace, the chunk's depth), p is a
// redirect target only when every other holder with room is slow too.
func (d *Distributor) NoteSlow(now time.Time, id cid.Cid, index uint32, p peer.ID, pace Pace) {
	if b := d.blobs[id]; b != nil {
		depth := 1
		if c := b.chunks[index]; c != nil {
			depth = c.depth()
		}
		b.slow[p] = now.Add(SlowBackoffFor(pace, depth))
	}
}

// HedgeGrace is how long after a relay first sent a chunk into a site it
// declines hedges for it (GET_DIRECT if-present) while the site's pace is
// not measured (with it, HedgeGraceFor): the chunk is then still moving
// from sibling to sibling, and the child's sibling has it or gets it soon.
// A copy from the relay would only load the port the exchange spares; when
// every child's sibling is behind, such copies are most of what the port
// carries. A child whose sibling is stuck hedges again later.
const HedgeGrace = 4 * time.Second

// NoteSent records that the relay has chunk index of blob id to send to a
// child now (the first time counts) and reports whether it was the first:
// the chunk's first copy into the site.
func (d *Distributor) NoteSent(now time.Time, id cid.Cid, index uint32) bool {
	if b := d.blobs[id]; b != nil {
		if c := b.chunks[index]; c != nil && c.sent.IsZero() {
			c.sent = now
			return true
		}
	}
	return false
}

// HedgeWait reports how much longer asker's hedge for chunk index of blob
// id is declined (0: serve it if the chunk is here): until
// HedgeGraceFor(pace, the asker's depth in the chunk's fanout tree, or the
// tree's depth for an asker that holds no place in it) after the relay
// first sent the chunk into the site. Chunks the relay never sent into the
// site (held from before, or not here yet) are not declined.
func (d *Distributor) HedgeWait(now time.Time, id cid.Cid, index uint32, asker peer.ID, pace Pace) time.Duration {
	b := d.blobs[id]
	if b == nil {
		return 0
	}
	c := b.chunks[index]
	if c == nil || c.sent.IsZero() {
		return 0
	}
	depth := c.depth()
	if i := c.find(asker); i >= 0 {
		depth = int(c.holders[i].depth)
	}
	return max(c.sent.Add(HedgeGraceFor(pace, depth)).Sub(now), 0)
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
			delete(c.deflects, p)
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
