// Package piece holds what omst's fetch protocol 1.3.0 needs to pass a
// chunk on in verified pieces before all of it has arrived: a chunk's Bao
// outboard (the inner nodes of its BLAKE3 tree down to groups of GroupSize
// bytes; lukechampine.com/blake3/bao), its verification against the chunk
// hash, the verification of each piece against it, and Partial, a chunk
// being filled in order by one or more senders and read by others as it
// grows.
//
// A chunk hash is the BLAKE3 root of the chunk's bytes, so the outboard
// needs nothing beyond the content addressing omst already has: chunk
// hashes, manifests and CIDs are unchanged. An outboard is verified whole
// on arrival (every inner node hashes to its parent, the top to the chunk
// hash), so that each GroupSize group it covers is then bound to the chunk
// hash and can be checked, and passed on, the moment it arrives.
package piece

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"

	"lukechampine.com/blake3/bao"
	"lukechampine.com/blake3/guts"

	"github.com/omst-project/omst/pkg/blob"
)

// Group is the Bao group parameter: groups of 2^Group BLAKE3 chunks of
// 1 KiB.
const Group = 4

// GroupSize is the size of a verifiable piece: every piece but a chunk's
// last is a whole number of groups, and starts at a multiple of GroupSize.
const GroupSize = guts.ChunkSize << Group // 16 KiB

// OutboardLen is the length of the outboard of a chunk of n bytes.
func OutboardLen(n int) int { return bao.EncodedSize(n, Group, true) }

// MaxOutboardLen is the longest outboard of a chunk of at most
// blob.MaxChunkSize bytes.
var MaxOutboardLen = OutboardLen(blob.MaxChunkSize)

// ErrCorrupt is wrapped by every verification failure here, and wraps
// blob.ErrCorrupt.
var ErrCorrupt = fmt.Errorf("piece: %w", blob.ErrCorrupt)

// Outboard computes the outboard of data and checks that data hashes to
// h (an error wrapping ErrCorrupt if not).
func Outboard(data []byte, h blob.Hash) ([]byte, error) {
	ob, root := bao.EncodeBuf(data, Group, true)
	if blob.Hash(root) != h {
		return nil, fmt.Errorf("%w: %d bytes do not hash to %s", ErrCorrupt, len(data), h)
	}
	return ob, nil
}

// ChunkLen returns the chunk length an outboard states (its first 8
// bytes), and checks that ob has the length that implies and states at
// most max bytes.
func ChunkLen(ob []byte, max int) (int, error) {
	if len(ob) < 8 {
		return 0, fmt.Errorf("%w: outboard of %d bytes", ErrCorrupt, len(ob))
	}
	n := binary.LittleEndian.Uint64(ob)
	if n == 0 || n > uint64(max) {
		return 0, fmt.Errorf("%w: outboard states a chunk of %d bytes (at most %d)", ErrCorrupt, n, max)
	}
	if len(ob) != OutboardLen(int(n)) {
		return 0, fmt.Errorf("%w: outboard of %d bytes for a chunk of %d (want %d)", ErrCorrupt, len(ob), n, OutboardLen(int(n)))
	}
	return int(n), nil
}

// VerifyOutboard checks that ob is the outboard of a chunk with hash h of
// at most max bytes: every inner node hashes to its parent's value for
// it, the top to h. It returns the chunk's length. Once it has passed,
// VerifyPiece checks any group against ob alone.
func VerifyOutboard(ob []byte, h blob.Hash, max int) (int, error) {
	n, err := ChunkLen(ob, max)
	if err != nil {
		return 0, err
	}
	nodes := ob[8:]
	var rec func(cv [8]uint32, size uint64, flags uint32) bool
	rec = func(cv [8]uint32, size uint64, flags uint32) bool {
		if size <= GroupSize {
			return true // a leaf: checked with its group's bytes
		}
		l, r := bytesToCV(nodes[:32]), bytesToCV(nodes[32:64])
		nodes = nodes[64:]
		if guts.ChainingValue(guts.ParentNode(l, r, &guts.IV, flags)) != cv {
			return false
		}
		mid := uint64(1) << (bits.Len64(size-1) - 1)
		return rec(l, mid, 0) && rec(r, size-mid, 0)
	}
	if !rec(bytesToCV(h[:]), uint64(n), guts.FlagRoot) {
		return 0, fmt.Errorf("%w: outboard does not hash to chunk %s", ErrCorrupt, h)
	}
	return n, nil
}

// VerifyPiece checks bytes p, found at offset off of a chunk with hash h
// whose outboard ob passed VerifyOutboard: off must be a multiple of
// GroupSize, and p whole groups or end at the chunk's end.
func VerifyPiece(p, ob []byte, off int, h blob.Hash) error {
	n := int(binary.LittleEndian.Uint64(ob))
	if off%GroupSize != 0 || len(p) == 0 || off+len(p) > n || (len(p)%GroupSize != 0 && off+len(p) != n) {
		return fmt.Errorf("%w: piece of %d bytes at offset %d of a %d-byte chunk", ErrCorrupt, len(p), off, n)
	}
	if !bao.VerifyChunk(p, ob, Group, uint64(off), h) {
		return fmt.Errorf("%w: piece of %d bytes at offset %d of chunk %s", ErrCorrupt, len(p), off, h)
	}
	return nil
}

func bytesToCV(b []byte) (cv [8]uint32) {
	_ = b[31]
	for i := range cv {
		cv[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return cv
}

// errFailed is a Partial's error when Fail was given none.
var errFailed = errors.New("chunk fetch failed")
