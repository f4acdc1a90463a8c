package transfer

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/omst-project/omst/internal/memstore"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/coalesce"
)

// heldWriteStore is a memstore whose PutVerifiedChunk waits until open is
// closed (a disk slower than the network), counting the writes under way.
type heldWriteStore struct {
	*memstore.Store
	open chan struct{}

	mu          sync.Mutex
	writing     int // PutVerifiedChunk calls under way
	mostWriting int
}

func (g *heldWriteStore) PutVerifiedChunk(h blob.Hash, data []byte) error {
	g.mu.Lock()
	g.writing++
	g.mostWriting = max(g.mostWriting, g.writing)
	g.mu.Unlock()
	<-g.open
	g.mu.Lock()
	g.writing--
	g.mu.Unlock()
	return g.Store.PutVerifiedChunk(h, data)
}

// A fetch whose chunks arrive faster than the store writes them holds at
// most its window and coalesce.DefaultStoreSlots verified chunks, and
// writes at most that many at once: while the child's store takes no
// write, the fetch of 64 chunks stops after Window + StoreSlots have
// arrived. Before the store slots every chunk arrived and waited for its
// write in a goroutine (and a thread) of its own: a loaded 2-core host
// held up to 490 MiB so.
func TestFetchBoundedByStoreWrites(t *testing.T) {
	const chunks, chunkSize = 64, 64 << 10
	parent := newEngine(t, nil)
	data := randBlob(chunks*chunkSize, 26)
	r := putBlob(t, parent.mem, "slow/disk", data, chunkSize)

	gs := &heldWriteStore{Store: memstore.New(), open: make(chan struct{})}
	child := newEngine(t, gs, parent)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fetched := make(chan error, 1)
	go func() { fetched <- child.eng.Fetch(ctx, r) }()

	// Wait until no more bytes arrive for half a second (the fetch is held
	// back, or has all) after the store slots' worth have.
	var got uint64
	for stable, deadline := 0, time.Now().Add(20*time.Second); stable < 10 || got < coalesce.DefaultStoreSlots*chunkSize; {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
		now := child.eng.Status().BytesFetched
		if now == got {
			stable++
		} else {
			stable = 0
		}
		got = now
	}
	arrived := int(got / chunkSize)
	bound := DefaultWindow + coalesce.DefaultStoreSlots
	gs.mu.Lock()
	writing, most := gs.writing, gs.mostWriting
	gs.mu.Unlock()
	t.Logf("store closed: %d of %d chunks arrived, %d writes waiting (at most %d at once)", arrived, chunks, writing, most)
	if arrived > bound {
		t.Errorf("%d chunks arrived while the store wrote none, want at most the window and the store slots, %d", arrived, bound)
	}
	if most > coalesce.DefaultStoreSlots {
		t.Errorf("%d chunk writes at once, want at most %d", most, coalesce.DefaultStoreSlots)
	}
	if arrived < coalesce.DefaultStoreSlots {
		t.Errorf("only %d chunks arrived: the fetch did not run", arrived)
	}

	close(gs.open)
	if err := <-fetched; err != nil {
		t.Fatalf("fetch: %v", err)
	}
	m, err := blob.Split(bytes.NewReader(data), chunkSize, func(int, blob.Hash, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range m.Chunks {
		c, err := gs.ReadChunk(h)
		if err != nil || !bytes.Equal(c, data[i*chunkSize:(i+1)*chunkSize]) {
			t.Fatalf("chunk %d not stored intact after the store opened: %v", i, err)
		}
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.mostWriting > coalesce.DefaultStoreSlots {
		t.Errorf("%d chunk writes at once, want at most %d", gs.mostWriting, coalesce.DefaultStoreSlots)
	}
}
