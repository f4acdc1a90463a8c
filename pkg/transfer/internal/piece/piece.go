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
	"slices"

	"lukechampine.com/blake3/bao"
	"lukechampine.com/blake3/guts"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/piece/internal/cvhash"
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
// h (an error wrapping ErrCorrupt if not): one pass over data at the speed
// of a whole-chunk hash (cvhash), so that it can take the place of a
// verification of data against h.
func Outboard(data []byte, h blob.Hash) ([]byte, error) {
	got, ob := HashOutboard(data)
	if got != h {
		return nil, fmt.Errorf("%w: %d bytes do not hash to %s", ErrCorrupt, len(data), h)
	}
	return ob, nil
}

// HashOutboard returns the chunk hash of data (blob.HashChunk's) and its
// outboard, in one pass over data: what a node that stores a chunk it
// hashes (a put) keeps so that it can serve the chunk in pieces without
// hashing it again. data must not be empty.
func HashOutboard(data []byte) (blob.Hash, []byte) {
	n := len(data)
	ob := make([]byte, OutboardLen(n))
	binary.LittleEndian.PutUint64(ob, uint64(n))
	if n <= GroupSize {
		// One group, the root: no inner nodes.
		return blob.HashChunk(data), ob
	}
	g := (n + GroupSize - 1) / GroupSize
	levels := [][]cvhash.CV{make([]cvhash.CV, g)}
	groupCVs(data, 0, levels[0])
	for len(levels[len(levels)-1]) > 2 {
		levels = append(levels, cvhash.Parents(slices.Clone(levels[len(levels)-1])))
	}
	top := levels[len(levels)-1]
	var h blob.Hash
	root := guts.ChainingValue(guts.ParentNode(top[0], top[1], &guts.IV, guts.FlagRoot))
	putCV(h[:], &root)
	// The subtree over groups [lo, lo+c) is levels[L][lo>>L] with 2^L the
	// least power of two >= c: each level pairs its values in order and
	// carries an odd last one up, as BLAKE3's left-balanced tree does.
	cvOf := func(lo, c int) *cvhash.CV {
		l := bits.Len(uint(c - 1))
		return &levels[l][lo>>l]
	}
	pos := 8
	var rec func(lo, c int)
	rec = func(lo, c int) { // pre-order, as Bao lays the outboard out
		if c == 1 {
			return
		}
		mid := 1 << (bits.Len(uint(c-1)) - 1)
		putCV(ob[pos:], cvOf(lo, mid))
		putCV(ob[pos+32:], cvOf(lo+mid, c-mid))
		pos += 64
		rec(lo, mid)
		rec(lo+mid, c-mid)
	}
	rec(0, g)
	return h, ob
}

// groupCVs sets out[i] to the chaining value of the i-th group of data,
// which starts at group number first of a chunk of more than one group:
// whole groups but perhaps the last, which then ends the chunk.
func groupCVs(data []byte, first int, out []cvhash.CV) {
	// Whole groups, in batches of batchGroups (the chunk values on the
	// stack).
	const batchGroups = 4
	var cvs [batchGroups * chunksPerGroup]cvhash.CV
	whole := len(data) / GroupSize
	for i := 0; i < whole; i += batchGroups {
		k := min(batchGroups, whole-i)
		c := cvs[:k*chunksPerGroup]
		cvhash.ChunkCVs(data[i*GroupSize:(i+k)*GroupSize], uint64((first+i)*chunksPerGroup), c)
		for range Group {
			c = cvhash.Parents(c)
		}
		copy(out[i:], c)
	}
	if rest := data[whole*GroupSize:]; len(rest) > 0 {
		// A last, partial group: its whole BLAKE3 chunks, then a partial
		// one, then their subtree.
		full := len(rest) / guts.ChunkSize
		c := cvs[:full]
		counter := uint64((first + whole) * chunksPerGroup)
		cvhash.ChunkCVs(rest[:full*guts.ChunkSize], counter, c)
		if len(rest)%guts.ChunkSize != 0 {
			c = append(c, guts.ChainingValue(guts.CompressChunk(rest[full*guts.ChunkSize:], &guts.IV, counter+uint64(full), 0)))
		}
		for len(c) > 1 {
			c = cvhash.Parents(c)
		}
		out[whole] = c[0]
	}
}

// chunksPerGroup is how many BLAKE3 chunks a group holds.
const chunksPerGroup = 1 << Group

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
// VerifyPiece checks any group against ob alone. The length is not proved
// by ob alone: inner nodes do not hash sizes, so an outboard stating
// another length passes if its tree has the same inner nodes (e.g. the
// same number of groups, or one group: no inner node at all); only the
// bytes of the group at the stated end bind it, and they never verify
// against a false length. A caller that knows the chunk's length checks
// it too.
func VerifyOutboard(ob []byte, h blob.Hash, max int) (int, error) {
	n, err := ChunkLen(ob, max)
	if err != nil {
		return 0, err
	}
	if n <= GroupSize {
		return n, nil // one group, the root: checked with its bytes
	}
	bad := func() error { return fmt.Errorf("%w: outboard does not hash to chunk %s", ErrCorrupt, h) }
	nodes := ob[8:]
	if guts.ChainingValue(guts.ParentNode(bytesToCV(nodes[:32]), bytesToCV(nodes[32:64]), &guts.IV, guts.FlagRoot)) != bytesToCV(h[:]) {
		return 0, bad()
	}
	// Every other node: its two children's values must hash to the value
	// its parent holds for it. Collected in pre-order, then hashed eight
	// at a time (cvhash.Parents).
	var pairBuf, wantBuf [2 * 64]cvhash.CV
	pairs, want := pairBuf[:0], wantBuf[:0]
	at := 64
	var rec func(size uint64, cv cvhash.CV)
	rec = func(size uint64, cv cvhash.CV) {
		if size <= GroupSize {
			return // a leaf: checked with its group's bytes
		}
		l, r := bytesToCV(nodes[at:]), bytesToCV(nodes[at+32:])
		at += 64
		pairs, want = append(pairs, l, r), append(want, cv)
		mid := uint64(1) << (bits.Len64(size-1) - 1)
		rec(mid, l)
		rec(size-mid, r)
	}
	mid := uint64(1) << (bits.Len64(uint64(n)-1) - 1)
	rec(mid, bytesToCV(nodes[:32]))
	rec(uint64(n)-mid, bytesToCV(nodes[32:64]))
	for i, p := range cvhash.Parents(pairs) {
		if p != want[i] {
			return 0, bad()
		}
	}
	return n, nil
}

// VerifyPiece checks bytes p, found at offset off of a chunk with hash h
// whose outboard ob passed VerifyOutboard: off must be a multiple of
// GroupSize, and p whole groups or end at the chunk's end. Each group of
// p is hashed once and compared with its value in ob, which VerifyOutboard
// bound to h; ob's inner nodes are not checked again, so an outboard that
// did not pass VerifyOutboard binds nothing. A malformed ob is an error
// wrapping ErrCorrupt, never a panic.
func VerifyPiece(p, ob []byte, off int, h blob.Hash) error {
	n, err := ChunkLen(ob, blob.MaxChunkSize)
	if err != nil {
		return err
	}
	if off < 0 || off%GroupSize != 0 || len(p) == 0 || off+len(p) > n || (len(p)%GroupSize != 0 && off+len(p) != n) {
		return fmt.Errorf("%w: piece of %d bytes at offset %d of a %d-byte chunk", ErrCorrupt, len(p), off, n)
	}
	if n <= GroupSize {
		// One group, the root: p is the whole chunk.
		if blob.HashChunk(p) != h {
			return fmt.Errorf("%w: piece of %d bytes at offset %d of chunk %s", ErrCorrupt, len(p), off, h)
		}
		return nil
	}
	g, first := (n+GroupSize-1)/GroupSize, off/GroupSize
	var cvs [4]cvhash.CV
	for i := 0; i < len(p); i += len(cvs) * GroupSize {
		q := p[i:min(i+len(cvs)*GroupSize, len(p))]
		c := cvs[:(len(q)+GroupSize-1)/GroupSize]
		groupCVs(q, first+i/GroupSize, c)
		for j := range c {
			at := leafAt(g, first+i/GroupSize+j)
			if bytesToCV(ob[at:at+32]) != c[j] {
				return fmt.Errorf("%w: piece of %d bytes at offset %d of chunk %s (group at %d)", ErrCorrupt, len(p), off, h, off+i+j*GroupSize)
			}
		}
	}
	return nil
}

// leafAt is where the outboard of a chunk of g > 1 groups holds group i's
// chaining value: in its parent's node, left or right half.
func leafAt(g, i int) int {
	pos, lo, c := 8, 0, g
	for {
		mid := 1 << (bits.Len(uint(c-1)) - 1)
		if i < lo+mid {
			if mid == 1 {
				return pos
			}
			pos, c = pos+64, mid
		} else {
			if c-mid == 1 {
				return pos + 32
			}
			pos, lo, c = pos+64*mid, lo+mid, c-mid // the node, then the left subtree's mid-1
		}
	}
}

func putCV(b []byte, cv *cvhash.CV) {
	_ = b[31]
	for i, w := range cv {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
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
