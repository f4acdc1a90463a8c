package cache

import (
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/namespace"
)

// The store keeps the namespace rules this node holds (pkg/namespace: a
// prefix removed everywhere, TTLs) under keyRule + the rule's Key, and
// enforces them: a record a rule withdraws is dropped with its history,
// route and pins when the rule arrives (ApplyRule) or falls due (Expire),
// is refused when it comes again (PutRecordFrom: ErrWithdrawn), and is
// never answered meanwhile (Record, List). Time is Options.Now's.

// ErrWithdrawn wraps the refusal of a record that a namespace rule this
// store holds withdraws (a prefix removed after it was put, or its TTL
// passed); it also wraps blob.ErrNotFound, so that a lookup that meets it
// reads as "no such name".
var ErrWithdrawn = fmt.Errorf("withdrawn by a namespace rule: %w", blob.ErrNotFound)

// removeBatch is how many names one index transaction drops (Badger
// bounds a transaction's size).
const removeBatch = 1024

func ruleKey(r namespace.Rule) []byte { return append([]byte(keyRule), r.Key()...) }

// loadRules reads the rules kept in the index (at Open).
func (s *Store) loadRules() error {
	set := namespace.NewSet()
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(keyRule), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			err := it.Item().Value(func(v []byte) error {
				r, err := namespace.Decode(v)
				if err != nil {
					s.log.Warn("namespace rule in the index does not decode; dropped", "key", it.Item().Key(), "err", err)
					return nil
				}
				_, err = set.Add(r)
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load namespace rules: %w", err)
	}
	s.rulesMu.Lock()
	s.rules = set
	s.rulesMu.Unlock()
	return nil
}

// now is the store's clock (Options.Now).
func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// Withdrawn returns the rule that withdraws rec now, if any.
func (s *Store) Withdrawn(rec blob.Record) (namespace.Rule, bool) {
	s.rulesMu.RLock()
	defer s.rulesMu.RUnlock()
	if s.rules == nil {
		return namespace.Rule{}, false
	}
	return s.rules.Withdrawn(rec, s.clock())
}

// withdrawnErr is the error for rec, withdrawn by rule r.
func withdrawnErr(rec blob.Record, r namespace.Rule) error {
	if r.Kind == namespace.KindRemove {
		return fmt.Errorf("%q: %w (%q removed at %s)", rec.Name, ErrWithdrawn, r.Scope, r.When().UTC().Format(time.RFC3339Nano))
	}
	return fmt.Errorf("%q: %w (TTL %v of %q passed)", rec.Name, ErrWithdrawn, r.TTL, r.Scope)
}

// Rules returns the rules this store holds whose scope is within prefix
// or covers it ("" all).
func (s *Store) Rules(prefix string) []namespace.Rule {
	s.rulesMu.RLock()
	defer s.rulesMu.RUnlock()
	if s.rules == nil {
		return nil
	}
	return s.rules.Under(prefix)
}

// ApplyRule is KeepRule, then, if r was new, DropWithdrawnBy.
func (s *Store) ApplyRule(r namespace.Rule) (changed bool, removed []blob.Record, err error) {
	changed, err = s.KeepRule(r)
	if err != nil || !changed {
		return changed, nil, err
	}
	removed, err = s.DropWithdrawnBy(r)
	return true, removed, err
}

// KeepRule keeps r if it is newer than the rule of its kind and scope held
// here, and reports whether it did: from then on Record, List and
// PutRecordFrom treat what it withdraws as gone. The rule's proof is the
// caller's to check. An invalid rule, or one past namespace.MaxRules, is
// an error.
func (s *Store) KeepRule(r namespace.Rule) (changed bool, err error) {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	s.rulesMu.Lock()
	if s.rules == nil {
		s.rules = namespace.NewSet()
	}
	old, had := s.rules.Get(r.Kind, r.Scope)
	changed, err = s.rules.Add(r)
	s.rulesMu.Unlock()
	if err == nil && changed {
		err = s.db.Update(func(txn *badger.Txn) error { return txn.Set(ruleKey(r), r.Encode()) })
		if err != nil {
			s.rulesMu.Lock()
			s.rules.Delete(r.Kind, r.Scope)
			if had {
				_, _ = s.rules.Add(old)
			}
			s.rulesMu.Unlock()
		}
	}
	if err != nil {
		return false, fmt.Errorf("%s %q: %w", r.Kind, r.Scope, noSpace(err))
	}
	return changed, nil
}

// DropWithdrawnBy drops every record of r's scope that the rules withdraw
// now (returned), with their history, routes and pins; their blobs'
// chunks, unless pinned otherwise, become the first to be evicted.
func (s *Store) DropWithdrawnBy(r namespace.Rule) ([]blob.Record, error) {
	return s.dropWithdrawn(r.Scope, r.Prefix())
}

// Expire drops every record the rules withdraw now (the TTLs that fell
// due since the last call) and forgets the rules namespace.Prunable lets
// go; it returns the records dropped.
func (s *Store) Expire() ([]blob.Record, error) {
	now := s.clock()
	var scopes []namespace.Rule
	var prune []namespace.Rule
	s.rulesMu.RLock()
	if s.rules != nil {
		for _, r := range s.rules.All() {
			switch {
			case namespace.Prunable(r, now):
				prune = append(prune, r)
			case r.Kind == namespace.KindTTL && r.TTL > 0:
				scopes = append(scopes, r)
			}
		}
	}
	s.rulesMu.RUnlock()
	var out []blob.Record
	for _, r := range scopes {
		dropped, err := s.dropWithdrawn(r.Scope, r.Prefix())
		out = append(out, dropped...)
		if err != nil {
			return out, err
		}
	}
	for _, r := range prune {
		s.metaMu.Lock()
		err := s.db.Update(func(txn *badger.Txn) error { return txn.Delete(ruleKey(r)) })
		if err == nil {
			s.rulesMu.Lock()
			if cur, ok := s.rules.Get(r.Kind, r.Scope); ok && !r.Newer(cur) && !cur.Newer(r) {
				s.rules.Delete(r.Kind, r.Scope)
			}
			s.rulesMu.Unlock()
		}
		s.metaMu.Unlock()
		if err != nil {
			return out, fmt.Errorf("prune rule of %q: %w", r.Scope, noSpace(err))
		}
	}
	return out, nil
}

// dropWithdrawn drops the records of scope (a prefix, or one name) that a
// rule withdraws now, removeBatch names per transaction.
func (s *Store) dropWithdrawn(scope string, prefix bool) ([]blob.Record, error) {
	var recs []blob.Record
	var err error
	if prefix {
		recs, err = s.scanRecords(recordKey(scope))
	} else {
		var r blob.Record
		if r, err = s.recordRaw(scope); err == nil {
			recs = []blob.Record{r}
		} else if errors.Is(err, blob.ErrNotFound) {
			err = nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("drop withdrawn names of %q: %w", scope, err)
	}
	var doomed []blob.Record
	for _, r := range recs {
		if _, ok := s.Withdrawn(r); ok {
			doomed = append(doomed, r)
		}
	}
	if len(doomed) == 0 {
		return nil, nil
	}
	// Every history key of the scope in one scan (an iterator per name,
	// inside a transaction with pending deletes, costs more than the rest).
	hist, err := s.historyKeys(scope, prefix)
	if err != nil {
		return nil, fmt.Errorf("drop withdrawn names of %q: %w", scope, err)
	}
	var done []blob.Record
	for len(doomed) > 0 {
		n := min(len(doomed), removeBatch)
		batch := doomed[:n]
		doomed = doomed[n:]
		if err := s.dropRecords(batch, hist); err != nil {
			return done, fmt.Errorf("drop withdrawn names of %q: %w", scope, err)
		}
		done = append(done, batch...)
	}
	return done, nil
}

// historyKeys returns the history keys of every name of scope, by name.
func (s *Store) historyKeys(scope string, prefix bool) (map[string][][]byte, error) {
	p := historyPrefix(scope)
	if prefix {
		p = append([]byte(keyHistory), scope...)
	}
	out := map[string][][]byte{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: p})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			if len(k) < len(keyHistory)+17 {
				continue
			}
			name := string(k[len(keyHistory) : len(k)-17])
			out[name] = append(out[name], k)
		}
		return nil
	})
	return out, err
}

// dropRecords removes each of recs that is still its name's current
// record, in one transaction, and demotes their blobs' chunks; hist holds
// their history keys (historyKeys: a key added since is trimmed with the
// name's next put).
func (s *Store) dropRecords(recs []blob.Record, hist map[string][][]byte) error {
	s.metaMu.Lock()
	defer s.metaMu.Unlock()
	unpins := map[string][]string{}
	err := s.db.Update(func(txn *badger.Txn) error {
		for _, r := range recs {
			cur, err := getRecord(txn, r.Name)
			if errors.Is(err, blob.ErrNotFound) || (err == nil && !cur.Equal(r)) {
				continue // gone or replaced meanwhile
			}
			if err != nil {
				return err
			}
			held, err := s.removeNameKeysTxn(txn, r.Name, r.ID, hist[r.Name])
			if err != nil {
				return err
			}
			unpins[r.Name] = held
		}
		return nil
	})
	if err != nil {
		return noSpace(err)
	}
	s.mu.Lock()
	for name, held := range unpins {
		s.dropOwnerMem(name, "", held)
	}
	s.mu.Unlock()
	for _, r := range recs {
		s.demote(r.ID)
	}
	return nil
}

// demote moves the unpinned chunks of blob id to the end of the eviction
// order: a removed job's bytes go before anything still in use.
func (s *Store) demote(id cid.Cid) {
	m, err := s.Manifest(id)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range m.Chunks {
		if e, ok := s.chunks[h]; ok && e.elem != nil {
			s.lru.MoveToBack(e.elem)
		}
	}
}

// recordRaw is Record without the rules' filter.
func (s *Store) recordRaw(name string) (blob.Record, error) {
	var r blob.Record
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		r, err = getRecord(txn, name)
		return err
	})
	return r, err
}

// removalCovering returns the newest removal rule that covers name (the
// time a put of name must come after to live).
func (s *Store) removalCovering(name string) (int64, bool) {
	s.rulesMu.RLock()
	defer s.rulesMu.RUnlock()
	if s.rules == nil {
		return 0, false
	}
	var at int64
	found := false
	check := func(scope string) {
		if r, ok := s.rules.Get(namespace.KindRemove, scope); ok && (!found || r.Time > at) {
			at, found = r.Time, true
		}
	}
	check(name)
	for i := 0; i < len(name); i++ {
		if name[i] == '/' {
			check(name[:i+1])
		}
	}
	return at, found
}

// Usage of a prefix on this node (DiskUsage).
type DiskUsage struct {
	Prefix string
	Names  int    // current records under the prefix
	Blobs  int    // distinct blobs they name
	Bytes  uint64 // the blobs' sizes (each blob once)
	// Held is the bytes of those blobs' chunks stored here (each chunk
	// once); Pinned the part that cannot be evicted, Unpinned the rest
	// (Held = Pinned + Unpinned).
	Held, Pinned, Unpinned int64
	// Complete counts the blobs held whole here, PinnedBlobs the pinned.
	Complete, PinnedBlobs int
	// Rules are the namespace rules held here within the prefix or
	// covering it.
	Rules []namespace.Rule
}

// DiskUsage reports what prefix ("" everything; a plain byte prefix that
// passes blob.ValidatePrefix) holds on this node.
func (s *Store) DiskUsage(prefix string) (DiskUsage, error) {
	recs, err := s.List(prefix)
	if err != nil {
		return DiskUsage{}, fmt.Errorf("du: %w", err)
	}
	du := DiskUsage{Prefix: prefix, Names: len(recs), Rules: s.Rules(prefix)}
	seenBlob := map[string]bool{}
	seenChunk := map[blob.Hash]bool{}
	for _, r := range recs {
		k := r.ID.KeyString()
		if seenBlob[k] {
			continue
		}
		seenBlob[k] = true
		du.Blobs++
		du.Bytes += r.Size
		m, err := s.Manifest(r.ID)
		if err != nil {
			continue
		}
		s.mu.Lock()
		_, pinned := s.pins[k]
		whole := true
		for _, h := range m.Chunks {
			e, ok := s.chunks[h]
			if !ok {
				whole = false
				continue
			}
			if seenChunk[h] {
				continue
			}
			seenChunk[h] = true
			du.Held += e.size
			if s.pinCount[h] > 0 {
				du.Pinned += e.size
			} else {
				du.Unpinned += e.size
			}
		}
		s.mu.Unlock()
		if whole {
			du.Complete++
		}
		if pinned {
			du.PinnedBlobs++
		}
	}
	return du, nil
}
