package sim

import (
	"math"
	"testing"
)

// testNet drives a network alone: flows started by hand, events run to
// the end.
type testNet struct {
	q   queue
	now float64
	n   network
}

func newTestNet() *testNet {
	tn := &testNet{}
	tn.n.q, tn.n.clock = &tn.q, &tn.now
	return tn
}

func (tn *testNet) run() {
	for e := tn.q.next(); e != nil; e = tn.q.next() {
		tn.now = e.at
		e.h.fire()
	}
}

// hop is a flow whose end is recorded; then runs when it was sent, first
// when its first piece was.
type hop struct {
	tn          *testNet
	f           flow
	sentAt      float64
	then, first func()
}

func (h *hop) flowSent(*flow)   { h.sentAt = h.tn.now; h.f.net.release(&h.f); runIf(h.then) }
func (h *hop) firstPiece(*flow) { runIf(h.first) }

func runIf(f func()) {
	if f != nil {
		f()
	}
}

func (tn *testNet) flow(size float64, g *flowGroup, res ...*resource) *hop {
	h := &hop{tn: tn}
	h.f.size, h.f.group, h.f.owner = size, g, h
	h.f.nres = copy(h.f.res[:], res)
	return h
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %.9g, want %.9g", what, got, want)
	}
}

// TestOneFlow: a flow alone takes size / capacity.
func TestOneFlow(t *testing.T) {
	tn := newTestNet()
	r := newResource("port", 100)
	h := tn.flow(1000, &flowGroup{}, r)
	tn.n.start(&h.f)
	tn.run()
	near(t, "sent at", h.sentAt, 10)
}

// TestFairShare: two connections on one port share it; when one is done,
// the other takes all of it.
func TestFairShare(t *testing.T) {
	tn := newTestNet()
	r := newResource("port", 100)
	a := tn.flow(100, &flowGroup{}, r)
	b := tn.flow(300, &flowGroup{}, r)
	tn.n.start(&a.f)
	tn.n.start(&b.f)
	near(t, "a's rate", a.f.rate, 50)
	tn.run()
	near(t, "a sent at", a.sentAt, 2)
	near(t, "b sent at", b.sentAt, 4) // 100 by 2 s, then 200 at 100
}

// TestMaxMinLeftover: a flow limited at its other port leaves the rest
// of a shared port to the other flow (max-min, not an equal split).
func TestMaxMinLeftover(t *testing.T) {
	tn := newTestNet()
	down := newResource("down", 100)
	slowUp := newResource("slow up", 20)
	fastUp := newResource("fast up", 1000)
	a := tn.flow(20, &flowGroup{}, slowUp, down)
	b := tn.flow(80, &flowGroup{}, fastUp, down)
	tn.n.start(&a.f)
	tn.n.start(&b.f)
	near(t, "a's rate", a.f.rate, 20)
	near(t, "b's rate", b.f.rate, 80)
	tn.run()
	near(t, "a sent at", a.sentAt, 1)
	near(t, "b sent at", b.sentAt, 1)
}

// TestConnectionShare: streams of one connection split its share; the
// port is shared per connection.
func TestConnectionShare(t *testing.T) {
	tn := newTestNet()
	r := newResource("port", 120)
	g1, g2 := &flowGroup{}, &flowGroup{}
	a, b, c := tn.flow(1e6, g1, r), tn.flow(1e6, g1, r), tn.flow(1e6, g2, r)
	for _, h := range []*hop{a, b, c} {
		tn.n.start(&h.f)
	}
	near(t, "stream a", a.f.rate, 30)
	near(t, "stream b", b.f.rate, 30)
	near(t, "the other connection", c.f.rate, 60)
}

// chain builds hops 0..n-1 from host k to host k+1, each on the sender's
// uplink and the receiver's downlink with the given rates; hop k+1
// forwards hop k's bytes, starting once its first piece is in (piece ==
// size: once it is whole, store and forward). It returns when the last
// hop was sent.
func chain(t *testing.T, size, piece float64, rates []float64) float64 {
	t.Helper()
	tn := newTestNet()
	hops := make([]*hop, len(rates))
	for k, rate := range rates {
		up := newResource("up", rate)
		down := newResource("down", 1e18)
		hops[k] = tn.flow(size, &flowGroup{}, up, down)
	}
	for k := 0; k+1 < len(hops); k++ {
		cur, next := hops[k], hops[k+1]
		if piece < size {
			cur.first = func() {
				next.f.up, next.f.lag = &cur.f, piece
				tn.n.start(&next.f)
				if next != hops[len(hops)-1] {
					tn.n.waitFirstPiece(&next.f, next, piece)
				}
			}
		} else {
			cur.then = func() { tn.n.start(&next.f) }
		}
	}
	tn.n.start(&hops[0].f)
	if piece < size && len(hops) > 1 {
		tn.n.waitFirstPiece(&hops[0].f, hops[0], piece)
	}
	tn.run()
	for k, h := range hops {
		if !h.f.sent {
			t.Fatalf("hop %d never sent", k)
		}
	}
	return hops[len(hops)-1].sentAt
}

// TestChainClosedForm: a chain of N hops at rate B forwarding pieces of p
// bytes takes S/B + (N-1)·p/B (a pipelined chain); whole chunks, N·S/B
// (store and forward). A slow first hop sets the pace of a fast second
// one, which catches up and follows it; a slow second hop simply lags.
func TestChainClosedForm(t *testing.T) {
	const S, p, B = 1 << 20, 16 << 10, 1e6
	for _, n := range []int{1, 2, 5, 10} {
		rates := make([]float64, n)
		for i := range rates {
			rates[i] = B
		}
		near(t, "pipelined chain", chain(t, S, p, rates), S/B+float64(n-1)*p/B)
		near(t, "store-and-forward chain", chain(t, S, S, rates), float64(n)*S/B)
	}
	// Slow first hop (B/2), fast second (B): the second starts after a
	// piece, catches up at once and follows at B/2; once the first is
	// sent the last piece goes at B.
	near(t, "slow then fast", chain(t, S, p, []float64{B / 2, B}), S/(B/2)+p/B)
	// Fast first hop, slow second: the second starts after a piece at B
	// and runs at B/2 throughout.
	near(t, "fast then slow", chain(t, S, p, []float64{B, B / 2}), p/B+S/(B/2))
}
