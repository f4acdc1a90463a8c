package main

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"

	pl "github.com/omst-project/omst/internal/payload"
)

// payload returns a reader of n deterministic pseudo-random bytes (the
// same for the BitTorrent baseline: internal/payload).
func payload(seed, stream int64, n int64) io.Reader { return pl.Reader(seed, stream, n) }

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
