package transfer

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
)

// TestExpectPush drives the receiving side of a push without the tree:
// a request for a pushed chunk waits for the push instead of asking;
// a chunk that arrives is verified and stored; a corrupt one fails its
// waiters and is counted; one that never comes (the push ended) fails its
// waiters, and a later request fetches it from the source.
func TestExpectPush(t *testing.T) {
	src := newEngine(t, nil)
	const chunk = 1 << 20
	data := randBlob(3*chunk, 7)
	r := putBlob(t, src.mem, "p/x", data, chunk)
	m, err := src.mem.Manifest(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	n := newEngine(t, nil, src)
	if _, err := n.mem.PutManifest(m); err != nil { // as a FOUND brings it
		t.Fatal(err)
	}
	deliver, end := n.eng.ExpectPush(r, src.h.ID(), 0, 3)
	if deliver == nil {
		t.Fatal("push declined")
	}
	// A request for chunk 0 joins the push: it returns once delivered.
	got := make(chan []byte, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		q := fetchwire.Request{Type: fetchwire.MsgGet, ID: r.ID, Index: 0, Hash: m.Chunks[0]}
		b, _, err := n.eng.chunks.Get(ctx, q, Source{ID: src.h.ID(), Kind: KindParent}, "")
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	time.Sleep(100 * time.Millisecond)
	if s := src.eng.Status(); s.BytesServed != 0 {
		t.Fatalf("the source served %d bytes: the request did not wait for the push", s.BytesServed)
	}
	deliver(0, data[:chunk])
	if b := <-got; !bytes.Equal(b, data[:chunk]) {
		t.Fatal("the waiter got other bytes")
	}
	bad := bytes.Clone(data[chunk : 2*chunk])
	bad[5] ^= 1
	deliver(1, bad)
	end(errors.New("stream cut")) // chunk 2 never came
	st := n.eng.Status()
	if st.PushReceived != chunk || st.CorruptReceived != 1 || st.PeerErrors != 1 {
		t.Fatalf("push received %d, corrupt %d, peer errors %d; want %d, 1, 1", st.PushReceived, st.CorruptReceived, st.PeerErrors, chunk)
	}
	if !n.mem.HasChunk(m.Chunks[0]) || n.mem.HasChunk(m.Chunks[1]) || n.mem.HasChunk(m.Chunks[2]) {
		t.Fatal("only the verified pushed chunk should be stored")
	}
	if left := n.eng.chunks.InFlight(); left != 0 {
		t.Fatalf("%d chunk calls left in flight after the push ended", left)
	}
	// The rest comes from the source as usual.
	if b := readBlob(t, n, r); !bytes.Equal(b, data) {
		t.Fatal("blob differs")
	}
	// (BytesServed also counts the few bytes of the REPORT's reply.)
	if s := src.eng.Status(); s.BytesServed < 2*chunk || s.BytesServed >= 3*chunk {
		t.Fatalf("the source served %d bytes; want the 2 chunks the push did not bring", s.BytesServed)
	}
	// Declined: no manifest, or chunks outside it.
	if d, _ := n.eng.ExpectPush(blob.Record{ID: r.ID}, src.h.ID(), 2, 2); d != nil {
		t.Fatal("a push past the manifest's end was taken")
	}
}
