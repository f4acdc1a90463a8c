package cache

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
)

// ErrIndexDamaged is returned (wrapped) by Open when the store's index
// cannot be read: a table file cut short, a flipped bit, a missing file.
var ErrIndexDamaged = errors.New("store index is damaged")

// checkIndexTables opens every table file of the index at dir and verifies
// its checksums before Badger opens them, because Badger panics (in
// goroutines of its own, where no caller can recover) on a table file that
// is cut short, and on some flipped bits. A damaged table is reported as an
// error wrapping ErrIndexDamaged.
func checkIndexTables(dir string, bopts badger.Options) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read index directory: %w", err)
	}
	topts := table.Options{
		ChkMode:              options.OnTableRead,
		BlockSize:            bopts.BlockSize,
		Compression:          bopts.Compression,
		ZSTDCompressionLevel: bopts.ZSTDCompressionLevel,
		ReadOnly:             true,
	}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sst") {
			continue
		}
		if err := checkTable(filepath.Join(dir, e.Name()), topts); err != nil {
			return fmt.Errorf("%w: table %s: %v", ErrIndexDamaged, e.Name(), err)
		}
	}
	return nil
}

// checkTable opens one table read-only and verifies it; a panic of the
// table code is an error.
func checkTable(path string, topts table.Options) (err error) {
	mf, err := z.OpenMmapFile(path, os.O_RDONLY, 0)
	if err != nil && !errors.Is(err, z.NewFile) {
		return err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("its %d bytes cannot be parsed (cut short or overwritten)", len(mf.Data))
		}
		mf.Close(-1)
	}()
	if _, err := table.OpenTable(mf, topts); err != nil {
		return err
	}
	return nil
}

// firstLine returns s up to its first non-empty line's end.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return s
}

// damagedIndexHelp tells an operator what to do about a damaged index.
func damagedIndexHelp(indexDir string) string {
	return fmt.Sprintf("the names, manifests and pins of this node cannot be read. To start with an empty index, move it "+
		"aside (mv %s %s.damaged): chunk files are kept (adopted as orphans), names are found again through the parent "+
		"as they are looked up, and blobs that were put only on this node must be put again", indexDir, indexDir)
}
