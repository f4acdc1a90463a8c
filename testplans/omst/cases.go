package main

import (
	"context"
	"errors"
	"fmt"
	gosync "sync"
	"time"

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
		name := fmt.Sprintf("results/site-%d/worker-%d", in.site, in.index)
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
