package cache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/dgraph-io/badger/v4"
	"github.com/ipfs/go-cid"
	"github.com/zeebo/blake3"

	"github.com/omst-project/omst/pkg/blob"
)

// PutManifest checks m and stores it; it returns the blob ID. Storing a
// manifest that is already present is a no-op.
func (s *Store) PutManifest(m *blob.Manifest) (cid.Cid, error) {
	if err := m.Check(); err != nil {
		return cid.Undef, fmt.Errorf("put manifest: %w", err)
	}
	enc := m.Encode()
	id := blob.ManifestCID(enc)
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	err := s.db.Update(func(txn *badger.Txn) error {
		return setManifest(txn, id, enc)
	})
	if err != nil {
		return cid.Undef, fmt.Errorf("put manifest %s: %w", id, noSpace(err))
	}
	s.mu.Lock()
	s.adoptChunksLocked(m.Chunks)
	s.mu.Unlock()
	return id, nil
}

// adoptChunksLocked clears the orphan mark of the stored chunks among hs,
// which a manifest just stored lists.
func (s *Store) adoptChunksLocked(hs []blob.Hash) {
	if s.orphanBytes == 0 {
		return
	}
	for _, h := range hs {
		if e := s.chunks[h]; e != nil {
			s.adoptLocked(e)
		}
	}
}

func setManifest(txn *badger.Txn, id cid.Cid, enc []byte) error {
	k := manifestKey(id.Bytes())
	if _, err := txn.Get(k); err == nil {
		return nil
	} else if !errors.Is(err, badger.ErrKeyNotFound) {
		return err
	}
	return txn.Set(k, enc)
}

// Manifest returns the manifest of blob id, or an error wrapping
// blob.ErrNotFound.
// The manifest is shared: callers must not modify it.
func (s *Store) Manifest(id cid.Cid) (*blob.Manifest, error) {
	if m, ok := s.manifests.get(id.KeyString()); ok {
		return m, nil
	}
	var m *blob.Manifest
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		m, err = getManifest(txn, id.Bytes())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", id, err)
	}
	s.rememberManifest(id, m)
	return m, nil
}

// rememberManifest keeps a decoded manifest in memory.
func (s *Store) rememberManifest(id cid.Cid, m *blob.Manifest) {
	s.manifests.put(id.KeyString(), m, 64+len(m.Chunks)*len(blob.Hash{}))
}

func getManifest(txn *badger.Txn, idb []byte) (*blob.Manifest, error) {
	item, err := txn.Get(manifestKey(idb))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, blob.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	var m *blob.Manifest
	err = item.Value(func(v []byte) error {
		var err error
		m, err = blob.DecodeManifest(v)
		return err
	})
	return m, err
}

// HasBlob reports whether the manifest of id and every chunk it lists are
// stored.
func (s *Store) HasBlob(id cid.Cid) bool {
	m, err := s.Manifest(id)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range m.Chunks {
		if _, ok := s.chunks[h]; !ok {
			return false
		}
	}
	return true
}

// PutRecord validates r's name and ID and keeps r in the name's history
// (the newest MaxHistory records are kept). It makes r the name's current
// record only if there is none or r.Newer(current), and reports whether it
// did; the name then has no route (see PutRecordFrom). It never changes
// pins.
func (s *Store) PutRecord(r blob.Record) (changed bool, err error) {
	return s.PutRecordFrom(r, "")
}

// PutRecordFrom is PutRecord for a record that came from the neighbour via
// (a peer ID, or "" for none): when r becomes current, via becomes the
// name's route (Routes), kept until another record replaces r.
func (s *Store) PutRecordFrom(r blob.Record, via string) (changed bool, err error) {
	if err := blob.ValidateName(r.Name); err != nil {
		return false, fmt.Errorf("put record: %w", err)
	}
	if !r.ID.Defined() {
		return false, fmt.Errorf("put record %q: undefined blob ID", r.Name)
	}
	if len(via) > maxRouteLen {
		return false, fmt.Errorf("put record %q: route of %d bytes", r.Name, len(via))
	}
	if rule, ok := s.Withdrawn(r); ok {
		return false, fmt.Errorf("put record %w", withdrawnErr(r, rule))
	}
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	err = s.db.Update(func(txn *badger.Txn) error {
		var err error
		changed, err = putRecord(txn, r, via)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("put record %q: %w", r.Name, noSpace(err))
	}
	return changed, nil
}

// maxRouteLen bounds a route (a peer ID's string form is about 52 bytes).
const maxRouteLen = 256

// MaxHistory bounds the records kept per name; the oldest go first.
const MaxHistory = 64

// putRecord adds r to its name's history and, if newer, makes it current
// with route via ("" removes the route).
func putRecord(txn *badger.Txn, r blob.Record, via string) (bool, error) {
	enc := r.Encode()
	if err := txn.Set(historyKey(r), enc); err != nil {
		return false, err
	}
	if err := trimHistory(txn, r.Name); err != nil {
		return false, err
	}
	cur, err := getRecord(txn, r.Name)
	if err != nil && !errors.Is(err, blob.ErrNotFound) {
		return false, err
	}
	if err == nil && !r.Newer(cur) {
		return false, nil
	}
	if err := setRoute(txn, r.Name, via); err != nil {
		return false, err
	}
	// The name's current record is no longer the one a local user put
	// (commit sets the user again for a put of its own).
	if err := txn.Delete(userKey(r.Name)); err != nil {
		return false, err
	}
	return true, txn.Set(recordKey(r.Name), enc)
}

func setRoute(txn *badger.Txn, name, via string) error {
	if via == "" {
		return txn.Delete(routeKey(name))
	}
	return txn.Set(routeKey(name), []byte(via))
}

// Routes returns the route of every name that has one: the neighbour its
// current record came from (see PutRecordFrom).
func (s *Store) Routes() (map[string]string, error) {
	out := map[string]string{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(keyRoute), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			name := string(it.Item().Key()[len(keyRoute):])
			err := it.Item().Value(func(v []byte) error {
				out[name] = string(v)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	return out, nil
}

func getRecord(txn *badger.Txn, name string) (blob.Record, error) {
	item, err := txn.Get(recordKey(name))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return blob.Record{}, blob.ErrNotFound
	}
	if err != nil {
		return blob.Record{}, err
	}
	var r blob.Record
	err = item.Value(func(v []byte) error {
		var err error
		r, err = blob.DecodeRecord(v)
		return err
	})
	return r, err
}

// Record returns the current record of name, or an error wrapping
// blob.ErrNotFound (or blob.ErrInvalidName).
func (s *Store) Record(name string) (blob.Record, error) {
	if err := blob.ValidateName(name); err != nil {
		return blob.Record{}, fmt.Errorf("record: %w", err)
	}
	var r blob.Record
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		r, err = getRecord(txn, name)
		return err
	})
	if err != nil {
		return blob.Record{}, fmt.Errorf("record %q: %w", name, err)
	}
	if rule, ok := s.Withdrawn(r); ok {
		return blob.Record{}, fmt.Errorf("record %w", withdrawnErr(r, rule))
	}
	return r, nil
}

// History returns every record kept for name, newest first (the first is the
// current one). It returns an error wrapping blob.ErrNotFound if there is
// none.
func (s *Store) History(name string) ([]blob.Record, error) {
	if err := blob.ValidateName(name); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	out, err := s.scanRecords(historyPrefix(name))
	if err != nil {
		return nil, fmt.Errorf("history %q: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("history %q: %w", name, blob.ErrNotFound)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Newer(out[j]) })
	return out, nil
}

// List returns the current records whose names start with prefix (a plain
// byte prefix; "" lists all), sorted by name. prefix must pass
// blob.ValidatePrefix.
func (s *Store) List(prefix string) ([]blob.Record, error) {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	out, err := s.scanRecords(recordKey(prefix))
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", prefix, err)
	}
	// Names a rule withdraws are not listed, even before Expire drops them.
	live := out[:0]
	for _, r := range out {
		if _, gone := s.Withdrawn(r); !gone {
			live = append(live, r)
		}
	}
	return live, nil
}

// scanRecords decodes every record stored under the key prefix, in key
// order. A value that does not decode is an error (the index is corrupt).
func (s *Store) scanRecords(prefix []byte) ([]blob.Record, error) {
	var out []blob.Record
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			err := it.Item().Value(func(v []byte) error {
				r, err := blob.DecodeRecord(v)
				if err != nil {
					return fmt.Errorf("key %q: %w", it.Item().Key(), err)
				}
				out = append(out, r)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return out, err
}

// RemoveName drops name's current record and its history, and removes the
// pins this name holds (see Ingest); blobs pinned otherwise stay pinned. It
// returns an error wrapping blob.ErrNotFound if name has no record.
func (s *Store) RemoveName(name string) error {
	return s.RemoveNameIf(name, nil)
}

// RemoveNameIf is RemoveName asking may first, in the same transaction,
// with the local user that put name's current record here (hasUser false:
// none did); an error from may leaves everything as it was and is returned
// wrapped.
func (s *Store) RemoveNameIf(name string, may func(user uint32, hasUser bool) error) error {
	if err := blob.ValidateName(name); err != nil {
		return fmt.Errorf("remove name: %w", err)
	}
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	var unpins []string
	err := s.db.Update(func(txn *badger.Txn) error {
		if _, err := getRecord(txn, name); err != nil {
			return err
		}
		if may != nil {
			uid, ok, err := getUser(txn, name)
			if err != nil {
				return err
			}
			if err := may(uid, ok); err != nil {
				return err
			}
		}
		var err error
		unpins, err = s.removeNameTxn(txn, name, cid.Undef)
		return err
	})
	if err != nil {
		return fmt.Errorf("remove name %q: %w", name, noSpace(err))
	}
	s.mu.Lock()
	s.dropOwnerMem(name, "", unpins)
	s.mu.Unlock()
	return nil
}

// removeNameTxn deletes name's record, user, route and history and drops
// the pins it holds; it returns the blobs it held (for dropOwnerMem). id,
// when defined, is the blob of name's current record: a name pins only
// the blob it ingested, so only that pin is looked at (else every pin).
// Call with metaMu held.
func (s *Store) removeNameTxn(txn *badger.Txn, name string, id cid.Cid) ([]string, error) {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: historyPrefix(name)})
	var keys [][]byte
	for it.Rewind(); it.Valid(); it.Next() {
		keys = append(keys, it.Item().KeyCopy(nil))
	}
	it.Close()
	return s.removeNameKeysTxn(txn, name, id, keys)
}

// removeNameKeysTxn is removeNameTxn with name's history keys given.
func (s *Store) removeNameKeysTxn(txn *badger.Txn, name string, id cid.Cid, keys [][]byte) ([]string, error) {
	if err := txn.Delete(recordKey(name)); err != nil {
		return nil, err
	}
	if err := txn.Delete(userKey(name)); err != nil {
		return nil, err
	}
	if err := txn.Delete(routeKey(name)); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			return nil, err
		}
	}
	if id.Defined() {
		if held, ok, err := s.dropOwnerOfTxn(txn, name, id); ok || err != nil {
			return held, err
		}
	}
	return s.dropOwnerTxn(txn, name, "")
}

// dropOwnerOfTxn is dropOwnerTxn for the pin of blob id alone: ok false
// if owner holds none on id (the caller then looks at every pin). Call
// with metaMu held.
func (s *Store) dropOwnerOfTxn(txn *badger.Txn, owner string, id cid.Cid) ([]string, bool, error) {
	k := id.KeyString()
	s.mu.Lock()
	p := s.pins[k]
	var rest map[string]struct{}
	if p != nil {
		if _, ok := p.owners[owner]; ok {
			rest = make(map[string]struct{}, len(p.owners))
			for o := range p.owners {
				if o != owner {
					rest[o] = struct{}{}
				}
			}
		}
	}
	s.mu.Unlock()
	if rest == nil {
		return nil, false, nil
	}
	var err error
	if len(rest) == 0 {
		err = txn.Delete(pinKey([]byte(k)))
	} else {
		err = txn.Set(pinKey([]byte(k)), encodeOwners(rest))
	}
	return []string{k}, true, err
}

// Pin keeps every chunk of blob id from eviction until Unpin. It needs the
// blob's manifest (else an error wrapping blob.ErrNotFound) but not its
// chunks: chunks that arrive later are pinned on arrival. A chunk shared by
// several pinned blobs stays pinned until all of them are unpinned. Pinning a
// pinned blob is a no-op.
func (s *Store) Pin(id cid.Cid) error {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	var m *blob.Manifest
	err := s.db.Update(func(txn *badger.Txn) error {
		var err error
		if m, err = getManifest(txn, id.Bytes()); err != nil {
			return err
		}
		_, err = s.addOwnerTxn(txn, id, "")
		return err
	})
	if err != nil {
		return fmt.Errorf("pin %s: %w", id, noSpace(err))
	}
	s.mu.Lock()
	s.addOwnerMem(id, "", m)
	s.mu.Unlock()
	return nil
}

// Unpin removes every pin on blob id (by Pin and by names), making its
// chunks evictable unless another pinned blob shares them. It returns an
// error wrapping blob.ErrNotFound if id is not pinned.
func (s *Store) Unpin(id cid.Cid) error {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	s.mu.Lock()
	_, ok := s.pins[id.KeyString()]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("unpin %s: not pinned: %w", id, blob.ErrNotFound)
	}
	err := s.db.Update(func(txn *badger.Txn) error {
		return txn.Delete(pinKey(id.Bytes()))
	})
	if err != nil {
		return fmt.Errorf("unpin %s: %w", id, noSpace(err))
	}
	s.mu.Lock()
	s.unpinBlobLocked(id.KeyString())
	s.mu.Unlock()
	return nil
}

// Pinned reports whether blob id is pinned (by Pin or by an ingested name).
func (s *Store) Pinned(id cid.Cid) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.pins[id.KeyString()]
	return ok
}

// addOwnerTxn adds owner to the pin of id in the index and reports whether
// the blob was unpinned before. Call with metaMu held.
func (s *Store) addOwnerTxn(txn *badger.Txn, id cid.Cid, owner string) (bool, error) {
	s.mu.Lock()
	p := s.pins[id.KeyString()]
	var owners map[string]struct{}
	if p != nil {
		if _, ok := p.owners[owner]; ok {
			s.mu.Unlock()
			return false, nil
		}
		owners = make(map[string]struct{}, len(p.owners)+1)
		for o := range p.owners {
			owners[o] = struct{}{}
		}
	} else {
		owners = make(map[string]struct{}, 1)
	}
	s.mu.Unlock()
	owners[owner] = struct{}{}
	return p == nil, txn.Set(pinKey(id.Bytes()), encodeOwners(owners))
}

// addOwnerMem applies addOwnerTxn to the in-memory state after the commit.
// Call with metaMu and mu held.
func (s *Store) addOwnerMem(id cid.Cid, owner string, m *blob.Manifest) {
	k := id.KeyString()
	p := s.pins[k]
	if p == nil {
		p = &pinnedBlob{owners: map[string]struct{}{}, chunks: distinct(m.Chunks)}
		s.pins[k] = p
		for _, h := range p.chunks {
			s.pinChunkLocked(h)
		}
	}
	p.owners[owner] = struct{}{}
	s.indexOwner(owner, k)
}

// indexOwner and unindexOwner keep s.owned, the pins' owners inverted, in
// step with them. Call with mu held.
func (s *Store) indexOwner(owner, k string) {
	ks := s.owned[owner]
	if ks == nil {
		ks = make(map[string]struct{}, 1)
		s.owned[owner] = ks
	}
	ks[k] = struct{}{}
}

func (s *Store) unindexOwner(owner, k string) {
	if ks := s.owned[owner]; ks != nil {
		delete(ks, k)
		if len(ks) == 0 {
			delete(s.owned, owner)
		}
	}
}

// dropOwnerTxn removes owner from every pin it holds except on blob keep
// (a cid.KeyString, or "") and returns the keys of the blobs it held.
// It looks only at owner's pins (s.owned), not at every pin: a put of a
// name costs the same with 10 or 100,000 blobs pinned. Call with metaMu
// held.
func (s *Store) dropOwnerTxn(txn *badger.Txn, owner, keep string) ([]string, error) {
	s.mu.Lock()
	var held []string
	var rewrite []map[string]struct{}
	for k := range s.owned[owner] {
		p := s.pins[k]
		if p == nil || k == keep {
			continue
		}
		rest := make(map[string]struct{}, len(p.owners))
		for o := range p.owners {
			if o != owner {
				rest[o] = struct{}{}
			}
		}
		held = append(held, k)
		rewrite = append(rewrite, rest)
	}
	s.mu.Unlock()
	for i, k := range held {
		var err error
		if len(rewrite[i]) == 0 {
			err = txn.Delete(pinKey([]byte(k)))
		} else {
			err = txn.Set(pinKey([]byte(k)), encodeOwners(rewrite[i]))
		}
		if err != nil {
			return nil, err
		}
	}
	return held, nil
}

// dropOwnerMem applies dropOwnerTxn to the in-memory state after the commit.
// Call with metaMu and mu held.
func (s *Store) dropOwnerMem(owner, keep string, held []string) {
	for _, k := range held {
		p := s.pins[k]
		if p == nil || k == keep {
			continue
		}
		delete(p.owners, owner)
		s.unindexOwner(owner, k)
		if len(p.owners) == 0 {
			s.unpinBlobLocked(k)
		}
	}
}

// unpinBlobLocked forgets the pin of blob k and releases its chunks.
func (s *Store) unpinBlobLocked(k string) {
	p := s.pins[k]
	if p == nil {
		return
	}
	delete(s.pins, k)
	for o := range p.owners {
		s.unindexOwner(o, k)
	}
	for _, h := range p.chunks {
		s.unpinChunkLocked(h)
	}
}

func manifestKey(idb []byte) []byte { return append([]byte(keyManifest), idb...) }
func pinKey(idb []byte) []byte      { return append([]byte(keyPin), idb...) }
func recordKey(name string) []byte  { return append([]byte(keyRecord), name...) }
func routeKey(name string) []byte   { return append([]byte(keyRoute), name...) }
func userKey(name string) []byte    { return append([]byte(keyUser), name...) }

// historyPrefix ends with 0x00, which valid names never contain, so it
// matches no other name's history.
func historyPrefix(name string) []byte {
	return append(append([]byte(keyHistory), name...), 0)
}

// historyKey identifies r within its name's history by a digest of its
// encoding.
func historyKey(r blob.Record) []byte {
	sum := blake3.Sum256(r.Encode())
	return append(historyPrefix(r.Name), sum[:16]...)
}

func encodeOwners(owners map[string]struct{}) []byte {
	names := make([]string, 0, len(owners))
	for o := range owners {
		names = append(names, o)
	}
	sort.Strings(names)
	var b []byte
	for _, o := range names {
		b = binary.BigEndian.AppendUint16(b, uint16(len(o)))
		b = append(b, o...)
	}
	return b
}

func decodeOwners(b []byte) map[string]struct{} {
	owners := make(map[string]struct{})
	for len(b) >= 2 {
		n := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+n {
			break
		}
		owners[string(b[2:2+n])] = struct{}{}
		b = b[2+n:]
	}
	if len(owners) == 0 { // damaged or empty value: still pinned
		owners[""] = struct{}{}
	}
	return owners
}

// trimHistory deletes the oldest records of name beyond MaxHistory.
func trimHistory(txn *badger.Txn, name string) error {
	type entry struct {
		key []byte
		r   blob.Record
	}
	var all []entry
	it := txn.NewIterator(badger.IteratorOptions{Prefix: historyPrefix(name), PrefetchValues: true})
	for it.Rewind(); it.Valid(); it.Next() {
		e := entry{key: it.Item().KeyCopy(nil)}
		err := it.Item().Value(func(v []byte) error {
			var err error
			e.r, err = blob.DecodeRecord(v)
			return err
		})
		if err != nil {
			it.Close()
			return err
		}
		all = append(all, e)
	}
	it.Close()
	if len(all) <= MaxHistory {
		return nil
	}
	sort.Slice(all, func(i, j int) bool { return all[i].r.Newer(all[j].r) })
	for _, e := range all[MaxHistory:] {
		if err := txn.Delete(e.key); err != nil {
			return err
		}
	}
	return nil
}
