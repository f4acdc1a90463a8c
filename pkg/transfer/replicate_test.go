package transfer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/internal/memstore"
	"github.com/omst-project/omst/pkg/blob"
)

// gatedStore is a memstore whose ReadChunk of a chunk it holds waits
// until open is closed.
type gatedStore struct {
	*memstore.Store
	open chan struct{}
}

func (g *gatedStore) ReadChunk(h blob.Hash) ([]byte, error) {
	if g.HasChunk(h) {
		<-g.open
	}
	return g.Store.ReadChunk(h)
}

// A head copies the puts of one child one at a time and keeps at most
// ReplicateQueue more waiting; past that a put is not copied (issue 24:
// a child could start any number of fetches at its head, one per put).
// Another child's puts have their own queue.
func TestReplicateBoundedPerChild(t *testing.T) {
	gate := &gatedStore{Store: memstore.New(), open: make(chan struct{})}
	child := newEngine(t, gate)
	other := newEngine(t, nil)
	head := newEngineWith(t, func(c *Config) { c.ReplicateQueue = 8 })
	head.sources.set(Source{ID: child.h.ID(), Kind: KindChild}, Source{ID: other.h.ID(), Kind: KindChild})
	for _, n := range []*engineNode{child, other} {
		head.h.Peerstore().AddAddrs(n.h.ID(), n.h.Addrs(), time.Hour)
	}
	const puts = 20
	var recs []blob.Record
	for i := range puts {
		r := putBlob(t, gate.Store, fmt.Sprintf("results/c/%d", i), randBlob(8<<10, uint64(100+i)), blob.MinChunkSize)
		r.Origin = child.h.ID().String()
		recs = append(recs, r)
		head.eng.Replicate(r)
	}
	o := putBlob(t, other.mem, "results/o/0", randBlob(8<<10, 99), blob.MinChunkSize)
	o.Origin = other.h.ID().String()
	head.eng.Replicate(o)

	// The other child's put is copied while the first child's hang.
	waitUntil(t, "the other child's put is copied", func() bool { return holds(head, o.ID) })
	time.Sleep(200 * time.Millisecond) // give extra fetches, if any, time to start
	n := 0
	for _, tr := range head.eng.Transfers() {
		if tr.Chunks > 0 && tr.Done < tr.Chunks {
			n++
		}
	}
	st := head.eng.Status()
	if n != 1 || st.ReplicationsWaiting != 8 || st.ReplicationsDropped != puts-1-8 {
		t.Fatalf("%d copies under way for one child (want 1), %d waiting (want 8), %d dropped (want %d)",
			n, st.ReplicationsWaiting, st.ReplicationsDropped, puts-1-8)
	}
	close(gate.open)
	waitUntil(t, "the queued puts are copied", func() bool {
		for _, r := range recs[:9] {
			if !holds(head, r.ID) {
				return false
			}
		}
		return true
	})
	for _, r := range recs[9:] {
		if holds(head, r.ID) {
			t.Fatalf("a dropped put (%s) was copied", r.Name)
		}
	}
	if st := head.eng.Status(); st.ReplicationsWaiting != 0 {
		t.Fatalf("%d still waiting", st.ReplicationsWaiting)
	}
	// The queue is gone: a later put is copied again.
	r := putBlob(t, gate.Store, "results/c/late", randBlob(8<<10, 7), blob.MinChunkSize)
	r.Origin = child.h.ID().String()
	head.eng.Replicate(r)
	waitUntil(t, "a later put is copied", func() bool { return holds(head, r.ID) })
}

// holds reports whether n's store holds r's blob whole.
func holds(n *engineNode, id cid.Cid) bool {
	m, err := n.mem.Manifest(id)
	if err != nil {
		return false
	}
	for _, h := range m.Chunks {
		if !n.mem.HasChunk(h) {
			return false
		}
	}
	return true
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A child's small puts are copied together: those waiting while a copy
// runs go in one CopyMany, bounded by the bytes of their records
// (ReplicateSmallBytes) rather than by ReplicateQueue; a small put
// CopyMany did not store is fetched alone, as any other put.
func TestReplicateSmallTogether(t *testing.T) {
	child := newEngine(t, nil)
	gate := make(chan struct{})
	var mu sync.Mutex
	var calls [][]blob.Record
	var refuse cid.Cid // the put CopyMany leaves to a fetch of its own
	head := newEngineWith(t, func(c *Config) {
		c.ReplicateQueue = 2
		c.ReplicateSmallBytes = 40 * 200 // about 40 of the records below
		c.CopyManyMax = 16 << 10
		c.CopyMany = func(ctx context.Context, recs []blob.Record) []bool {
			<-gate
			mu.Lock()
			calls = append(calls, recs)
			mu.Unlock()
			out := make([]bool, len(recs))
			for i, r := range recs {
				out[i] = !r.ID.Equals(refuse)
			}
			return out
		}
	})
	head.sources.set(Source{ID: child.h.ID(), Kind: KindChild})
	head.h.Peerstore().AddAddrs(child.h.ID(), child.h.Addrs(), time.Hour)
	var recs []blob.Record
	for i := range 60 {
		r := putBlob(t, child.mem, fmt.Sprintf("results/s/%d", i), randBlob(4<<10, uint64(200+i)), blob.MinChunkSize)
		r.Origin = child.h.ID().String()
		r.Name = fmt.Sprintf("results/s/%03d-%s", i, strings.Repeat("x", 200-128-len(r.Origin)-len("results/s/000-")))
		recs = append(recs, r)
	}
	refuse = recs[5].ID
	for _, r := range recs {
		head.eng.Replicate(r)
	}
	st := head.eng.Status()
	// The first is being copied (CopyMany waits on the gate); 40 wait.
	if st.ReplicationsWaiting != 40 || st.ReplicationsDropped != 19 {
		t.Fatalf("%d waiting, %d dropped; want 40 waiting (8,000 bytes of records), 19 dropped", st.ReplicationsWaiting, st.ReplicationsDropped)
	}
	close(gate)
	waitUntil(t, "the waiting puts are copied", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == 2 && holds(head, refuse)
	})
	if len(calls[0]) != 1 || len(calls[1]) != 40 {
		t.Fatalf("CopyMany got %d then %d records; want 1, then the 40 waiting together", len(calls[0]), len(calls[1]))
	}
	waitUntil(t, "the queue drains", func() bool { return head.eng.Status().ReplicationsWaiting == 0 })
	if st := head.eng.Status(); st.ReplicationsBatched != 40 {
		t.Fatalf("%d copied in batches, want 40 (41 less the one CopyMany left)", st.ReplicationsBatched)
	}
}
