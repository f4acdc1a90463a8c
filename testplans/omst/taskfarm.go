package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	gosync "sync"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/testground/sdk-go/sync"
)

// The taskfarm case: OmniStorage's experiment (seed 001, Figures 7-9) on
// the emulated grid. The master (the root) holds the initial data; `jobs`
// jobs run on the sites*workers_per_site workers, worker w taking the jobs
// j with j mod workers = w, one after another. A job gets the initial data
// by name through its worker's daemon, computes (sleeps `compute`), puts a
// result of result_size bytes by name and announces it; the master gets
// every result through its own daemon and verifies it by content: a
// result's bytes are a function of the seed, the job and the SHA-256 of the
// initial data (farmResult), which the master computes itself. In mode
// star every worker's parent is the root, which serves each worker its copy
// (OmniRPC alone: the master sends the initial data to every worker; a
// worker's second job reuses its copy, as OmniRPC's auto-initialized
// module does); in mode tree (omst) the data crosses each site's WAN link
// once and the site's workers get it from their head and each other. The
// measure is the makespan: from the common start signal, at which every
// worker starts its first job, to the master's last verified result.

const (
	farmInputName   = "taskfarm/input"
	topicFarmInput  = "omst-farm-input"
	topicFarmDone   = "omst-farm-done"
	farmInputStream = 3 << 40 // payload stream of the initial data
	farmResultBase  = 4 << 40 // payload stream of job j's result: farmResultBase + j
	// farmHeaderLen is the length of a result's header, which names the job
	// and the initial data's SHA-256; result_size must be at least this.
	farmHeaderLen = 128
	// farmSummaryFile is the master's account of the run, beside summary.json.
	farmSummaryFile = "taskfarm.json"
)

// errFarmJob marks an announcement the master refuses: a job out of range,
// announced twice, or under a name other than its worker's.
var errFarmJob = errors.New("bad job announcement")

// farmParams are the case's own parameters (the others are in config).
type farmParams struct {
	jobs    int           // jobs in all
	compute time.Duration // per job
	workers int           // sites * workers_per_site
}

// loadFarmParams reads and checks jobs and compute, and checks result_size
// against the header a result starts with.
func loadFarmParams(p *params, cfg *config) (farmParams, error) {
	fp := farmParams{jobs: p.int("jobs", 32), compute: p.duration("compute", "2s"), workers: cfg.sites * cfg.workersPerSite}
	if p.err != nil {
		return fp, p.err
	}
	switch {
	case fp.jobs < 1:
		return fp, fmt.Errorf("param jobs=%d: want at least 1", fp.jobs)
	case fp.compute < 0:
		return fp, fmt.Errorf("param compute=%s: want a duration >= 0", fp.compute)
	case fp.workers < 1:
		return fp, fmt.Errorf("taskfarm needs at least one worker (sites=%d workers_per_site=%d)", cfg.sites, cfg.workersPerSite)
	case cfg.resultSize < farmHeaderLen:
		return fp, fmt.Errorf("param result_size=%d: want at least %d bytes (a result starts with a %d-byte header naming its job and input)",
			cfg.resultSize, farmHeaderLen, farmHeaderLen)
	case cfg.blobSize < 1:
		return fp, fmt.Errorf("param blob_size=%d: the initial data must have at least one byte", cfg.blobSize)
	}
	return fp, nil
}

// farmWorker is a worker's number among all workers: site*workersPerSite + index.
func farmWorker(site, index, workersPerSite int) int { return site*workersPerSite + index }

// farmJobs returns the jobs worker w of n runs, in the order it runs them:
// every j in [0, jobs) with j mod n == w. Nil when w is not in [0, n).
func farmJobs(w, n, jobs int) []int {
	if n < 1 || w < 0 || w >= n {
		return nil
	}
	var out []int
	for j := w; j < jobs; j += n {
		out = append(out, j)
	}
	return out
}

// farmResultName is the name job's result is put under by the worker
// (site, index): below the worker's own result name, so that a grid's
// worker certificate (prefix results/site-S/worker-I) covers it.
func farmResultName(site, index, job int) string {
	return fmt.Sprintf("%s/job-%04d", resultName(site, index), job)
}

// farmHeader is the first farmHeaderLen bytes of job's result: a line
// naming the job and the initial data's SHA-256, padded with spaces and
// ended by a newline.
func farmHeader(job int, inputSHA string) []byte {
	h := []byte(fmt.Sprintf("omst-taskfarm job=%d input-sha256=%s", job, inputSHA))
	if len(h) > farmHeaderLen-1 {
		h = h[:farmHeaderLen-1]
	}
	h = append(h, bytes.Repeat([]byte{' '}, farmHeaderLen-1-len(h))...)
	return append(h, '\n')
}

// farmResult returns a reader of job's result, size bytes (size >=
// farmHeaderLen): farmHeader(job, inputSHA), then pseudo-random bytes of
// stream farmResultBase+job. A worker that read other initial data, or ran
// another job, produces other bytes.
func farmResult(seed int64, job int, inputSHA string, size int64) io.Reader {
	return io.MultiReader(bytes.NewReader(farmHeader(job, inputSHA)),
		payload(seed, farmResultBase+int64(job), size-farmHeaderLen))
}

// farmResultSHA is the SHA-256 (hex) of farmResult(seed, job, inputSHA,
// size): what the master expects a job's result to hash to.
func farmResultSHA(seed int64, job int, inputSHA string, size int64) string {
	dg := newDigest()
	_, _ = io.Copy(dg, farmResult(seed, job, inputSHA, size))
	return dg.Sum()
}

// farmDone is a worker's announcement of one job: its result (or the
// error that ended it) and when, in seconds from the start signal, the job
// started, had its initial data, had computed and had put its result.
type farmDone struct {
	Job    int    `json:"job"`
	Site   int    `json:"site"`
	Index  int    `json:"index"`
	Name   string `json:"name"`
	ID     string `json:"id"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // as the worker hashed what it put
	Error  string `json:"error,omitempty"`

	Start         float64 `json:"start"`
	Input         float64 `json:"input"`
	Computed      float64 `json:"computed"`
	Put           float64 `json:"put"`
	InputAttempts int     `json:"input_attempts"`
	// Verified is when the master had the result verified (the master's
	// account only).
	Verified float64 `json:"verified,omitempty"`
}

// farmTally is the master's check of the announcements: every job in
// [0, jobs) once, under the name of the worker farmJobs gives it to.
type farmTally struct {
	jobs, workers, workersPerSite int
	seen                          []bool
}

func newFarmTally(jobs, workers, workersPerSite int) *farmTally {
	return &farmTally{jobs: jobs, workers: workers, workersPerSite: workersPerSite, seen: make([]bool, jobs)}
}

// add records an announcement; it returns an error wrapping errFarmJob if
// the job is out of range or already announced, or if it ran on another
// worker than farmJobs assigns it to or its result has another name.
func (t *farmTally) add(d farmDone) error {
	if d.Job < 0 || d.Job >= t.jobs {
		return fmt.Errorf("%w: job %d (from site %d #%d) is not in [0, %d)", errFarmJob, d.Job, d.Site, d.Index, t.jobs)
	}
	if t.seen[d.Job] {
		return fmt.Errorf("%w: job %d announced twice (again from site %d #%d)", errFarmJob, d.Job, d.Site, d.Index)
	}
	t.seen[d.Job] = true
	if w := farmWorker(d.Site, d.Index, t.workersPerSite); d.Index < 0 || d.Index >= t.workersPerSite || w%t.workers != d.Job%t.workers {
		return fmt.Errorf("%w: job %d ran on site %d #%d (worker %d), it belongs to worker %d", errFarmJob, d.Job, d.Site, d.Index, w, d.Job%t.workers)
	}
	if d.Error == "" && d.Name != farmResultName(d.Site, d.Index, d.Job) {
		return fmt.Errorf("%w: job %d's result is named %q, want %q", errFarmJob, d.Job, d.Name, farmResultName(d.Site, d.Index, d.Job))
	}
	return nil
}

// missing returns the jobs not announced, in order.
func (t *farmTally) missing() []int {
	var out []int
	for j, ok := range t.seen {
		if !ok {
			out = append(out, j)
		}
	}
	return out
}

// taskfarmCase holds the master's account between act and the summary.
type taskfarmCase struct {
	fp farmParams

	mu    gosync.Mutex
	dones []farmDone // the master: every announcement, with Verified set
	put   float64    // the master: seconds its put of the initial data took
}

func (*taskfarmCase) name() string                        { return "taskfarm" }
func (*taskfarmCase) workerStartsLate(*instance) bool     { return false }
func (*taskfarmCase) workerParents(in *instance) []string { return []string{in.defaultParent()} }

// prepare (before the start signal, in both modes alike): the master puts
// the initial data and publishes what it is; the workers wait for that.
func (c *taskfarmCase) prepare(ctx context.Context, in *instance) error {
	p := params{re: in.re}
	fp, err := loadFarmParams(&p, in.cfg)
	if err != nil {
		return err
	}
	c.fp = fp
	switch in.role {
	case roleRoot:
		t0 := time.Now()
		bi, err := putPayload(ctx, in.d.client, farmInputName, in.cfg.seed, farmInputStream, in.cfg.blobSize, in.cfg.chunkSize)
		if err != nil {
			return err
		}
		c.put = time.Since(t0).Seconds()
		in.re.RecordMessage("put %s: %d bytes, id %s, %.3fs", bi.Name, bi.Size, bi.ID, c.put)
		in.blob = bi
		_, err = in.sc.Publish(ctx, sync.NewTopic(topicFarmInput, &blobInfo{}), &bi)
		return err
	case roleWorker:
		bi, err := waitFirst[blobInfo](ctx, in.sc, topicFarmInput, nil)
		if err != nil {
			return fmt.Errorf("wait for the master's initial data: %w", err)
		}
		in.blob = *bi
	}
	return nil
}

func (c *taskfarmCase) act(ctx context.Context, in *instance, rec *record) error {
	switch in.role {
	case roleWorker:
		return c.work(ctx, in, rec)
	case roleRoot:
		return c.master(ctx, in, rec)
	}
	rec.OK = true
	return nil
}

// work runs this worker's jobs one after another and announces each. A
// failed job is announced with its error, and so are the jobs after it,
// so that the master does not wait for them.
func (c *taskfarmCase) work(ctx context.Context, in *instance, rec *record) error {
	cfg := in.cfg
	jobs := farmJobs(farmWorker(in.site, in.index, cfg.workersPerSite), c.fp.workers, c.fp.jobs)
	topic := sync.NewTopic(topicFarmDone, &farmDone{})
	var failed error
	for _, j := range jobs {
		d := farmDone{Job: j, Site: in.site, Index: in.index, Name: farmResultName(in.site, in.index, j), Start: in.since()}
		if failed == nil {
			failed = c.runJob(ctx, in, &d)
			if failed != nil {
				failed = fmt.Errorf("job %d: %w", j, failed)
			}
		}
		if failed != nil {
			d.Error = failed.Error()
		} else {
			rec.Bytes += d.Size
		}
		if _, err := in.sc.Publish(ctx, topic, &d); err != nil && failed == nil {
			failed = fmt.Errorf("announce job %d: %w", j, err)
		}
	}
	rec.Seconds = in.since()
	rec.OK = failed == nil
	rec.Note = fmt.Sprintf("jobs %v; seconds = the last job's result put", jobs)
	return failed
}

// runJob is one job: the initial data by name (verified against the
// master's blob ID and SHA-256), the compute, the result put by name.
func (c *taskfarmCase) runJob(ctx context.Context, in *instance, d *farmDone) error {
	var r record
	err := fetchVerify(ctx, in.d.client, in.blob, &r, in.re.RecordMessage)
	d.Input, d.InputAttempts = in.since(), r.Attempts
	if err != nil {
		return fmt.Errorf("initial data: %w", err)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.fp.compute):
	}
	d.Computed = in.since()
	dg := newDigest()
	info, err := in.d.client.Put(ctx, d.Name,
		io.TeeReader(farmResult(in.cfg.seed, d.Job, in.blob.SHA256, in.cfg.resultSize), dg),
		rpcbridge.PutOptions{ChunkSize: int(in.cfg.chunkSize)})
	d.Put = in.since()
	if err != nil {
		return fmt.Errorf("put result %s: %w", d.Name, err)
	}
	d.ID, d.Size, d.SHA256 = info.ID, dg.n, dg.Sum()
	return nil
}

// master takes the jobs' announcements as they come and gets and
// verifies each result, concurrently (one API connection each), until
// every job is announced; rec.Seconds is then the makespan.
func (c *taskfarmCase) master(ctx context.Context, in *instance, rec *record) error {
	cfg := in.cfg
	tally := newFarmTally(c.fp.jobs, c.fp.workers, cfg.workersPerSite)
	ch := make(chan *farmDone, c.fp.jobs)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := in.sc.Subscribe(sctx, sync.NewTopic(topicFarmDone, &farmDone{}), ch)
	if err != nil {
		return err
	}
	var (
		wg    gosync.WaitGroup
		mu    gosync.Mutex
		errs  []error
		total int64
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	fetch := func(d farmDone) {
		defer wg.Done()
		r := record{Case: c.name(), Mode: cfg.mode, Role: "root-fetch", Site: d.Site, Index: d.Index, Instance: in.tag,
			Note: fmt.Sprintf("job %d", d.Job)}
		// The master's own expectation, not the worker's hash: the result
		// of this job computed on the initial data the master put.
		want := blobInfo{Name: d.Name, ID: d.ID, Size: cfg.resultSize,
			SHA256: farmResultSHA(cfg.seed, d.Job, in.blob.SHA256, cfg.resultSize)}
		cl, err := in.d.dial()
		if err == nil {
			err = fetchVerify(ctx, cl, want, &r, in.re.RecordMessage)
			cl.Close()
		}
		r.Seconds, r.OK = in.since(), err == nil
		d.Verified = r.Seconds
		if err != nil {
			r.Error = err.Error()
			fail(fmt.Errorf("job %d: %w", d.Job, err))
		}
		in.out.Write(r)
		mu.Lock()
		defer mu.Unlock()
		in.local = append(in.local, r)
		c.mu.Lock()
		c.dones = append(c.dones, d)
		c.mu.Unlock()
		if err == nil {
			total += r.Bytes
		}
	}
	var waitErr error
	for n := 0; n < c.fp.jobs && waitErr == nil; {
		select {
		case d := <-ch:
			n++
			if err := tally.add(*d); err != nil {
				fail(err)
				continue
			}
			if d.Error != "" {
				fail(fmt.Errorf("job %d failed on site %d #%d: %s", d.Job, d.Site, d.Index, d.Error))
				c.mu.Lock()
				c.dones = append(c.dones, *d)
				c.mu.Unlock()
				continue
			}
			wg.Add(1)
			go fetch(*d)
		case err := <-sub.Done():
			waitErr = fmt.Errorf("job topic closed: %v", err)
		case <-ctx.Done():
			waitErr = fmt.Errorf("jobs %v never announced: %w", tally.missing(), ctx.Err())
		}
	}
	wg.Wait()
	rec.Seconds, rec.Bytes = in.since(), total
	if waitErr != nil {
		errs = append(errs, waitErr)
	}
	rec.OK = len(errs) == 0
	rec.Note = "seconds = makespan: the start signal to the last verified result"
	return errors.Join(errs...)
}

// measured: the master's verified results; one per job.
func (c *taskfarmCase) measured(_ *instance, _ []record, own []record) ([]record, int) {
	return own, c.fp.jobs
}

// farmAccount is taskfarm.json: the run's shape, its makespan and phases,
// what crossed each site's WAN link, and every job.
type farmAccount struct {
	Mode           string  `json:"mode"`
	Sites          int     `json:"sites"`
	WorkersPerSite int     `json:"workers_per_site"`
	Jobs           int     `json:"jobs"`
	InputBytes     int64   `json:"input_bytes"`
	ResultBytes    int64   `json:"result_bytes"`
	ComputeSeconds float64 `json:"compute_seconds"`
	// MasterPutSeconds: the master's put of the initial data, before the
	// start signal (not in the makespan, the same in both modes).
	MasterPutSeconds float64 `json:"master_put_seconds"`
	// Makespan: from the first job's start to the last verified result
	// at the master (seconds; the start signal is 0).
	FirstStart   float64 `json:"first_start"`
	LastVerified float64 `json:"last_verified"`
	Makespan     float64 `json:"makespan"`
	// InputFirstMax: the latest any worker had the initial data for its
	// first job; InputFirstMedian the median over the workers.
	InputFirstMax    float64 `json:"input_first_max"`
	InputFirstMedian float64 `json:"input_first_median"`
	// SiteWANInMiB: per site, what its head's WAN interface received from
	// the start signal until the workers were done (namespace harness only).
	SiteWANInMiB []float64  `json:"site_wan_in_mib,omitempty"`
	Verified     int        `json:"verified"`
	Pass         bool       `json:"pass"`
	JobsDone     []farmDone `json:"jobs_done"`
}

// account builds the master's account from the announcements and every
// instance's record; pure.
func (c *taskfarmCase) account(cfg *config, all []record, pass bool) farmAccount {
	c.mu.Lock()
	dones := append([]farmDone(nil), c.dones...)
	c.mu.Unlock()
	sort.Slice(dones, func(i, j int) bool { return dones[i].Job < dones[j].Job })
	a := farmAccount{Mode: cfg.mode, Sites: cfg.sites, WorkersPerSite: cfg.workersPerSite, Jobs: c.fp.jobs,
		InputBytes: cfg.blobSize, ResultBytes: cfg.resultSize, ComputeSeconds: c.fp.compute.Seconds(),
		MasterPutSeconds: c.put, Pass: pass, JobsDone: dones}
	first := map[[2]int]farmDone{}
	a.FirstStart = -1
	for _, d := range dones {
		if a.FirstStart < 0 || d.Start < a.FirstStart {
			a.FirstStart = d.Start
		}
		if d.Error == "" && d.Verified > 0 {
			a.Verified++
			a.LastVerified = max(a.LastVerified, d.Verified)
		}
		k := [2]int{d.Site, d.Index}
		if f, ok := first[k]; !ok || d.Job < f.Job {
			first[k] = d
		}
	}
	if a.FirstStart < 0 {
		a.FirstStart = 0
	}
	a.Makespan = a.LastVerified - a.FirstStart
	var ins []float64
	for _, d := range first {
		ins = append(ins, d.Input-d.Start)
	}
	if len(ins) > 0 {
		sort.Float64s(ins)
		a.InputFirstMax, a.InputFirstMedian = ins[len(ins)-1], ins[len(ins)/2]
	}
	wan := make([]float64, cfg.sites)
	seen := 0
	for _, r := range all {
		if r.Role == roleHead && r.WANIface != "" && r.Site >= 0 && r.Site < cfg.sites {
			wan[r.Site] = float64(r.WANRxBytes) / (1 << 20)
			seen++
		}
	}
	if seen == cfg.sites {
		a.SiteWANInMiB = wan
	}
	return a
}

// extras (the master, once every instance has reported) writes
// taskfarm.json beside summary.json.
func (c *taskfarmCase) extras(in *instance, all []record, s *summary) {
	a := c.account(in.cfg, all, len(s.Failures) == 0)
	b, _ := json.MarshalIndent(a, "", "  ")
	if err := os.WriteFile(filepath.Join(in.re.TestOutputsPath, farmSummaryFile), append(b, '\n'), 0o644); err != nil {
		in.re.RecordMessage("write %s: %v", farmSummaryFile, err)
	}
}

func (c *taskfarmCase) notes(in *instance, all []record) []string {
	a := c.account(in.cfg, all, true)
	out := []string{fmt.Sprintf("taskfarm %s: %d jobs on %d workers, initial data %s, compute %s, results %s each; makespan %.3fs "+
		"(first job start %.3fs, last result verified %.3fs); initial data for the first jobs: median %.3fs, max %.3fs; the master's put %.3fs before the start",
		in.cfg.mode, a.Jobs, c.fp.workers, mib(uint64(a.InputBytes)), c.fp.compute, mib(uint64(a.ResultBytes)), a.Makespan,
		a.FirstStart, a.LastVerified, a.InputFirstMedian, a.InputFirstMax, a.MasterPutSeconds)}
	if a.SiteWANInMiB != nil {
		out = append(out, fmt.Sprintf("into each site over its WAN link (wire, MiB): %.1f", a.SiteWANInMiB))
	}
	return out
}
