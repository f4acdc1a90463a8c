//go:build linux

// Command omst-btbase is the BitTorrent baseline of omst's WAN benchmark:
// a mainstream BitTorrent client with a tracker (aria2c and opentracker from
// Debian's packages), as cluster deploy tools use, run on the same emulated
// grid as omst. It runs once per emulated host under the namespace harness:
//
//	omst-wan run -sites 2 -workers 8 ... -case broadcast \
//	    -params 'blob_size=64MiB' -- omst-btbase
//
// The root makes the payload (the bytes of the omst plan's broadcast), a
// torrent of it (mktorrent), runs opentracker and an aria2c seeder; every
// worker runs an aria2c leecher from one common start instant, records when
// aria2c reports the download complete, checks the bytes' SHA-256 against
// the root's and keeps seeding until every worker is done. Heads only route
// (and count the bytes on their WAN link). The root writes
// OUT/root/summary.json in the shape of the omst plan's, mode "bittorrent".
// See testplans/README.md ("The BitTorrent baseline").
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/omst-project/omst/pkg/bytesize"
)

const usage = `omst-btbase: the BitTorrent baseline (aria2c + opentracker) of the WAN
benchmark, one instance per host under the namespace harness:

  omst-wan run [topology flags] -case broadcast -params 'blob_size=64MiB' -- omst-btbase

Parameters (-params, "k=v|k=v"; others are ignored):
  blob_size        payload size (default 64MiB)
  piece_size       torrent piece size, a power of two (default 1MiB, omst's chunk size)
  seed             payload seed (default 1: the omst plan's broadcast bytes)
  timeout          bound from the start instant to the end (default 5m)
  startup_timeout  bound on the preparation before the start (default 60s)
  mode             bittorrent (the only one; default)
  aria2_log_level  aria2c's --log-level (default notice)

Needs aria2c, opentracker and mktorrent on PATH (Debian: apt-get install
aria2 opentracker mktorrent) and the variables omst-wan sets (OMST_WAN_ROLE,
OMST_WAN_SHARED, ...). Exit 0 when this host's part succeeded (at the root:
when the run passed), 1 otherwise, 2 for bad parameters or environment.
`

// Exit statuses.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

const modeBitTorrent = "bittorrent"

// config is what the parameters and the harness's environment say.
type config struct {
	role, host string
	site       int // -1 for the root
	index      int // a worker's 0-based index in its site
	ip, rootIP string
	out, tmp   string // this host's output and scratch directories
	shared     string // the directory every host shares (coordination)
	wanIface   string // heads: the WAN link's interface
	sites      int
	workers    int // per site
	instances  int // hosts in the run
	run        string

	blobSize, pieceSize int64
	seed                int64
	timeout, startup    time.Duration
	ariaLogLevel        string
}

func main() {
	if len(os.Args) > 1 {
		fmt.Fprint(os.Stderr, usage)
		if os.Args[1] == "-h" || os.Args[1] == "-help" || os.Args[1] == "--help" {
			os.Exit(exitOK)
		}
		os.Exit(exitUsage)
	}
	cfg, err := loadConfig(os.Getenv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "omst-btbase: %v\n\n%s", err, usage)
		os.Exit(exitUsage)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	h := &host{cfg: cfg, logf: logf(cfg.host)}
	switch cfg.role {
	case "root":
		err = h.root(ctx)
	case "head":
		err = h.head(ctx)
	default:
		err = h.worker(ctx)
	}
	h.stopAll()
	if err != nil {
		h.logf("FAILED: %v", err)
		os.Exit(exitFailed)
	}
	os.Exit(exitOK)
}

func logf(host string) func(string, ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s omst-btbase %s: %s\n", time.Now().Format("15:04:05.000"), host, fmt.Sprintf(format, args...))
	}
}

// loadConfig reads the harness's variables and TEST_INSTANCE_PARAMS.
func loadConfig(getenv func(string) string) (*config, error) {
	c := &config{
		role: getenv("OMST_WAN_ROLE"), host: getenv("OMST_WAN_HOST"), ip: getenv("OMST_WAN_IP"),
		rootIP: getenv("OMST_WAN_ROOT_IP"), out: getenv("OMST_WAN_OUT"), tmp: getenv("OMST_WAN_TMP"),
		shared: getenv("OMST_WAN_SHARED"), wanIface: getenv("OMST_WAN_WAN_IFACE"), run: getenv("TEST_RUN"),
		site: -1,
	}
	for _, v := range []struct{ name, val string }{
		{"OMST_WAN_ROLE", c.role}, {"OMST_WAN_HOST", c.host}, {"OMST_WAN_ROOT_IP", c.rootIP},
		{"OMST_WAN_OUT", c.out}, {"OMST_WAN_TMP", c.tmp}, {"OMST_WAN_SHARED", c.shared},
	} {
		if v.val == "" {
			return nil, fmt.Errorf("%s is not set: run me under `omst-wan run` (a newer one: OMST_WAN_SHARED came with the BitTorrent baseline)", v.name)
		}
	}
	switch c.role {
	case "root", "head", "worker":
	default:
		return nil, fmt.Errorf("OMST_WAN_ROLE=%q: want root, head or worker", c.role)
	}
	var err error
	if c.sites, err = strconv.Atoi(getenv("OMST_WAN_SITES")); err != nil || c.sites < 1 {
		return nil, fmt.Errorf("OMST_WAN_SITES=%q: want >= 1", getenv("OMST_WAN_SITES"))
	}
	if c.workers, err = strconv.Atoi(getenv("OMST_WAN_WORKERS")); err != nil || c.workers < 1 {
		return nil, fmt.Errorf("OMST_WAN_WORKERS=%q: want >= 1 (a broadcast needs workers)", getenv("OMST_WAN_WORKERS"))
	}
	c.instances = 1 + c.sites*(1+c.workers)
	if n, err := strconv.Atoi(getenv("TEST_INSTANCE_COUNT")); err == nil && n != c.instances {
		return nil, fmt.Errorf("TEST_INSTANCE_COUNT=%d, but %d sites of %d workers make %d hosts", n, c.sites, c.workers, c.instances)
	}
	if c.role != "root" {
		if c.site, err = strconv.Atoi(getenv("OMST_WAN_SITE")); err != nil || c.site < 0 || c.site >= c.sites {
			return nil, fmt.Errorf("OMST_WAN_SITE=%q: want 0..%d", getenv("OMST_WAN_SITE"), c.sites-1)
		}
	}
	if c.role == "worker" {
		// Worker hosts are named <site>-w<k>, k from 1.
		_, k, ok := strings.Cut(c.host, "-w")
		n, err := strconv.Atoi(k)
		if !ok || err != nil || n < 1 {
			return nil, fmt.Errorf("OMST_WAN_HOST=%q: want <site>-w<k>", c.host)
		}
		c.index = n - 1
	}
	if tc := getenv("TEST_CASE"); tc != "" && tc != "broadcast" {
		return nil, fmt.Errorf("TEST_CASE=%q: the BitTorrent baseline has only the broadcast case", tc)
	}
	p, err := parseParams(getenv("TEST_INSTANCE_PARAMS"))
	if err != nil {
		return nil, err
	}
	if m := p.str("mode", modeBitTorrent); m != modeBitTorrent {
		return nil, fmt.Errorf("param mode=%q: this is the %s baseline (omst's modes run with omst-plan)", m, modeBitTorrent)
	}
	c.blobSize = p.size("blob_size", "64MiB")
	c.pieceSize = p.size("piece_size", "1MiB")
	c.seed = int64(p.int("seed", 1))
	c.timeout = p.duration("timeout", "5m")
	c.startup = p.duration("startup_timeout", "60s")
	c.ariaLogLevel = p.str("aria2_log_level", "notice")
	if p.err != nil {
		return nil, p.err
	}
	if c.blobSize < 1 {
		return nil, fmt.Errorf("param blob_size=%d: want >= 1 byte", c.blobSize)
	}
	// mktorrent takes the piece length as a power of two, 2^15 .. 2^28.
	if c.pieceSize < 32<<10 || c.pieceSize > 256<<20 || c.pieceSize&(c.pieceSize-1) != 0 {
		return nil, fmt.Errorf("param piece_size=%d: want a power of two from 32KiB to 256MiB", c.pieceSize)
	}
	switch c.ariaLogLevel {
	case "debug", "info", "notice", "warn", "error":
	default:
		return nil, fmt.Errorf("param aria2_log_level=%q: want debug, info, notice, warn or error", c.ariaLogLevel)
	}
	return c, nil
}

// params are TEST_INSTANCE_PARAMS ("k=v|k=v"); the first bad value is kept
// in err.
type params struct {
	m   map[string]string
	err error
}

func parseParams(s string) (*params, error) {
	p := &params{m: map[string]string{}}
	for _, kv := range strings.Split(s, "|") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("TEST_INSTANCE_PARAMS: %q is not key=value", kv)
		}
		p.m[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return p, nil
}

func (p *params) str(k, def string) string {
	if v, ok := p.m[k]; ok && v != "" {
		return v
	}
	return def
}

func (p *params) fail(k string, err error) {
	if p.err == nil {
		p.err = fmt.Errorf("param %s=%q: %w", k, p.m[k], err)
	}
}

func (p *params) size(k, def string) int64 {
	n, err := bytesize.Parse(p.str(k, def))
	if err != nil {
		p.fail(k, err)
	}
	return n
}

func (p *params) int(k string, def int) int {
	v, ok := p.m[k]
	if !ok || v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		p.fail(k, err)
	}
	return n
}

func (p *params) duration(k, def string) time.Duration {
	d, err := time.ParseDuration(p.str(k, def))
	if err == nil && d <= 0 {
		err = errors.New("want > 0")
	}
	if err != nil {
		p.fail(k, err)
	}
	return d
}
