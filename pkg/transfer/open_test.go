package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/internal/memstore"
	"github.com/omst-project/omst/pkg/blob"
)

// damagedStore holds one chunk whose stored copy reads back damaged: the
// store reports it corrupt and drops it, as Store.ReadChunk says.
type damagedStore struct {
	*memstore.Store
	bad blob.Hash
}

func (s *damagedStore) ReadChunk(h blob.Hash) ([]byte, error) {
	if h == s.bad {
		s.DeleteChunk(h)
		return nil, fmt.Errorf("chunk %s: %w", h, blob.ErrCorrupt)
	}
	return s.Store.ReadChunk(h)
}

// A chunk missing here, or damaged here, with no source to fetch it from
// fails the get at once with blob.ErrUnavailable (the name exists: not
// ErrNotFound), naming the chunk and, when damaged, why: a Fetch before it
// asks anyone, a reader (Open) when it reaches the chunk, after the chunks
// before it.
func TestNoSourceForMissingChunk(t *testing.T) {
	const cs = blob.MinChunkSize
	data := randBlob(4*cs, 21)
	for _, tc := range []struct {
		name    string
		damaged bool // chunk 1 is there but reads back damaged (else it is absent)
		open    bool // read it (Open), else Fetch
		want    []string
	}{
		{"fetch missing", false, false, []string{"no source"}},
		{"open missing", false, true, []string{"chunk 1", "no source"}},
		{"open damaged", true, true, []string{"chunk 1", "no source", "does not match its hash"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memstore.New()
			r := putBlob(t, mem, "x", data, cs)
			m, err := mem.Manifest(r.ID)
			if err != nil {
				t.Fatal(err)
			}
			var store Store = mem
			if tc.damaged {
				store = &damagedStore{Store: mem, bad: m.Chunks[1]}
			} else {
				mem.DeleteChunk(m.Chunks[1])
			}
			w := newEngine(t, store) // no sources
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var got []byte
			if tc.open {
				rc, oerr := w.eng.Open(ctx, r)
				if oerr != nil {
					t.Fatalf("open: %v", oerr)
				}
				got, err = io.ReadAll(rc)
				rc.Close()
				if string(got) != string(data[:cs]) {
					t.Fatalf("read %d bytes before the error, want chunk 0's %d", len(got), cs)
				}
			} else {
				err = w.eng.Fetch(ctx, r)
			}
			if !errors.Is(err, blob.ErrUnavailable) || errors.Is(err, blob.ErrNotFound) || ctx.Err() != nil {
				t.Fatalf("got %v, want ErrUnavailable at once", err)
			}
			if tc.damaged != errors.Is(err, blob.ErrCorrupt) {
				t.Fatalf("got %v: the damage is not (or wrongly) named", err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
		})
	}
}

// OpenManifest reads a blob with the manifest its caller already holds
// (the store's is not read again), and refuses one that does not match
// the record, or none.
func TestOpenManifest(t *testing.T) {
	const cs = blob.MinChunkSize
	data := randBlob(3*cs+5, 22)
	mem := memstore.New()
	r := putBlob(t, mem, "x", data, cs)
	m, err := mem.Manifest(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	n := newEngine(t, mem)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := n.eng.OpenManifest(ctx, r, m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != string(data) {
		t.Fatalf("read %d bytes (want %d), err %v", len(got), len(data), err)
	}
	other := putBlob(t, mem, "y", randBlob(2*cs, 23), cs)
	om, err := mem.Manifest(other.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*blob.Manifest{nil, om} {
		if _, err := n.eng.OpenManifest(ctx, r, bad); err == nil || !strings.Contains(err.Error(), `open "x": manifest does not match`) {
			t.Fatalf("OpenManifest with a wrong manifest: %v", err)
		}
	}
}

// manifestCountingStore is a memstore that counts the reads of manifests.
type manifestCountingStore struct {
	*memstore.Store
	manifests atomic.Int64
}

func (s *manifestCountingStore) Manifest(id cid.Cid) (*blob.Manifest, error) {
	s.manifests.Add(1)
	return s.Store.Manifest(id)
}

// FetchManifest fetches a blob with the manifest its caller already holds
// (a get's, from its lookup): the store's manifest is never read, where
// Fetch reads it; every chunk is stored; a manifest that does not match
// the record, or none, is refused.
func TestFetchManifest(t *testing.T) {
	const cs = blob.MinChunkSize
	root := newEngine(t, nil)
	r := putBlob(t, root.mem, "x", randBlob(5*cs+3, 31), cs)
	m, err := root.mem.Manifest(r.ID)
	if err != nil {
		t.Fatal(err)
	}
	cst := &manifestCountingStore{Store: memstore.New()}
	w := newEngine(t, cst, root)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.eng.FetchManifest(ctx, r, m); err != nil {
		t.Fatal(err)
	}
	for i, h := range m.Chunks {
		if !cst.HasChunk(h) {
			t.Fatalf("chunk %d not stored", i)
		}
	}
	if n := cst.manifests.Load(); n != 0 {
		t.Fatalf("FetchManifest read the manifest %d times, want 0", n)
	}
	r2 := putBlob(t, root.mem, "y", randBlob(2*cs, 32), cs)
	if err := w.eng.Fetch(ctx, r2); err != nil {
		t.Fatal(err)
	}
	if n := cst.manifests.Load(); n == 0 {
		t.Fatal("Fetch did not read the manifest (the counter counts nothing)")
	}
	m2, _ := root.mem.Manifest(r2.ID)
	for _, bad := range []*blob.Manifest{nil, m2} {
		if err := w.eng.FetchManifest(ctx, r, bad); err == nil || !strings.Contains(err.Error(), `fetch "x": manifest does not match`) {
			t.Fatalf("FetchManifest with a wrong manifest: %v", err)
		}
	}
}
