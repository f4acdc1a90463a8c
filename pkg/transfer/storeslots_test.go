package transfer

import (
	"bytes"
	"context"
	"io"
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

// The chunks of the blobs slowDisk makes: 64 of 64 KiB.
const slowChunks, slowChunkSize = 64, 64 << 10

// slowDisk returns a blob named name (random bytes from seed) held by a
// parent engine, and a child engine under it with window chunks in flight
// whose store takes no write until gs.open is closed.
func slowDisk(t *testing.T, name string, seed uint64, window int) (r blob.Record, data []byte, gs *heldWriteStore, child *engineNode) {
	parent := newEngine(t, nil)
	data = randBlob(slowChunks*slowChunkSize, seed)
	r = putBlob(t, parent.mem, name, data, slowChunkSize)
	gs = &heldWriteStore{Store: memstore.New(), open: make(chan struct{})}
	return r, data, gs, newEngineWith(t, func(c *Config) { c.Store, c.Window = gs, window }, parent)
}

// settled waits until no more bytes arrive at child for half a second
// (its fetch is held back, or has all) after at least least chunks have
// (20 s at most), and returns the chunks that arrived.
func settled(child *engineNode, least int) int {
	var got uint64
	for stable, deadline := 0, time.Now().Add(20*time.Second); stable < 10 || got < uint64(least*slowChunkSize); {
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
	return int(got / slowChunkSize)
}

// A fetch whose chunks arrive faster than the store writes them holds at
// most its window and coalesce.DefaultHeldChunks verified chunks, and
// writes at most coalesce.DefaultStoreSlots at once: while the child's
// store takes no write, the fetch of 64 chunks stops after Window +
// HeldChunks have arrived. Before the store slots every chunk arrived and
// waited for its write in a goroutine (and a thread) of its own: a loaded
// 2-core host held up to 490 MiB so.
func TestFetchBoundedByStoreWrites(t *testing.T) {
	r, data, gs, child := slowDisk(t, "slow/disk", 26, DefaultWindow)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fetched := make(chan error, 1)
	go func() { fetched <- child.eng.Fetch(ctx, r) }()

	arrived := settled(child, coalesce.DefaultStoreSlots)
	bound := DefaultWindow + coalesce.DefaultHeldChunks
	gs.mu.Lock()
	writing, most := gs.writing, gs.mostWriting
	gs.mu.Unlock()
	t.Logf("store closed: %d of %d chunks arrived, %d writes waiting (at most %d at once)", arrived, slowChunks, writing, most)
	if arrived > bound {
		t.Errorf("%d chunks arrived while the store wrote none, want at most the window and the held chunks, %d", arrived, bound)
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
	m, err := blob.Split(bytes.NewReader(data), slowChunkSize, func(int, blob.Hash, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range m.Chunks {
		c, err := gs.ReadChunk(h)
		if err != nil || !bytes.Equal(c, data[i*slowChunkSize:(i+1)*slowChunkSize]) {
			t.Fatalf("chunk %d not stored intact after the store opened: %v", i, err)
		}
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.mostWriting > coalesce.DefaultStoreSlots {
		t.Errorf("%d chunk writes at once, want at most %d", gs.mostWriting, coalesce.DefaultStoreSlots)
	}
}

// A reader has each chunk the moment it is verified, up to
// coalesce.DefaultHeldChunks ahead of the store (cut-through): with the
// child's store taking no write, a reader of a blob of 64 chunks reads
// twice the store slots' worth, and the fetch then stops. (A window of 4
// keeps the first chunks among the first HeldChunks verified: with 16 in
// flight a late chunk 2 may find HeldChunks later ones ahead of it.)
// Before, a verified chunk waited for a store slot before its waiters got
// it, so the reader stopped after coalesce.DefaultStoreSlots chunks, and
// every reader, every sibling asking for a chunk and a relay's children
// waited on the store's writes.
func TestReaderNotHeldByStoreWrites(t *testing.T) {
	const readWindow = 4
	r, data, gs, child := slowDisk(t, "slow/disk/read", 27, readWindow)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := child.eng.Open(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	want := 2 * coalesce.DefaultStoreSlots
	read := make(chan error, 1)
	buf := make([]byte, want*slowChunkSize)
	go func() {
		_, err := io.ReadFull(rc, buf)
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	case <-time.After(10 * time.Second):
		close(gs.open)
		<-read
		t.Fatalf("the reader got no %d chunks in 10 s while the store wrote none: held back by the store's slots", want)
	}
	if !bytes.Equal(buf, data[:len(buf)]) {
		t.Fatal("the reader's bytes differ from the blob's")
	}
	// The fetch is still bounded: once it stops, no more than its window
	// and the store slots' worth have arrived.
	if arrived, bound := settled(child, want), readWindow+coalesce.DefaultHeldChunks; arrived > bound {
		t.Errorf("%d chunks arrived while the store wrote none, want at most %d", arrived, bound)
	}
	close(gs.open)
	rest, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read the rest: %v", err)
	}
	if !bytes.Equal(rest, data[len(buf):]) {
		t.Fatal("the rest of the blob differs")
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.mostWriting > coalesce.DefaultStoreSlots {
		t.Errorf("%d chunk writes at once, want at most %d", gs.mostWriting, coalesce.DefaultStoreSlots)
	}
}
