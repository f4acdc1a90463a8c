// Package payload makes the deterministic pseudo-random blobs that the
// benchmark harnesses move (the testground plan and the BitTorrent
// baseline), so that every harness moves the same bytes for the same seed.
package payload

import (
	"encoding/binary"
	"io"
	"math/rand/v2"
)

// Reader returns a reader of n pseudo-random bytes: the same (seed,
// stream) always gives the same bytes, on any machine (ChaCha8 keyed by
// both).
func Reader(seed, stream int64, n int64) io.Reader {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:], uint64(seed))
	binary.LittleEndian.PutUint64(key[8:], uint64(stream))
	copy(key[16:], "omst-testplan")
	return io.LimitReader(rand.NewChaCha8(key), n)
}
