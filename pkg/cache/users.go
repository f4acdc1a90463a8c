package cache

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/omst-project/omst/pkg/blob"
)

// The local user of a name: the uid of the local API caller whose put made
// the name's current record on this node. It is kept with the record, and
// dropped when the name is removed or a record from elsewhere replaces it.
// The node uses it to let a user of the shared daemon replace and remove its
// own puts and nobody else's (docs/security.md).

// IngestOptions are the optional settings of IngestWith.
type IngestOptions struct {
	// User, if HasUser, is recorded as the name's local user.
	User    uint32
	HasUser bool
	// MayReplace, if not nil, is asked inside the commit's transaction
	// whether the put may replace the name's current record here, which
	// the local user user put (hasUser false: no local user did: it came
	// from elsewhere). An error fails the ingest, storing nothing, and is
	// returned wrapped. It is not asked when the name has no record here.
	MayReplace func(user uint32, hasUser bool) error
	// Quota, if not 0 (and HasUser), bounds the bytes of the names whose
	// local user is User, this put's included (a name it replaces does
	// not count twice): a put that would exceed it fails with an error
	// wrapping blob.ErrNoSpace, early (as soon as the bytes read say so)
	// or at the commit.
	Quota uint64
}

// userBytes returns the bytes of the names whose local user is uid, name
// excepted.
func userBytes(txn *badger.Txn, uid uint32, except string) (uint64, error) {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(keyUser), PrefetchValues: true})
	defer it.Close()
	var total uint64
	for it.Rewind(); it.Valid(); it.Next() {
		name := string(it.Item().Key()[len(keyUser):])
		if name == except {
			continue
		}
		var u uint32
		if err := it.Item().Value(func(v []byte) error {
			if len(v) == 4 {
				u = binary.BigEndian.Uint32(v)
			}
			return nil
		}); err != nil {
			return 0, err
		}
		if u != uid {
			continue
		}
		rec, err := getRecord(txn, name)
		if errors.Is(err, blob.ErrNotFound) {
			continue
		}
		if err != nil {
			return 0, err
		}
		total += rec.Size
	}
	return total, nil
}

// UserBytes returns the bytes of the names whose local user is uid.
func (s *Store) UserBytes(uid uint32) (uint64, error) {
	var n uint64
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		n, err = userBytes(txn, uid, "")
		return err
	})
	return n, err
}

// quotaErr is the error of a put past its user's quota.
func quotaErr(uid uint32, used, size, quota uint64) error {
	return fmt.Errorf("%w: uid %d holds %d bytes of puts on this node; %d more would pass its quota of %d bytes (remove some of its names)",
		blob.ErrNoSpace, uid, used, size, quota)
}

// checkQuota checks, in the commit's transaction, that a put of name of
// size bytes keeps its user within opts.Quota.
func checkQuota(txn *badger.Txn, name string, size uint64, opts IngestOptions) error {
	if opts.Quota == 0 || !opts.HasUser {
		return nil
	}
	used, err := userBytes(txn, opts.User, name)
	if err != nil {
		return err
	}
	if used+size > opts.Quota {
		return quotaErr(opts.User, used, size, opts.Quota)
	}
	return nil
}

// LocalUser returns the uid of the local user that put name's current
// record here; ok is false if none did (or name has no record).
func (s *Store) LocalUser(name string) (uid uint32, ok bool, err error) {
	err = s.db.View(func(txn *badger.Txn) error {
		uid, ok, err = getUser(txn, name)
		return err
	})
	if err != nil {
		return 0, false, fmt.Errorf("local user of %q: %w", name, err)
	}
	return uid, ok, nil
}

func getUser(txn *badger.Txn, name string) (uint32, bool, error) {
	it, err := txn.Get(userKey(name))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	var uid uint32
	err = it.Value(func(v []byte) error {
		if len(v) != 4 {
			return fmt.Errorf("%w: local user of %q is %d bytes", blob.ErrCorrupt, name, len(v))
		}
		uid = binary.BigEndian.Uint32(v)
		return nil
	})
	return uid, err == nil, err
}

// checkReplace asks opts.MayReplace about the current record of name in
// txn.
func checkReplace(txn *badger.Txn, name string, opts IngestOptions) error {
	if opts.MayReplace == nil {
		return nil
	}
	if _, err := getRecord(txn, name); errors.Is(err, blob.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	uid, ok, err := getUser(txn, name)
	if err != nil {
		return err
	}
	return opts.MayReplace(uid, ok)
}

// setUser records the local user of a put's new record (after putRecord,
// which clears it).
func setUser(txn *badger.Txn, name string, opts IngestOptions) error {
	if !opts.HasUser {
		return nil
	}
	return txn.Set(userKey(name), binary.BigEndian.AppendUint32(nil, opts.User))
}
