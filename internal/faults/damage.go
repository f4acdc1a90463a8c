package faults

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/omst-project/omst/pkg/blob"
)

// Store layout of a daemon home (pkg/node: HOME/cache is the store
// directory; pkg/cache/doc.go: its layout).
const (
	storeDir = "cache"
	chunkDir = "chunks"
	indexDir = "index"
)

// ChunkPath is the file of chunk h in the store of the daemon with this
// home: HOME/cache/chunks/<first two hex digits>/<hex hash>.
func ChunkPath(home string, h blob.Hash) string {
	x := h.String()
	return filepath.Join(home, storeDir, chunkDir, x[:2], x)
}

// IndexDir is the BadgerDB index of the daemon with this home.
func IndexDir(home string) string { return filepath.Join(home, storeDir, indexDir) }

// ChunkHashes returns the chunk hashes of data cut at chunkSize, as the
// daemon cuts a put (blob.Split).
func ChunkHashes(data []byte, chunkSize int) []blob.Hash {
	var hs []blob.Hash
	for off := 0; off < len(data); off += chunkSize {
		hs = append(hs, blob.HashChunk(data[off:min(off+chunkSize, len(data))]))
	}
	return hs
}

// DamageKind is a kind of on-disk damage.
type DamageKind int

const (
	Flip     DamageKind = iota // flip 1..4 random bits in place
	Truncate                   // cut the file to a random shorter length
	Delete                     // remove the file
)

// DamageKinds lists every kind, for random choice.
var DamageKinds = []DamageKind{Flip, Truncate, Delete}

func (k DamageKind) String() string { return [...]string{"flip", "truncate", "delete"}[k] }

// ErrEmpty: an empty file has no byte to flip and nothing to cut.
var ErrEmpty = errors.New("empty file")

// Damage applies k to the file at path, with positions drawn from rng, and
// describes what it did. The file keeps its inode (flip, truncate), as a
// disk error or a stray write would leave it.
func Damage(path string, k DamageKind, rng *rand.Rand) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	size := st.Size()
	switch k {
	case Delete:
		if err := os.Remove(path); err != nil {
			return "", err
		}
		return fmt.Sprintf("deleted %s (%d bytes)", path, size), nil
	case Truncate:
		if size == 0 {
			return "", fmt.Errorf("truncate %s: %w", path, ErrEmpty)
		}
		to := rng.Int64N(size)
		if err := os.Truncate(path, to); err != nil {
			return "", err
		}
		return fmt.Sprintf("truncated %s from %d to %d bytes", path, size, to), nil
	case Flip:
		if size == 0 {
			return "", fmt.Errorf("flip in %s: %w", path, ErrEmpty)
		}
		n := 1 + rng.IntN(4)
		offs, err := FlipBits(path, size, n, rng)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("flipped %d bit(s) of %s (%d bytes) at offsets %v", n, path, size, offs), nil
	}
	return "", fmt.Errorf("unknown damage kind %d", k)
}

// FlipBits flips one random bit in each of n random bytes (distinct
// offsets below size) of the file, in place, and returns the offsets.
func FlipBits(path string, size int64, n int, rng *rand.Rand) ([]int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[int64]bool{}
	var offs []int64
	for len(offs) < n && int64(len(offs)) < size {
		off := rng.Int64N(size)
		if seen[off] {
			continue
		}
		seen[off] = true
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, off); err != nil {
			return nil, err
		}
		b[0] ^= 1 << rng.IntN(8)
		if _, err := f.WriteAt(b, off); err != nil {
			return nil, err
		}
		offs = append(offs, off)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	return offs, f.Close()
}

// Files returns the regular files under dir (recursively), sorted, so that
// a random pick from them replays.
func Files(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// DamageIndex damages the index directory of a stopped daemon: with
// delete set it removes the whole directory, else it flips bits in 1..3
// random non-empty files of it (or truncates one, drawn by rng). It
// describes what it did.
func DamageIndex(home string, del bool, rng *rand.Rand) (string, error) {
	dir := IndexDir(home)
	if del {
		if err := os.RemoveAll(dir); err != nil {
			return "", err
		}
		return "deleted the index directory " + dir, nil
	}
	files, err := Files(dir)
	if err != nil {
		return "", err
	}
	var nonEmpty []string
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.Size() > 0 {
			nonEmpty = append(nonEmpty, f)
		}
	}
	if len(nonEmpty) == 0 {
		return "", fmt.Errorf("no non-empty file in %s", dir)
	}
	var did []string
	n := 1 + rng.IntN(min(3, len(nonEmpty)))
	for _, i := range rng.Perm(len(nonEmpty))[:n] {
		k := Flip
		if rng.IntN(4) == 0 {
			k = Truncate
		}
		d, err := Damage(nonEmpty[i], k, rng)
		if err != nil {
			return "", err
		}
		did = append(did, d)
	}
	return strings.Join(did, "; "), nil
}
