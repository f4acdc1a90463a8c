// Package memstore is an in-memory store for tests of the packages that
// move blobs (pkg/tree, pkg/transfer): no disk, no verification on read,
// and hooks to lose or damage what it holds.
package memstore

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
)

// Store is an in-memory store of chunks, manifests and name records: the
// interfaces of pkg/tree and pkg/transfer, for their tests. It keeps
// whatever bytes it is given (PutVerifiedChunk does not verify), so that a
// test can make it serve damaged data.
type Store struct {
	mu        sync.Mutex
	chunks    map[blob.Hash][]byte
	manifests map[cid.Cid]*blob.Manifest
	records   map[string]blob.Record
	routes    map[string]string
}

// New returns an empty Store.
func New() *Store {
	return &Store{chunks: map[blob.Hash][]byte{}, manifests: map[cid.Cid]*blob.Manifest{}, records: map[string]blob.Record{}, routes: map[string]string{}}
}

func (s *Store) HasChunk(h blob.Hash) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.chunks[h]
	return ok
}

func (s *Store) ReadChunk(h blob.Hash) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.chunks[h]
	if !ok {
		return nil, fmt.Errorf("chunk %s: %w", h, blob.ErrNotFound)
	}
	return b, nil
}

// RecheckChunk verifies the held bytes and drops them if they are damaged.
func (s *Store) RecheckChunk(h blob.Hash) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.chunks[h]
	if !ok || h.Verify(b) == nil {
		return false, nil
	}
	delete(s.chunks, h)
	return true, nil
}

func (s *Store) PutChunk(h blob.Hash, data []byte) error {
	if err := h.Verify(data); err != nil {
		return err
	}
	return s.PutVerifiedChunk(h, data)
}

func (s *Store) PutVerifiedChunk(h blob.Hash, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.chunks[h] = data
	return nil
}

func (s *Store) Manifest(id cid.Cid) (*blob.Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.manifests[id]
	if !ok {
		return nil, fmt.Errorf("manifest %s: %w", id, blob.ErrNotFound)
	}
	return m, nil
}

func (s *Store) PutManifest(m *blob.Manifest) (cid.Cid, error) {
	id := m.CID()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.manifests[id] = m
	return id, nil
}

func (s *Store) Record(name string) (blob.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.records[name]
	if !ok {
		return r, fmt.Errorf("name %q: %w", name, blob.ErrNotFound)
	}
	return r, nil
}

// PutRecord is PutRecordFrom with no route.
func (s *Store) PutRecord(r blob.Record) (bool, error) { return s.PutRecordFrom(r, "") }

// PutRecordFrom stores r if it is newer than the current record, with via
// as its name's route.
func (s *Store) PutRecordFrom(r blob.Record, via string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.records[r.Name]; ok && !r.Newer(old) {
		return false, nil
	}
	s.records[r.Name] = r
	if via == "" {
		delete(s.routes, r.Name)
	} else {
		s.routes[r.Name] = via
	}
	return true, nil
}

// Routes returns the routes of the current records.
func (s *Store) Routes() (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.routes), nil
}

func (s *Store) List(prefix string) ([]blob.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []blob.Record
	for n, r := range s.records {
		if strings.HasPrefix(n, prefix) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b blob.Record) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DeleteChunk forgets chunk h.
func (s *Store) DeleteChunk(h blob.Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.chunks, h)
}

// DeleteRecord forgets the record of name.
func (s *Store) DeleteRecord(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.records, name)
	delete(s.routes, name)
}
