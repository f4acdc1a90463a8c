package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	gosync "sync"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/testground/sdk-go/sync"
)

const (
	broadcastName = "testplan/broadcast"
	topicBlob     = "omst-blob"
	topicGather   = "omst-gather"
)

// ---- shared by broadcast, failover and churn ----

// putBroadcast (root) puts the blob and publishes its blobInfo;
// waitBroadcast (workers) waits for it.
func putBroadcast(ctx context.Context, in *instance) error {
	t0 := time.Now()
	bi, err := putPayload(ctx, in.d.client, broadcastName, in.cfg.seed, 0, in.cfg.blobSize, in.cfg.chunkSize)
	if err != nil {
		return err
	}
	in.re.RecordMessage("put %s: %d bytes, id %s, sha256 %s, %.3fs", bi.Name, bi.Size, bi.ID, bi.SHA256, time.Since(t0).Seconds())
	in.blob = bi
	_, err = in.sc.Publish(ctx, sync.NewTopic(topicBlob, &blobInfo{}), &bi)
	return err
}

func prepareBroadcast(ctx context.Context, in *instance) error {
	switch in.role {
	case roleRoot:
		return putBroadcast(ctx, in)
	case roleWorker:
		bi, err := waitFirst[blobInfo](ctx, in.sc, topicBlob, nil)
		if err != nil {
			return fmt.Errorf("wait for the root's blob: %w", err)
		}
		in.blob = *bi
	}
	return nil
}

// fetchBroadcast is a worker's part: get the blob and verify it.
func fetchBroadcast(ctx context.Context, in *instance, rec *record) error {
	err := fetchVerify(ctx, in.d.client, in.blob, rec, in.re.RecordMessage)
	rec.Seconds = in.since()
	rec.OK = err == nil
	return err
}

func rootOrHead(in *instance, rec *record) {
	rec.OK = true
	if in.role == roleRoot {
		rec.Bytes, rec.ID = in.blob.Size, in.blob.ID
	}
}

// workerRecords: the measured records are the workers'.
func workerRecords(all []record, keep func(record) bool) []record {
	var out []record
	for _, r := range all {
		if r.Role == roleWorker && (keep == nil || keep(r)) {
			out = append(out, r)
		}
	}
	return out
}

// ---- broadcast ----

// broadcastCase: the root puts blob_size bytes; every worker gets them.
type broadcastCase struct{}

func (broadcastCase) name() string                        { return "broadcast" }
func (broadcastCase) workerStartsLate(*instance) bool     { return false }
func (broadcastCase) workerParents(in *instance) []string { return []string{in.defaultParent()} }
func (broadcastCase) prepare(ctx context.Context, in *instance) error {
	return prepareBroadcast(ctx, in)
}

func (broadcastCase) act(ctx context.Context, in *instance, rec *record) error {
	if in.role == roleWorker {
		return fetchBroadcast(ctx, in, rec)
	}
	rootOrHead(in, rec)
	return nil
}

func (broadcastCase) measured(in *instance, all, _ []record) ([]record, int) {
	return workerRecords(all, nil), in.cfg.sites * in.cfg.workersPerSite
}

// ---- gather ----

// gatherCase: every worker puts result_size bytes; the root fetches them
// all concurrently. The measure is the root's time to each verified result.
type gatherCase struct{}

func (gatherCase) name() string                             { return "gather" }
func (gatherCase) workerStartsLate(*instance) bool          { return false }
func (gatherCase) workerParents(in *instance) []string      { return []string{in.defaultParent()} }
func (gatherCase) prepare(context.Context, *instance) error { return nil }

func (gatherCase) act(ctx context.Context, in *instance, rec *record) error {
	switch in.role {
	case roleWorker:
		name := resultName(in.site, in.index)
		stream := int64(1+in.site)<<20 + int64(in.index)
		bi, err := putPayload(ctx, in.d.client, name, in.cfg.seed, stream, in.cfg.resultSize, in.cfg.chunkSize)
		rec.Seconds = in.since()
		if err != nil {
			return err
		}
		bi.Site, bi.Index = in.site, in.index
		rec.Bytes, rec.ID, rec.OK = bi.Size, bi.ID, true
		rec.Note = "seconds = local put"
		_, err = in.sc.Publish(ctx, sync.NewTopic(topicGather, &blobInfo{}), &bi)
		return err
	case roleRoot:
		return gatherAtRoot(ctx, in, rec)
	}
	rec.OK = true
	return nil
}

// gatherAtRoot fetches every worker's result as soon as it is announced on
// the sync topic, each on its own API connection.
func gatherAtRoot(ctx context.Context, in *instance, rec *record) error {
	want := in.cfg.sites * in.cfg.workersPerSite
	ch := make(chan *blobInfo, want)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := in.sc.Subscribe(sctx, sync.NewTopic(topicGather, &blobInfo{}), ch)
	if err != nil {
		return err
	}
	var (
		wg    gosync.WaitGroup
		mu    gosync.Mutex
		errs  []error
		total int64
	)
	fetch := func(bi blobInfo) {
		defer wg.Done()
		r := record{Case: "gather", Mode: in.cfg.mode, Role: "root-fetch", Site: bi.Site, Index: bi.Index,
			Instance: in.tag}
		cl, err := in.d.dial()
		if err == nil {
			err = fetchVerify(ctx, cl, bi, &r, in.re.RecordMessage)
			cl.Close()
		}
		r.Seconds, r.OK = in.since(), err == nil
		if err != nil {
			r.Error = err.Error()
		}
		in.out.Write(r)
		mu.Lock()
		defer mu.Unlock()
		in.local = append(in.local, r)
		if err != nil {
			errs = append(errs, err)
		} else {
			total += r.Bytes
		}
	}
	var waitErr error
	for n := 0; n < want && waitErr == nil; {
		select {
		case bi := <-ch:
			n++
			wg.Add(1)
			go fetch(*bi)
		case err := <-sub.Done():
			waitErr = fmt.Errorf("gather topic closed: %v", err)
		case <-ctx.Done():
			waitErr = fmt.Errorf("only %d of %d results announced: %w", n, want, ctx.Err())
		}
	}
	wg.Wait()
	rec.Seconds, rec.Bytes = in.since(), total
	if waitErr != nil {
		errs = append(errs, waitErr)
	}
	rec.OK = len(errs) == 0
	return errors.Join(errs...)
}

func (gatherCase) measured(in *instance, _ []record, own []record) ([]record, int) {
	return own, in.cfg.sites * in.cfg.workersPerSite
}

// ---- failover ----

// failoverCase: a broadcast during which the head of kill_site is
// SIGKILLed; its workers (started with --parent head --parent root) must
// finish through the root with the right bytes.
type failoverCase struct{}

func (failoverCase) name() string                    { return "failover" }
func (failoverCase) workerStartsLate(*instance) bool { return false }
func (failoverCase) workerParents(in *instance) []string {
	if in.cfg.mode == modeStar {
		return []string{in.root.Addr}
	}
	return []string{in.head.Addr, in.root.Addr}
}

func (failoverCase) killsThisHead(in *instance) bool {
	return in.role == roleHead && (in.cfg.killSite < 0 || in.cfg.killSite == in.site)
}

func (failoverCase) prepare(ctx context.Context, in *instance) error {
	if in.cfg.killAfter <= 0 && in.cfg.killAtFraction <= 0 {
		return errors.New("failover needs kill_after > 0 or kill_at_fraction > 0")
	}
	if in.cfg.killSite >= in.cfg.sites {
		return fmt.Errorf("kill_site=%d: there are only %d sites", in.cfg.killSite, in.cfg.sites)
	}
	if in.role == roleWorker && in.cfg.mode != modeStar {
		// With one --parent the daemon must take the first as its parent;
		// a daemon whose --parent is a plain string flag takes the last
		// one (the root) and the case would pass without any failover.
		st, err := in.d.client.Status(ctx)
		if err != nil {
			return err
		}
		if !sameNode(st.Parent, in.head.PeerID) {
			return fmt.Errorf("the daemon's parent is %q, not the first --parent (head %s): this omst does not take "+
				"--parent more than once (preferred parent + fallbacks); see `omst daemon --help`", st.Parent, in.head.PeerID)
		}
	}
	return prepareBroadcast(ctx, in)
}

func (c failoverCase) act(ctx context.Context, in *instance, rec *record) error {
	switch {
	case in.role == roleWorker:
		return fetchBroadcast(ctx, in, rec)
	case c.killsThisHead(in):
		return killHead(ctx, in, rec)
	}
	rootOrHead(in, rec)
	return nil
}

// killHead SIGKILLs this head's daemon after kill_after, or once it has
// fetched kill_at_fraction of the blob, whichever comes first.
func killHead(ctx context.Context, in *instance, rec *record) error {
	cfg := in.cfg
	threshold := uint64(cfg.killAtFraction * float64(cfg.blobSize))
	reason := ""
	if cfg.mode == modeStar && cfg.killAfter <= 0 {
		// No worker is under a head in star mode, so the head fetches
		// nothing: kill it at the start (the case is then a plain star
		// broadcast, the baseline).
		reason = "star mode: the head has no children; killed at the start"
	}
	for reason == "" {
		if cfg.killAfter > 0 && time.Since(in.start) >= cfg.killAfter {
			reason = fmt.Sprintf("kill_after=%s", cfg.killAfter)
		}
		if cfg.killAtFraction > 0 {
			if st, err := in.d.client.Status(ctx); err == nil {
				rec.BytesFetched, rec.BytesServed = st.BytesFetched, st.BytesServed
				if st.BytesFetched >= threshold {
					reason = fmt.Sprintf("fetched %d >= %.2f of the blob", st.BytesFetched, cfg.killAtFraction)
				}
			}
		}
		if reason != "" {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kill condition never met: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
	in.d.kill()
	rec.EventSeconds = in.since()
	rec.Seconds = rec.EventSeconds
	rec.OK = true
	rec.Note = "killed (SIGKILL): " + reason
	in.re.RecordMessage("head %d killed at %.3fs: %s", in.site, rec.EventSeconds, reason)
	return nil
}

func (failoverCase) measured(in *instance, all, _ []record) ([]record, int) {
	return workerRecords(all, nil), in.cfg.sites * in.cfg.workersPerSite
}

// notes says whether the kill happened while the killed site's workers
// were still transferring (else the run did not exercise failover).
func (c failoverCase) notes(in *instance, all []record) []string {
	var out []string
	for _, h := range all {
		if h.Role != roleHead || h.EventSeconds == 0 {
			continue
		}
		after, retried := 0, 0
		for _, w := range all {
			if w.Role == roleWorker && w.Site == h.Site {
				if w.Seconds > h.EventSeconds {
					after++
				}
				if w.Attempts > 1 {
					retried++
				}
			}
		}
		if in.cfg.mode == modeStar {
			out = append(out, fmt.Sprintf("head of site %d killed at %.3fs; star mode: no worker is under a head (baseline, failover not exercised)",
				h.Site, h.EventSeconds))
			continue
		}
		out = append(out, fmt.Sprintf("head of site %d killed at %.3fs; %d of its %d workers finished after the kill (failover exercised: %v); %d needed more than one GET",
			h.Site, h.EventSeconds, after, in.cfg.workersPerSite, after > 0, retried))
	}
	return out
}

// ---- churn ----

// churnCase: a broadcast while, in every site, churn_leave workers leave
// after leave_after and churn_late workers join after join_delay. The
// stayers and the late joiners must finish with the right bytes.
type churnCase struct{}

const (
	churnStayer = "stayer"
	churnLeaver = "leaver"
	churnLate   = "late"
)

func churnRole(in *instance) string {
	switch {
	case in.index < in.cfg.churnLeave:
		return churnLeaver
	case in.index < in.cfg.churnLeave+in.cfg.churnLate:
		return churnLate
	}
	return churnStayer
}

func (churnCase) name() string                                    { return "churn" }
func (churnCase) workerStartsLate(in *instance) bool              { return churnRole(in) == churnLate }
func (churnCase) workerParents(in *instance) []string             { return []string{in.defaultParent()} }
func (churnCase) prepare(ctx context.Context, in *instance) error { return prepareBroadcast(ctx, in) }

func (churnCase) act(ctx context.Context, in *instance, rec *record) error {
	if in.role != roleWorker {
		rootOrHead(in, rec)
		return nil
	}
	rec.Churn = churnRole(in)
	switch rec.Churn {
	case churnLate:
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(in.cfg.joinDelay):
		}
		if err := in.startWorker(ctx); err != nil {
			rec.Seconds = in.since()
			return fmt.Errorf("late join: %w", err)
		}
		rec.EventSeconds = in.since()
		return fetchBroadcast(ctx, in, rec)
	case churnLeaver:
		lctx, cancel := context.WithTimeout(ctx, in.cfg.leaveAfter)
		err := fetchVerify(lctx, in.d.client, in.blob, rec, in.re.RecordMessage)
		cancel()
		rec.Seconds = in.since()
		if errors.Is(err, errWrongBytes) {
			return err
		}
		if err == nil {
			rec.Note = "finished before leaving"
		} else {
			rec.Note = fmt.Sprintf("left after %d bytes", rec.Bytes)
		}
		in.counters(rec)
		if serr := in.d.stop(10 * time.Second); serr != nil {
			in.re.RecordMessage("leave: %v", serr)
		}
		rec.EventSeconds = in.since()
		rec.OK = true
		return nil
	}
	return fetchBroadcast(ctx, in, rec)
}

func (churnCase) measured(in *instance, all, _ []record) ([]record, int) {
	leave := min(in.cfg.churnLeave, in.cfg.workersPerSite)
	return workerRecords(all, func(r record) bool { return r.Churn != churnLeaver }),
		in.cfg.sites * (in.cfg.workersPerSite - leave)
}

func (churnCase) notes(in *instance, all []record) []string {
	var out []string
	for _, r := range all {
		if r.Role == roleWorker && r.Churn != churnStayer && r.Churn != "" {
			out = append(out, fmt.Sprintf("%s site %d #%d: %s at %.3fs, %s", r.Churn, r.Site, r.Index,
				map[string]string{churnLeaver: "left", churnLate: "joined"}[r.Churn], r.EventSeconds, r.Note))
		}
	}
	return out
}

// ---- dht ----

const topicDHT = "omst-dht"

// dhtCase: putters_per_site workers of every site put result_size bytes
// (results/site-S/worker-I) before the start signal; after it, every
// worker gets every result of the other sites by name and verifies it.
// In the tree topology a result flows from its site's head to the
// reader's head, which found it in the DHT, and not through the root;
// with dht=false (every daemon with --no-dht) it goes through the root,
// the old path. In the flat topology there is no --parent anywhere: names
// and sources come from the DHT alone. The measure is each worker's time
// to its last verified result; the root's bytes_served over the reading
// phase is recorded (and checked against max_root_share when that is set),
// and so are the heads' bytes in and out by kind.
type dhtCase struct{}

func (dhtCase) name() string                        { return "dht" }
func (dhtCase) workerStartsLate(*instance) bool     { return false }
func (dhtCase) workerParents(in *instance) []string { return []string{in.defaultParent()} }

// dhtPutters is the number of workers per site that put a result.
func dhtPutters(cfg *config) int {
	if cfg.puttersPerSite <= 0 {
		return cfg.workersPerSite
	}
	return cfg.puttersPerSite
}

// dhtBytesRead is what the workers read in all: each reads every result
// of the other sites.
func dhtBytesRead(cfg *config) int64 {
	return int64(cfg.sites*cfg.workersPerSite) * int64((cfg.sites-1)*dhtPutters(cfg)) * cfg.resultSize
}

func (c dhtCase) prepare(ctx context.Context, in *instance) error {
	cfg := in.cfg
	if cfg.sites < 2 {
		return errors.New("dht needs sites >= 2: the workers read the results of the other sites")
	}
	switch in.role {
	case roleWorker:
		if in.index < dhtPutters(cfg) {
			if err := c.put(ctx, in); err != nil {
				return err
			}
		}
		all, err := waitAllResults(ctx, in)
		if err != nil {
			return fmt.Errorf("wait for the other sites' results: %w", err)
		}
		var reads []blobInfo
		for _, b := range all {
			if b.Site != in.site {
				reads = append(reads, b)
			}
		}
		sort.Slice(reads, func(i, j int) bool {
			return reads[i].Site < reads[j].Site || reads[i].Site == reads[j].Site && reads[i].Index < reads[j].Index
		})
		in.reads = reads
		return nil
	case roleHead:
		if !in.flat() && cfg.mode != modeStar {
			if err := c.waitHeadHolds(ctx, in); err != nil {
				return err
			}
		}
	}
	st, err := in.d.client.Status(ctx)
	if err != nil {
		return err
	}
	in.readStart = &st
	return nil
}

// put (a putting worker) puts this worker's result, waits (softly) until
// its daemon has announced it in the DHT, and publishes it.
func (dhtCase) put(ctx context.Context, in *instance) error {
	cfg := in.cfg
	before, err := in.d.client.Status(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	name := resultName(in.site, in.index)
	stream := int64(1+in.site)<<20 + int64(in.index)
	bi, err := putPayload(ctx, in.d.client, name, cfg.seed, stream, cfg.resultSize, cfg.chunkSize)
	if err != nil {
		return err
	}
	bi.Site, bi.Index = in.site, in.index
	put := time.Since(t0)
	announced := "dht off"
	if cfg.dht {
		// The blob's provider record and the name's record: a flat
		// cluster finds the name only there.
		waited, ok := waitStatus(ctx, in, cfg.startupTimeout, func(st rpcbridge.Status) bool {
			return st.DHTProvided > before.DHTProvided && st.DHTNames > before.DHTNames
		})
		announced = fmt.Sprintf("announced in the DHT after %.3fs more", waited.Seconds())
		if !ok {
			announced = fmt.Sprintf("NOT announced in the DHT after %s (the readers may not find it there)", waited)
		}
	}
	in.re.RecordMessage("put %s: %d bytes, id %s, %.3fs; %s", name, bi.Size, bi.ID, put.Seconds(), announced)
	in.blob = bi
	_, err = in.sc.Publish(ctx, sync.NewTopic(topicDHT, &blobInfo{}), &bi)
	return err
}

// waitHeadHolds (a head, tree topology) waits (softly) until it holds its
// site's results in full (the daemon copies a result to the head when it
// is put) and, with the DHT, has announced them: so that the reading phase
// measures the transfer between sites, not the copy into the head.
func (dhtCase) waitHeadHolds(ctx context.Context, in *instance) error {
	cfg := in.cfg
	all, err := waitAllResults(ctx, in)
	if err != nil {
		return fmt.Errorf("wait for site %d's results: %w", in.site, err)
	}
	var own []blobInfo
	for _, b := range all {
		if b.Site == in.site {
			own = append(own, b)
		}
	}
	t0 := time.Now()
	wctx, cancel := context.WithTimeout(ctx, cfg.startupTimeout)
	defer cancel()
	for _, bi := range own {
		for {
			info, err := in.d.client.Stat(wctx, bi.Name)
			if err == nil && info.Local {
				break
			}
			select {
			case <-wctx.Done():
				in.re.RecordMessage("head %d: %s not held in full after %s (err=%v)", in.site, bi.Name, cfg.startupTimeout, err)
				return nil
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	held := time.Since(t0)
	if cfg.dht {
		_, ok := waitStatus(wctx, in, cfg.startupTimeout, func(st rpcbridge.Status) bool {
			return st.DHTProvided >= uint64(len(own))
		})
		if !ok {
			in.re.RecordMessage("head %d: its %d result(s) not all announced in the DHT", in.site, len(own))
		}
	}
	in.re.RecordMessage("head %d holds its site's %d result(s) after %.3fs, announced after %.3fs",
		in.site, len(own), held.Seconds(), time.Since(t0).Seconds())
	return nil
}

// waitStatus polls the daemon's status until ok, for at most limit.
func waitStatus(ctx context.Context, in *instance, limit time.Duration, ok func(rpcbridge.Status) bool) (time.Duration, bool) {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		if st, err := in.d.client.Status(ctx); err == nil && ok(st) {
			return time.Since(t0), true
		}
		select {
		case <-ctx.Done():
			return time.Since(t0), false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c dhtCase) act(ctx context.Context, in *instance, rec *record) error {
	if in.role == roleWorker {
		return c.read(ctx, in, rec)
	}
	return c.watchRead(ctx, in, rec)
}

// read (a worker) gets every result of the other sites at once, each on
// its own API connection, and verifies it.
func (dhtCase) read(ctx context.Context, in *instance, rec *record) error {
	gets := make([]getTime, len(in.reads))
	errs := make([]error, len(in.reads))
	var wg gosync.WaitGroup
	for i, bi := range in.reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := record{}
			cl, err := in.d.dial()
			if err == nil {
				err = fetchVerify(ctx, cl, bi, &r, in.re.RecordMessage)
				cl.Close()
			}
			g := getTime{Name: bi.Name, Site: bi.Site, Index: bi.Index, Bytes: r.Bytes, Seconds: in.since(),
				Attempts: r.Attempts, OK: err == nil}
			if err != nil {
				g.Error = err.Error()
			}
			in.re.RecordMessage("get %s (site %d): %d bytes at %.3fs, %d attempt(s), ok %v", bi.Name, bi.Site, g.Bytes, g.Seconds, g.Attempts, g.OK)
			gets[i], errs[i] = g, err
		}()
	}
	wg.Wait()
	rec.Gets = gets
	rec.Seconds = in.since()
	rec.OK = true
	for _, g := range gets {
		rec.Bytes += g.Bytes
		rec.OK = rec.OK && g.OK
	}
	rec.Note = fmt.Sprintf("seconds = the last of %d gets of the other sites' results", len(gets))
	return errors.Join(errs...)
}

// watchRead (the root, a head) waits for the workers and records its
// counters over the reading phase.
func (dhtCase) watchRead(ctx context.Context, in *instance, rec *record) error {
	cfg := in.cfg
	b, err := in.sc.Barrier(ctx, stateWorkersDone, cfg.sites*cfg.workersPerSite)
	if err == nil {
		err = <-b.C
	}
	if err != nil {
		return fmt.Errorf("wait for the workers: %w", err)
	}
	rec.Seconds = in.since()
	st, err := in.d.client.Status(ctx)
	if err != nil {
		return err
	}
	if in.readStart == nil {
		return errors.New("no status at the start of the reading phase")
	}
	st0 := *in.readStart
	rec.Read = &readCounters{BytesServed: st.BytesServed - st0.BytesServed, BytesFetched: st.BytesFetched - st0.BytesFetched,
		BytesIn: diffCounts(st.BytesIn, st0.BytesIn), BytesOut: diffCounts(st.BytesOut, st0.BytesOut)}
	rec.OK = true
	if in.role == roleRoot && cfg.maxRootShare >= 0 {
		read := dhtBytesRead(cfg)
		if float64(rec.Read.BytesServed) > cfg.maxRootShare*float64(read) {
			return fmt.Errorf("the root served %d bytes while the results were read, %.3f of the %d bytes read (max_root_share=%g)",
				rec.Read.BytesServed, float64(rec.Read.BytesServed)/float64(read), read, cfg.maxRootShare)
		}
	}
	return nil
}

func diffCounts(now, then map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range now {
		if v > then[k] {
			out[k] = v - then[k]
		} else {
			out[k] = 0
		}
	}
	return out
}

func (dhtCase) measured(in *instance, all, _ []record) ([]record, int) {
	return workerRecords(all, nil), in.cfg.sites * in.cfg.workersPerSite
}

func (dhtCase) notes(in *instance, all []record) []string {
	cfg := in.cfg
	read := dhtBytesRead(cfg)
	out := []string{fmt.Sprintf("topology %s, dht %v: %d result(s) of %s per site, each read by the %d workers of the other site(s); %s read in all",
		cfg.topology, cfg.dht, dhtPutters(cfg), mib(uint64(cfg.resultSize)), (cfg.sites-1)*cfg.workersPerSite, mib(uint64(read)))}
	workersIn := make([]map[string]uint64, cfg.sites)
	for _, r := range all {
		switch {
		case r.Role == roleRoot && r.Read != nil:
			out = append(out, fmt.Sprintf("reading phase: the root served %s (%.3f of the bytes read)",
				mib(r.Read.BytesServed), float64(r.Read.BytesServed)/float64(max(read, 1))))
			if cfg.dht && !in.flat() && r.Read.BytesServed > 0 {
				out = append(out, "with the DHT, results went through the root: a head did not take another site's head "+
					"as its source (at log_level=debug, a head's daemon.log says why, e.g. \"provider did not tell its place\")")
			}
		case r.Role == roleHead && r.Read != nil:
			out = append(out, fmt.Sprintf("reading phase, head of site %d: bytes in %s; bytes out %s",
				r.Site, kinds(r.Read.BytesIn), kinds(r.Read.BytesOut)))
		case r.Role == roleWorker && r.Site >= 0 && r.Site < cfg.sites:
			if workersIn[r.Site] == nil {
				workersIn[r.Site] = map[string]uint64{}
			}
			for k, v := range r.BytesIn {
				workersIn[r.Site][k] += v
			}
		}
	}
	for s, m := range workersIn {
		if m != nil {
			out = append(out, fmt.Sprintf("site %d's workers: bytes in %s", s, kinds(m)))
		}
	}
	return out
}

func (dhtCase) extras(in *instance, all []record, s *summary) {
	cfg := in.cfg
	dht := cfg.dht
	s.Topology, s.DHT = cfg.topology, &dht
	for _, r := range all {
		if r.Role == roleRoot && r.Read != nil {
			served := r.Read.BytesServed
			s.RootServedRead = &served
			s.RootShareRead = float64(served) / float64(max(dhtBytesRead(cfg), 1))
		}
	}
	// What entered each site from outside: its head's bytes from its
	// parent and from other peers (another site's head, found in the
	// DHT) over the reading phase, in units of s.Bytes (what one worker
	// read). The flat topology has no such gateway: see the wire bytes.
	s.SiteIn = nil
	if in.flat() || s.Bytes <= 0 {
		return
	}
	s.SiteIn = make([]float64, cfg.sites)
	for _, r := range all {
		if r.Role == roleHead && r.Read != nil && r.Site >= 0 && r.Site < cfg.sites {
			s.SiteIn[r.Site] = float64(r.Read.BytesIn["parent"]+r.Read.BytesIn["other"]) / float64(s.Bytes)
		}
	}
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// kinds formats bytes by kind, e.g. "other=64.0 MiB parent=0.0 MiB".
func kinds(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", k, mib(m[k]))
	}
	return b.String()
}

// waitAllResults waits for every site's results. It takes them all, not
// only those it needs: sdk-go v0.3.0 may panic (send on closed channel)
// when a subscription is cancelled while items still arrive on it.
func waitAllResults(ctx context.Context, in *instance) ([]blobInfo, error) {
	return waitN[blobInfo](ctx, in.sc, topicDHT, in.cfg.sites*dhtPutters(in.cfg), nil)
}

// waitN subscribes to a topic and returns the first n items that ok
// accepts; the subscription replays items published before it.
func waitN[T any](ctx context.Context, sc sync.Client, topic string, n int, ok func(*T) bool) ([]T, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan *T, 64)
	sub, err := sc.Subscribe(ctx, sync.NewTopic(topic, new(T)), ch)
	if err != nil {
		return nil, err
	}
	var out []T
	for len(out) < n {
		select {
		case v := <-ch:
			if ok == nil || ok(v) {
				out = append(out, *v)
			}
		case err := <-sub.Done():
			if err == nil {
				err = errors.New("subscription closed")
			}
			return out, fmt.Errorf("topic %s: %d of %d: %w", topic, len(out), n, err)
		case <-ctx.Done():
			return out, fmt.Errorf("topic %s: %d of %d: %w", topic, len(out), n, ctx.Err())
		}
	}
	return out, nil
}

// noter is implemented by cases that add notes to the summary.
type noter interface {
	notes(in *instance, all []record) []string
}

func caseNotes(in *instance, all []record) []string {
	if n, ok := in.c.(noter); ok {
		return n.notes(in, all)
	}
	return nil
}

// ---- rmprefix ----

// rmprefixCase (issue 27, job namespaces): the workers put rm_names small
// names in all under rmjob/ (split among them) before the start; the root
// waits until it lists them all. After the start the root runs `rm -r
// rmjob --everywhere` (RemovePrefix); every node, the root included,
// measures until its daemon lists none of them. The case's time is the
// last node's.
type rmprefixCase struct{}

const rmPrefix = "rmjob/"

func (rmprefixCase) name() string                        { return "rmprefix" }
func (rmprefixCase) workerStartsLate(*instance) bool     { return false }
func (rmprefixCase) workerParents(in *instance) []string { return []string{in.defaultParent()} }

func (rmprefixCase) prepare(ctx context.Context, in *instance) error {
	workers := in.cfg.sites * in.cfg.workersPerSite
	total := in.cfg.rmNames / workers * workers
	switch in.role {
	case roleWorker:
		// rm_parallel puts in flight (the names of a task farm's threads);
		// the first and last put's wall times (unix ns) are recorded for
		// the put phase's account (docs/benchmarks.md, "Job namespaces").
		n := total / workers
		names := make(chan int)
		errs := make(chan error, max(in.cfg.rmParallel, 1))
		first := time.Now()
		for range max(in.cfg.rmParallel, 1) {
			go func() {
				// One API connection per put in flight (a connection
				// serialises its requests).
				cl, err := in.d.dial()
				if err != nil {
					for range names {
					}
					errs <- err
					return
				}
				defer cl.Close()
				for k := range names {
					if err != nil {
						continue
					}
					name := fmt.Sprintf("%ss%d/w%d/%05d", rmPrefix, in.site, in.index, k)
					var body io.Reader = strings.NewReader(name)
					if in.cfg.rmSize > 0 {
						body = io.LimitReader(rand.NewChaCha8(seedFor(name)), in.cfg.rmSize)
					}
					if _, perr := cl.Put(ctx, name, body, rpcbridge.PutOptions{}); perr != nil {
						err = fmt.Errorf("put %s: %w", name, perr)
					}
				}
				errs <- err
			}()
		}
		for k := range n {
			names <- k
		}
		close(names)
		var failed error
		for range max(in.cfg.rmParallel, 1) {
			if err := <-errs; err != nil && failed == nil {
				failed = err
			}
		}
		if failed != nil {
			return failed
		}
		last := time.Now()
		in.re.RecordMessage("put phase: %d names, first put at %d, last put returned at %d (unix ns), %.3fs",
			n, first.UnixNano(), last.UnixNano(), last.Sub(first).Seconds())
	case roleRoot:
		t0 := time.Now()
		for {
			infos, err := in.d.client.List(ctx, rmPrefix)
			if err != nil {
				return err
			}
			if len(infos) >= total {
				now := time.Now()
				in.re.RecordMessage("the root lists %d names under %s after %.1fs, at %d (unix ns)", len(infos), rmPrefix, now.Sub(t0).Seconds(), now.UnixNano())
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("the root lists %d of %d names: %w", len(infos), total, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

// seedFor derives a ChaCha8 seed from s (rmprefix's payloads).
func seedFor(s string) [32]byte { return sha256.Sum256([]byte(s)) }

func (rmprefixCase) act(ctx context.Context, in *instance, rec *record) error {
	if in.role == roleRoot {
		res, err := in.d.client.RemovePrefix(ctx, rmPrefix, true)
		if err != nil {
			return err
		}
		in.re.RecordMessage("rm -r %s --everywhere: %d names here, %d nodes took it, %d not reached, %.3fs (%.3fs since the start)",
			rmPrefix, res.Removed, res.Reached, res.Unreached, res.Seconds, in.since())
	}
	for {
		infos, err := in.d.client.List(ctx, rmPrefix)
		if err != nil {
			return err
		}
		if len(infos) == 0 {
			rec.Seconds, rec.OK = in.since(), true
			rec.Note = "seconds = until this node lists none of the names"
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d names still listed: %w", len(infos), ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (rmprefixCase) measured(in *instance, all []record, _ []record) ([]record, int) {
	return all, 1 + in.cfg.sites + in.cfg.sites*in.cfg.workersPerSite
}
