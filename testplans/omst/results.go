package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	gosync "sync"

	"github.com/testground/sdk-go/sync"
)

// record is one line of results.jsonl: what one instance (or one of the
// root's gather fetches) did.
type record struct {
	Case     string  `json:"case"`
	Mode     string  `json:"mode"`
	Role     string  `json:"role"`
	Site     int     `json:"site"`
	Index    int     `json:"index"`
	Instance string  `json:"instance"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"` // from the common start signal to verified bytes
	OK       bool    `json:"ok"`
	Error    string  `json:"error,omitempty"`

	ID       string `json:"id,omitempty"` // blob ID (CID) verified
	Attempts int    `json:"attempts,omitempty"`
	Churn    string `json:"churn,omitempty"` // churn case: stayer, leaver or late
	// Seconds from the start signal to the event: the head's kill (failover),
	// a leaver's exit or a late joiner's daemon being up (churn).
	EventSeconds float64 `json:"event_seconds,omitempty"`
	Note         string  `json:"note,omitempty"`

	BytesServed  uint64 `json:"bytes_served,omitempty"`
	BytesFetched uint64 `json:"bytes_fetched,omitempty"`
	PeerErrors   uint64 `json:"peer_errors,omitempty"`
	// Chunk bytes by kind of source (bytes_in) and by the asker's
	// relation (bytes_out), as the daemon counts them; redirects.
	BytesIn         map[string]uint64 `json:"bytes_in,omitempty"`
	BytesOut        map[string]uint64 `json:"bytes_out,omitempty"`
	RedirectsSent   uint64            `json:"redirects_sent,omitempty"`
	RedirectsTaken  uint64            `json:"redirects_taken,omitempty"`
	SiblingFailures uint64            `json:"sibling_failures,omitempty"`
	Hedges          uint64            `json:"hedges,omitempty"`
	HedgesDeclined  uint64            `json:"hedges_declined,omitempty"`
	// What the hedging cost (daemons of 1.2.1 and before report none of
	// these but hedges and hedges_declined): hedges a relay declined for
	// its port's backlog or its budget (of hedges_declined), served with
	// the chunk; hedges a worker held back for its budget; plain
	// GET_DIRECTs a worker sent after giving up on a sibling and those a
	// relay served, or (fetch 1.4.0) redirected to a complete holder or
	// answered BUSY.
	HedgesBusy        uint64 `json:"hedges_busy,omitempty"`
	HedgesServed      uint64 `json:"hedges_served,omitempty"`
	HedgesDeferred    uint64 `json:"hedges_deferred,omitempty"`
	Directs           uint64 `json:"directs,omitempty"`
	DirectsServed     uint64 `json:"directs_served,omitempty"`
	DirectsRedirected uint64 `json:"directs_redirected,omitempty"`
	DirectsBusy       uint64 `json:"directs_busy,omitempty"`
	// DuplicateBytes (a worker that verified the blob) is the verified
	// chunk bytes it received beyond one copy of the blob: copies that
	// lost a race (a hedge, a GET_DIRECT and the sibling's reply all
	// delivered). CPUSeconds is the user and system time its daemon had
	// used when the counters were read (from /proc; 0 where unreadable).
	DuplicateBytes uint64  `json:"duplicate_bytes,omitempty"`
	CPUSeconds     float64 `json:"cpu_seconds,omitempty"`
	// IdleCPUSeconds (idle case) is the CPU its daemon used while idle.
	IdleCPUSeconds float64 `json:"idle_cpu_seconds,omitempty"`
	// Chunk bytes pushed with lookups' answers across sites (names 1.2.0).
	PushSent     uint64 `json:"push_sent,omitempty"`
	PushReceived uint64 `json:"push_received,omitempty"`

	// Heads under the namespace harness: bytes received and sent on the
	// WAN link's interface (WANIface) from the start signal until every
	// worker was done, as the kernel counts them (headers included).
	WANIface   string `json:"wan_iface,omitempty"`
	WANRxBytes uint64 `json:"wan_rx_bytes,omitempty"`
	WANTxBytes uint64 `json:"wan_tx_bytes,omitempty"`

	// dht case: a reading worker's gets (one per result of the other
	// sites); the root's and heads' counters over the reading phase.
	Gets []getTime     `json:"gets,omitempty"`
	Read *readCounters `json:"read,omitempty"`

	// Grid (param grid): the daemon's membership as its status reported
	// it (role and prefixes from its start, counters from the end).
	Grid *gridStatus `json:"grid,omitempty"`
}

// getTime is one get of the dht case.
type getTime struct {
	Name     string  `json:"name"`
	Site     int     `json:"site"` // the putter's
	Index    int     `json:"index"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"` // from the start signal to verified bytes
	Attempts int     `json:"attempts"`
	OK       bool    `json:"ok"`
	Error    string  `json:"error,omitempty"`
}

// readCounters are a daemon's counters over the dht case's reading phase:
// from the start signal until every worker was done.
type readCounters struct {
	BytesServed  uint64            `json:"bytes_served"`
	BytesFetched uint64            `json:"bytes_fetched"`
	BytesIn      map[string]uint64 `json:"bytes_in"`
	BytesOut     map[string]uint64 `json:"bytes_out"`
}

// summary is what the root writes to summary.json when every instance has
// reported.
type summary struct {
	Case           string  `json:"case"`
	Mode           string  `json:"mode"`
	Grid           bool    `json:"grid"` // param grid: the daemons were members of a grid (closed to outsiders)
	Run            string  `json:"run"`
	Sites          int     `json:"sites"`
	WorkersPerSite int     `json:"workers_per_site"`
	Bytes          int64   `json:"bytes"` // per measured transfer
	Expected       int     `json:"expected"`
	Verified       int     `json:"verified"`
	TimeToLast     float64 `json:"time_to_last"` // seconds, start signal to the last verified transfer
	Min            float64 `json:"min"`
	Median         float64 `json:"median"`
	Max            float64 `json:"max"`
	RootServed     uint64  `json:"root_bytes_served"`
	// HeadToChildren is, per site, the chunk bytes its head sent its
	// workers, in blobs (bytes / Bytes); SiteIn the chunk bytes that
	// entered the site from outside it (the head's from its parent, plus
	// in mode star the workers' from theirs), in blobs.
	HeadToChildren []float64 `json:"head_to_children_blobs,omitempty"`
	SiteIn         []float64 `json:"site_in_blobs,omitempty"`
	// SiteInWire and SiteOutWire are, per site, the bytes its head's WAN
	// interface received and sent from the start signal until every worker
	// was done, in blobs: what crossed the site's WAN link, with TCP/IP
	// headers, TLS and everything else (only under the namespace harness).
	SiteInWire  []float64 `json:"site_in_wire_blobs,omitempty"`
	SiteOutWire []float64 `json:"site_out_wire_blobs,omitempty"`
	// Waste is, per site, what its hedging and its GET_DIRECTs cost
	// (siteWaste), with the CPU seconds of its daemons.
	Waste []siteWaste `json:"waste,omitempty"`
	// CPUByRole is the CPU seconds of the daemons by role (root, head,
	// worker) when the counters were read at the end, from their start:
	// mean and most of one. IdleCPUByRole (idle case) is the same over
	// the idle time only.
	CPUByRole     map[string]roleCPU `json:"cpu_by_role,omitempty"`
	IdleCPUByRole map[string]roleCPU `json:"idle_cpu_by_role,omitempty"`
	// dht case: the topology, whether the daemons ran the DHT, what the
	// root served while the results were read (bytes, and as a share of
	// the bytes the workers read).
	Topology       string  `json:"topology,omitempty"`
	DHT            *bool   `json:"dht,omitempty"`
	RootServedRead *uint64 `json:"root_bytes_served_read,omitempty"`
	RootShareRead  float64 `json:"root_share_read,omitempty"`

	Pass     bool     `json:"pass"`
	Failures []string `json:"failures,omitempty"`
	Notes    []string `json:"notes,omitempty"`
	Records  []record `json:"records"`
}

// resultsFile appends records as JSON lines.
type resultsFile struct {
	mu gosync.Mutex
	f  *os.File
}

func openResults(dir string) (*resultsFile, error) {
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, "results.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &resultsFile{f: f}, nil
}

func (r *resultsFile) Write(rec record) {
	b, _ := json.Marshal(rec)
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.f.Write(append(b, '\n'))
}

func (r *resultsFile) Close() error { return r.f.Close() }

// collect (root only) gathers every instance's record from the results
// topic, writes summary.json and returns an error if the case failed.
func (in *instance) collect(ctx context.Context, own record) error {
	re := in.re
	ch := make(chan *record, re.TestInstanceCount)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := in.sc.Subscribe(sctx, sync.NewTopic(topicResults, &record{}), ch)
	if err != nil {
		return err
	}
	var all []record
	var waitErr error
	for len(all) < re.TestInstanceCount && waitErr == nil {
		select {
		case r := <-ch:
			all = append(all, *r)
		case err := <-sub.Done():
			waitErr = fmt.Errorf("results topic closed: %v", err)
		case <-ctx.Done():
			waitErr = fmt.Errorf("only %d of %d instances reported: %w", len(all), re.TestInstanceCount, ctx.Err())
		}
	}
	rank := map[string]int{roleRoot: 0, roleHead: 1, roleWorker: 2}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Role != all[j].Role {
			return rank[all[i].Role] < rank[all[j].Role]
		}
		if all[i].Site != all[j].Site {
			return all[i].Site < all[j].Site
		}
		return all[i].Index < all[j].Index
	})

	s := summary{Case: in.c.name(), Mode: in.cfg.mode, Grid: in.cfg.grid, Run: re.TestRun, Sites: in.cfg.sites,
		WorkersPerSite: in.cfg.workersPerSite, Records: all}
	if waitErr != nil {
		s.Failures = append(s.Failures, waitErr.Error())
	}
	for _, r := range all {
		if !r.OK {
			s.Failures = append(s.Failures, fmt.Sprintf("%s (%s site %d #%d): %s", r.Instance, r.Role, r.Site, r.Index, r.Error))
		}
		if r.Role == roleRoot {
			s.RootServed = r.BytesServed
		}
	}
	measured, expected := in.c.measured(in, all, in.local)
	s.Expected = expected
	var secs []float64
	for _, r := range measured {
		if r.OK {
			secs = append(secs, r.Seconds)
			s.Bytes = r.Bytes
		}
	}
	s.Verified = len(secs)
	if s.Verified < s.Expected {
		s.Failures = append(s.Failures, fmt.Sprintf("%d of %d transfers verified", s.Verified, s.Expected))
	}
	if len(secs) > 0 {
		sort.Float64s(secs)
		s.Min, s.Max, s.Median = secs[0], secs[len(secs)-1], secs[len(secs)/2]
		s.TimeToLast = s.Max
	}
	s.HeadToChildren, s.SiteIn = siteBytes(in.cfg, all, s.Bytes)
	s.SiteInWire, s.SiteOutWire = siteWire(in.cfg, all, s.Bytes)
	s.Waste = wasteBySite(in.cfg, all, s.Bytes)
	s.CPUByRole = cpuByRole(all, func(r record) float64 { return r.CPUSeconds })
	s.Notes = append(s.Notes, caseNotes(in, all)...)
	if in.cfg.grid {
		s.Notes = append(s.Notes, gridNote(all))
	}
	if x, ok := in.c.(summaryExtras); ok {
		x.extras(in, all, &s)
	}
	s.Pass = len(s.Failures) == 0

	b, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(filepath.Join(re.TestOutputsPath, "summary.json"), append(b, '\n'), 0o644); err != nil {
		re.RecordMessage("write summary: %v", err)
	}
	re.R().RecordPoint(fmt.Sprintf("%s_time_to_last_seconds", s.Case), s.TimeToLast)
	re.R().RecordPoint(fmt.Sprintf("%s_verified", s.Case), float64(s.Verified))
	re.RecordMessage("SUMMARY case=%s mode=%s verified=%d/%d time_to_last=%.3fs median=%.3fs pass=%v",
		s.Case, s.Mode, s.Verified, s.Expected, s.TimeToLast, s.Median, s.Pass)
	for _, n := range s.Notes {
		re.RecordMessage("note: %s", n)
	}
	for _, f := range s.Failures {
		re.RecordMessage("failure: %s", f)
	}
	if !s.Pass {
		return fmt.Errorf("%s/%s failed: %d failure(s), first: %s", s.Case, s.Mode, len(s.Failures), s.Failures[0])
	}
	return nil
}

// summaryExtras is implemented by cases that fill fields of the summary
// of their own.
type summaryExtras interface {
	extras(in *instance, all []record, s *summary)
}

// siteBytes returns, per site, what its head sent to its workers and what
// entered the site from outside, in blobs of size bytes.
func siteBytes(cfg *config, all []record, size int64) (headOut, in []float64) {
	if size <= 0 {
		return nil, nil
	}
	headOut = make([]float64, cfg.sites)
	in = make([]float64, cfg.sites)
	for _, r := range all {
		if r.Site < 0 || r.Site >= cfg.sites {
			continue
		}
		switch {
		case r.Role == roleHead:
			headOut[r.Site] += float64(r.BytesOut["child"]) / float64(size)
			in[r.Site] += float64(r.BytesIn["parent"]) / float64(size)
		case r.Role == roleWorker && cfg.mode == modeStar:
			in[r.Site] += float64(r.BytesIn["parent"]) / float64(size)
		}
	}
	return headOut, in
}

// siteWaste is what one site's hedging and GET_DIRECTs cost: the hedges
// its workers sent and held back, what its head did with them, the plain
// GET_DIRECTs, the verified bytes its workers received beyond one copy
// each (in blobs), and the CPU seconds its daemons used (head and workers:
// mean and most of one).
type siteWaste struct {
	Site              int     `json:"site"`
	Hedges            uint64  `json:"hedges"`
	HedgesDeferred    uint64  `json:"hedges_deferred"`
	HedgesDeclined    uint64  `json:"hedges_declined"`
	HedgesBusy        uint64  `json:"hedges_busy"`
	HedgesServed      uint64  `json:"hedges_served"`
	Directs           uint64  `json:"directs"`
	DirectsServed     uint64  `json:"directs_served"`
	DirectsRedirected uint64  `json:"directs_redirected"`
	DirectsBusy       uint64  `json:"directs_busy"`
	SiblingFailures   uint64  `json:"sibling_failures"`
	DuplicateBlobs    float64 `json:"duplicate_blobs"`
	MaxDuplicate      float64 `json:"max_duplicate_blobs"` // of one worker
	CPUMean           float64 `json:"cpu_seconds_mean"`
	CPUMax            float64 `json:"cpu_seconds_max"`
}

// duplicateBytes is what a worker that verified a blob of size bytes
// received beyond one copy of it, by its daemon's counters of verified
// chunk bytes in (bytesIn, by kind of source).
func duplicateBytes(bytesIn map[string]uint64, size int64) uint64 {
	var n uint64
	for _, v := range bytesIn {
		n += v
	}
	if size <= 0 || n <= uint64(size) {
		return 0
	}
	return n - uint64(size)
}

// wasteBySite sums the records' hedging counters per site (nil when no
// blob was measured).
func wasteBySite(cfg *config, all []record, size int64) []siteWaste {
	if size <= 0 || cfg.sites <= 0 {
		return nil
	}
	w := make([]siteWaste, cfg.sites)
	daemons := make([]int, cfg.sites)
	for i := range w {
		w[i].Site = i
	}
	for _, r := range all {
		if r.Site < 0 || r.Site >= cfg.sites {
			continue
		}
		sw := &w[r.Site]
		switch r.Role {
		case roleHead:
			sw.HedgesDeclined += r.HedgesDeclined
			sw.HedgesBusy += r.HedgesBusy
			sw.HedgesServed += r.HedgesServed
			sw.DirectsServed += r.DirectsServed
			sw.DirectsRedirected += r.DirectsRedirected
			sw.DirectsBusy += r.DirectsBusy
		case roleWorker:
			sw.Hedges += r.Hedges
			sw.HedgesDeferred += r.HedgesDeferred
			sw.Directs += r.Directs
			sw.SiblingFailures += r.SiblingFailures
			d := float64(r.DuplicateBytes) / float64(size)
			sw.DuplicateBlobs += d
			sw.MaxDuplicate = max(sw.MaxDuplicate, d)
		default:
			continue
		}
		if r.CPUSeconds > 0 {
			sw.CPUMean += r.CPUSeconds
			sw.CPUMax = max(sw.CPUMax, r.CPUSeconds)
			daemons[r.Site]++
		}
	}
	for i := range w {
		if daemons[i] > 0 {
			w[i].CPUMean /= float64(daemons[i])
		}
	}
	return w
}

// roleCPU is the CPU seconds of the daemons of one role.
type roleCPU struct {
	Daemons int     `json:"daemons"`
	Mean    float64 `json:"mean"`
	Max     float64 `json:"max"`
}

// cpuByRole returns, per role, the mean and most of seconds(r) over the
// records that have a positive figure (a daemon whose /proc was
// unreadable has none); nil when none has.
func cpuByRole(all []record, seconds func(record) float64) map[string]roleCPU {
	var m map[string]roleCPU
	for _, r := range all {
		s := seconds(r)
		if s <= 0 || r.Role == "" {
			continue
		}
		if m == nil {
			m = map[string]roleCPU{}
		}
		c := m[r.Role]
		c.Mean += s // the sum until the division below
		c.Max = max(c.Max, s)
		c.Daemons++
		m[r.Role] = c
	}
	for role, c := range m {
		c.Mean /= float64(c.Daemons)
		m[role] = c
	}
	return m
}

// siteWire returns, per site, the bytes its head's WAN interface received
// and sent, in blobs of size bytes; nil unless every head measured them.
func siteWire(cfg *config, all []record, size int64) (in, out []float64) {
	if size <= 0 {
		return nil, nil
	}
	in, out = make([]float64, cfg.sites), make([]float64, cfg.sites)
	seen := 0
	for _, r := range all {
		if r.Role != roleHead || r.WANIface == "" || r.Site < 0 || r.Site >= cfg.sites {
			continue
		}
		in[r.Site] = float64(r.WANRxBytes) / float64(size)
		out[r.Site] = float64(r.WANTxBytes) / float64(size)
		seen++
	}
	if seen != cfg.sites {
		return nil, nil
	}
	return in, out
}

// gridNote says how many instances' daemons were members of the grid and
// what the root saw.
func gridNote(all []record) string {
	members, joins, refused, denied := 0, uint64(0), uint64(0), uint64(0)
	admitted := -1
	for _, r := range all {
		if r.Grid == nil || r.Grid.Role == "" {
			continue
		}
		members++
		refused += r.Grid.Refused
		denied += r.Grid.Denied
		if r.Role == roleRoot {
			joins, admitted = r.Grid.Joins, r.Grid.Admitted
		}
	}
	return fmt.Sprintf("grid: %d of %d instances' daemons were members; the root served %d join request(s) and admitted %d peer(s) at the end; "+
		"%d certificate(s) refused and %d stream(s) denied in all", members, len(all), joins, admitted, refused, denied)
}
