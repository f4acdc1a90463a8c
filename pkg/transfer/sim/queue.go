package sim

import "container/heap"

// This file holds the simulation's event queue: a binary heap
// (container/heap) of events ordered by time, then by the order in which
// they were scheduled, so that a run is deterministic. An event is
// embedded in what it belongs to (a message, a flow, a timer): it is
// scheduled, moved or cancelled in place, with no allocation.

// handler is what an event does when its time comes.
type handler interface{ fire() }

// event is one thing scheduled to happen at a time (seconds of simulated
// time). Its zero value is not queued.
type event struct {
	at  float64
	seq uint64
	idx int // position in the queue + 1; 0 when not queued
	h   handler
}

// queued reports whether e is in a queue.
func (e *event) queued() bool { return e.idx > 0 }

// queue is the events to come, earliest first; among events at the same
// time, the one scheduled first comes first.
type queue struct {
	items eventHeap
	seq   uint64
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i+1, j+1
}
func (h *eventHeap) Push(x any) {
	e := x.(*event)
	e.idx = len(*h) + 1
	*h = append(*h, e)
}
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = 0
	return e
}

// schedule queues e at time at, or moves it there if it is queued already
// (it then counts as scheduled now, after every event already at that
// time).
func (q *queue) schedule(e *event, at float64) {
	q.seq++
	e.at, e.seq = at, q.seq
	if e.queued() {
		heap.Fix(&q.items, e.idx-1)
		return
	}
	heap.Push(&q.items, e)
}

// cancel removes e from the queue if it is queued.
func (q *queue) cancel(e *event) {
	if e.queued() {
		heap.Remove(&q.items, e.idx-1)
	}
}

// next removes and returns the earliest event, or nil when none is left.
func (q *queue) next() *event {
	if len(q.items) == 0 {
		return nil
	}
	return heap.Pop(&q.items).(*event)
}

// len returns the number of events queued.
func (q *queue) len() int { return len(q.items) }
