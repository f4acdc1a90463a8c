package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/omst-project/omst/pkg/bytesize"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// sample is one timed run.
type sample struct {
	figure string
	size   int64
	run    int
	secs   float64
}

func (s sample) mbps() float64 { return float64(s.size) / s.secs / 1e6 }

// servedRow is the root's and child's byte counters around one cold fetch.
type servedRow struct {
	run             int
	size            int64
	served, fetched int64
	// CPU seconds the root (sender) and the child (receiver) daemons used
	// during the run (NaN: not read).
	senderCPU, receiverCPU float64
}

// Fit series: cold fetches from the parent, cache hits at the node that
// put the blob (local-get), and cache hits at the child after its cold fetch.
const (
	seriesParent   = "parent-fetch"
	seriesLocal    = "local-get"
	seriesChildHit = "child-hit-get"
)

var fitSeries = []string{seriesParent, seriesLocal, seriesChildHit}

// results collects everything one invocation measured.
type results struct {
	cfg     *config
	started time.Time
	samples []sample
	served  []servedRow
	version string
	notes   []string
}

func (r *results) add(figure string, size int64, run int, d time.Duration) sample {
	s := sample{figure: figure, size: size, run: run, secs: d.Seconds()}
	r.samples = append(r.samples, s)
	return s
}

// of returns the samples of figure (and size, when size > 0).
func (r *results) of(figure string, size int64) []sample {
	var out []sample
	for _, s := range r.samples {
		if s.figure == figure && (size <= 0 || s.size == size) {
			out = append(out, s)
		}
	}
	return out
}

func run(ctx context.Context, cfg *config) error {
	res := &results{cfg: cfg, started: time.Now()}
	tmp, err := os.MkdirTemp(cfg.tmp, "omst-bench-")
	if err != nil {
		return err
	}
	defer func() {
		procs.stopAll() // nothing may hold files in tmp while it is removed
		if cfg.keepTmp {
			logf("kept %s", tmp)
			return
		}
		if err := os.RemoveAll(tmp); err != nil {
			logf("remove %s: %v", tmp, err)
		}
	}()
	if err := checkDisk(tmp, cfg); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	var pl *payload
	if need := payloadSize(cfg); need > 0 {
		logf("generating %s of random payload", bytesize.Format(need))
		pl = newPayload(need, cfg.seed)
	}
	logf("omst-bench: %s", cfg.cmdline)

	if cfg.figures["raw-tcp"] || cfg.figures["parent-fetch"] {
		if err := benchTransfer(ctx, cfg, res, pl, filepath.Join(tmp, "transfer")); err != nil {
			return err
		}
		if err := writeCSVs(cfg.out, res); err != nil {
			return err
		}
	}
	if cfg.figures["fit"] {
		if err := benchFit(ctx, cfg, res, pl, filepath.Join(tmp, "fit")); err != nil {
			return err
		}
		if err := writeCSVs(cfg.out, res); err != nil {
			return err
		}
	}
	if cfg.figures["put-ingest"] {
		if err := benchPut(ctx, cfg, res, pl, filepath.Join(tmp, "put")); err != nil {
			return err
		}
		if err := writeCSVs(cfg.out, res); err != nil {
			return err
		}
	}
	writeSummary(os.Stdout, res)
	logf("done in %v; CSV files in %s", time.Since(res.started).Round(time.Second), cfg.out)
	return nil
}

// payloadSize is the largest blob any selected figure needs.
func payloadSize(cfg *config) int64 {
	var n int64
	if cfg.figures["raw-tcp"] || cfg.figures["parent-fetch"] || cfg.figures["put-ingest"] {
		n = cfg.size
	}
	if cfg.figures["fit"] {
		fs := fitSizes(cfg.minFit, cfg.maxFit)
		n = max(n, fs[len(fs)-1])
	}
	if n > 0 {
		n = max(n, warmupSize)
	}
	return n
}

// Stored bytes per daemon, per section (each section starts fresh daemons
// and removes their homes when it ends, so the peak is the largest section).
func transferBytes(cfg *config) int64 {
	if !cfg.figures["parent-fetch"] {
		return 0
	}
	return int64(cfg.runs)*cfg.size + warmupSize
}

func fitBytes(cfg *config) int64 {
	if !cfg.figures["fit"] {
		return 0
	}
	var sum int64
	for _, s := range fitSizes(cfg.minFit, cfg.maxFit) {
		sum += s
	}
	return int64(cfg.runs)*sum + warmupSize
}

func putBytes(cfg *config) int64 {
	if !cfg.figures["put-ingest"] {
		return 0
	}
	return 2*int64(cfg.runs)*cfg.size + warmupSize
}

// cacheFor is the --cache-size for a daemon storing stored bytes: enough
// that nothing is evicted during the section.
func cacheFor(cfg *config, stored int64) int64 {
	if cfg.cacheSize > 0 {
		return cfg.cacheSize
	}
	return stored + stored/4 + 256<<20
}

// checkDisk refuses to start when the temporary directory's file system
// cannot hold the largest section (two daemons' stores, plus the put-file
// source file).
func checkDisk(dir string, cfg *config) error {
	need := max(2*transferBytes(cfg), 2*fitBytes(cfg))
	if cfg.figures["put-ingest"] {
		need = max(need, putBytes(cfg)+cfg.size) // plus the put-file source
	}
	need += need/10 + 512<<20
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return nil // cannot tell: try anyway
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	logf("disk: %s free in %s, the largest section stores up to %s", bytesize.Format(free), dir, bytesize.Format(need))
	if free < need {
		return fmt.Errorf("%s has %s free, the run needs about %s: use -tmp DIR, a smaller -size/-max-fit or fewer -runs",
			dir, bytesize.Format(free), bytesize.Format(need))
	}
	return nil
}

const warmupSize = 1 << 20

// startPair starts a root and a child whose parent is the root, and waits
// until the child reports its parent connected.
func startPair(ctx context.Context, cfg *config, dir string, stored int64) (root, child *daemon, err error) {
	cache := cacheFor(cfg, stored)
	var rootArgs, childArgs []string
	if cfg.grid {
		if err := gridInit(ctx, cfg.omst, filepath.Join(dir, "root")); err != nil {
			return nil, nil, err
		}
	}
	if root, err = startDaemon(ctx, cfg.omst, dir, "root", cache, "", rootArgs...); err != nil {
		return nil, nil, err
	}
	if cfg.grid {
		tok, err := gridToken(ctx, cfg.omst, root.home)
		if err != nil {
			root.close()
			return nil, nil, err
		}
		childArgs = append(childArgs, "--join", tok)
	}
	if child, err = startDaemon(ctx, cfg.omst, dir, "child", cache, root.tcpAddr, childArgs...); err != nil {
		root.close()
		return nil, nil, err
	}
	if err = child.waitParent(ctx, 20*time.Second); err != nil {
		if ctx.Err() != nil {
			child.close()
			root.close()
			return nil, nil, err
		}
		// The warm-up fetch will tell whether the child reaches its parent.
		logf("warning: %v", err)
	}
	logf("daemons up: root %s, child (parent = root); --cache-size %s each", root.tcpAddr, bytesize.Format(cache))
	return root, child, nil
}

// endSection stops daemons and removes dir.
func endSection(dir string, ds ...*daemon) {
	for _, d := range ds {
		if d != nil {
			d.close()
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		logf("remove %s: %v", dir, err)
	}
}

// put stores data at d under name (untimed helper).
func put(ctx context.Context, d *daemon, name string, data []byte) error {
	octx, cancel := context.WithTimeout(ctx, opTimeout(int64(len(data))))
	defer cancel()
	if _, err := d.client.Put(octx, name, bytes.NewReader(data), rpcbridge.PutOptions{}); err != nil {
		return fmt.Errorf("put %s at %s: %w%s", name, d.name, err, logTail(d.logPath))
	}
	return nil
}

// timedGet fetches name through d's socket into a discarding sink and
// returns the time, checking the byte count.
func timedGet(ctx context.Context, d *daemon, name string, size int64, s *sink) (time.Duration, error) {
	octx, cancel := context.WithTimeout(ctx, opTimeout(size))
	defer cancel()
	s.n = 0
	start := time.Now()
	_, err := d.client.Get(octx, name, s)
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("get %s at %s: %w%s", name, d.name, err, logTail(d.logPath))
	}
	if s.n != size {
		return 0, fmt.Errorf("get %s at %s: %d bytes, want %d", name, d.name, s.n, size)
	}
	return took, nil
}

// warmUp makes one untimed put at root and get at child, so that the
// first timed run does not pay for connection and stream set-up.
func warmUp(ctx context.Context, pl *payload, root, child *daemon, s *sink) error {
	name := fmt.Sprintf("bench/warmup/%d", pl.nonce+1)
	if err := put(ctx, root, name, pl.next(warmupSize)); err != nil {
		return err
	}
	if child != nil {
		_, err := timedGet(ctx, child, name, warmupSize, s)
		return err
	}
	return nil
}

// benchTransfer measures raw-tcp and parent-fetch at -size, interleaved run
// by run so that both see the same machine.
func benchTransfer(ctx context.Context, cfg *config, res *results, pl *payload, dir string) error {
	var root, child *daemon
	s := newSink()
	if cfg.figures["parent-fetch"] {
		var err error
		if root, child, err = startPair(ctx, cfg, dir, transferBytes(cfg)); err != nil {
			return err
		}
		defer endSection(dir, child, root)
		res.version = root.version
		if err := warmUp(ctx, pl, root, child, s); err != nil {
			return err
		}
	}
	var lp *libp2pPair
	if cfg.figures["raw-tcp"] {
		var err error
		if lp, err = newLibp2pPair(ctx); err != nil {
			return err
		}
		defer lp.Close()
	}
	for i := 1; i <= cfg.runs; i++ {
		if cfg.figures["raw-tcp"] {
			d, err := lp.run(ctx, cfg.size, s.buf)
			if err != nil {
				return fmt.Errorf("libp2p-stream run %d: %w", i, err)
			}
			sm := res.add("libp2p-stream", cfg.size, i, d)
			logf("libp2p-stream run %d/%d: %s in %.3fs = %.0f MB/s", i, cfg.runs, bytesize.Format(cfg.size), sm.secs, sm.mbps())
			if pl != nil {
				d, err = chunkFilesRun(filepath.Join(dir, "chunk-files"), pl.next(cfg.size), 1<<20)
				if err != nil {
					return fmt.Errorf("chunk-files run %d: %w", i, err)
				}
				sm = res.add("chunk-files", cfg.size, i, d)
				logf("chunk-files   run %d/%d: %s in %.3fs = %.0f MB/s", i, cfg.runs, bytesize.Format(cfg.size), sm.secs, sm.mbps())
			}
		}
		if cfg.figures["raw-tcp"] {
			d, err := rawTCPRun(ctx, cfg.size, s.buf)
			if err != nil {
				return fmt.Errorf("raw-tcp run %d: %w", i, err)
			}
			sm := res.add("raw-tcp", cfg.size, i, d)
			logf("raw-tcp       run %d/%d: %s in %.3fs = %.0f MB/s", i, cfg.runs, bytesize.Format(cfg.size), sm.secs, sm.mbps())
		}
		if cfg.figures["parent-fetch"] {
			name := fmt.Sprintf("bench/parent-fetch/%d", pl.nonce+1)
			if err := put(ctx, root, name, pl.next(cfg.size)); err != nil {
				return err
			}
			served0, _, err := root.counters(ctx)
			if err != nil {
				return err
			}
			_, fetched0, err := child.counters(ctx)
			if err != nil {
				return err
			}
			rootCPU0, childCPU0 := cpuOf(root), cpuOf(child)
			d, err := timedGet(ctx, child, name, cfg.size, s)
			if err != nil {
				return fmt.Errorf("parent-fetch run %d: %w", i, err)
			}
			rootCPU, childCPU := cpuOf(root)-rootCPU0, cpuOf(child)-childCPU0
			served1, _, err := root.counters(ctx)
			if err != nil {
				return err
			}
			_, fetched1, err := child.counters(ctx)
			if err != nil {
				return err
			}
			res.served = append(res.served, servedRow{run: i, size: cfg.size, served: served1 - served0, fetched: fetched1 - fetched0,
				senderCPU: rootCPU, receiverCPU: childCPU})
			sm := res.add("parent-fetch", cfg.size, i, d)
			gib := float64(cfg.size) / (1 << 30)
			logf("parent-fetch  run %d/%d: %s in %.3fs = %.0f MB/s (root served %s; CPU s/GiB: sender %.2f, receiver %.2f)", i, cfg.runs,
				bytesize.Format(cfg.size), sm.secs, sm.mbps(), bytesize.Format(served1-served0), rootCPU/gib, childCPU/gib)
		}
	}
	return nil
}

// benchFit measures single cold fetches from the parent over the fit sizes,
// then cache hits at the root (which holds every blob it was given) and at
// the child (which holds what it fetched).
func benchFit(ctx context.Context, cfg *config, res *results, pl *payload, dir string) error {
	root, child, err := startPair(ctx, cfg, dir, fitBytes(cfg))
	if err != nil {
		return err
	}
	defer endSection(dir, child, root)
	res.version = root.version
	s := newSink()
	if err := warmUp(ctx, pl, root, child, s); err != nil {
		return err
	}
	sizes := fitSizes(cfg.minFit, cfg.maxFit)
	held := map[int64]string{} // size -> a name both root and child hold
	for _, m := range sizes {
		for i := 1; i <= cfg.runs; i++ {
			name := fmt.Sprintf("bench/fit/%d/%d", m, pl.nonce+1)
			if err := put(ctx, root, name, pl.next(m)); err != nil {
				return err
			}
			d, err := timedGet(ctx, child, name, m, s)
			if err != nil {
				return fmt.Errorf("fit parent-fetch %s run %d: %w", bytesize.Format(m), i, err)
			}
			res.add("fit-"+seriesParent, m, i, d)
			held[m] = name
		}
		logf("fit %-13s %8s: median %.6fs", seriesParent, bytesize.Format(m), medianSecs(res.of("fit-"+seriesParent, m)))
	}
	for _, hit := range []struct {
		series string
		d      *daemon
	}{{seriesLocal, root}, {seriesChildHit, child}} {
		// One untimed get to load the path (and the page cache).
		if _, err := timedGet(ctx, hit.d, held[sizes[0]], sizes[0], s); err != nil {
			return err
		}
		for _, m := range sizes {
			for i := 1; i <= cfg.runs; i++ {
				d, err := timedGet(ctx, hit.d, held[m], m, s)
				if err != nil {
					return fmt.Errorf("fit %s %s run %d: %w", hit.series, bytesize.Format(m), i, err)
				}
				res.add("fit-"+hit.series, m, i, d)
			}
			logf("fit %-13s %8s: median %.6fs", hit.series, bytesize.Format(m), medianSecs(res.of("fit-"+hit.series, m)))
		}
	}
	return nil
}

// benchPut measures puts at one daemon: from the client's memory streamed
// over the socket, and put-file of a file in the page cache, interleaved.
func benchPut(ctx context.Context, cfg *config, res *results, pl *payload, dir string) error {
	d, err := startDaemon(ctx, cfg.omst, dir, "ingest", cacheFor(cfg, putBytes(cfg)), "")
	if err != nil {
		return err
	}
	defer endSection(dir, d)
	res.version = d.version
	if err := warmUp(ctx, pl, d, nil, nil); err != nil {
		return err
	}
	src := filepath.Join(dir, "put-file-source.bin")
	for i := 1; i <= cfg.runs; i++ {
		name := fmt.Sprintf("bench/put-mem/%d", pl.nonce+1)
		data := pl.next(cfg.size)
		octx, cancel := context.WithTimeout(ctx, opTimeout(cfg.size))
		start := time.Now()
		_, err := d.client.Put(octx, name, bytes.NewReader(data), rpcbridge.PutOptions{})
		took := time.Since(start)
		cancel()
		if err != nil {
			return fmt.Errorf("put-mem run %d: %w%s", i, err, logTail(d.logPath))
		}
		sm := res.add("put-mem", cfg.size, i, took)
		logf("put-mem       run %d/%d: %s in %.3fs = %.0f MB/s", i, cfg.runs, bytesize.Format(cfg.size), sm.secs, sm.mbps())

		name = fmt.Sprintf("bench/put-file/%d", pl.nonce+1)
		if err := writeWarmFile(src, pl.next(cfg.size)); err != nil {
			return err
		}
		octx, cancel = context.WithTimeout(ctx, opTimeout(cfg.size))
		start = time.Now()
		_, err = d.client.PutFile(octx, name, src, rpcbridge.PutOptions{})
		took = time.Since(start)
		cancel()
		if err != nil {
			return fmt.Errorf("put-file run %d: %w%s", i, err, logTail(d.logPath))
		}
		sm = res.add("put-file", cfg.size, i, took)
		logf("put-file      run %d/%d: %s in %.3fs = %.0f MB/s", i, cfg.runs, bytesize.Format(cfg.size), sm.secs, sm.mbps())
	}
	return nil
}

// writeWarmFile writes data to path, flushes it to disk (so no write-back
// competes with the timed put) and reads it once so it is in the page cache.
func writeWarmFile(path string, data []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return err
	}
	if _, err := newSink().ReadFrom(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func medianSecs(ss []sample) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = s.secs
	}
	return median(xs)
}
