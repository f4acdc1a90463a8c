package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// TestPutManyAnnouncesTogether: a worker's PUT_MANY of 200 small names
// (real root, head and worker daemons, the worker's socket) announces its
// items together: the worker sends its head a handful of ANNOUNCE_BATCHes,
// not one per name or per few (each put announcing alone, 64 at once, made
// dozens), the head no more upward, and when PutMany returns the root
// holds every name with its put's blob ID (a put's reply still comes after
// its name is announced).
func TestPutManyAnnouncesTogether(t *testing.T) {
	dir := t.TempDir()
	root, head, w := startChain(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitPutReaches(t, ctx, w, root)
	wBefore, hBefore := w.tree.Status().BatchesSent, head.tree.Status().BatchesSent

	const count = 200
	items := make([]rpcbridge.PutItem, count)
	for i := range items {
		b := bytes.Repeat([]byte(fmt.Sprintf("r%d;", i)), 1000)
		items[i] = rpcbridge.PutItem{Name: fmt.Sprintf("job/res/r%03d", i), Size: uint64(len(b)),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }}
	}
	c, err := rpcbridge.Dial(SocketPath(filepath.Join(dir, "w")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	entries, sum, err := c.PutMany(ctx, items, rpcbridge.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if sum.OK != count || sum.Failed != 0 || len(entries) != count {
		t.Fatalf("summary %+v, %d entries; want %d ok", sum, len(entries), count)
	}
	// Every name at the root now, with the ID its entry gave.
	for _, e := range entries {
		rec, err := root.store.Record(e.Name)
		if err != nil {
			t.Fatalf("%s not at the root when PutMany returned: %v", e.Name, err)
		}
		if rec.ID.String() != e.Info.ID {
			t.Fatalf("%s at the root is %s, the put's entry says %s", e.Name, rec.ID, e.Info.ID)
		}
	}
	wb := w.tree.Status().BatchesSent - wBefore
	hb := head.tree.Status().BatchesSent - hBefore
	t.Logf("PutMany of %d: %v; the worker sent %d ANNOUNCE_BATCHes, the head %d", count, took, wb, hb)
	if wb == 0 || wb > 4 || hb > 4 {
		t.Fatalf("%d names went up in %d batches from the worker, %d from the head: want 1-4 each", count, wb, hb)
	}
}

// TestReplicateSmallTogether: a head copies a worker's PUT_MANY of 300
// small results whole (real root, head and worker daemons), in batch
// requests, dropping none: one copy at a time with 64 waiting per child
// dropped 235 of them (about 250 warnings a head logged per job of 1,024
// results), leaving them on the worker alone.
func TestReplicateSmallTogether(t *testing.T) {
	dir := t.TempDir()
	_, head, w := startChain(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitPutReaches(t, ctx, w, head)
	const count = 300
	items := make([]rpcbridge.PutItem, count)
	for i := range items {
		b := bytes.Repeat([]byte(fmt.Sprintf("s%d;", i)), 500)
		items[i] = rpcbridge.PutItem{Name: fmt.Sprintf("job/out/r%03d", i), Size: uint64(len(b)),
			Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }}
	}
	c, err := rpcbridge.Dial(SocketPath(filepath.Join(dir, "w")))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	entries, sum, err := c.PutMany(ctx, items, rpcbridge.PutOptions{})
	if err != nil || sum.OK != count {
		t.Fatalf("PutMany: %+v, %v", sum, err)
	}
	missing := func() int {
		n := 0
		for _, e := range entries {
			rec, err := head.store.Record(e.Name)
			if err != nil || !head.store.HasBlob(rec.ID) {
				n++
			}
		}
		return n
	}
	for missing() > 0 {
		if ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := head.engine.Status()
	t.Logf("head: %d of %d results not held, %d copied in batches, %d dropped", missing(), count, st.ReplicationsBatched, st.ReplicationsDropped)
	if m := missing(); m > 0 || st.ReplicationsDropped != 0 {
		t.Fatalf("the head holds all but %d of the worker's %d results and dropped %d copies: want all held, none dropped", m, count, st.ReplicationsDropped)
	}
	if st.ReplicationsBatched < count {
		t.Fatalf("%d results copied in batches, want %d", st.ReplicationsBatched, count)
	}
}

// startChain starts a root, a head of site a under it and a worker under
// the head, in dir.
func startChain(t *testing.T, dir string) (root, head, w *Node) {
	root = startNode(t, filepath.Join(dir, "root"), "", "")
	head = startNode(t, filepath.Join(dir, "head"), root.Addrs()[0], "a")
	w = startNode(t, filepath.Join(dir, "w"), head.Addrs()[0], "a")
	return root, head, w
}

// waitPutReaches puts job/warm at w until its record reaches at (the
// worker's parent session is up then), failing the test when ctx ends.
func waitPutReaches(t *testing.T, ctx context.Context, w, at *Node) {
	t.Helper()
	for {
		if _, err := w.Put(ctx, "job/warm", bytes.NewReader([]byte("w")), rpcbridge.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := at.store.Record("job/warm"); err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the worker's put never reached %s", at.ID())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
