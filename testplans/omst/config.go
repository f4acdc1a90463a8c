package main

import (
	"cmp"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/testground/sdk-go/runtime"
)

// Modes of distribution the plan compares.
const (
	modeTree         = "tree"          // omst's default: worker -> head -> root, pull-through
	modeStar         = "star"          // every worker's parent is the root, which serves each itself (the baseline; --no-sibling-exchange)
	modeStoreForward = "store-forward" // tree, with the daemons' --relay-mode store-forward and --no-sibling-exchange (OmniStorage's relay)
	modeTreeAlone    = "tree-alone"    // tree without sibling exchange: the head serves every worker (--no-sibling-exchange)
)

// Topologies (param topology).
const (
	topologyTree = "tree" // root, heads under the root, workers under their head (--parent)
	topologyFlat = "flat" // no --parent anywhere: every daemon joins the DHT through --bootstrap peers
)

// Group IDs the compositions must use.
const (
	groupRoot    = "root"
	groupHeads   = "heads"
	groupWorkers = "workers"
)

// config holds the test parameters. Every parameter has a default here that
// matches manifest.toml, so that a plan binary launched directly (without the
// testground daemon, which fills defaults from the manifest) needs only the
// parameters it changes.
type config struct {
	sites          int
	workersPerSite int
	blobSize       int64
	resultSize     int64
	rmNames        int   // rmprefix: names put in all under rmjob/
	smallCount     int   // smallgather: results per worker (and inputs in all: as many as the results)
	smallSize      int64 // smallgather: bytes of each
	rmSize         int64 // rmprefix: bytes of each name's blob (0: the name itself)
	rmParallel     int   // rmprefix: puts in flight per worker
	chunkSize      int64
	mode           string
	seed           int64
	timeout        time.Duration
	startupTimeout time.Duration

	// Shaping (applied by testground's sidecar under local:docker only).
	wanBW      uint64 // bytes per second, 0 = unshaped
	wanLatency time.Duration
	lanBW      uint64

	// failover
	killSite       int // site whose head is killed; -1 = every site
	killAfter      time.Duration
	killAtFraction float64

	// churn
	churnLeave int // per site: workers that leave early
	churnLate  int // per site: workers that join late
	leaveAfter time.Duration
	joinDelay  time.Duration

	// dht
	topology       string  // tree or flat
	dht            bool    // false: every daemon runs with --no-dht (tree only)
	puttersPerSite int     // workers per site that put a result; 0 = every worker
	maxRootShare   float64 // most the root may serve while results are read, as a share of the bytes read; < 0: not checked

	// daemon
	omstBin   string
	window    int
	cacheSize string
	logLevel  string
	transport string // tcp or quic
	keepHome  bool
	// trustedLAN runs every daemon with --trusted-lan: bulk bytes between
	// two daemons of one site go in plain text, as on a cluster LAN its
	// operator trusts (across sites they stay encrypted).
	trustedLAN bool

	// idle: how long the daemons are left doing nothing while their CPU
	// is measured.
	idleFor time.Duration

	// grid: the root makes a grid (omst grid init) and every other daemon
	// joins it with a token of its own (--join); see grid.go.
	grid bool
}

// defaultBlobSize per case, as in manifest.toml.
var defaultBlobSize = map[string]string{"broadcast": "64MiB", "failover": "256MiB", "churn": "128MiB", "gather": "0", "dht": "0", "rmprefix": "0", "taskfarm": "16MiB", "smallgather": "0", "idle": "0"}

// defaultResultSize per case, as in manifest.toml.
var defaultResultSize = map[string]string{"dht": "16MiB", "taskfarm": "1MiB"}

func loadConfig(re *runtime.RunEnv) (*config, error) {
	p := params{re: re}
	c := &config{
		sites:          p.int("sites", envInt("OMST_WAN_SITES", 2)),
		workersPerSite: p.int("workers_per_site", envInt("OMST_WAN_WORKERS", 4)),
		blobSize:       p.size("blob_size", defaultBlobSize[re.TestCase]),
		resultSize:     p.size("result_size", cmp.Or(defaultResultSize[re.TestCase], "8MiB")),
		chunkSize:      p.size("chunk_size", "0"),
		mode:           p.str("mode", modeTree),
		seed:           int64(p.int("seed", 1)),
		timeout:        p.duration("timeout", "5m"),
		startupTimeout: p.duration("startup_timeout", "60s"),
		wanBW:          uint64(p.size("wan_bw", "0")),
		wanLatency:     p.duration("wan_latency", "0s"),
		lanBW:          uint64(p.size("lan_bw", "0")),
		killSite:       p.int("kill_site", 0),
		killAfter:      p.duration("kill_after", "0s"),
		killAtFraction: p.float("kill_at_fraction", 0.3),
		churnLeave:     p.int("churn_leave", 1),
		churnLate:      p.int("churn_late", 1),
		leaveAfter:     p.duration("leave_after", "200ms"),
		joinDelay:      p.duration("join_delay", "300ms"),
		topology:       p.str("topology", topologyTree),
		dht:            p.bool("dht", true),
		puttersPerSite: p.int("putters_per_site", 1),
		maxRootShare:   p.float("max_root_share", -1),
		omstBin:        p.str("omst_bin", ""),
		window:         p.int("window", 0),
		cacheSize:      p.str("cache_size", ""),
		logLevel:       p.str("log_level", "warn"),
		transport:      p.str("transport", "tcp"),
		keepHome:       p.bool("keep_home", false),
		trustedLAN:     p.bool("trusted_lan", false),
		idleFor:        p.duration("idle_for", "60s"),
		grid:           p.bool("grid", false),
		rmNames:        p.int("rm_names", 10000),
		smallCount:     p.int("small_count", 128),
		smallSize:      p.size("small_size", "16KiB"),
		rmSize:         p.size("rm_size", "0"),
		rmParallel:     p.int("rm_parallel", 1),
	}
	if p.err != nil {
		return nil, p.err
	}
	switch c.mode {
	case modeTree, modeStar, modeStoreForward, modeTreeAlone:
	default:
		return nil, fmt.Errorf("param mode=%q: want tree, tree-alone, star or store-forward", c.mode)
	}
	switch c.topology {
	case topologyTree:
	case topologyFlat:
		if !c.dht || c.mode != modeTree {
			return nil, fmt.Errorf("param topology=flat needs dht=true and mode=tree (a flat cluster exists only through the DHT)")
		}
	default:
		return nil, fmt.Errorf("param topology=%q: want tree or flat", c.topology)
	}
	if c.grid && c.topology == topologyFlat {
		return nil, fmt.Errorf("param grid=true needs topology=tree: a join token is redeemed through --parent, which a flat cluster has not")
	}
	if re.TestCase == "smallgather" && (c.smallCount < 1 || c.smallSize < 1 || c.sites*c.workersPerSite < 1) {
		return nil, fmt.Errorf("param small_count=%d, small_size=%d: want at least 1 each, and at least one worker", c.smallCount, c.smallSize)
	}
	if re.TestCase == "idle" && (c.idleFor <= 0 || c.idleFor >= c.timeout) {
		return nil, fmt.Errorf("param idle_for=%s: want more than 0 and less than timeout=%s", c.idleFor, c.timeout)
	}
	if re.TestCase == "dht" && (c.puttersPerSite < 0 || c.puttersPerSite > c.workersPerSite) {
		return nil, fmt.Errorf("param putters_per_site=%d: want 0 (every worker) .. workers_per_site=%d", c.puttersPerSite, c.workersPerSite)
	}
	switch c.transport {
	case "tcp", "quic":
	default:
		return nil, fmt.Errorf("param transport=%q: want tcp or quic", c.transport)
	}
	if c.sites < 1 || c.workersPerSite < 0 {
		return nil, fmt.Errorf("params sites=%d workers_per_site=%d: need sites >= 1, workers_per_site >= 0", c.sites, c.workersPerSite)
	}
	if c.blobSize < 0 || c.resultSize < 0 {
		return nil, fmt.Errorf("blob_size and result_size must not be negative")
	}
	if c.chunkSize != 0 && (c.chunkSize < 4096 || c.chunkSize > 64<<20) {
		return nil, fmt.Errorf("param chunk_size=%d: want 0 (daemon default) or 4KiB..64MiB", c.chunkSize)
	}
	// The binary: env OMST_BIN (the harnesses), else the omst_bin param, else PATH.
	if b := os.Getenv("OMST_BIN"); b != "" {
		c.omstBin = b
	}
	if c.omstBin == "" {
		c.omstBin = "omst"
	}
	return c, nil
}

// envInt reads a default from the namespace harness's environment
// (OMST_WAN_SITES, OMST_WAN_WORKERS), so that its topology flags need not be
// repeated as parameters.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

// params reads instance parameters with defaults and collects the first
// parse error (sdk-go's own helpers panic instead).
type params struct {
	re  *runtime.RunEnv
	err error
}

func (p *params) raw(name string) (string, bool) {
	v, ok := p.re.TestInstanceParams[name]
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

func (p *params) fail(name, v string, err error) {
	if p.err == nil {
		p.err = fmt.Errorf("param %s=%q: %w", name, v, err)
	}
}

func (p *params) str(name, def string) string {
	if v, ok := p.raw(name); ok {
		return v
	}
	return def
}

func (p *params) int(name string, def int) int {
	v, ok := p.raw(name)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		p.fail(name, v, err)
	}
	return n
}

func (p *params) float(name string, def float64) float64 {
	v, ok := p.raw(name)
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		p.fail(name, v, err)
	}
	return f
}

func (p *params) bool(name string, def bool) bool {
	v, ok := p.raw(name)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(name, v, err)
	}
	return b
}

// size parses "64MiB", "1G", "100000" (bytes) or a rate such as "100Mbit"
// (converted to bytes per second) with go-humanize.
func (p *params) size(name, def string) int64 {
	v, ok := p.raw(name)
	if !ok {
		v = def
	}
	n, err := parseSize(v)
	if err != nil {
		p.fail(name, v, err)
	}
	return n
}

func parseSize(v string) (int64, error) {
	s := strings.TrimSpace(v)
	lower := strings.ToLower(s)
	for _, suffix := range []string{"bit/s", "bps", "bit"} {
		if strings.HasSuffix(lower, suffix) {
			bits, err := humanize.ParseBytes(strings.TrimSpace(s[:len(s)-len(suffix)]))
			if err != nil {
				return 0, err
			}
			return int64(bits / 8), nil
		}
	}
	n, err := humanize.ParseBytes(s)
	return int64(n), err
}

func (p *params) duration(name, def string) time.Duration {
	v, ok := p.raw(name)
	if !ok {
		v = def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		p.fail(name, v, err)
	}
	return d
}
