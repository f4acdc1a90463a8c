package faults

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/omst-project/omst/pkg/blob"
)

// Store layout of a daemon home (pkg/node: HOME/cache is the store
// directory; pkg/cache/doc.go: its layout).
const (
	storeDir = "cache"
	chunkDir = "chunks"
	blobDir  = "blobs"
	indexDir = "index"
)

// ChunkPath is the file of chunk h in the store of the daemon with this
// home: HOME/cache/chunks/<first two hex digits>/<hex hash>.
func ChunkPath(home string, h blob.Hash) string {
	x := h.String()
	return filepath.Join(home, storeDir, chunkDir, x[:2], x)
}

// FindChunk returns where chunk ci of data (cut at chunkSize, hashes hs)
// is stored in the daemon with this home: its chunk file (off 0, the whole
// file), or else a file of HOME/cache/blobs holding the chunk's bytes: a
// file of the whole blob (a get's destination the store shares) at the
// chunk's offset, or any other file there (a store that keeps a put's
// chunks in blob files of its own layout, e.g. one per blob or several)
// wherever its bytes are found. known, if not "", is the file of the
// whole blob found for another chunk of data: it is taken when it still
// holds the chunk at its offset, or, when no file holds the chunk's bytes
// any more (damaged since), as where it was. It fails with an error
// wrapping fs.ErrNotExist when nothing holds it.
func FindChunk(home string, hs []blob.Hash, data []byte, chunkSize, ci int, known string) (path string, off, n int64, err error) {
	path = ChunkPath(home, hs[ci])
	if st, err := os.Stat(path); err == nil {
		return path, 0, st.Size(), nil
	}
	off = int64(ci) * int64(chunkSize)
	want := data[off:min(off+int64(chunkSize), int64(len(data)))]
	if known != "" && holdsAt(known, off, want) {
		return known, off, int64(len(want)), nil
	}
	files, _ := Files(filepath.Join(home, storeDir, blobDir))
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil || st.Size() < int64(len(want)) {
			continue
		}
		if st.Size() == int64(len(data)) {
			if holdsAt(f, off, want) {
				return f, off, int64(len(want)), nil
			}
			continue
		}
		if b, err := os.ReadFile(f); err == nil {
			if i := bytes.Index(b, want); i >= 0 {
				return f, int64(i), int64(len(want)), nil
			}
		}
	}
	if known != "" {
		return known, off, int64(len(want)), nil
	}
	return "", 0, 0, fmt.Errorf("chunk %d (%s): no chunk file and no blob file holds it: %w", ci, hs[ci], fs.ErrNotExist)
}

// holdsAt reports whether the file at path holds want at off.
func holdsAt(path string, off int64, want []byte) bool {
	fh, err := os.Open(path)
	if err != nil {
		return false
	}
	defer fh.Close()
	b := make([]byte, len(want))
	_, err = fh.ReadAt(b, off)
	return err == nil && bytes.Equal(b, want)
}

// DamageRange is Damage confined to the n bytes at off of the file at
// path (a chunk in a blob file): bits flipped in the range, the file cut
// inside it, or the range punched out (zeros: the file holds other
// chunks). A range an earlier cut removed is ErrEmpty. For a chunk file
// (off 0, n its size) it is Damage.
func DamageRange(path string, off, n int64, k DamageKind, rng *rand.Rand) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if off == 0 && n == st.Size() {
		return Damage(path, k, rng)
	}
	n = min(n, st.Size()-off)
	if n <= 0 {
		return "", fmt.Errorf("blob file %s cut at %d, before the chunk at %d: %w", path, st.Size(), off, ErrEmpty)
	}
	switch k {
	case Delete:
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return "", err
		}
		err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("punch %d bytes at %d out of %s: %w", n, off, path, err)
		}
		return fmt.Sprintf("punched the chunk out of blob file %s (%d bytes at %d: zeros)", path, n, off), nil
	case Truncate:
		to := off + rng.Int64N(n)
		if err := os.Truncate(path, to); err != nil {
			return "", err
		}
		return fmt.Sprintf("truncated blob file %s from %d to %d bytes (the chunk at %d)", path, st.Size(), to, off), nil
	case Flip:
		k := 1 + rng.IntN(4)
		offs, err := flipBitsIn(path, off, n, k, rng)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("flipped %d bit(s) of blob file %s (the chunk at %d, %d bytes) at offsets %v", k, path, off, n, offs), nil
	}
	return "", fmt.Errorf("unknown damage kind %d", k)
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
	return flipBitsIn(path, 0, size, n, rng)
}

// flipBitsIn is FlipBits in the size bytes at base.
func flipBitsIn(path string, base, size int64, n int, rng *rand.Rand) ([]int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[int64]bool{}
	var offs []int64
	for len(offs) < n && int64(len(offs)) < size {
		off := base + rng.Int64N(size)
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
