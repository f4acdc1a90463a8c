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

// DefaultReplicateQueue is Config.ReplicateQueue's default.
const DefaultReplicateQueue = 64

// replQueue is one origin's replications: one running, the rest waiting.
type replQueue struct {
	waiting []blob.Record
}

// Replicate fetches r's blob into the store in the background (a relay
// does so for a blob put by its child, r.Origin): one fetch at a time per
// blob (shared with a Preheat of it) and per origin, at most
// Config.ReplicateQueue waiting per origin; a record past that is dropped
// and counted. Failures are logged.
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
	if len(q.waiting) >= e.cfg.ReplicateQueue {
		e.stats.ReplDropped.Add(1)
		e.log.Warn("not copying a child's put: too many of its puts wait to be copied",
			"name", r.Name, "id", r.ID, "origin", r.Origin, "waiting", len(q.waiting))
		return
	}
	q.waiting = append(q.waiting, r)
	e.stats.ReplWaiting.Add(1)
}

// replicateLoop copies first, then origin's waiting records one at a time,
// until none waits or the engine closes.
func (e *Engine) replicateLoop(origin string, q *replQueue, first blob.Record) {
	r := first
	for {
		if c := e.background(r); c != nil {
			select {
			case <-c.done:
			case <-e.ctx.Done():
			}
		}
		e.mu.Lock()
		if len(q.waiting) == 0 || e.closed || e.ctx.Err() != nil {
			e.stats.ReplWaiting.Add(-int64(len(q.waiting)))
			delete(e.repl, origin)
			e.mu.Unlock()
			return
		}
		r = q.waiting[0]
		q.waiting = q.waiting[1:]
		e.stats.ReplWaiting.Add(-1)
		e.mu.Unlock()
	}
}
