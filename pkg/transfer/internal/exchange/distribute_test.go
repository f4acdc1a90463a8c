package exchange

import (
	"fmt"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
)

// The relay sends each chunk once; a holder feeds at most Fanout siblings
// of a chunk, and no copy is more than MaxDepth hops from the relay; over
// a blob, feeding is spread over the workers: short of MaxDepth the holder
// that has fed the fewest siblings is chosen.
func TestDistributorSpreadsLoad(t *testing.T) {
	for _, rotate := range []bool{true, false} {
		d := NewDistributor(DistributorConfig{})
		id := sampleID().ID
		now := time.Unix(1000, 0)
		const workers, chunks = 8, 64
		w := func(i int) peer.ID { return peer.ID(fmt.Sprintf("w%d", i)) }
		fed := map[peer.ID]int{}
		for c := range uint32(chunks) {
			perChunk := map[peer.ID]int{}
			depth := map[peer.ID]int{}
			direct := 0
			for i := range workers {
				if rotate {
					i = (i + int(c)) % workers
				}
				to := d.Decide(now, Ask{Blob: id, Index: c, Child: w(i + 1), Group: "siteA"}, Pace{})
				depth[w(i+1)] = depth[to] + 1
				if depth[w(i+1)] > DefaultMaxDepth {
					t.Fatalf("rotate %v, chunk %d: %s is %d hops from the relay, want at most %d", rotate, c, w(i+1), depth[w(i+1)], DefaultMaxDepth)
				}
				if to == "" {
					direct++
					continue
				}
				if to == w(i+1) {
					t.Fatalf("chunk %d: %s sent to itself", c, to)
				}
				perChunk[to]++
				fed[to]++
			}
			if direct != 1 {
				t.Fatalf("chunk %d: the relay sent %d copies, want 1", c, direct)
			}
			for p, n := range perChunk {
				if n > 2 {
					t.Fatalf("chunk %d: %s fed %d siblings, want at most 2", c, p, n)
				}
			}
		}
		if !rotate {
			continue
		}
		// (workers-1) feeds per chunk, spread: nobody feeds much more
		// than its share.
		share := chunks * (workers - 1) / workers
		for i := 1; i <= workers; i++ {
			if fed[w(i)] > share+chunks/4 || fed[w(i)] < share-chunks/4 {
				t.Errorf("%s fed %d siblings over %d chunks; a fair share is %d", w(i), fed[w(i)], chunks, share)
			}
		}
	}
	// Another blob starts over: its first asker gets it from the relay.
	d := NewDistributor(DistributorConfig{})
	d.Decide(time.Unix(1000, 0), Ask{Blob: sampleID().ID, Index: 0, Child: "w1", Group: "siteA"}, Pace{})
	if got := d.Decide(time.Unix(1000, 0), Ask{Blob: sampleID2(), Index: 0, Child: "w5", Group: "siteA"}, Pace{}); got != "" {
		t.Fatalf("first asker of another blob redirected to %q", got)
	}
}

// sampleID is the record of a one-chunk blob.
func sampleID() blob.Record {
	m := &blob.Manifest{Size: 1, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{7}}}
	return blob.Record{Name: "a/b", ID: m.CID(), Size: 1}
}

func sampleID2() cid.Cid {
	m := &blob.Manifest{Size: 2, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{8}}}
	return m.CID()
}

func TestDistributorGroupsAndDirect(t *testing.T) {
	d := NewDistributor(DistributorConfig{})
	id := sampleID().ID
	now := time.Unix(1000, 0)
	d.Decide(now, Ask{Blob: id, Index: 0, Child: "a1", Group: "A"}, Pace{})
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "b1", Group: "B"}, Pace{}); got != "" {
		t.Fatalf("child of site B sent to %q of site A", got)
	}
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "a2", Group: "A", Direct: true}, Pace{}); got != "" {
		t.Fatalf("a direct request was redirected to %q", got)
	}
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "a3", Group: "A"}, Pace{}); got != "a1" && got != "a2" {
		t.Fatalf("a3 sent to %q, want a1 or a2", got)
	}
}

func TestDistributorFailuresAndLeavers(t *testing.T) {
	d := NewDistributor(DistributorConfig{Fanout: 4})
	id := sampleID().ID
	now := time.Unix(1000, 0)
	d.Decide(now, Ask{Blob: id, Index: 0, Child: "w1", Group: "S"}, Pace{})
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "w2", Group: "S"}, Pace{}); got != "w1" {
		t.Fatalf("w2 sent to %q", got)
	}
	// w2 could not get chunk 0 from w1: direct, and w1 is no holder of it.
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "w2", Group: "S", Direct: true, Failed: "w1"}, Pace{}); got != "" {
		t.Fatalf("retry redirected to %q", got)
	}
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "w3", Group: "S"}, Pace{}); got != "w2" {
		t.Fatalf("w3 sent to %q, want w2 (w1 failed)", got)
	}
	// A second failure of w1 (chunk 1): w1 is no target for this blob.
	d.Decide(now, Ask{Blob: id, Index: 1, Child: "w1", Group: "S"}, Pace{})
	d.Decide(now, Ask{Blob: id, Index: 1, Child: "w4", Group: "S", Direct: true, Failed: "w1"}, Pace{})
	d.Decide(now, Ask{Blob: id, Index: 2, Child: "w1", Group: "S"}, Pace{})
	if got := d.Decide(now, Ask{Blob: id, Index: 2, Child: "w5", Group: "S"}, Pace{}); got != "" {
		t.Fatalf("w5 sent to %q, a holder with 2 failures", got)
	}
	// A holder that asks again lost the chunk: served directly, no holder.
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "w3", Group: "S"}, Pace{}); got != "" {
		t.Fatalf("a holder asking again redirected to %q", got)
	}
	// A child that left is no target.
	d.DropPeer("w2")
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "w6", Group: "S"}, Pace{}); got != "w3" {
		t.Fatalf("w6 sent to %q, want w3 (w2 left)", got)
	}
	// Idle blobs are forgotten.
	d.Sweep(now.Add(time.Hour))
	if got := d.Decide(now.Add(time.Hour), Ask{Blob: id, Index: 0, Child: "w7", Group: "S"}, Pace{}); got != "" {
		t.Fatalf("after the sweep, w7 sent to %q", got)
	}
}

// However many children ask for a chunk, the relay remembers a bounded
// number of holders, and still sends each one to an earlier asker.
func TestDistributorBounded(t *testing.T) {
	d := NewDistributor(DistributorConfig{})
	id := sampleID().ID
	now := time.Unix(1000, 0)
	asked := map[peer.ID]bool{}
	direct := 0
	for i := range 500 {
		w := peer.ID(fmt.Sprintf("w%03d", i))
		to := d.Decide(now, Ask{Blob: id, Index: 0, Child: w, Group: "S"}, Pace{})
		switch {
		case to == "":
			direct++
		case !asked[to]:
			t.Fatalf("%s sent to %s, which never asked", w, to)
		}
		asked[w] = true
	}
	if n := len(d.blobs[id].chunks[0].holders); n > maxHolders {
		t.Fatalf("%d holders remembered for one chunk, want at most %d", n, maxHolders)
	}
	t.Logf("500 askers: the relay sent %d copies itself", direct)
}

// A sibling reported slow (a hedge) is no target for SlowBackoff while
// another holder has room, then one again; it is not counted as failed.
func TestDistributorSlowSibling(t *testing.T) {
	d := NewDistributor(DistributorConfig{Fanout: 8})
	id := sampleID().ID
	now := time.Unix(1000, 0)
	d.Decide(now, Ask{Blob: id, Index: 0, Child: "w1", Group: "S"}, Pace{})
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "w2", Group: "S"}, Pace{}); got != "w1" {
		t.Fatalf("w2 sent to %q", got)
	}
	// w2 hedged: w1 was slow.
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "w2", Group: "S", Direct: true, Slow: "w1"}, Pace{}); got != "" {
		t.Fatalf("a hedge was redirected to %q", got)
	}
	for _, w := range []peer.ID{"w3", "w4"} {
		if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: w, Group: "S"}, Pace{}); got == "w1" {
			t.Fatalf("%s sent to the slow w1", w)
		}
	}
	later := now.Add(SlowBackoff + time.Second)
	d.Decide(later, Ask{Blob: id, Index: 1, Child: "w1", Group: "S"}, Pace{})
	if got := d.Decide(later, Ask{Blob: id, Index: 1, Child: "w5", Group: "S"}, Pace{}); got != "w1" {
		t.Fatalf("after the backoff, w5 sent to %q, want w1 again", got)
	}
	if d.blobs[id].failures["w1"] != 0 {
		t.Fatal("a slow sibling was counted as failed")
	}
}

// Hedges are declined for HedgeGrace after the relay first sent a chunk
// into the site, and never for a chunk it did not send (held from before).
func TestDistributorHedgeGrace(t *testing.T) {
	d := NewDistributor(DistributorConfig{})
	id := sampleID().ID
	now := time.Unix(1000, 0)
	if w := d.HedgeWait(now, id, 0, "", Pace{}); w != 0 {
		t.Fatalf("unknown blob: wait %v, want 0", w)
	}
	d.Decide(now, Ask{Blob: id, Index: 0, Child: "w1", Group: "siteA"}, Pace{})
	if w := d.HedgeWait(now, id, 0, "", Pace{}); w != 0 {
		t.Fatalf("chunk not sent yet: wait %v, want 0", w)
	}
	sent := now.Add(3 * time.Second) // the relay's own fetch took 3 s
	d.NoteSent(sent, id, 0)
	d.NoteSent(sent.Add(time.Second), id, 0) // a later send does not move it
	if w := d.HedgeWait(sent.Add(500*time.Millisecond), id, 0, "", Pace{}); w != HedgeGrace-500*time.Millisecond {
		t.Fatalf("0.5 s after the send: wait %v, want %v", w, HedgeGrace-500*time.Millisecond)
	}
	if w := d.HedgeWait(sent.Add(HedgeGrace), id, 0, "", Pace{}); w != 0 {
		t.Fatalf("HedgeGrace after the send: wait %v, want 0", w)
	}
	if w := d.HedgeWait(sent, id, 1, "", Pace{}); w != 0 {
		t.Fatalf("another chunk: wait %v, want 0", w)
	}
	d.NoteSent(sent, id, 7) // no state for chunk 7: nothing recorded
	if w := d.HedgeWait(sent, id, 7, "", Pace{}); w != 0 {
		t.Fatalf("chunk 7 (never asked): wait %v, want 0", w)
	}
}

// When every holder of a chunk with room is slow, a child is still sent to
// one of them rather than served by the relay: the relay's port would
// otherwise carry a copy per child whenever the whole site is slow (e.g. a
// small fetch window on a slow LAN: 2 x 16 at a quarter of the rates with
// --window 8 took 25-28 s, the head sending 8 copies, against 10-11 s).
func TestDistributorOnlySlowHolders(t *testing.T) {
	d := NewDistributor(DistributorConfig{})
	id := sampleID().ID
	now := time.Unix(1000, 0)
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "w1", Group: "S"}, Pace{}); got != "" {
		t.Fatalf("first asker sent to %q", got)
	}
	d.NoteSlow(now, id, 0, "w1", Pace{})
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "w2", Group: "S"}, Pace{}); got != "w1" {
		t.Fatalf("w2 sent to %q; want the slow w1, the only holder, rather than the relay", got)
	}
	// A holder that is not slow is preferred, whatever it has fed.
	if got := d.Decide(now, Ask{Blob: id, Index: 0, Child: "w3", Group: "S"}, Pace{}); got != "w2" && got != "w1" {
		t.Fatalf("w3 sent to %q", got)
	}
	// Past w1's backoff, w2 is slow: w4 goes to w1, though w2 is nearer
	// the relay.
	now = now.Add(SlowBackoff)
	d.Decide(now, Ask{Blob: id, Index: 1, Child: "w2", Group: "S"}, Pace{}) // w2 feeds nobody of chunk 1
	d.Decide(now, Ask{Blob: id, Index: 1, Child: "w1", Group: "S"}, Pace{})
	d.NoteSlow(now, id, 1, "w2", Pace{})
	if got := d.Decide(now, Ask{Blob: id, Index: 1, Child: "w4", Group: "S"}, Pace{}); got != "w1" {
		t.Fatalf("w4 sent to %q; want w1, the holder that is not slow", got)
	}
}

// Children asking one after another build a chain per chunk until it is
// MaxDepth hops long, then branch at every level above it: no copy is
// more than MaxDepth hops from the relay however many ask (here up to
// 2,000, with the default 16 and with 5) and in whatever order, and the
// relay sends one copy while the tree has room (Fanout 2, MaxDepth 5: 31
// holders).
func TestDistributorShallowTrees(t *testing.T) {
	for _, tc := range []struct{ n, maxDepth int }{{10, 0}, {100, 0}, {1000, 0}, {2000, 0}, {31, 5}} {
		n := tc.n
		d := NewDistributor(DistributorConfig{MaxDepth: tc.maxDepth})
		id := sampleID().ID
		now := time.Unix(1000, 0)
		want := min(n, DefaultMaxDepth)
		if tc.maxDepth > 0 {
			want = tc.maxDepth
		}
		for c, mult := range []int{1, 3, 7, 9} { // coprime with n: every worker once
			c := uint32(c)
			depth := map[peer.ID]int{}
			most := 0
			for i := range n {
				w := peer.ID(fmt.Sprintf("w%04d", (i*mult)%n)) // another order per chunk
				to := d.Decide(now, Ask{Blob: id, Index: c, Child: w, Group: "S"}, Pace{})
				depth[w] = depth[to] + 1
				most = max(most, depth[w])
			}
			if most > want {
				t.Errorf("%d askers, chunk %d: a copy %d hops from the relay, want at most %d", n, c, most, want)
			}
			if got := d.blobs[id].chunks[c].direct; got != 1 {
				t.Errorf("%d askers, chunk %d: the relay sent %d copies, want 1", n, c, got)
			}
			if got := len(d.blobs[id].chunks[c].holders); got > maxHolders {
				t.Errorf("%d askers, chunk %d: %d holders remembered, want at most %d", n, c, got, maxHolders)
			}
		}
	}
}
