package peerrate

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

const mib = 1 << 20

var t0 = time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)

// near reports whether got is within 2% of want.
func near(got, want float64) bool { return math.Abs(got-want) <= 0.02*math.Abs(want) }

// Replies one at a time: the rate is the bytes over the time from the
// request to the last byte, less a round trip.
func TestSequentialReplies(t *testing.T) {
	tb := New()
	now := t0
	for range 4 {
		r := tb.Sent(now, "p")
		tb.Answered(now.Add(time.Millisecond), r)
		now = now.Add(10 * time.Millisecond)
	}
	for range 8 {
		r := tb.Sent(now, "p")
		tb.Replied(now.Add(21*time.Millisecond), r, mib) // 1 ms round trip, 20 ms of bytes
		now = now.Add(time.Second)
	}
	f := tb.Peer("p")
	if f.RTT != time.Millisecond || !near(f.Rate, mib/0.020) || f.Outstanding != 0 {
		t.Fatalf("figures %+v, want rtt 1ms, %.0f B/s, none outstanding", f, mib/0.020)
	}
	own, site := tb.Expect("p", mib)
	if own.From != Peer || site.From != None {
		t.Fatalf("from %v and %v, want peer and none (no other peer measured)", own.From, site.From)
	}
	if d := own.Time - 21*time.Millisecond; d < -100*time.Microsecond || d > 100*time.Microsecond {
		t.Fatalf("a 1 MiB reply expected in %v, want 21ms", own.Time)
	}
	// Half the size, half the bytes' time.
	if half, _ := tb.Expect("p", mib/2); half.Time > own.Time/2+time.Millisecond {
		t.Fatalf("512 KiB expected in %v against %v for 1 MiB", half.Time, own.Time)
	}
	// Size 0: the size of the chunks measured lately.
	if typ, _ := tb.Expect("p", 0); typ.Time != own.Time {
		t.Fatalf("size 0 expected in %v, want %v (1 MiB)", typ.Time, own.Time)
	}
}

// Requests that overlap: each reply counts from the last one's last byte,
// so that four requests queued at once measure the peer's rate, not a
// quarter of it; and a request behind others is expected after them.
func TestOverlappingReplies(t *testing.T) {
	tb := New()
	now := t0
	for range 4 {
		var rs []Pending
		for range 4 {
			rs = append(rs, tb.Sent(now, "p"))
		}
		for i, r := range rs {
			tb.Replied(now.Add(time.Duration(i+1)*20*time.Millisecond), r, mib)
		}
		now = now.Add(time.Second)
	}
	if f := tb.Peer("p"); !near(f.Rate, mib/0.020) {
		t.Fatalf("rate %.0f B/s, want %.0f", f.Rate, mib/0.020)
	}
	tb.Sent(now, "p")
	tb.Sent(now, "p")
	own, _ := tb.Expect("p", mib)
	if own.Ahead != 2 || own.Time < 59*time.Millisecond || own.Time > 61*time.Millisecond {
		t.Fatalf("behind two requests: %+v, want 2 ahead and 60ms", own)
	}
}

// A peer never measured gets the site's figures, the medians of the
// measured peers': one slow peer does not move them, and a peer's own
// figures are not among those the site's pace gives it. Nothing measured:
// From None.
func TestSitePrior(t *testing.T) {
	tb := New()
	if own, site := tb.Expect("x", mib); own.From != None || site.From != None {
		t.Fatalf("nothing measured: from %v, %v", own.From, site.From)
	}
	feed := func(p peer.ID, took time.Duration) {
		now := t0
		for range 8 {
			r := tb.Sent(now, p)
			tb.Replied(now.Add(took), r, mib)
			now = now.Add(time.Second)
		}
	}
	feed("a", 20*time.Millisecond)
	feed("b", 20*time.Millisecond)
	feed("slow", 2*time.Second)
	own, site := tb.Expect("new", mib)
	if own.From != Site || own != site {
		t.Fatalf("a new peer: %+v, want the site's %+v", own, site)
	}
	if site.Time < 19*time.Millisecond || site.Time > 21*time.Millisecond {
		t.Fatalf("site expects 1 MiB in %v, want 20ms (the slow peer is not the median)", site.Time)
	}
	slow, bySite := tb.Expect("slow", mib)
	if slow.Time < time.Second || bySite.Time > 21*time.Millisecond {
		t.Fatalf("the slow peer: its own expectation %v, the site's %v (want 2s and 20ms)", slow.Time, bySite.Time)
	}
	if a, bySite := tb.Expect("a", mib); bySite.Time > 21*time.Millisecond || a.Time > 21*time.Millisecond {
		t.Fatalf("a: its own expectation %v, the site's %v (want 20ms: b's, the lower median of b's and slow's)", a.Time, bySite.Time)
	}
}

// The deviation grows with unsteady replies and shrinks with steady ones.
func TestDeviation(t *testing.T) {
	tb := New()
	now := t0
	for i := range 16 {
		took := 10 * time.Millisecond
		if i%2 == 1 {
			took = 70 * time.Millisecond
		}
		r := tb.Sent(now, "unsteady")
		tb.Replied(now.Add(took), r, mib)
		r = tb.Sent(now, "steady")
		tb.Replied(now.Add(40*time.Millisecond), r, mib)
		now = now.Add(time.Second)
	}
	u, s := tb.Peer("unsteady"), tb.Peer("steady")
	if u.Dev < 20*time.Millisecond || s.Dev > 2*time.Millisecond {
		t.Fatalf("deviations: unsteady %v, steady %v", u.Dev, s.Dev)
	}
}

// Ends without a measure, and bad input: counts stay right, nothing is
// folded, nothing panics.
func TestLostAndBadInput(t *testing.T) {
	tb := New()
	r := tb.Sent(t0, "p")
	tb.Lost(r)
	if f := tb.Peer("p"); f.Outstanding != 0 || f.Rate != 0 {
		t.Fatalf("after a lost request: %+v", f)
	}
	if (Pending{}).Started() || !r.Started() {
		t.Fatal("Started: wrong for the zero Pending or a request sent")
	}
	tb.Lost(Pending{})             // the zero Pending ends nothing
	tb.Replied(t0, Pending{}, mib) // nor this
	r = tb.Sent(t0, "p")
	tb.Replied(t0.Add(-time.Second), r, mib) // a reply before its request: ignored
	r = tb.Sent(t0, "p")
	tb.Replied(t0.Add(time.Second), r, 0) // an empty reply: no rate
	r = tb.Sent(t0, "p")
	tb.Replied(t0, r, mib) // no time at all: no rate
	if f := tb.Peer("p"); f.Outstanding != 0 || f.Rate != 0 {
		t.Fatalf("after bad samples: %+v", f)
	}
	// Samples are clipped: an hour for a byte is at most maxPerByte.
	r = tb.Sent(t0, "q")
	tb.Replied(t0.Add(time.Hour), r, 1)
	if f := tb.Peer("q"); f.Rate < 1e9/maxPerByte*0.99 {
		t.Fatalf("rate %v under the floor", f.Rate)
	}
}

// At most maxPeers idle peers are remembered; one with a request
// outstanding is never forgotten.
func TestBounded(t *testing.T) {
	tb := New()
	busy := tb.Sent(t0, "busy")
	for i := range 3 * maxPeers {
		r := tb.Sent(t0.Add(time.Duration(i+1)*time.Millisecond), peer.ID(fmt.Sprint("p", i)))
		tb.Lost(r)
	}
	if len(tb.peers) > maxPeers {
		t.Fatalf("%d peers remembered, want at most %d", len(tb.peers), maxPeers)
	}
	if tb.Peer("busy").Outstanding != 1 {
		t.Fatal("a peer with a request outstanding was forgotten")
	}
	tb.Lost(busy)
}

// The site's figures read from the sorted cache (siteFigures) are the
// medians of the other peers' figures computed afresh, whichever peer is
// left out, as peers are measured, answer and are evicted.
func TestSiteFiguresMatchMedians(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	tb := New()
	now := time.Unix(0, 0)
	naive := func(except peer.ID) est {
		var srtt, rttvar, dev []time.Duration
		var perByte []float64
		for p, e := range tb.peers {
			if p == except {
				continue
			}
			if e.rtts > 0 {
				srtt, rttvar = append(srtt, e.srtt), append(rttvar, e.rttvar)
			}
			if e.perByte > 0 {
				perByte, dev = append(perByte, e.perByte), append(dev, e.dev)
			}
		}
		return est{srtt: median(srtt), rttvar: median(rttvar), perByte: median(perByte), dev: median(dev), rtts: len(srtt), chunks: len(perByte)}
	}
	for i := range 1500 {
		p := peer.ID(fmt.Sprint("p", rng.IntN(300))) // past maxPeers: evictions
		now = now.Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
		r := tb.Sent(now, p)
		d := time.Duration(rng.IntN(50)+1) * time.Millisecond
		switch rng.IntN(3) {
		case 0:
			tb.Answered(now.Add(d), r)
		case 1:
			tb.Replied(now.Add(d), r, 1<<20)
		default:
			tb.Lost(r)
		}
		for _, q := range []peer.ID{p, peer.ID(fmt.Sprint("p", rng.IntN(300))), "nobody"} {
			got, want := *tb.siteFigures(q), naive(q)
			if got != want {
				t.Fatalf("step %d, without %s: cached %+v, afresh %+v", i, q, got, want)
			}
		}
	}
}

// median returns the lower median of v (zero for none); v is reordered.
func median[T time.Duration | float64](v []T) T {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[(len(v)-1)/2]
}
