package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"io"
	"math/rand/v2"
)

// payload returns a reader of n deterministic pseudo-random bytes: the same
// (seed, stream) always gives the same bytes, on any machine.
func payload(seed, stream int64, n int64) io.Reader {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[0:], uint64(seed))
	binary.LittleEndian.PutUint64(key[8:], uint64(stream))
	copy(key[16:], "omst-testplan")
	return io.LimitReader(rand.NewChaCha8(key), n)
}

// digest is an io.Writer that hashes and counts what it is given.
type digest struct {
	h hash.Hash
	n int64
}

func newDigest() *digest { return &digest{h: sha256.New()} }

func (d *digest) Write(p []byte) (int, error) {
	d.n += int64(len(p))
	return d.h.Write(p)
}

func (d *digest) Sum() string { return hex.EncodeToString(d.h.Sum(nil)) }
