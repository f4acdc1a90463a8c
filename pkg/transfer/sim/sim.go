package sim

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/omst-project/omst/pkg/transfer/internal/exchange"
)

// Defaults of Config, as the daemon has them (pkg/transfer's
// DefaultWindow, DefaultStreamsPerPeer and DefaultSiblingTimeout,
// pkg/tree's MaxPushBytes; TestDefaultsMatchTheEngine checks them).
const (
	DefaultWindow         = 16
	DefaultStreamsPerPeer = 2
	DefaultSiblingTimeout = 10 * time.Second
	DefaultPushBytes      = 4 << 20
	// DefaultGoodput is the share of a link's rate one TCP connection
	// delivers on the emulated grid (`omst-wan check`: 95.6 of 100
	// Mbit/s over the WAN, 956 of 1000 over a LAN; docs/benchmarks.md).
	DefaultGoodput = 0.956
	// DefaultInitWindow is the bytes the root sent a head in the first
	// round trip of a get in a packet trace of the emulated WAN
	// (docs/benchmarks.md, "Where the time went": 43, 55, 125, 251, 443
	// KB per 41 ms round trip, then the link's rate).
	DefaultInitWindow = 43 << 10
)

// ErrConfig is wrapped by every error about a Config.
var ErrConfig = errors.New("bad simulation config")

// Config is what a simulated broadcast runs on: the grid, the blob, the
// protocol's parameters. Zero fields take the defaults said.
type Config struct {
	// Sites, each a head and Workers workers on a LAN, the head behind its
	// own WAN link to the root (which holds the blob).
	Sites, Workers int
	// BlobSize and ChunkSize in bytes; the last chunk may be shorter.
	BlobSize, ChunkSize int64
	// PieceSize: a hop forwards each piece of a chunk as soon as it is in
	// (the verified sub-chunk pieces of issue 25). 0, or at least a
	// chunk: whole chunks, each stored and verified before it is passed
	// on (today's protocol).
	PieceSize int64
	// WANRate and LANRate in bits per second, each direction; a WAN link
	// per site, a LAN port per host (the head's too).
	WANRate, LANRate float64
	// WANLatency and LANLatency one way (a LAN's host to host).
	WANLatency, LANLatency time.Duration
	// WANGoodput and LANGoodput are the shares of a link's rate that TCP
	// delivers (default DefaultGoodput each; 1 for ideal links).
	WANGoodput, LANGoodput float64
	// Window is the chunks a worker's fetch keeps in flight (default
	// DefaultWindow); it requests at most 2 × Window past its reader, as
	// a get does.
	Window int
	// StreamsPerPeer is the fetch streams a node opens to one peer
	// (default DefaultStreamsPerPeer): the replies one server writes to
	// one client at once.
	StreamsPerPeer int
	// SiblingTimeout bounds a request to a sibling (default
	// DefaultSiblingTimeout).
	SiblingTimeout time.Duration
	// Direct and Fanout tune the head's Distributor (0: its defaults,
	// 1 and 2).
	Direct, Fanout int
	// HedgeBacklog is the most a node may have to write to its children
	// for it to serve a hedge past its grace (exchange.ServeConfig; 0:
	// exchange.DefaultHedgeBacklog; < 0: no bound, as before the bound).
	HedgeBacklog int64
	// Budgets: the workers' hedges and give-ups are budgeted
	// (exchange.NewBudget(HedgeShare, HedgeBurst)); the daemon's are not
	// (exchange.NewHedger).
	Budgets bool
	// NoDeflect: the workers' GET_DIRECTs carry no deflect flag (fetch
	// 1.3.0), so the heads serve every one; by default (fetch 1.4.0, as
	// the daemon) a head may send one to a worker that holds the chunk
	// complete, or answer BUSY while its port is busy.
	NoDeflect bool
	// ConstantTimers: the workers' Hedgers run the constant timers (no
	// peerrate table fed), as the simulator did before it fed them the
	// rates each worker measures as the engine does.
	ConstantTimers bool
	// PushBytes is what the root pushes to a head after the FOUND of a
	// worker's LOOKUP_GET (default DefaultPushBytes; < 0: no push).
	PushBytes int64
	// StartJitter spreads the workers' starts uniformly over [0,
	// StartJitter) (default 0: all at once); MessageJitter adds to each
	// request's and reply's latency a delay drawn uniformly from [0,
	// MessageJitter) (default 0), as a loaded host's scheduling does: it
	// varies the order in which a head sees its workers' requests.
	StartJitter, MessageJitter time.Duration
	// InitWindow is what a new WAN connection carries in its first round
	// trip (its congestion window, doubling every round trip up to the
	// link's rate; default DefaultInitWindow; < 0: no slow start). LAN
	// connections, whose round trip is under a millisecond, are not
	// slowed.
	InitWindow int64
	// Seed makes the jitter reproducible; site s uses Seed + s.
	Seed uint64
	// Parallel bounds the sites simulated at once (default GOMAXPROCS).
	Parallel int
	// MaxTime bounds the simulated time (default 100 × Limit + 1 hour):
	// workers without every chunk by then are counted as unfinished.
	MaxTime time.Duration
}

// withDefaults returns c with zero fields set to their defaults, or an
// error wrapping ErrConfig naming the first field that is wrong.
func (c Config) withDefaults() (Config, error) {
	bad := func(format string, a ...any) (Config, error) {
		return c, fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, a...))
	}
	switch {
	case c.Sites < 1:
		return bad("sites %d: want at least 1", c.Sites)
	case c.Workers < 1:
		return bad("workers %d: want at least 1 per site", c.Workers)
	case c.BlobSize < 1:
		return bad("blob size %d: want at least 1 byte", c.BlobSize)
	case c.ChunkSize < 1:
		return bad("chunk size %d: want at least 1 byte", c.ChunkSize)
	case c.PieceSize < 0:
		return bad("piece size %d: want 0 (whole chunks) or more", c.PieceSize)
	case (c.BlobSize+c.ChunkSize-1)/c.ChunkSize > maxChunks:
		return bad("%d chunks (blob size %d / chunk size %d): at most %d", (c.BlobSize+c.ChunkSize-1)/c.ChunkSize, c.BlobSize, c.ChunkSize, maxChunks)
	case !(c.WANRate > 0) || math.IsInf(c.WANRate, 0):
		return bad("WAN rate %v bit/s: want more than 0", c.WANRate)
	case !(c.LANRate > 0) || math.IsInf(c.LANRate, 0):
		return bad("LAN rate %v bit/s: want more than 0", c.LANRate)
	case c.WANLatency < 0 || c.LANLatency < 0:
		return bad("latency %v (WAN), %v (LAN): want 0 or more", c.WANLatency, c.LANLatency)
	case !(c.WANGoodput >= 0 && c.WANGoodput <= 1) || !(c.LANGoodput >= 0 && c.LANGoodput <= 1):
		return bad("goodput %v (WAN), %v (LAN): want a share in (0, 1]", c.WANGoodput, c.LANGoodput)
	case c.Window < 0 || c.StreamsPerPeer < 0 || c.Direct < 0 || c.Fanout < 0:
		return bad("window %d, streams per peer %d, direct %d, fanout %d: want 0 (the default) or more", c.Window, c.StreamsPerPeer, c.Direct, c.Fanout)
	case c.SiblingTimeout < 0 || c.StartJitter < 0 || c.MessageJitter < 0 || c.MaxTime < 0:
		return bad("sibling timeout %v, start jitter %v, message jitter %v, max time %v: want 0 or more", c.SiblingTimeout, c.StartJitter, c.MessageJitter, c.MaxTime)
	case c.Workers > maxWorkers:
		return bad("workers %d: at most %d per site", c.Workers, maxWorkers)
	}
	if c.PieceSize == 0 || c.PieceSize > c.ChunkSize {
		c.PieceSize = c.ChunkSize
	}
	if c.WANGoodput == 0 {
		c.WANGoodput = DefaultGoodput
	}
	if c.LANGoodput == 0 {
		c.LANGoodput = DefaultGoodput
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.StreamsPerPeer == 0 {
		c.StreamsPerPeer = DefaultStreamsPerPeer
	}
	if c.SiblingTimeout == 0 {
		c.SiblingTimeout = DefaultSiblingTimeout
	}
	if c.InitWindow == 0 {
		c.InitWindow = DefaultInitWindow
	}
	if c.PushBytes == 0 {
		c.PushBytes = DefaultPushBytes
	}
	if c.MaxTime == 0 {
		c.MaxTime = time.Duration((100*c.Limit() + 3600) * float64(time.Second))
	}
	if c.Parallel <= 0 {
		c.Parallel = runtime.GOMAXPROCS(0)
	}
	return c, nil
}

// Limits of a Config.
const (
	maxChunks  = 1 << 20
	maxWorkers = 1 << 16
)

// Limit is S / B_wan in seconds: the blob over one WAN link at its
// configured rate, the broadcast's lower bound.
func (c Config) Limit() float64 { return float64(c.BlobSize) * 8 / c.WANRate }

// wholeChunks reports whether hops forward whole chunks (store and
// forward).
func (c Config) wholeChunks() bool { return c.PieceSize >= c.ChunkSize }

// Result is what a simulated broadcast measured. Times are seconds from
// the common start; copies are in blobs (bytes / BlobSize).
type Result struct {
	Config Config
	// Limit is S / B_wan (Config.Limit).
	Limit float64
	// First, Median and Last: the time at which the first, the median
	// and the last worker (over all sites) had every chunk; a worker
	// unfinished at MaxTime counts as done then (Unfinished says how
	// many).
	First, Median, Last float64
	Unfinished          int
	// SiteLast is each site's last worker's time (MaxTime if unfinished).
	SiteLast []float64
	// HeadCopies: what a head sent its workers, the mean over sites and
	// the most of any; SiteIn: what crossed a site's WAN link (mean);
	// SiblingCopies: what a site's workers sent each other (mean).
	HeadCopies, HeadCopiesMax, SiteIn, SiblingCopies float64
	// Over all sites: redirects the heads sent; hedges the workers sent,
	// the heads declined (for the grace or the backlog), of those for the
	// backlog (HedgesBusy), the heads served, and found not there yet;
	// sibling requests given up at SiblingTimeout; plain GET_DIRECTs after
	// a sibling failed; hedges and give-ups the workers held back for
	// their budgets (Deferred).
	Redirects, Hedges, HedgesDeclined, HedgesBusy, HedgesServed, HedgesNotHere, SiblingTimeouts, Directs, Deferred int64
	// Of the GET_DIRECTs, those the heads redirected to a worker holding
	// the chunk complete, answered BUSY (fetch 1.4.0), and served.
	DirectsRedirected, DirectsBusy, DirectsServed int64
	// FirstHedgeServed is when a head first served a hedge (the first
	// copy beyond one into a site; 0: none did).
	FirstHedgeServed float64
	// MaxDepth and MeanDepth: how many hops from its head a worker's copy
	// of a chunk was to come through, as the head's redirects made it (1:
	// from the head), the most and the mean over all asks.
	MaxDepth  int
	MeanDepth float64
	// Events is the events the simulation processed; Truncated the
	// relaxations of the link model cut short (links.go).
	Events, Truncated int64
}

// Ratio is Last / Limit.
func (r Result) Ratio() float64 { return r.Last / r.Limit }

// Run simulates one broadcast of cfg: at time 0 every worker of every site
// starts a get of the blob the root holds. Sites share nothing but the
// root, which serves each over its own WAN link, so they are simulated
// apart, Config.Parallel at a time.
func Run(cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	out := make([]siteResult, cfg.Sites)
	errs := make([]error, cfg.Sites)
	sem := make(chan struct{}, cfg.Parallel)
	var wg sync.WaitGroup
	for s := range cfg.Sites {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[s], errs[s] = runSite(&cfg, s)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	res := Result{Config: cfg, Limit: cfg.Limit()}
	var sumDepth, nDepth int64
	var done []float64
	size := float64(cfg.BlobSize)
	for _, sr := range out {
		last := cfg.MaxTime.Seconds()
		if len(sr.workerDone) == cfg.Workers {
			last = slices.Max(sr.workerDone)
		}
		res.SiteLast = append(res.SiteLast, last)
		done = append(done, sr.workerDone...)
		for range cfg.Workers - len(sr.workerDone) {
			done = append(done, cfg.MaxTime.Seconds())
			res.Unfinished++
		}
		hc := sr.headOut / size
		res.HeadCopies += hc / float64(cfg.Sites)
		res.HeadCopiesMax = max(res.HeadCopiesMax, hc)
		res.SiteIn += sr.wanIn / size / float64(cfg.Sites)
		res.SiblingCopies += sr.siblingOut / size / float64(cfg.Sites)
		res.Redirects += sr.redirects
		res.Hedges += sr.hedges
		res.HedgesDeclined += sr.hedgesDeclined
		res.HedgesBusy += sr.hedgesBusy
		res.HedgesServed += sr.hedgesServed
		if sr.hedgesServed > 0 && (res.FirstHedgeServed == 0 || sr.firstServed < res.FirstHedgeServed) {
			res.FirstHedgeServed = sr.firstServed
		}
		res.HedgesNotHere += sr.hedgesNotHere
		res.SiblingTimeouts += sr.timeouts
		res.Directs += sr.directs
		res.DirectsRedirected += sr.directsRedirected
		res.DirectsBusy += sr.directsBusy
		res.DirectsServed += sr.directsServed
		res.Deferred += sr.deferred
		res.Events += sr.events
		res.Truncated += sr.truncated
		res.MaxDepth = max(res.MaxDepth, int(sr.maxDepth))
		sumDepth += sr.sumDepth
		nDepth += sr.nDepth
	}
	if nDepth > 0 {
		res.MeanDepth = float64(sumDepth) / float64(nDepth)
	}
	slices.Sort(done)
	res.First, res.Last = done[0], done[len(done)-1]
	res.Median = done[len(done)/2]
	if len(done)%2 == 0 {
		res.Median = (done[len(done)/2-1] + done[len(done)/2]) / 2
	}
	return res, nil
}

// distribution is cfg's Distributor configuration.
func (c *Config) distribution() exchange.DistributorConfig {
	return exchange.DistributorConfig{Direct: c.Direct, Fanout: c.Fanout}
}
