package sim

import "math"

// This file holds the link model: flows of bytes over resources (one
// direction of a host's port or of a WAN link). Each resource's capacity
// is shared max-min fairly among the connections sending over it, as TCP
// shares a bottleneck per connection, and a connection's share among its
// streams that are writing (a libp2p connection multiplexes its streams):
// a flow limited elsewhere (by its other port, or by its feeder) leaves
// what it cannot use to the others. A flow may be fed by another (its
// sender is still receiving what it forwards): it then stays lag bytes (a
// piece) behind its feeder, and runs at most at the feeder's rate once it
// has caught up.
//
// Bytes are a fluid: a flow's progress is linear between rate changes, and
// an event is scheduled only where something changes (a flow is sent, a
// flow catches up with its feeder, a flow's first piece is in), so that a
// piece size adds no events per piece.
//
// The allocation is computed by relaxation, and only near a change: a
// resource's level (its share per unit of weight) is the water level at
// which the flows not limited below it fill its capacity, given the other
// resources' levels and the feeders' rates. A flow starting or ending
// queues its resources; when a flow's rate changes by more than relEps,
// its other resources are computed again, up to maxDepth resources away
// from the change (each at most maxVisits times), and the flows it feeds
// that caught up with it follow it down the whole feed tree. Feeds and
// the ports they share make cycles of influence (a flow gives up a share
// that another takes, which feeds a flow that ...) through which a change
// can circle without fading, and at a thousand workers a change reaches
// most of a site: relaxing to the end took minutes per run. Past the bound
// the levels stand until the next change nearby, which at these scales
// comes within milliseconds. Measured against relaxing to the end
// (maxDepth 8): within 1.5% up to 256 workers per site, 1.3% at 1,000
// (TestRelaxationDepth); a port may carry about as much over its capacity
// meanwhile.

// maxRes bounds the resources one flow crosses: its sender's uplink and
// its receiver's downlink, or a WAN link and its connection's congestion
// window.
const maxRes = 2

// resource is one direction of a link or a port: what the flows crossing
// it share.
type resource struct {
	name   string
	cap    float64 // bytes per second
	level  float64 // share per unit of weight; +Inf when no flow is limited here
	flows  []*flow
	queued bool // in the network's work list
	epoch  uint64
	visits int // computations in the relaxation of epoch
	depth  int // how many resources away from the change it was queued
}

func newResource(name string, bytesPerSecond float64) *resource {
	return &resource{name: name, cap: bytesPerSecond, level: math.Inf(1)}
}

// flowGroup is a connection: its flows (one per stream writing) split
// the connection's share.
type flowGroup struct{ n int }

// flowOwner is told when all of a flow's bytes have left its sender.
type flowOwner interface{ flowSent(f *flow) }

// pieceWaiter is told when a flow's first piece (thresh bytes) has been
// sent.
type pieceWaiter interface{ firstPiece(f *flow) }

// flow is one reply's bytes on their way from a sender to a receiver.
type flow struct {
	ev     event
	net    *network
	res    [maxRes]*resource
	resIdx [maxRes]int // f's index in res[i].flows
	nres   int
	group  *flowGroup
	owner  flowOwner

	size float64 // bytes
	x, t float64 // bytes sent as of time t
	rate float64 // bytes per second

	// up feeds this flow: its sender forwards up's bytes as they arrive,
	// staying lag bytes behind (nil: every byte is there). capped: f has
	// caught up and runs at most at up's rate.
	up     *flow
	lag    float64
	capped bool
	downs  []*flow // the flows this one feeds

	// waiter is told when x reaches thresh.
	waiter pieceWaiter
	thresh float64

	active bool // crossing its resources
	sent   bool
	stamp  uint64 // 1 while queued for planning
}

// network holds the resources and flows of one simulation.
type network struct {
	q       *queue
	clock   *float64    // the simulation's time
	work    []*resource // resources to compute again
	dirty   []*flow     // flows whose next event is to be planned again
	stamp   uint64
	scratch []share
	// truncated counts the resources not computed again because they
	// were maxDepth resources away from a change, or computed maxVisits
	// times already, in one relaxation.
	truncated int64
	maxDepth  int // 0: the constant maxDepth (tests compare others)
}

type share struct{ ratio, w, b float64 }

// maxDepth and maxVisits bound a relaxation (see above); relEps is the
// relative change of a rate it passes on.
const (
	maxDepth  = 2
	maxVisits = 2
	relEps    = 1e-2
	// uncapSlack: a flow that caught up with its feeder falls behind it
	// only when its shares are this much below the feeder's rate (so
	// that the relaxation's leftovers do not make it fall behind and
	// catch up again at every change).
	uncapSlack = 0.02
)

// byteEps is the tolerance, in bytes, of the fluid's comparisons.
const byteEps = 1e-3

func (n *network) now() float64 { return *n.clock }

// depthBound is maxDepth, unless a test set maxDepth on n.
func (n *network) depthBound() int {
	if n.maxDepth > 0 {
		return n.maxDepth
	}
	return maxDepth
}

// xAt returns the bytes f has sent by time t (t at or after f.t).
func (f *flow) xAt(t float64) float64 {
	return math.Min(f.x+f.rate*(t-f.t), f.size)
}

// avail is how far f may have sent by now: lag behind its feeder's bytes.
func (f *flow) avail(now float64) float64 {
	if f.up == nil {
		return f.size
	}
	return math.Max(f.up.xAt(now)-f.lag, 0)
}

func (n *network) advance(f *flow) {
	now := n.now()
	if f.active {
		f.x = math.Min(f.x+f.rate*(now-f.t), f.size)
		if f.up != nil {
			f.x = math.Min(f.x, f.avail(now))
		}
	}
	f.t = now
}

// start puts f (its resources, group, owner, size, feeder and lag set) on
// its resources from now.
func (n *network) start(f *flow) {
	f.net = n
	f.ev.h = f
	f.t, f.x, f.rate = n.now(), 0, 0
	f.active = true
	for i := 0; i < f.nres; i++ {
		r := f.res[i]
		f.resIdx[i] = len(r.flows)
		r.flows = append(r.flows, f)
	}
	f.group.n++
	if f.up != nil {
		f.up.downs = append(f.up.downs, f)
		f.capped = f.avail(n.now()) <= byteEps
	}
	n.touch(f)
	n.update()
}

// touch queues f's resources (their flows' weights or bounds changed) and
// marks f for planning.
func (n *network) touch(f *flow) {
	for i := 0; i < f.nres; i++ {
		n.enqueue(f.res[i])
	}
	n.mark(f)
}

func (n *network) enqueue(r *resource) { n.enqueueAt(r, 0) }

// enqueueAt queues r to be computed again, depth resources away from a
// change; past maxDepth a change is not passed on (in this relaxation).
func (n *network) enqueueAt(r *resource, depth int) {
	if depth > n.depthBound() {
		n.truncated++
		return
	}
	if r.epoch != n.stamp {
		r.epoch, r.visits = n.stamp, 0
	}
	if r.queued {
		r.depth = min(r.depth, depth)
		return
	}
	if r.visits >= maxVisits {
		n.truncated++
		return
	}
	r.queued, r.depth = true, depth
	n.work = append(n.work, r)
}

// mark queues f for planning.
func (n *network) mark(f *flow) {
	if f.stamp == 0 {
		f.stamp = 1
		n.dirty = append(n.dirty, f)
	}
}

// remove takes f off its resources.
func (n *network) remove(f *flow) {
	for i := 0; i < f.nres; i++ {
		r := f.res[i]
		j := f.resIdx[i]
		last := r.flows[len(r.flows)-1]
		r.flows[j] = last
		for k := 0; k < last.nres; k++ {
			if last.res[k] == r {
				last.resIdx[k] = j
			}
		}
		r.flows[len(r.flows)-1] = nil
		r.flows = r.flows[:len(r.flows)-1]
		if len(r.flows) == 0 {
			r.level = math.Inf(1)
		}
	}
	f.group.n--
	f.active = false
	n.touch(f)
}

// release tells the flows u feeds that all of u's bytes are in at their
// sender: they are fed no more.
func (n *network) release(u *flow) {
	for _, d := range u.downs {
		n.advance(d)
		d.up, d.capped = nil, false
		n.touch(d)
	}
	u.downs = nil
	n.update()
}

// bound is the most f may get at resource r: its feeder's rate once it
// has caught up, and its share at its other resources.
func (f *flow) bound(r *resource, w float64) float64 {
	b := math.Inf(1)
	if f.up != nil && f.capped {
		b = f.up.rate
	}
	for i := 0; i < f.nres; i++ {
		if o := f.res[i]; o != r && !math.IsInf(o.level, 1) {
			b = math.Min(b, w*o.level)
		}
	}
	return b
}

// waterLevel computes r's level: the share per unit of weight at which
// the flows not limited below it fill r's capacity. It takes out the
// flows limited below the level as it stands, until none is (each pass
// raises the level; no sorting: most resources carry a few flows).
func (n *network) waterLevel(r *resource) float64 {
	s := n.scratch[:0]
	ws := 0.0
	for _, f := range r.flows {
		w := 1 / float64(f.group.n)
		b := f.bound(r, w)
		s = append(s, share{ratio: b / w, w: w, b: b})
		ws += w
	}
	n.scratch = s
	rem := r.cap
	for ws > 1e-12 {
		level := rem / ws
		k := 0
		for _, e := range s {
			if e.ratio < level {
				rem -= e.b
				ws -= e.w
			} else {
				s[k] = e
				k++
			}
		}
		if k == len(s) {
			return level
		}
		s = s[:k]
	}
	return math.Inf(1)
}

// rateOf is f's rate under the current levels.
func (f *flow) rateOf() float64 {
	if !f.active {
		return 0
	}
	r := math.Inf(1)
	if f.up != nil && f.capped {
		r = f.up.rate
	}
	w := 1 / float64(f.group.n)
	for i := 0; i < f.nres; i++ {
		if l := f.res[i].level; !math.IsInf(l, 1) {
			r = math.Min(r, w*l)
		}
	}
	if math.IsInf(r, 1) {
		return 0 // unreachable: a flow is limited at one of its resources
	}
	return r
}

// changed reports whether rate b differs from a by more than relEps.
func changed(a, b float64) bool {
	return math.Abs(a-b) > relEps*math.Max(math.Abs(a), math.Abs(b))+1e-6
}

// setRate gives f rate r from now: its resources other than from (whose
// level set it) are computed again, one resource further from the change
// (depth); the flows it feeds follow it if they caught up with it.
func (n *network) setRate(f *flow, r float64, from *resource, depth int) {
	n.advance(f)
	f.rate = r
	n.mark(f)
	for i := 0; i < f.nres; i++ {
		if f.res[i] != from {
			n.enqueueAt(f.res[i], depth+1)
		}
	}
	for _, d := range f.downs {
		n.mark(d)
		if d.capped && d.active {
			if nr := d.rateOf(); changed(nr, d.rate) {
				n.setRate(d, nr, nil, depth)
			}
		}
	}
}

// update relaxes the queued resources, then plans the next event of every
// flow whose rate or feeder changed; a flow found caught up with its
// feeder, or limited below it, changes state and is relaxed again (a few
// rounds at most).
func (n *network) update() {
	for round := 0; round < 4 && (len(n.work) > 0 || len(n.dirty) > 0); round++ {
		n.stamp++
		for len(n.work) > 0 {
			r := n.work[0]
			n.work[0] = nil
			n.work = n.work[1:]
			r.queued = false
			if r.epoch != n.stamp {
				r.epoch, r.visits = n.stamp, 0
			}
			r.visits++
			r.level = n.waterLevel(r)
			for _, f := range r.flows {
				switch nr := f.rateOf(); {
				case changed(nr, f.rate):
					n.setRate(f, nr, r, r.depth)
				case nr != f.rate:
					// Too small a change to pass on, not to take.
					n.advance(f)
					f.rate = nr
					n.mark(f)
				}
			}
		}
		n.work = n.work[:0]
		dirty := n.dirty
		n.dirty = nil
		for _, f := range dirty {
			f.stamp = 0
		}
		for _, f := range dirty {
			n.plan(f)
		}
		if n.dirty == nil {
			n.dirty = dirty[:0]
		}
	}
}

// plan schedules f's next event: all sent, caught up with its feeder, or
// its first piece sent.
func (n *network) plan(f *flow) {
	if !f.active {
		n.q.cancel(&f.ev)
		return
	}
	n.advance(f)
	now := n.now()
	if f.up != nil {
		switch {
		case f.capped && f.rate < f.up.rate*(1-uncapSlack):
			// Its shares are below its feeder's rate: it falls behind
			// (and may catch up again later).
			f.capped = false
		case !f.capped && f.rate > f.up.rate && f.avail(now)-f.x <= byteEps:
			// Caught up: it runs at its feeder's rate from now.
			f.capped = true
			n.touch(f)
			return
		}
	}
	next := math.Inf(1)
	switch {
	case f.up == nil:
		if f.rate > 0 {
			next = now + math.Max(f.size-f.x, 0)/f.rate
		}
	case !f.capped:
		if ur := f.up.rate; f.rate > ur {
			next = now + math.Max(f.avail(now)-f.x, 0)/(f.rate-ur)
		}
	}
	if f.waiter != nil && f.rate > 0 {
		next = math.Min(next, now+math.Max(f.thresh-f.x, 0)/f.rate)
	}
	if math.IsInf(next, 1) {
		n.q.cancel(&f.ev)
		return
	}
	n.q.schedule(&f.ev, next)
}

// fire applies what happened to f at its event's time.
func (f *flow) fire() {
	n := f.net
	n.advance(f)
	now := n.now()
	if f.waiter != nil && f.x >= f.thresh-byteEps {
		w := f.waiter
		f.waiter = nil
		defer w.firstPiece(f)
	}
	switch {
	case f.up == nil && f.x >= f.size-byteEps:
		f.x = f.size
		n.remove(f)
		f.sent = true
		f.rate = 0
		for _, d := range f.downs {
			n.mark(d)
			if d.capped && d.active {
				n.touch(d)
			}
		}
		n.update()
		f.owner.flowSent(f)
		return
	case f.up != nil && !f.capped && f.x >= f.avail(now)-byteEps:
		f.x = f.avail(now)
		f.capped = true
		n.touch(f)
	}
	n.mark(f)
	n.update()
}

// setCap changes r's capacity from now.
func (n *network) setCap(r *resource, bytesPerSecond float64) {
	r.cap = bytesPerSecond
	n.enqueue(r)
	n.update()
}

// waitFirstPiece asks f to tell w when thresh of its bytes have been sent
// (at once, in f's next event, if they have).
func (n *network) waitFirstPiece(f *flow, w pieceWaiter, thresh float64) {
	f.waiter, f.thresh = w, thresh
	n.mark(f)
	n.update()
}
