package transfer

import (
	"github.com/omst-project/omst/pkg/blob"
)

// A relay copies the blobs its children put (Replicate), so that a result
// is durable once its head holds it. What it copies on behalf of one child
// is bounded: the blobs of one origin (the child that put them) are copied
// one at a time, in the order they were announced, and at most
// Config.ReplicateQueue more wait; past that a put is not copied (logged,
// counted in Status.ReplicationsDropped): it stays on the child, and any
// node fetches it from there as usual. So a child that puts faster than
// its head copies, or a modified daemon that announces without end, costs
// its head one blob fetch (one manifest, at most blob.MaxManifestLen, and
// a window of chunks) and a short list of records, never a fetch per put.
//
// Small puts (at most Config.CopyManyMax bytes, when Config.CopyMany is
// set: a task farm's results) are copied together instead: all of an
// origin's small puts waiting when its copier comes to them go in one
// CopyMany (one batch request to the child), and they wait bounded by the
// bytes of their records (Config.ReplicateSmallBytes, 1 MiB: some 2,000
// records with their proofs), not by ReplicateQueue. So a worker's PUT_MANY
// of 1,024 results, announced at once, is copied whole in a request or
// two, where 64 waiting and the rest dropped left most of them on the
// worker alone.

// DefaultReplicateQueue is Config.ReplicateQueue's default;
// DefaultReplicateSmallBytes Config.ReplicateSmallBytes'.
const (
	DefaultReplicateQueue      = 64
	DefaultReplicateSmallBytes = 1 << 20
)

// replQueue is one origin's replications: one running, the rest waiting.
type replQueue struct {
	waiting    []blob.Record
	large      int // of waiting, those not small
	smallBytes int // recordBytes of the small ones waiting
}

// recordBytes is what a waiting record holds of memory, about.
func recordBytes(r blob.Record) int {
	return len(r.Name) + len(r.Proof) + len(r.Origin) + 128
}

// small reports whether r's blob is copied with CopyMany.
func (e *Engine) small(r blob.Record) bool {
	return e.cfg.CopyMany != nil && r.Size <= e.cfg.CopyManyMax
}

// Replicate fetches r's blob into the store in the background (a relay
// does so for a blob put by its child, r.Origin): one fetch at a time per
// blob (shared with a Preheat of it) and per origin, at most
// Config.ReplicateQueue waiting per origin (small blobs: their records'
// Config.ReplicateSmallBytes); a record past that is dropped and counted.
// Failures are logged.
func (e *Engine) Replicate(r blob.Record) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	if _, ok := e.replicas[r.ID]; ok {
		return // under way already
	}
	q := e.repl[r.Origin]
	if q == nil {
		q = &replQueue{}
		e.repl[r.Origin] = q
		e.wg.Go(func() { e.replicateLoop(r.Origin, q, r) })
		return
	}
	for _, w := range q.waiting {
		if w.ID.Equals(r.ID) {
			return
		}
	}
	small := e.small(r)
	if (!small && q.large >= e.cfg.ReplicateQueue) || (small && q.smallBytes+recordBytes(r) > e.cfg.ReplicateSmallBytes) {
		e.stats.ReplDropped.Add(1)
		e.log.Warn("not copying a child's put: too many of its puts wait to be copied",
			"name", r.Name, "id", r.ID, "origin", r.Origin, "waiting", len(q.waiting))
		return
	}
	q.waiting = append(q.waiting, r)
	if small {
		q.smallBytes += recordBytes(r)
	} else {
		q.large++
	}
	e.stats.ReplWaiting.Add(1)
}

// take removes from q and returns what origin's copier does next: the
// first waiting record, and when it is small every small one waiting
// with it (at most maxBatch). Called with e.mu held.
func (e *Engine) take(q *replQueue) []blob.Record {
	r := q.waiting[0]
	if !e.small(r) {
		q.waiting = q.waiting[1:]
		q.large--
		return []blob.Record{r}
	}
	var batch, rest []blob.Record
	for _, w := range q.waiting {
		if e.small(w) && len(batch) < maxCopyMany {
			batch = append(batch, w)
			q.smallBytes -= recordBytes(w)
		} else {
			rest = append(rest, w)
		}
	}
	q.waiting = rest
	return batch
}

// maxCopyMany bounds the records of one CopyMany (batchfetch.MaxIDs).
const maxCopyMany = 4096

// replicateLoop copies first, then origin's waiting records (small ones
// together), until none waits or the engine closes.
func (e *Engine) replicateLoop(origin string, q *replQueue, first blob.Record) {
	recs := []blob.Record{first}
	for {
		e.copyRecords(recs)
		e.mu.Lock()
		if len(q.waiting) == 0 || e.closed || e.ctx.Err() != nil {
			e.stats.ReplWaiting.Add(-int64(len(q.waiting)))
			delete(e.repl, origin)
			e.mu.Unlock()
			return
		}
		recs = e.take(q)
		e.stats.ReplWaiting.Add(-int64(len(recs)))
		e.mu.Unlock()
	}
}

// copyRecords copies recs: small ones with one CopyMany (which reports a
// blob the store held already as stored), then each it did not store (and
// a large one) by a background fetch, one at a time.
func (e *Engine) copyRecords(recs []blob.Record) {
	if len(recs) > 0 && e.small(recs[0]) {
		stored := e.cfg.CopyMany(e.ctx, recs)
		var rest []blob.Record
		for i, r := range recs {
			if i < len(stored) && stored[i] {
				e.stats.ReplBatched.Add(1)
				if e.cfg.OnComplete != nil {
					e.cfg.OnComplete(r.ID)
				}
				continue
			}
			rest = append(rest, r)
		}
		recs = rest
	}
	for _, r := range recs {
		if e.ctx.Err() != nil {
			return
		}
		if c := e.background(r); c != nil {
			select {
			case <-c.done:
			case <-e.ctx.Done():
			}
		}
	}
}
