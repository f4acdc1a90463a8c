package cache

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

// ownedFromPins inverts s.pins' owners: what s.owned must equal.
func ownedFromPins(s *Store) map[string]map[string]struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]struct{}{}
	for k, p := range s.pins {
		for o := range p.owners {
			if out[o] == nil {
				out[o] = map[string]struct{}{}
			}
			out[o][k] = struct{}{}
		}
	}
	return out
}

func checkOwned(t *testing.T, s *Store, step string) {
	t.Helper()
	want := ownedFromPins(s)
	s.mu.Lock()
	got := maps.Clone(s.owned)
	s.mu.Unlock()
	if !maps.EqualFunc(got, want, func(a, b map[string]struct{}) bool { return maps.Equal(a, b) }) {
		t.Fatalf("after %s: the owners index %v, the pins say %v", step, got, want)
	}
}

// The inverted index of the pins' owners (which lets a put drop its name's
// old pin without looking at every pin) stays equal to the pins over
// random puts (rebinding names to new and to shared blobs), removals, Pin,
// Unpin and a reopen.
func TestOwnedIndexFollowsPins(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	rng := rand.New(rand.NewPCG(7, 8))
	contents := make([][]byte, 6) // few contents: names share blobs
	for i := range contents {
		contents[i] = randBytes(3_000, uint64(i+1))
	}
	var ids []blob.Record
	for i := range 300 {
		name := fmt.Sprintf("job/n%d", rng.IntN(12))
		var step string
		switch op := rng.IntN(10); {
		case op < 6:
			rec, err := s.Ingest(ctx, name, bytes.NewReader(contents[rng.IntN(len(contents))]), blob.MinChunkSize, "me")
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, rec)
			step = "put " + name
		case op < 8:
			_ = s.RemoveName(name)
			step = "remove " + name
		case op < 9 && len(ids) > 0:
			_ = s.Pin(ids[rng.IntN(len(ids))].ID)
			step = "pin"
		case len(ids) > 0:
			_ = s.Unpin(ids[rng.IntN(len(ids))].ID)
			step = "unpin"
		}
		checkOwned(t, s, fmt.Sprintf("step %d (%s)", i, step))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, 1<<30)
	checkOwned(t, s, "reopen")
}

// BenchmarkPutWithManyPinned: a put's cost with 20,000 names pinned (each
// put once looked at every pin to drop its name's old one).
func BenchmarkPutWithManyPinned(b *testing.B) {
	ctx := context.Background()
	s := openStore(b, b.TempDir(), 1<<34)
	for i := range 20_000 {
		if _, err := s.Ingest(ctx, fmt.Sprintf("pinned/%d", i), bytes.NewReader([]byte(fmt.Sprint(i))), blob.MinChunkSize, "me"); err != nil {
			b.Fatal(err)
		}
	}
	data := []byte("payload")
	b.ResetTimer()
	for i := range b.N {
		if _, err := s.Ingest(ctx, fmt.Sprintf("new/%d", i), bytes.NewReader(data), blob.MinChunkSize, "me"); err != nil {
			b.Fatal(err)
		}
	}
}
