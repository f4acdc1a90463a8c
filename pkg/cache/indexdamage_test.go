package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pristineIndex makes a store with a few names, closes it (Badger writes
// its table), and returns the store's directory and the table file's path.
func pristineIndex(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, Options{MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := s.Ingest(context.Background(), fmt.Sprintf("d/%d", i), bytes.NewReader(randBytes(100<<10, uint64(i))), 64<<10, "me"); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	tables, _ := filepath.Glob(filepath.Join(dir, "index", "*.sst"))
	if len(tables) == 0 {
		t.Fatal("no index table written: the test proves nothing")
	}
	return dir, tables[0]
}

// copyDir copies the files of a store directory tree.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDamagedIndexRefused: an index table cut short, or with a flipped bit
// anywhere, makes Open fail with ErrIndexDamaged and a way out, never
// panic; a store that still opens reads back exactly what was put.
func TestDamagedIndexRefused(t *testing.T) {
	src, table := pristineIndex(t)
	rel, _ := filepath.Rel(src, table)
	orig, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	damages := map[string]func(b []byte) []byte{
		"cut to 0":      func(b []byte) []byte { return nil },
		"cut by 1":      func(b []byte) []byte { return b[:len(b)-1] },
		"cut in half":   func(b []byte) []byte { return b[:len(b)/2] },
		"cut to 84%":    func(b []byte) []byte { return b[:len(b)*84/100] },
		"zeros at end":  func(b []byte) []byte { return append(b[:len(b)-16], make([]byte, 16)...) },
		"trailing junk": func(b []byte) []byte { return append(b, 1, 2, 3) },
	}
	for off := 0; off < len(orig); off += max(1, len(orig)/41) {
		damages[fmt.Sprintf("bit flip at %d", off)] = func(b []byte) []byte { b[off] ^= 0x10; return b }
	}
	refused := 0
	for name, damage := range damages {
		dir := t.TempDir()
		copyDir(t, src, dir)
		if err := os.WriteFile(filepath.Join(dir, rel), damage(bytes.Clone(orig)), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir, Options{MaxBytes: 1 << 30})
		if err != nil {
			if !strings.Contains(err.Error(), "move it aside") {
				t.Errorf("%s: error does not say what to do: %v", name, err)
			}
			refused++
			continue
		}
		for i := range 5 {
			r, err := s.Record(fmt.Sprintf("d/%d", i))
			if err != nil {
				continue // lost to the damage: allowed
			}
			m, err := s.Manifest(r.ID)
			if err != nil {
				continue
			}
			if got := readBlob(t, s, m); !bytes.Equal(got, randBytes(100<<10, uint64(i))) {
				t.Errorf("%s: d/%d reads other bytes", name, i)
			}
		}
		s.Close()
	}
	t.Logf("%d of %d damages refused with ErrIndexDamaged; the rest opened and read back correctly", refused, len(damages))
	if refused == 0 {
		t.Fatal("no damage was refused")
	}
}

func TestDamagedIndexErrorWraps(t *testing.T) {
	src, table := pristineIndex(t)
	if err := os.Truncate(table, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(src, Options{MaxBytes: 1 << 30}); !errors.Is(err, ErrIndexDamaged) {
		t.Fatalf("open with a cut table: %v, want ErrIndexDamaged", err)
	}
}
