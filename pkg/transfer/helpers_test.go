package transfer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/memstore"
	"github.com/omst-project/omst/internal/p2ptest"
	"github.com/omst-project/omst/pkg/blob"
)

// staticSources is a Provider with a fixed list of sources for every blob.
type staticSources struct {
	mu   sync.Mutex
	list []Source
}

func (s *staticSources) set(list ...Source) {
	s.mu.Lock()
	s.list = list
	s.mu.Unlock()
}

func (s *staticSources) Sources(_ cid.Cid, exclude peer.ID) []Source {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Source
	for _, src := range s.list {
		if src.ID != exclude {
			out = append(out, src)
		}
	}
	return out
}

func (s *staticSources) Describe(p peer.ID) string { return "peer " + p.String() }

func (s *staticSources) Relation(p peer.ID) SourceKind {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, src := range s.list {
		if src.ID == p {
			return src.Kind
		}
	}
	return KindOther
}

func newTestHost(t testing.TB, extra ...libp2p.Option) host.Host {
	return p2ptest.NewHost(t, extra...)
}

// engineNode is an engine on its own host, with an in-memory store and a
// static list of sources.
type engineNode struct {
	h       host.Host
	eng     *Engine
	mem     *memstore.Store
	sources *staticSources
}

// newEngine starts an engine whose sources are the given nodes, as parents.
func newEngine(t testing.TB, store Store, from ...*engineNode) *engineNode {
	t.Helper()
	h := newTestHost(t)
	mem, _ := store.(*memstore.Store)
	if store == nil {
		mem = memstore.New()
		store = mem
	}
	n := &engineNode{h: h, mem: mem, sources: &staticSources{}}
	for _, f := range from {
		h.Peerstore().AddAddrs(f.h.ID(), f.h.Addrs(), time.Hour)
		n.sources.list = append(n.sources.list, Source{ID: f.h.ID(), Kind: KindParent})
	}
	e, err := New(Config{Host: h, Store: store, Sources: n.sources, DialTimeout: 2 * time.Second, RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	n.eng = e
	return n
}

func randBlob(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// putBlob stores data as a blob in mem and returns its record.
func putBlob(t testing.TB, mem *memstore.Store, name string, data []byte, chunkSize int) blob.Record {
	t.Helper()
	m, err := blob.Split(bytes.NewReader(data), chunkSize, func(_ int, h blob.Hash, c []byte) error {
		return mem.PutChunk(h, bytes.Clone(c))
	})
	if err != nil {
		t.Fatal(err)
	}
	id, err := mem.PutManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	return blob.Record{Name: name, ID: id, Size: m.Size}
}

// readBlob reads r's blob through n's engine.
func readBlob(t testing.TB, n *engineNode, r blob.Record) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rc, err := n.eng.Open(ctx, r)
	if err != nil {
		t.Fatalf("open %q: %v", r.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %q: %v", r.Name, err)
	}
	return b
}

func errorsIsNotFound(err error) bool { return errors.Is(err, blob.ErrNotFound) }

// sampleID is the record of a one-chunk blob.
func sampleID() blob.Record {
	m := &blob.Manifest{Size: 1, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{7}}}
	return blob.Record{Name: "a/b", ID: m.CID(), Size: 1}
}
