package dht

import (
	"context"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"sync"

	ds "github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
	dssync "github.com/ipfs/go-datastore/sync"
	recpb "github.com/libp2p/go-libp2p-record/pb"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/omst-project/omst/pkg/blob"
)

// StoreLimits bound what other nodes can make this node's DHT keep: the
// name records (kad's values) and provider records it stores for them, in
// memory. Records this node made (its own names, its own provider
// records) are not bounded here: they are its users' doing, bounded by
// its cache. A zero field takes its default.
type StoreLimits struct {
	// Names bounds the name records (and removals) kept, of all other
	// origins; NameBytes their size (keys, values and NameOverhead each);
	// NamesPerOrigin those of one origin, so that one member cannot take
	// the store.
	Names          int
	NameBytes      int64
	NamesPerOrigin int
	// Providers bounds the provider records kept, of all other peers;
	// ProvidersPerPeer those of one peer (kad accepts a provider record
	// only from the provider itself); ProvidersPerKey those of one blob
	// (a lookup needs a few sources, not every reader of a popular blob).
	Providers        int
	ProvidersPerPeer int
	ProvidersPerKey  int
}

// Defaults of StoreLimits. At about 700 bytes a closed grid's name record
// and 300 a provider record (key, value and the maps' entries), a full
// store holds at most about 256 MiB of names and 150 MiB of providers.
const (
	DefaultMaxNames            = 1 << 19
	DefaultMaxNameBytes        = 256 << 20
	DefaultMaxNamesPerOrigin   = 1 << 17
	DefaultMaxProviders        = 1 << 19
	DefaultMaxProvidersPerPeer = 1 << 17
	DefaultMaxProvidersPerKey  = 64
	// NameOverhead is what a name record costs beyond its key and value
	// bytes in NameBytes: the maps' entries and slice headers.
	NameOverhead = 200
)

func (l StoreLimits) withDefaults() StoreLimits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.Names, DefaultMaxNames)
	def(&l.NamesPerOrigin, DefaultMaxNamesPerOrigin)
	def(&l.Providers, DefaultMaxProviders)
	def(&l.ProvidersPerPeer, DefaultMaxProvidersPerPeer)
	def(&l.ProvidersPerKey, DefaultMaxProvidersPerKey)
	if l.NameBytes <= 0 {
		l.NameBytes = DefaultMaxNameBytes
	}
	return l
}

// ErrStoreFull wraps the refusal of a record that would pass a StoreLimits
// bound; the error names the bound.
var ErrStoreFull = errors.New("DHT record store full")

// StoreStats is what the DHT keeps for others now, and how many records
// it refused for a bound since the start.
type StoreStats struct {
	Names     int   // name records of other origins
	NameBytes int64 // their size, as StoreLimits.NameBytes counts it
	Providers int   // provider records of other peers
	Refused   uint64
}

// providersPrefix is kad's datastore prefix of provider records
// (records.ProvidersKeyPrefix): "/providers/<base32 key>/<base32 peer>".
// Every other key holds a value: a recpb.Record whose value is a name
// record.
const providersPrefix = "/providers/"

// boundedStore is the DHT's datastore: an in-memory datastore whose
// writes pass admit, so that what others make it keep stays within
// StoreLimits. A refused Put returns an error wrapping ErrStoreFull (kad
// refuses the PUT_VALUE); a refused write in a Batch is skipped and
// counted, the others committed (kad batches provider records of many
// peers). Reads go to the datastore unchanged.
type boundedStore struct {
	store    ds.Batching
	lim      StoreLimits
	selfName string // this node's peer ID as a name record's Origin
	selfProv string // ... as a provider key's last segment

	mu        sync.Mutex
	entries   map[string]storeEntry // by datastore key, what is stored
	names     int
	nameBytes int64
	provs     int
	byOrigin  map[string]int // name records by origin
	byPeer    map[string]int // provider records by provider
	byKey     map[string]int // provider records by provided key
	refused   uint64
}

var _ ds.Batching = (*boundedStore)(nil)

// storeEntry is what admit needs to know of a stored record.
type storeEntry struct {
	provider bool
	own      bool   // this node's: not counted
	owner    string // origin (a name), provider (base32, a provider record)
	group    string // the provided key (base32; provider records)
	size     int64  // NameBytes' measure (names)
}

func newBoundedStore(self peer.ID, lim StoreLimits) *boundedStore {
	return &boundedStore{
		store:    dssync.MutexWrap(ds.NewMapDatastore()),
		lim:      lim.withDefaults(),
		selfName: self.String(),
		selfProv: base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte(self)),
		entries:  map[string]storeEntry{},
		byOrigin: map[string]int{},
		byPeer:   map[string]int{},
		byKey:    map[string]int{},
	}
}

// classify says what the value at datastore key k is and whose.
func (s *boundedStore) classify(k string, value []byte) storeEntry {
	if rest, ok := strings.CutPrefix(k, providersPrefix); ok {
		group, owner, _ := strings.Cut(rest, "/")
		return storeEntry{provider: true, own: owner == s.selfProv, owner: owner, group: group}
	}
	origin := valueOrigin(value)
	return storeEntry{own: origin == s.selfName, owner: origin, size: int64(len(k) + len(value) + NameOverhead)}
}

// valueOrigin is the Origin of the name record in value, a stored kad
// record (the validator checked it before kad stores it); "" if it cannot
// be read.
func valueOrigin(value []byte) string {
	var rec recpb.Record
	if proto.Unmarshal(value, &rec) != nil {
		return ""
	}
	v := rec.GetValue()
	if len(v) < len(nameMagic) {
		return ""
	}
	rb, _, err := take16(v[len(nameMagic):], maxRecordLen)
	if err != nil {
		return ""
	}
	r, err := blob.DecodeRecord(rb)
	if err != nil {
		return ""
	}
	return r.Origin
}

// admit is the bounds' decision, plain code: whether e may be stored in
// place of old (had: there is one), given the counts now. s.mu held.
func (s *boundedStore) admit(e, old storeEntry, had bool) error {
	if e.own {
		return nil
	}
	// What replacing old frees, if it was counted.
	freed := had && !old.own
	sub := func(same bool) int {
		if freed && same {
			return 1
		}
		return 0
	}
	if e.provider {
		switch {
		case s.provs-sub(old.provider)+1 > s.lim.Providers:
			return fmt.Errorf("%w: %d provider records kept (at most %d)", ErrStoreFull, s.provs, s.lim.Providers)
		case s.byPeer[e.owner]-sub(old.provider && old.owner == e.owner)+1 > s.lim.ProvidersPerPeer:
			return fmt.Errorf("%w: %d provider records of one peer (at most %d)", ErrStoreFull, s.byPeer[e.owner], s.lim.ProvidersPerPeer)
		case s.byKey[e.group]-sub(old.provider && old.group == e.group)+1 > s.lim.ProvidersPerKey:
			return fmt.Errorf("%w: %d providers of one blob (at most %d)", ErrStoreFull, s.byKey[e.group], s.lim.ProvidersPerKey)
		}
		return nil
	}
	oldBytes := int64(0)
	if freed && !old.provider {
		oldBytes = old.size
	}
	switch {
	case s.names-sub(!old.provider)+1 > s.lim.Names:
		return fmt.Errorf("%w: %d name records kept (at most %d)", ErrStoreFull, s.names, s.lim.Names)
	case s.nameBytes-oldBytes+e.size > s.lim.NameBytes:
		return fmt.Errorf("%w: name records of %d bytes kept (at most %d)", ErrStoreFull, s.nameBytes, s.lim.NameBytes)
	case s.byOrigin[e.owner]-sub(!old.provider && old.owner == e.owner)+1 > s.lim.NamesPerOrigin:
		return fmt.Errorf("%w: %d name records of origin %s (at most %d)", ErrStoreFull, s.byOrigin[e.owner], e.owner, s.lim.NamesPerOrigin)
	}
	return nil
}

// add counts e in, or (sign -1) out. s.mu held.
func (s *boundedStore) add(e storeEntry, sign int) {
	if e.own {
		return
	}
	if e.provider {
		s.provs += sign
		bump(s.byPeer, e.owner, sign)
		bump(s.byKey, e.group, sign)
		return
	}
	s.names += sign
	s.nameBytes += int64(sign) * e.size
	bump(s.byOrigin, e.owner, sign)
}

func bump(m map[string]int, k string, d int) {
	if m[k]+d <= 0 {
		delete(m, k)
	} else {
		m[k] += d
	}
}

// put stores value at key if admit allows.
func (s *boundedStore) put(ctx context.Context, key ds.Key, value []byte) error {
	k := key.String()
	e := s.classify(k, value)
	s.mu.Lock()
	defer s.mu.Unlock()
	old, had := s.entries[k]
	if err := s.admit(e, old, had); err != nil {
		s.refused++
		return err
	}
	if err := s.store.Put(ctx, key, value); err != nil {
		return err
	}
	if had {
		s.add(old, -1)
	}
	s.add(e, 1)
	s.entries[k] = e
	return nil
}

// Put implements ds.Write: an error wrapping ErrStoreFull past a bound.
func (s *boundedStore) Put(ctx context.Context, key ds.Key, value []byte) error {
	return s.put(ctx, key, value)
}

// Delete implements ds.Write.
func (s *boundedStore) Delete(ctx context.Context, key ds.Key) error {
	k := key.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.store.Delete(ctx, key); err != nil {
		return err
	}
	if old, had := s.entries[k]; had {
		s.add(old, -1)
		delete(s.entries, k)
	}
	return nil
}

// Get, Has, GetSize, Query, Sync and Close read (or close) the datastore.
func (s *boundedStore) Get(ctx context.Context, key ds.Key) ([]byte, error) {
	return s.store.Get(ctx, key)
}
func (s *boundedStore) Has(ctx context.Context, key ds.Key) (bool, error) {
	return s.store.Has(ctx, key)
}
func (s *boundedStore) GetSize(ctx context.Context, key ds.Key) (int, error) {
	return s.store.GetSize(ctx, key)
}
func (s *boundedStore) Query(ctx context.Context, q dsq.Query) (dsq.Results, error) {
	return s.store.Query(ctx, q)
}
func (s *boundedStore) Sync(ctx context.Context, prefix ds.Key) error {
	return s.store.Sync(ctx, prefix)
}
func (s *boundedStore) Close() error { return s.store.Close() }

// Batch implements ds.Batching: its Commit applies the writes in order,
// skipping (and counting) those a bound refuses.
func (s *boundedStore) Batch(context.Context) (ds.Batch, error) { return &boundedBatch{s: s}, nil }

type boundedBatch struct {
	s   *boundedStore
	ops []batchOp
}

type batchOp struct {
	key    ds.Key
	value  []byte
	delete bool
}

func (b *boundedBatch) Put(_ context.Context, key ds.Key, value []byte) error {
	b.ops = append(b.ops, batchOp{key: key, value: value})
	return nil
}

func (b *boundedBatch) Delete(_ context.Context, key ds.Key) error {
	b.ops = append(b.ops, batchOp{key: key, delete: true})
	return nil
}

// Commit applies the writes; a write a bound refuses is skipped, not an
// error (it is counted in Refused). It stops at the first other error.
func (b *boundedBatch) Commit(ctx context.Context) error {
	ops := b.ops
	b.ops = nil
	for _, op := range ops {
		var err error
		if op.delete {
			if err = b.s.Delete(ctx, op.key); errors.Is(err, ds.ErrNotFound) {
				err = nil
			}
		} else if err = b.s.put(ctx, op.key, op.value); errors.Is(err, ErrStoreFull) {
			err = nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// stats returns the counts.
func (s *boundedStore) stats() StoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return StoreStats{Names: s.names, NameBytes: s.nameBytes, Providers: s.provs, Refused: s.refused}
}

// dropNames deletes every stored name record (not a removal) for which
// drop is true, and returns how many it deleted.
func (s *boundedStore) dropNames(drop func(blob.Record) bool) int {
	s.mu.Lock()
	var keys []string
	for k, e := range s.entries {
		if !e.provider {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	n := 0
	ctx := context.Background()
	for _, k := range keys {
		v, err := s.store.Get(ctx, ds.NewKey(k))
		if err != nil {
			continue
		}
		r, ok := storedName(v)
		if !ok || !drop(r) {
			continue
		}
		if s.Delete(ctx, ds.NewKey(k)) == nil {
			n++
		}
	}
	return n
}

// storedName is the name record in value, a stored kad record, if it is
// one (not a removal).
func storedName(value []byte) (blob.Record, bool) {
	var rec recpb.Record
	if proto.Unmarshal(value, &rec) != nil {
		return blob.Record{}, false
	}
	v := rec.GetValue()
	if len(v) < len(nameMagic) || string(v[:len(nameMagic)]) != nameMagic {
		return blob.Record{}, false
	}
	rb, _, err := take16(v[len(nameMagic):], maxRecordLen)
	if err != nil {
		return blob.Record{}, false
	}
	r, err := blob.DecodeRecord(rb)
	return r, err == nil
}
