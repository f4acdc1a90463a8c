package tree

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// Preheat makes the heads (of the sites asked) fetch a blob before any
// worker asks; the workers' gets then cost the root nothing more.
func TestPreheat(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	ha := newNode(t, root, "siteA", nil)
	hb := newNode(t, root, "siteB", nil)
	wa := newNode(t, ha, "siteA", nil)
	waitConnected(t, ha, hb, wa)
	data := randBlob(1<<20+7, 31)
	rec := put(t, root, "pre/x", data, 64<<10)
	m, _ := root.store.Manifest(rec.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	res := root.tree.Preheat(ctx, rec, []string{"siteA"})
	if len(res) != 1 || res[0].Child != ha.h.ID() || res[0].Err != nil {
		t.Fatalf("preheat of site A: %+v", res)
	}
	for i, h := range m.Chunks {
		if !ha.store.HasChunk(h) {
			t.Fatalf("head A lacks chunk %d after the preheat", i)
		}
		if hb.store.HasChunk(h) {
			t.Fatalf("head B, of another site, got chunk %d", i)
		}
	}
	if r, err := ha.store.Record("pre/x"); err != nil || r.ID != rec.ID {
		t.Fatalf("head A has no record after the preheat: %v", err)
	}
	served := root.eng.Status().BytesServed
	if got := readAll(t, wa, "pre/x"); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes at the worker")
	}
	if more := root.eng.Status().BytesServed - served; more != 0 {
		t.Fatalf("the root served %d more bytes for a worker's get after the preheat", more)
	}
	// Every site: both heads answer.
	res = root.tree.Preheat(ctx, rec, nil)
	if len(res) != 2 || res[0].Err != nil || res[1].Err != nil {
		t.Fatalf("preheat of every site: %+v", res)
	}
	// A PREHEAT from a peer that is not a parent is refused.
	if res := wa.tree.Preheat(ctx, rec, nil); len(res) != 0 {
		t.Fatalf("a worker with no children preheated %+v", res)
	}
	if err := ha.tree.preheatChild(ctx, hb.h.ID(), rec); err == nil {
		t.Fatal("a head accepted a PREHEAT from a peer that is not its parent")
	}
}
