package transfer

import (
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

func TestDistributorSpreadsBreadthFirst(t *testing.T) {
	d := NewDistributor(DistributorConfig{})
	id := sampleID().ID
	now := time.Unix(1000, 0)
	w := func(i int) peer.ID { return peer.ID(fmt.Sprintf("w%d", i)) }
	want := []peer.ID{"", w(1), w(1), w(2), w(2), w(3), w(3), w(4)}
	for i := 1; i <= 8; i++ {
		if got := d.Decide(now, id, 0, w(i), "siteA", false, "", nil); got != want[i-1] {
			t.Fatalf("worker %d sent to %q, want %q", i, got, want[i-1])
		}
	}
	// Another chunk starts over: its first asker gets it from the relay.
	if got := d.Decide(now, id, 1, w(5), "siteA", false, "", nil); got != "" {
		t.Fatalf("first asker of chunk 1 redirected to %q", got)
	}
}

func TestDistributorGroupsAndDirect(t *testing.T) {
	d := NewDistributor(DistributorConfig{})
	id := sampleID().ID
	now := time.Unix(1000, 0)
	d.Decide(now, id, 0, "a1", "A", false, "", nil)
	if got := d.Decide(now, id, 0, "b1", "B", false, "", nil); got != "" {
		t.Fatalf("child of site B sent to %q of site A", got)
	}
	if got := d.Decide(now, id, 0, "a2", "A", true, "", nil); got != "" {
		t.Fatalf("a direct request was redirected to %q", got)
	}
	if got := d.Decide(now, id, 0, "a3", "A", false, "", nil); got != "a1" {
		t.Fatalf("a3 sent to %q, want a1", got)
	}
}

func TestDistributorFailuresAndLeavers(t *testing.T) {
	d := NewDistributor(DistributorConfig{Fanout: 4})
	id := sampleID().ID
	now := time.Unix(1000, 0)
	d.Decide(now, id, 0, "w1", "S", false, "", nil)
	if got := d.Decide(now, id, 0, "w2", "S", false, "", nil); got != "w1" {
		t.Fatalf("w2 sent to %q", got)
	}
	// w2 could not get chunk 0 from w1: direct, and w1 is no holder of it.
	if got := d.Decide(now, id, 0, "w2", "S", true, "w1", nil); got != "" {
		t.Fatalf("retry redirected to %q", got)
	}
	if got := d.Decide(now, id, 0, "w3", "S", false, "", nil); got != "w2" {
		t.Fatalf("w3 sent to %q, want w2 (w1 failed)", got)
	}
	// A second failure of w1 (chunk 1): w1 is no target for this blob.
	d.Decide(now, id, 1, "w1", "S", false, "", nil)
	d.Decide(now, id, 1, "w4", "S", true, "w1", nil)
	d.Decide(now, id, 2, "w1", "S", false, "", nil)
	if got := d.Decide(now, id, 2, "w5", "S", false, "", nil); got != "" {
		t.Fatalf("w5 sent to %q, a holder with 2 failures", got)
	}
	// A holder that asks again lost the chunk: served directly, no holder.
	if got := d.Decide(now, id, 0, "w3", "S", false, "", nil); got != "" {
		t.Fatalf("a holder asking again redirected to %q", got)
	}
	// A child that left is no target.
	d.DropPeer("w2")
	if got := d.Decide(now, id, 0, "w6", "S", false, "", nil); got != "w3" {
		t.Fatalf("w6 sent to %q, want w3 (w2 left)", got)
	}
	// Idle blobs are forgotten.
	d.Sweep(now.Add(time.Hour))
	if got := d.Decide(now.Add(time.Hour), id, 0, "w7", "S", false, "", nil); got != "" {
		t.Fatalf("after the sweep, w7 sent to %q", got)
	}
}
