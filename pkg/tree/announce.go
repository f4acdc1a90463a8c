package tree

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
)

// Announcements (names 1.3.0). Every record this node must announce to its
// parent joins one queue: its own puts (Announce, AnnounceMany), the
// records its children announce and it takes (takeAnnounced), and its
// subtree's records at each new parent session (reannounce). Up to
// AnnounceWindow senders drain the queue: each sends the records at its
// head as an ANNOUNCE_BATCH (up to SendBatchRecords records and
// MaxBatchBytes, each with its blob's manifest when small) and, once the
// parent has answered, the next. No timer holds a record back: a lone put
// goes up at once, and the records that arrive while the window is full
// make the next batches. (With one batch in flight, a site's workers each
// putting one name at a time waited for one another's round trips: on the
// emulated grid's 40 ms WAN, 95-100 ms a put instead of 58.) A parent
// answers a batch once every record it took has gone through its own
// queue upward (bounded by half the request timeout), so a put returns
// once its name is known at the root, as with one ANNOUNCE per name; many
// puts at once (threads, several workers of a site) share a message per
// hop instead of a stream and a round trip each.
//
// A parent that speaks only names 1.2.0 or 1.1.0 gets one ANNOUNCE per
// record instead, up to fallbackParallel at once.

// errOldNames marks a request the peer's names version does not carry
// (namesVersionHas): the caller falls back (ANNOUNCE per record) or
// skips it (rules).
var errOldNames = errors.New("its names protocol does not carry this request")

// fallbackParallel bounds the ANNOUNCEs in flight to an old parent.
const fallbackParallel = 16

// AnnounceWindow bounds the ANNOUNCE_BATCHes a node has in flight to its
// parent; bulkSenders is how many of them one call queueing many records
// starts.
const (
	AnnounceWindow = 8
	bulkSenders    = 2
)

// announceWait is one record in the announce queue; done is closed once
// the parent answered for it (err nil: taken, or not sent because the
// parent was not connected, which the re-announce repairs).
type announceWait struct {
	e    batchEntry
	size int
	done chan struct{}
	err  error
}

// Announce pushes a record stored by a local put up to the parent and
// waits (within ctx and the request timeout) until the parent has stored
// it; each relay passes it further up before it answers, so on success
// the name is known all the way to the root. A record that does not reach
// the parent now is sent again, with every record of this subtree, when the
// parent session is (re)established; the error says why it did not.
// Records announced at the same time travel together (ANNOUNCE_BATCH).
func (t *Tree) Announce(ctx context.Context, r blob.Record) error {
	return t.AnnounceMany(ctx, []blob.Record{r})
}

// AnnounceMany is Announce for many records (a put of many names): they
// go up in as few ANNOUNCE_BATCHes as SendBatchRecords and MaxBatchBytes
// allow, and it returns once the parent answered for all of them. The
// error joins those of the records not announced (the first few, each
// naming its record, and how many more).
func (t *Tree) AnnounceMany(ctx context.Context, recs []blob.Record) error {
	for _, r := range recs {
		t.learnOrigin(r)
	}
	return t.announceUp(ctx, recs)
}

// announceUp queues recs for the parent and waits until the parent has
// answered for each, within ctx and the request timeout for every batch
// they fill. It returns nil at the root, and when the parent is not
// connected now (the re-announce on reconnect carries the records then).
func (t *Tree) announceUp(ctx context.Context, recs []blob.Record) error {
	waits := t.enqueue(recs)
	if len(waits) == 0 {
		return nil
	}
	batches := (len(waits) + SendBatchRecords - 1) / SendBatchRecords
	ctx, cancel := context.WithTimeout(ctx, time.Duration(batches)*t.cfg.RequestTimeout)
	defer cancel()
	return waitAnnounced(ctx, waits)
}

// maxJoined bounds the records' errors AnnounceMany joins.
const maxJoined = 4

// waitAnnounced waits for every wait (or ctx) and joins their errors.
func waitAnnounced(ctx context.Context, waits []*announceWait) error {
	var errs []error
	failed := 0
	for i, w := range waits {
		select {
		case <-w.done:
		case <-ctx.Done():
			err := fmt.Errorf("announce %q to parent: no answer: %w", w.e.Record.Name, context.Cause(ctx))
			if rest := len(waits) - i - 1; rest > 0 {
				err = fmt.Errorf("%w (and %d more records)", err, rest)
			}
			return errors.Join(append(errs, err)...)
		}
		if w.err != nil {
			failed++
			if len(errs) < maxJoined {
				errs = append(errs, fmt.Errorf("announce %q to parent: %w", w.e.Record.Name, w.err))
			}
		}
	}
	if failed > len(errs) {
		errs = append(errs, fmt.Errorf("%d more records not announced", failed-len(errs)))
	}
	return errors.Join(errs...)
}

// enqueue puts recs in the announce queue, starting the sender if it is
// not running, and returns their waits; none on the root, or when the
// parent session is not up (the re-announce carries them).
func (t *Tree) enqueue(recs []blob.Record) []*announceWait {
	if len(t.parents) == 0 || len(recs) == 0 {
		return nil
	}
	waits := make([]*announceWait, len(recs))
	for i, r := range recs {
		e := batchEntry{Record: r, Manifest: t.smallManifest(r.ID)}
		waits[i] = &announceWait{e: e, size: entrySize(e), done: make(chan struct{})}
	}
	t.mu.Lock()
	if !t.connected || t.closed {
		t.mu.Unlock()
		return nil
	}
	t.announcing = append(t.announcing, waits...)
	// Many records at once (AnnounceMany, a re-announce) get two senders:
	// more only queue at the parent, whose store takes one batch at a
	// time. Records arriving one by one get a sender each, up to the
	// window.
	start := min(AnnounceWindow-t.senders, (len(waits)+SendBatchRecords-1)/SendBatchRecords, bulkSenders)
	t.senders += start
	t.wg.Add(start)
	t.mu.Unlock()
	for range start {
		go func() {
			defer t.wg.Done()
			t.sendLoop()
		}()
	}
	return waits
}

// smallManifest returns the encoded manifest of blob id if it is stored
// here and fits an ANNOUNCE_BATCH entry (maxBatchManifest), else nil.
func (t *Tree) smallManifest(id cid.Cid) []byte {
	m, err := t.store.Manifest(id)
	if err != nil || blob.EncodedManifestLen(len(m.Chunks)) > maxBatchManifest {
		return nil
	}
	return m.Encode()
}

// sendLoop is one sender: it sends the queue's records to the parent, a
// batch at a time, until the queue is empty (or the tree closes: the rest
// fail).
func (t *Tree) sendLoop() {
	for {
		t.mu.Lock()
		if t.closed || t.ctx.Err() != nil {
			rest := t.announcing
			t.announcing = nil
			t.senders--
			t.mu.Unlock()
			finish(rest, errClosed)
			return
		}
		if len(t.announcing) == 0 {
			t.announcing = nil
			t.senders--
			t.mu.Unlock()
			return
		}
		sizes := make([]int, 0, min(len(t.announcing), SendBatchRecords+1))
		for _, w := range t.announcing[:cap(sizes)] {
			sizes = append(sizes, w.size)
		}
		n := batchLen(sizes)
		batch := slices.Clone(t.announcing[:n])
		t.announcing = t.announcing[n:]
		t.mu.Unlock()

		errs, down := t.sendBatch(batch)
		for i, w := range batch {
			w.err = errs[i]
			close(w.done)
		}
		if down != nil {
			// The parent cannot be reached: what waits now would fail
			// the same way, one request timeout each; the re-announce
			// of the next session carries it all.
			t.mu.Lock()
			rest := t.announcing
			t.announcing = nil
			t.mu.Unlock()
			finish(rest, down)
		}
	}
}

// finish completes waits with err.
func finish(waits []*announceWait, err error) {
	for _, w := range waits {
		w.err = err
		close(w.done)
	}
}

// sendBatch sends batch to the current parent as one ANNOUNCE_BATCH (or,
// to a parent of names 1.2.0 and before, one ANNOUNCE per record) and
// returns each record's error; down is set when the parent could not be
// reached at all. Nothing is sent, and no error returned, while the
// parent session is down: the re-announce carries the records.
func (t *Tree) sendBatch(batch []*announceWait) (errs []error, down error) {
	errs = make([]error, len(batch))
	t.mu.Lock()
	up := t.connected
	t.mu.Unlock()
	if !up {
		return errs, nil
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.RequestTimeout)
	defer cancel()
	parent := t.parentID()
	entries := make([]batchEntry, len(batch))
	for i, w := range batch {
		entries[i] = w.e
	}
	rep, err := t.namesCall(ctx, parent, namesRequest{Type: msgAnnounceBatch, Batch: entries})
	if errors.Is(err, errOldNames) {
		return t.announceEach(ctx, parent, entries), nil
	}
	if err == nil && (rep.Type != msgBatchAck || len(rep.Entries) != len(batch)) {
		err = fmt.Errorf("%s: %w", t.Describe(parent),
			malformed("reply 0x%02x with %d entries to an ANNOUNCE_BATCH of %d", rep.Type, len(rep.Entries), len(batch)))
		t.notePeerError(parent, "announce", err)
	}
	if err != nil {
		t.log.Warn("announce to parent failed; will re-announce on reconnect",
			"records", len(batch), "first", batch[0].e.Record.Name, "err", err)
		for i := range errs {
			errs[i] = err
		}
		if errors.Is(err, blob.ErrUnreachable) {
			down = err
		}
		return errs, down
	}
	t.batches.Add(1)
	refused := 0
	for i, e := range rep.Entries {
		if e.Refused {
			refused++
			errs[i] = remoteError(t.Describe(parent), namesReply{Code: e.Code, Message: e.Message})
		}
	}
	if refused > 0 {
		t.log.Warn("the parent refused records of an announce", "refused", refused, "of", len(batch), "parent", t.parentAddr())
	}
	return errs, nil
}

// announceEach sends entries to parent, a speaker of names 1.2.0 or
// 1.1.0, as one ANNOUNCE each (fallbackParallel at once).
func (t *Tree) announceEach(ctx context.Context, parent peer.ID, entries []batchEntry) []error {
	errs := make([]error, len(entries))
	sem := make(chan struct{}, fallbackParallel)
	var wg sync.WaitGroup
	for i, e := range entries {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rep, err := t.namesCall(ctx, parent, namesRequest{Type: msgAnnounce, Record: e.Record})
			if err == nil && rep.Type != msgAck {
				err = fmt.Errorf("%s: %w", t.Describe(parent), malformed("reply 0x%02x to ANNOUNCE", rep.Type))
			}
			errs[i] = err
		})
	}
	wg.Wait()
	return errs
}

// reannounce sends every record that originated in this subtree (put here,
// or announced by a child) to the parent, in batches.
func (t *Tree) reannounce(ctx context.Context) {
	recs, err := t.store.List("")
	var routes map[string]string
	if err == nil {
		routes, err = t.store.Routes()
	}
	if err != nil {
		t.log.Warn("re-announce: list records", "err", err)
		return
	}
	var mine []blob.Record
	for _, r := range recs {
		if routes[r.Name] != "" || r.Origin == t.self.String() {
			mine = append(mine, r)
		}
	}
	waits := t.enqueue(mine)
	if len(waits) == 0 {
		return
	}
	if err := waitAnnounced(ctx, waits); err != nil {
		t.log.Warn("re-announce incomplete; the next session sends the rest", "count", len(waits), "err", err)
		return
	}
	t.log.Info("re-announced subtree records", "count", len(waits), "parent", t.parentAddr())
}

// serveAnnounce answers a child's ANNOUNCE (every names version) as a
// batch of one.
func (t *Tree) serveAnnounce(ctx context.Context, p peer.ID, r blob.Record) []byte {
	if !t.isChild(p) {
		return errorFrame(fmt.Errorf("announce %q: %s is not a child of %s", r.Name, p, t.self))
	}
	if err := t.takeAnnounced(ctx, p, []batchEntry{{Record: r}})[0]; err != nil {
		return errorFrame(err)
	}
	return appendFrame(nil, msgAck, nil)
}

// serveAnnounceBatch answers a child's ANNOUNCE_BATCH: an entry per
// record, a refused one with its reason, the rest taken.
func (t *Tree) serveAnnounceBatch(ctx context.Context, p peer.ID, batch []batchEntry) []byte {
	if !t.isChild(p) {
		return errorFrame(fmt.Errorf("announce %d records: %s is not a child of %s", len(batch), p, t.self))
	}
	errs := t.takeAnnounced(ctx, p, batch)
	res := make([]entryResult, len(errs))
	for i, err := range errs {
		if err != nil {
			res[i] = refusedEntry(err)
		}
	}
	return encodeBatchAck(res)
}

// takeAnnounced checks and stores each record child p announced, keeps the
// small manifests that came with them, and passes the new ones up (waiting
// within half the request timeout, so that the child's put returns once
// the root knows the name); it returns each record's refusal (nil: taken).
// A record CheckRecord refuses is counted and refused alone.
func (t *Tree) takeAnnounced(ctx context.Context, p peer.ID, batch []batchEntry) []error {
	errs := make([]error, len(batch))
	var recs []blob.Record
	var vias []string
	var manifests []*blob.Manifest
	var idx []int
	for i, e := range batch {
		r := e.Record
		if err := t.checkRecord(r); err != nil {
			t.recRefused.Add(1)
			t.log.Warn("refused a record announced by a child", "child", p, "name", r.Name, "err", err)
			errs[i] = fmt.Errorf("announce to %s: %w", t.self, err)
			continue
		}
		// The record moves routing (its route, the blob's first source)
		// only if the child answers for it (MayRoute); else it is kept, if
		// newer, as one from nowhere in particular.
		route := p.String()
		if err := t.mayRoute(p, r); err != nil {
			t.unrouted.Add(1)
			t.log.Warn("record announced by a child that neither put it nor may write its name: kept without a route", "child", p, "name", r.Name, "origin", r.Origin, "err", err)
			route = ""
		}
		recs, vias, idx = append(recs, r), append(vias, route), append(idx, i)
		manifests = append(manifests, t.announcedManifest(p, r, e.Manifest))
	}
	changed, perr := t.putRecords(recs, vias, manifests)
	var up, puts []blob.Record
	for k, i := range idx {
		r, err := recs[k], perr[k]
		if errors.Is(err, blob.ErrNotFound) {
			// Withdrawn by a namespace rule here (an old record of a node
			// that was away): dropped, and the child learns the rule at its
			// next session.
			t.log.Debug("announced record withdrawn here", "child", p, "name", r.Name, "err", err)
			continue
		}
		if err != nil {
			errs[i] = fmt.Errorf("announce %q: %w", r.Name, err)
			continue
		}
		if vias[k] != "" {
			t.learnVia(r.ID, p)
		}
		t.learnOrigin(r)
		if changed[k] {
			t.log.Debug("record announced by child", "name", r.Name, "id", r.ID, "child", p)
			up = append(up, r)
			if t.eng != nil && len(t.parents) > 0 && r.Origin == p.String() && vias[k] != "" {
				puts = append(puts, r)
			}
		}
	}
	if len(up) > 0 {
		t.log.Info("records announced by child", "count", len(up), "of", len(batch), "first", up[0].Name, "child", p)
		// Forward before answering. A failure is logged by the sender and
		// repaired by the re-announce on reconnect; the child's records
		// are stored here either way.
		fctx, cancel := context.WithTimeout(ctx, t.cfg.RequestTimeout/2)
		_ = t.announceUp(fctx, up)
		cancel()
	}
	for _, r := range puts {
		t.goTracked(func() { t.eng.Replicate(r) })
	}
	return errs
}

// putRecords stores recs with their routes and manifests, one at a time:
// one index transaction for a whole batch was slower with pkg/cache (600
// records with their manifests: 206 ms against 23 ms one by one; badger's
// iterators in a write transaction sort its pending writes, and each
// record's history trim opens one).
func (t *Tree) putRecords(recs []blob.Record, vias []string, manifests []*blob.Manifest) ([]bool, []error) {
	changed := make([]bool, len(recs))
	errs := make([]error, len(recs))
	for i, r := range recs {
		changed[i], errs[i] = t.store.PutRecordFrom(r, vias[i])
		if errs[i] == nil && manifests[i] != nil {
			if _, err := t.store.PutManifest(manifests[i]); err != nil {
				t.log.Warn("store manifest from child", "id", r.ID, "err", err)
			}
		}
	}
	return changed, errs
}

// announcedManifest returns the manifest a child sent with r, once checked
// against r's blob ID (a child cannot pass off other chunks for it), to be
// stored with r; nil if none came, it is here already, or it does not
// match (counted as the child's error).
func (t *Tree) announcedManifest(p peer.ID, r blob.Record, encoded []byte) *blob.Manifest {
	if encoded == nil {
		return nil
	}
	if _, err := t.store.Manifest(r.ID); err == nil {
		return nil
	}
	m, err := blob.VerifyManifest(r.ID, encoded)
	if err != nil {
		t.notePeerError(p, "announce", fmt.Errorf("manifest sent with %q: %w", r.Name, err))
		return nil
	}
	return m
}
