package cache

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/omst-project/omst/pkg/blob"
)

// migrateV1 rewrites an index of version 1 as version 2: every record
// (current and history) re-encoded without via, and a current record's
// non-empty via kept as the name's route. It is idempotent, so a crash in
// the middle only makes the next Open do it again; the version is set last.
func (s *Store) migrateV1() error {
	type kv struct{ k, v []byte }
	var sets []kv
	var dels [][]byte
	err := s.db.View(func(txn *badger.Txn) error {
		for _, prefix := range []string{keyRecord, keyHistory} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix), PrefetchValues: true})
			for it.Rewind(); it.Valid(); it.Next() {
				k := it.Item().KeyCopy(nil)
				v, err := it.Item().ValueCopy(nil)
				if err != nil {
					it.Close()
					return err
				}
				r, via, err := blob.DecodeRecordV1(v)
				if err != nil {
					it.Close()
					return fmt.Errorf("key %q: %w", k, err)
				}
				enc := r.Encode()
				if prefix == keyRecord {
					sets = append(sets, kv{k, enc})
					if via != "" {
						sets = append(sets, kv{routeKey(r.Name), []byte(via)})
					}
					continue
				}
				nk := historyKey(r)
				sets = append(sets, kv{nk, enc})
				if !bytes.Equal(nk, k) {
					dels = append(dels, k)
				}
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate index from version 1: %w", err)
	}
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for _, d := range dels {
		if err := wb.Delete(d); err != nil {
			return fmt.Errorf("migrate index from version 1: %w", err)
		}
	}
	for _, e := range sets {
		if err := wb.Set(e.k, e.v); err != nil {
			return fmt.Errorf("migrate index from version 1: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("migrate index from version 1: %w", noSpace(err))
	}
	err = s.db.Update(func(txn *badger.Txn) error {
		return txn.Set([]byte(keyVersion), binary.BigEndian.AppendUint32(nil, indexVersion))
	})
	if err != nil {
		return fmt.Errorf("migrate index from version 1: %w", noSpace(err))
	}
	s.log.Info("index migrated from version 1 to 2", "records", len(sets)-len(dels))
	return nil
}
