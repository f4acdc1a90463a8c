package sim

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/transfer"
	"github.com/omst-project/omst/pkg/tree"
)

// ideal is a grid with no TCP effects: full goodput, no slow start, no
// push, no jitter.
func ideal(c Config) Config {
	c.WANGoodput, c.LANGoodput, c.InitWindow, c.PushBytes = 1, 1, -1, -1
	return c
}

func run(t *testing.T, c Config) Result {
	t.Helper()
	r, err := Run(c)
	if err != nil {
		t.Fatal(err)
	}
	if r.Unfinished > 0 {
		t.Fatalf("%d workers unfinished", r.Unfinished)
	}
	return r
}

// TestOneHopClosedForm: one worker under its head. The WAN is busy from
// the first request's arrival at the root (after the lookup's round trips
// and the request's way there: 3 LAN + 3 WAN latencies) for S/B_wan; the
// last two chunks, one per stream, arrive at the head together and cross
// the LAN side by side (2 C / B_lan), then a LAN latency.
func TestOneHopClosedForm(t *testing.T) {
	const S, C = 8 << 20, 1 << 20
	const bw, bl = 100e6, 1e9
	lw, ll := 10*time.Millisecond, 100*time.Microsecond
	r := run(t, ideal(Config{Sites: 1, Workers: 1, BlobSize: S, ChunkSize: C, WANRate: bw, LANRate: bl, WANLatency: lw, LANLatency: ll}))
	want := 4*ll.Seconds() + 4*lw.Seconds() + S*8/bw + 2*C*8/bl
	if math.Abs(r.Last-want) > 1e-6 {
		t.Fatalf("one hop: %.6f s, want %.6f s", r.Last, want)
	}
	if r.HeadCopies != 1 || r.SiteIn != 1 || r.Redirects != 0 {
		t.Fatalf("head copies %v, site in %v, redirects %d; want 1, 1, 0", r.HeadCopies, r.SiteIn, r.Redirects)
	}
}

// TestWorkerChainClosedForm: N workers asking for a one-chunk blob at the
// same instant, in the same order, are made a chain by the head's
// Distributor with Fanout 1 (the first asker is served, each later one
// sent to the only holder with room: the one before it). Over links
// of one rate B and no latency the last of them has the chunk after
// S/B + N·p/B with pieces of p bytes (N+1 hops: root, head, N-1 workers,
// each forwarding as pieces come), after (N+1)·S/B whole (store and
// forward).
func TestWorkerChainClosedForm(t *testing.T) {
	const S, p, rate = 1 << 20, 16 << 10, 100e6
	const B = rate / 8
	for _, n := range []int{1, 2, 6} {
		c := ideal(Config{Sites: 1, Workers: n, BlobSize: S, ChunkSize: S, WANRate: rate, LANRate: rate, Fanout: 1})
		whole := run(t, c)
		c.PieceSize = p
		pieces := run(t, c)
		if want := float64(n+1) * S / B; math.Abs(whole.Last-want) > 1e-6 {
			t.Errorf("%d workers, whole chunks: %.6f s, want (N+1)·S/B = %.6f s", n, whole.Last, want)
		}
		if want := S/B + float64(n)*p/B; math.Abs(pieces.Last-want) > 1e-6 {
			t.Errorf("%d workers, %d-byte pieces: %.6f s, want S/B + N·p/B = %.6f s", n, p, pieces.Last, want)
		}
		for _, r := range []Result{whole, pieces} {
			if r.HeadCopies != 1 || r.Redirects != int64(n-1) || math.Abs(r.SiblingCopies-float64(n-1)) > 1e-9 {
				t.Errorf("%d workers: head copies %v, redirects %d, sibling copies %v; want 1, %d, %d", n, r.HeadCopies, r.Redirects, r.SiblingCopies, n-1, n-1)
			}
		}
	}
}

// TestSlowSiblingsTimeOut: a chain of whole chunks over a LAN so slow that
// the deep workers wait past the hedge delay and SiblingTimeout: the
// Hedger's timers run on simulated time, the head declines hedges during
// HedgeGrace and serves later ones, the given-up siblings are replaced by
// GET_DIRECTs, and the head's port carries more than one copy.
func TestSlowSiblingsTimeOut(t *testing.T) {
	r := run(t, ideal(Config{Sites: 1, Workers: 6, BlobSize: 1 << 20, ChunkSize: 1 << 20, WANRate: 100e6, LANRate: 2e6}))
	if r.Hedges == 0 || r.HedgesDeclined == 0 || r.HedgesServed == 0 || r.SiblingTimeouts == 0 || r.Directs == 0 || r.HeadCopies <= 1 {
		t.Fatalf("hedges %d (declined %d, served %d), sibling timeouts %d, directs %d, head copies %.2f: want all above 0 (copies above 1)",
			r.Hedges, r.HedgesDeclined, r.HedgesServed, r.SiblingTimeouts, r.Directs, r.HeadCopies)
	}
	t.Logf("last %.1f s; hedges %d (declined %d, served %d), sibling timeouts %d, directs %d, head copies %.2f",
		r.Last, r.Hedges, r.HedgesDeclined, r.HedgesServed, r.SiblingTimeouts, r.Directs, r.HeadCopies)
}

// TestHedgesByBacklog: a site whose LAN is slower than its WAN, so that
// siblings are late past the hedge grace: a head that serves every hedge
// past its grace (HedgeBacklog < 0, as before the bound) fills its port
// with second copies, and the first copies every sibling waits on crawl
// with them; one that serves hedges only while it has at most a chunk to
// write to its workers (the default) sends fewer copies and finishes
// sooner.
func TestHedgesByBacklog(t *testing.T) {
	c := Config{Sites: 1, Workers: 16, BlobSize: 8 << 20, ChunkSize: 1 << 20, WANRate: 100e6, LANRate: 20e6,
		WANLatency: 20 * time.Millisecond, LANLatency: 100 * time.Microsecond, StartJitter: 2 * time.Millisecond,
		MessageJitter: 200 * time.Microsecond, Seed: 1} // the backlog alone
	c.HedgeBacklog = -1
	all := run(t, c)
	c.HedgeBacklog = 0
	gated := run(t, c)
	t.Logf("every hedge past the grace: last %.1f s, head copies %.2f, hedges served %d; by the backlog: %.1f s, %.2f, %d (%d declined for it)",
		all.Last, all.HeadCopies, all.HedgesServed, gated.Last, gated.HeadCopies, gated.HedgesServed, gated.HedgesBusy)
	if all.HedgesBusy != 0 || gated.HedgesBusy == 0 {
		t.Fatalf("hedges declined for the backlog: %d with no bound, %d with one; want 0 and more", all.HedgesBusy, gated.HedgesBusy)
	}
	if gated.HedgesServed*4 > all.HedgesServed || gated.HeadCopies > all.HeadCopies*3/4 || gated.Last > all.Last*3/4 {
		t.Fatalf("by the backlog: %d hedges served, %.2f head copies, last %.1f s; want under a quarter of %d, three quarters of %.2f and of %.1f s",
			gated.HedgesServed, gated.HeadCopies, gated.Last, all.HedgesServed, all.HeadCopies, all.Last)
	}
}

// TestWorkersMeasureRates: each worker's Hedger runs on the rates the
// worker measured of its own requests, as the engine's (coalesce feeds
// its peerrate.Table): after a broadcast its timers for a sibling are
// measured ones, within the Hedger's bounds; with ConstantTimers they are
// the constants.
func TestWorkersMeasureRates(t *testing.T) {
	c := Config{Sites: 1, Workers: 8, BlobSize: 16 << 20, ChunkSize: 1 << 20, WANRate: 100e6, LANRate: 200e6,
		WANLatency: 20 * time.Millisecond, LANLatency: 100 * time.Microsecond, Seed: 1}
	for _, constant := range []bool{false, true} {
		c.ConstantTimers = constant
		cfg, err := c.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		s, err := newSite(&cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.run(); err != nil {
			t.Fatal(err)
		}
		w := s.workers[len(s.workers)-1]
		measured := 0
		for _, sib := range s.workers[:len(s.workers)-1] {
			tm := w.hedger.Timers(sib.id, s.head.id, int(cfg.ChunkSize))
			if tm.Measured {
				measured++
				if tm.Hedge <= 0 || tm.Hedge > tm.GiveUp || tm.GiveUp > cfg.SiblingTimeout {
					t.Errorf("timers for %s: %+v: want 0 < hedge <= give-up <= %v", sib.name, tm, cfg.SiblingTimeout)
				}
			}
		}
		switch {
		case !constant && measured == 0:
			t.Errorf("%s measured none of its siblings: its Hedger runs the constants", w.name)
		case constant && measured > 0:
			t.Errorf("ConstantTimers: %s has measured timers for %d siblings", w.name, measured)
		}
		t.Logf("constant timers %v: %s has measured timers for %d of %d siblings", constant, w.name, measured, len(s.workers)-1)
	}
}

// TestDeterministic: a seed gives the same run every time.
func TestDeterministic(t *testing.T) {
	c := Config{Sites: 2, Workers: 8, BlobSize: 8 << 20, ChunkSize: 1 << 20, PieceSize: 64 << 10, WANRate: 100e6, LANRate: 200e6,
		WANLatency: 20 * time.Millisecond, LANLatency: 100 * time.Microsecond, StartJitter: 2 * time.Millisecond, MessageJitter: 200 * time.Microsecond, Seed: 7}
	a, b := run(t, c), run(t, c)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", a, b)
	}
}

// TestBadConfig: every field out of range is an error wrapping ErrConfig
// that names it.
func TestBadConfig(t *testing.T) {
	good := Config{Sites: 1, Workers: 1, BlobSize: 1 << 20, ChunkSize: 1 << 20, WANRate: 1e6, LANRate: 1e6}
	if _, err := Run(good); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
	}{
		{"sites", func(c *Config) { c.Sites = 0 }},
		{"workers", func(c *Config) { c.Workers = -1 }},
		{"blob size", func(c *Config) { c.BlobSize = 0 }},
		{"chunk size", func(c *Config) { c.ChunkSize = 0 }},
		{"piece size", func(c *Config) { c.PieceSize = -1 }},
		{"chunks", func(c *Config) { c.BlobSize, c.ChunkSize = 4<<20, 1 }},
		{"WAN rate", func(c *Config) { c.WANRate = 0 }},
		{"LAN rate", func(c *Config) { c.LANRate = math.NaN() }},
		{"latency", func(c *Config) { c.LANLatency = -1 }},
		{"goodput", func(c *Config) { c.WANGoodput = 1.5 }},
		{"window", func(c *Config) { c.Window = -2 }},
		{"sibling timeout", func(c *Config) { c.SiblingTimeout = -time.Second }},
		{"max time", func(c *Config) { c.MaxTime = -1 }},
		{"workers", func(c *Config) { c.Workers = maxWorkers + 1 }},
	} {
		c := good
		tc.edit(&c)
		_, err := Run(c)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("%s: error %v, want ErrConfig naming %q", tc.name, err, tc.name)
		}
	}
}

// TestDefaultsMatchTheEngine: the defaults are the daemon's.
func TestDefaultsMatchTheEngine(t *testing.T) {
	if DefaultWindow != transfer.DefaultWindow || DefaultStreamsPerPeer != transfer.DefaultStreamsPerPeer ||
		DefaultSiblingTimeout != transfer.DefaultSiblingTimeout || DefaultPushBytes != tree.MaxPushBytes {
		t.Fatalf("sim defaults %d, %d, %v, %d; engine %d, %d, %v, %d", DefaultWindow, DefaultStreamsPerPeer, DefaultSiblingTimeout, DefaultPushBytes,
			transfer.DefaultWindow, transfer.DefaultStreamsPerPeer, transfer.DefaultSiblingTimeout, tree.MaxPushBytes)
	}
}

// TestRelaxationDepth: the bounded relaxation (maxDepth) gives the same
// times, within 3%, as relaxing much further, with pieces and many workers
// (where most flows are fed and ports are shared by many).
func TestRelaxationDepth(t *testing.T) {
	c := Config{Sites: 1, Workers: 128, BlobSize: 32 << 20, ChunkSize: 1 << 20, PieceSize: 16 << 10, WANRate: 100e6, LANRate: 200e6,
		WANLatency: 20 * time.Millisecond, LANLatency: 100 * time.Microsecond, StartJitter: 2 * time.Millisecond, MessageJitter: 200 * time.Microsecond, Seed: 1}
	bounded := run(t, c)
	relaxDepth = 8
	defer func() { relaxDepth = 0 }()
	deep := run(t, c)
	if d := math.Abs(bounded.Last-deep.Last) / deep.Last; d > 0.03 {
		t.Fatalf("last worker %.3f s bounded, %.3f s relaxed deeper: %.1f%% apart", bounded.Last, deep.Last, 100*d)
	}
	t.Logf("last worker %.3f s bounded, %.3f s relaxed deeper; truncated %d, %d", bounded.Last, deep.Last, bounded.Truncated, deep.Truncated)
}

// TestDeflectedDirectsInAStorm: 2 × 32 workers at a quarter of the rates,
// whole chunks: chains 32 deep make the workers give up on late siblings,
// and their GET_DIRECTs (fetch 1.3.0, NoDeflect) are each a copy of a
// chunk from the head (7.84 copies into a site at seed 1, 30.4 s). With
// fetch 1.4.0 the head, its port busy, sends most of them to workers that
// hold the chunk complete or tells them to ask again: fewer copies (1.97,
// 221 of 227 redirected), no later (20.9 s).
func TestDeflectedDirectsInAStorm(t *testing.T) {
	c := Config{Sites: 2, Workers: 32, BlobSize: 16 << 20, ChunkSize: 1 << 20, WANRate: 25e6, LANRate: 50e6,
		WANLatency: 20 * time.Millisecond, LANLatency: 100 * time.Microsecond, StartJitter: 2 * time.Millisecond,
		MessageJitter: 200 * time.Microsecond, Seed: 1}
	off := c
	off.NoDeflect = true
	ron, roff := run(t, c), run(t, off)
	t.Logf("1.4.0: %.2f s, head %.2f copies, GET_DIRECTs %d (redirected %d, busy %d, served %d); 1.3.0: %.2f s, head %.2f copies, GET_DIRECTs %d (served %d)",
		ron.Last, ron.HeadCopies, ron.Directs, ron.DirectsRedirected, ron.DirectsBusy, ron.DirectsServed, roff.Last, roff.HeadCopies, roff.Directs, roff.DirectsServed)
	if roff.Directs < 50 || roff.DirectsRedirected+roff.DirectsBusy != 0 || roff.DirectsServed != roff.Directs {
		t.Fatalf("1.3.0: %d GET_DIRECTs, %d redirected, %d busy, %d served: want a storm, every one served", roff.Directs, roff.DirectsRedirected, roff.DirectsBusy, roff.DirectsServed)
	}
	if ron.DirectsRedirected == 0 || ron.HeadCopies > roff.HeadCopies/2 || ron.Last > roff.Last {
		t.Fatalf("1.4.0: %d redirected, head %.2f copies (1.3.0: %.2f), %.2f s (1.3.0: %.2f s): want the copies halved, no later",
			ron.DirectsRedirected, ron.HeadCopies, roff.HeadCopies, ron.Last, roff.Last)
	}
}
