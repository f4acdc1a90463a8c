package blob

import (
	"encoding/hex"
	"fmt"

	"github.com/zeebo/blake3"
)

// HashSize is the length in bytes of a chunk hash.
const HashSize = 32

// Hash names a chunk: the BLAKE3-256 digest of its bytes. BLAKE3 was chosen
// over SHA-256 by measurement (see docs/benchmarks.md, "chunk hash").
type Hash [HashSize]byte

// HashChunk returns the hash of b.
func HashChunk(b []byte) Hash {
	return Hash(blake3.Sum256(b))
}

// Verify reports whether b hashes to h; on mismatch it returns an error
// wrapping ErrCorrupt that names both hashes.
func (h Hash) Verify(b []byte) error {
	if got := HashChunk(b); got != h {
		return fmt.Errorf("chunk %s: got bytes hashing to %s: %w", h, got, ErrCorrupt)
	}
	return nil
}

// String returns the lower-case hex form of h.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is the all-zero hash (never a real chunk's).
func (h Hash) IsZero() bool { return h == Hash{} }

// ParseHash parses the hex form produced by String.
func ParseHash(s string) (Hash, error) {
	var h Hash
	if len(s) != 2*HashSize {
		return h, fmt.Errorf("parse hash %q: want %d hex digits", s, 2*HashSize)
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, fmt.Errorf("parse hash %q: %w", s, err)
	}
	return h, nil
}
