package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/namespace"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func putNames(t *testing.T, s *Store, prefix string, n int) []blob.Record {
	t.Helper()
	var out []blob.Record
	for i := range n {
		r, err := s.Ingest(context.Background(), fmt.Sprintf("%s%04d", prefix, i), bytes.NewReader(randBytes(5000, uint64(i)+uint64(len(prefix))<<20)), blob.MinChunkSize, "self")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestRemovePrefixRule: a prefix's removal drops every name under it (and
// no other), unpins their blobs and makes their bytes the first evicted;
// an older record arriving later is refused, a newer put lives; the rule
// survives a restart.
func TestRemovePrefixRule(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 64<<20)
	job := putNames(t, s, "job1/", 300)
	putNames(t, s, "job10/", 3)
	before, _ := s.DiskUsage("job1/")
	if before.Names != 300 || before.Pinned == 0 || before.Unpinned != 0 || before.PinnedBlobs != 300 {
		t.Fatalf("before: %+v", before)
	}
	rm := namespace.Rule{Kind: namespace.KindRemove, Scope: "job1/", Time: time.Now().UnixNano(), Origin: "remover"}
	changed, removed, err := s.ApplyRule(rm)
	if err != nil || !changed || len(removed) != 300 {
		t.Fatalf("ApplyRule: changed %v, %d removed, %v", changed, len(removed), err)
	}
	if again, _, _ := s.ApplyRule(rm); again {
		t.Fatal("the same rule applied twice")
	}
	if recs, _ := s.List("job1/"); len(recs) != 0 {
		t.Fatalf("%d names left under job1/", len(recs))
	}
	if recs, _ := s.List("job10/"); len(recs) != 3 {
		t.Fatalf("job10/ lost names: %d", len(recs))
	}
	if _, err := s.Record(job[7].Name); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("removed name: %v", err)
	}
	after, _ := s.DiskUsage("")
	if after.Names != 3 {
		t.Fatalf("after: %+v", after)
	}
	if u := s.Usage(); u.PinnedBytes != int64(3*5000) || u.PinnedBlobs != 3 {
		t.Fatalf("pins after the removal: %+v", u)
	}
	// The removed job's chunks are evicted before the kept ones.
	s.mu.Lock()
	back := s.lru.Back().Value.(*chunkEntry)
	s.mu.Unlock()
	found := false
	for _, r := range job {
		m, _ := s.Manifest(r.ID)
		for _, h := range m.Chunks {
			found = found || h == back.hash
		}
	}
	if !found {
		t.Fatal("the least recently used chunk is not a removed job's")
	}
	// An older record of the prefix (a node down during the removal
	// announcing it again) is refused; a newer one lives.
	if _, err := s.PutRecordFrom(job[3], "child"); !errors.Is(err, ErrWithdrawn) || !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("old record: %v", err)
	}
	newer := job[3]
	newer.Time = rm.Time + 1
	if ok, err := s.PutRecordFrom(newer, ""); !ok || err != nil {
		t.Fatalf("newer record: %v %v", ok, err)
	}
	// A put after the removal lives even if this clock lags the
	// remover's.
	ahead := rm
	ahead.Scope, ahead.Time = "job2/", time.Now().Add(time.Minute).UnixNano()
	if _, _, err := s.ApplyRule(ahead); err != nil {
		t.Fatal(err)
	}
	put := putNames(t, s, "job2/", 1)[0]
	if _, err := s.Record(put.Name); err != nil || put.Time <= ahead.Time {
		t.Fatalf("a put after the removal: %v (time %d, removal %d)", err, put.Time, ahead.Time)
	}
	s.Close()
	s = openStore(t, dir, 64<<20)
	if _, err := s.PutRecordFrom(job[4], "child"); !errors.Is(err, ErrWithdrawn) {
		t.Fatalf("after a restart, the old record: %v", err)
	}
	if got := s.Rules(""); len(got) != 2 {
		t.Fatalf("rules after a restart: %v", got)
	}
}

// TestTTLRule: names expire on the injected clock, not a moment before;
// Record and List stop answering them at once, Expire drops and unpins.
func TestTTLRule(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	s, err := Open(t.TempDir(), Options{MaxBytes: 64 << 20, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := putNames(t, s, "job1/", 5)
	if _, _, err := s.ApplyRule(namespace.Rule{Kind: namespace.KindTTL, Scope: "job1/", TTL: 2 * time.Hour, Time: clock.Now().UnixNano(), Origin: "o"}); err != nil {
		t.Fatal(err)
	}
	clock.t = recs[0].When().Add(2*time.Hour - time.Nanosecond)
	if gone, err := s.Expire(); len(gone) != 0 || err != nil {
		t.Fatalf("expired early: %d, %v", len(gone), err)
	}
	clock.t = recs[len(recs)-1].When().Add(2 * time.Hour)
	if _, err := s.Record(recs[4].Name); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("expired name answered: %v", err)
	}
	if l, _ := s.List(""); len(l) != 0 {
		t.Fatalf("expired names listed: %d", len(l))
	}
	gone, err := s.Expire()
	if len(gone) != 5 || err != nil {
		t.Fatalf("Expire: %d, %v", len(gone), err)
	}
	if u := s.Usage(); u.PinnedBytes != 0 {
		t.Fatalf("pinned after expiry: %d", u.PinnedBytes)
	}
	// A put's own TTL (one name) spares a later rebind.
	one := putNames(t, s, "solo/", 1)[0]
	if _, _, err := s.ApplyRule(namespace.Rule{Kind: namespace.KindTTL, Scope: one.Name, TTL: time.Minute, Time: one.Time, Origin: "o"}); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Minute)
	if _, err := s.Record(one.Name); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("one name's TTL: %v", err)
	}
	again := putNames(t, s, "solo/", 1)[0]
	clock.Add(time.Hour)
	if _, err := s.Record(again.Name); err != nil {
		t.Fatalf("a rebind after a put's TTL: %v", err)
	}
	clock.Add(namespace.PruneAfter + time.Hour)
	if _, err := s.Expire(); err != nil {
		t.Fatal(err)
	}
	if got := s.Rules("solo/"); len(got) != 0 {
		t.Fatalf("one name's TTL kept past PruneAfter: %v", got)
	}
}

// BenchmarkRemovePrefix10k: a prefix's removal dropping 10,000 pinned
// names (what a worker that put them does).
func BenchmarkRemovePrefix10k(b *testing.B) {
	for range b.N {
		b.StopTimer()
		s, err := Open(b.TempDir(), Options{MaxBytes: 256 << 20})
		if err != nil {
			b.Fatal(err)
		}
		for i := range 10000 {
			name := fmt.Sprintf("job1/%05d", i)
			if _, err := s.Ingest(context.Background(), name, bytes.NewReader([]byte(name)), blob.MinChunkSize, "self"); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		_, removed, err := s.ApplyRule(namespace.Rule{Kind: namespace.KindRemove, Scope: "job1/", Time: time.Now().UnixNano(), Origin: "o"})
		if err != nil || len(removed) != 10000 {
			b.Fatal(len(removed), err)
		}
		b.StopTimer()
		s.Close()
	}
}
