package sim

import (
	"slices"
	"testing"
)

type recorder struct {
	name string
	log  *[]string
}

func (r *recorder) fire() { *r.log = append(*r.log, r.name) }

// TestQueueOrder: events come out by time, and at equal times in the
// order they were scheduled; a moved event counts as scheduled when it
// was moved; a cancelled one never comes out.
func TestQueueOrder(t *testing.T) {
	var log []string
	var q queue
	evs := map[string]*event{}
	add := func(name string, at float64) {
		e := evs[name]
		if e == nil {
			e = &event{h: &recorder{name: name, log: &log}}
			evs[name] = e
		}
		q.schedule(e, at)
	}
	add("c", 3)
	add("a", 1)
	add("b1", 2)
	add("b2", 2)
	add("x", 0.5)
	add("b0", 2)
	add("d", 4)
	add("a", 2) // moved after b0: scheduled last at 2
	q.cancel(evs["x"])
	q.cancel(evs["x"]) // twice is harmless
	if q.len() != 6 {
		t.Fatalf("len %d, want 6", q.len())
	}
	for e := q.next(); e != nil; e = q.next() {
		if e.queued() {
			t.Fatalf("event %v still marked queued after next", e)
		}
		e.h.fire()
	}
	want := []string{"b1", "b2", "b0", "a", "c", "d"}
	if !slices.Equal(log, want) {
		t.Fatalf("order %v, want %v", log, want)
	}
}

// TestQueueManyRandom: a thousand events scheduled, moved and cancelled
// in a scrambled order come out sorted.
func TestQueueManyRandom(t *testing.T) {
	var q queue
	evs := make([]event, 1000)
	for i := range evs {
		evs[i].h = &recorder{log: new([]string)}
		q.schedule(&evs[i], float64((i*7919)%1000))
	}
	for i := 0; i < len(evs); i += 3 {
		q.schedule(&evs[i], float64((i*104729)%977)+0.5)
	}
	for i := 1; i < len(evs); i += 5 {
		q.cancel(&evs[i])
	}
	last := -1.0
	n := 0
	for e := q.next(); e != nil; e = q.next() {
		if e.at < last {
			t.Fatalf("event at %v after one at %v", e.at, last)
		}
		last = e.at
		n++
	}
	if want := 1000 - 200; n != want {
		t.Fatalf("%d events came out, want %d", n, want)
	}
}
