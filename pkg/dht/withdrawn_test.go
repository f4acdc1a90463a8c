package dht

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
)

// TestWithdrawnByPrefix: once every node holds a prefix's removal (as the
// tree brings it: Config.Withdrawn), the DHT neither returns nor stores a
// name under the prefix dated before it, DropWithdrawn deletes the stored
// ones, and a later put of the name lives: one rule, not a removal per
// name.
func TestWithdrawnByPrefix(t *testing.T) {
	var removedAt atomic.Int64 // 0: no rule yet
	withdrawn := func(r blob.Record) bool {
		at := removedAt.Load()
		return at != 0 && strings.HasPrefix(r.Name, "job1/") && r.Time <= at
	}
	hosts, dhts := chain(t, 4, func(_ int, c *Config) { c.Withdrawn = withdrawn })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := []string{"job1/a", "job1/b/c", "job10/a"}
	for i, n := range names {
		r := blob.Record{Name: n, ID: blobID(t, n), Size: 1, Time: 100, Origin: hosts[i%4].ID().String()}
		if err := dhts[i%4].PutName(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() int {
		n := 0
		for _, d := range dhts {
			n += d.store.stats().Names
		}
		return n
	}
	if _, err := dhts[3].Name(ctx, "job1/a"); err != nil {
		t.Fatal(err)
	}
	before := stored()
	removedAt.Store(150)
	dropped := 0
	for _, d := range dhts {
		dropped += d.DropWithdrawn()
	}
	if dropped == 0 || stored() >= before {
		t.Fatalf("DropWithdrawn deleted %d (stored %d -> %d)", dropped, before, stored())
	}
	for _, n := range []string{"job1/a", "job1/b/c"} {
		if _, err := dhts[2].Name(ctx, n); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("%s after the prefix's removal: %v", n, err)
		}
	}
	if _, err := dhts[2].Name(ctx, "job10/a"); err != nil {
		t.Fatalf("a name outside the prefix: %v", err)
	}
	// An old record put again (a node that missed the removal) is
	// refused; a newer one lives.
	old := blob.Record{Name: "job1/a", ID: blobID(t, "job1/a"), Size: 1, Time: 120, Origin: hosts[0].ID().String()}
	_ = dhts[0].PutName(ctx, old)
	if _, err := dhts[3].Name(ctx, "job1/a"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("an old record put again: %v", err)
	}
	newer := old
	newer.Time = 200
	if err := dhts[0].PutName(ctx, newer); err != nil {
		t.Fatal(err)
	}
	if got, err := dhts[3].Name(ctx, "job1/a"); err != nil || got.Time != 200 {
		t.Fatalf("a put after the removal: %+v, %v", got, err)
	}
	v := nameValidator{rejected: new(atomic.Uint64), withdrawn: withdrawn}
	k, origin := newKey(t)
	b, _ := SignRecord(k, blob.Record{Name: "job1/z", ID: blobID(t, "z"), Size: 1, Time: 1, Origin: origin})
	if err := v.Validate(NameKey("job1/z"), b); !errors.Is(err, ErrWithdrawn) || v.rejected.Load() != 1 {
		t.Fatalf("validator: %v, %d rejected", err, v.rejected.Load())
	}
}
