package main

import (
	"encoding/binary"
	"io"
	"math/rand/v2"
)

// stampStride is the spacing of the per-blob nonce written into the
// payload: the smallest chunk size omst accepts (blob.MinChunkSize), so
// every chunk of every blob differs from every chunk of every other blob
// and no run can be served from a cache or deduplicated.
const stampStride = 4 << 10

// payload is one buffer of random bytes (PCG) from which every blob is cut:
// blob k of size m is buf[:m] with nonce k stamped every stampStride bytes.
// Generating the bytes once keeps the client's CPU out of the timed runs.
type payload struct {
	buf   []byte
	nonce uint64
}

func newPayload(size int64, seed uint64) *payload {
	p := &payload{buf: make([]byte, size), nonce: seed << 32}
	fillRandom(p.buf, seed)
	return p
}

// fillRandom fills b with PCG random bytes from seed.
func fillRandom(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	for v := r.Uint64(); i < len(b); i++ {
		b[i] = byte(v)
		v >>= 8
	}
}

// next returns the bytes of a new, distinct blob of size m. The slice is
// valid until the next call.
func (p *payload) next(m int64) []byte {
	p.nonce++
	b := p.buf[:m]
	for off := 0; off < len(b); off += stampStride {
		var v [8]byte
		binary.LittleEndian.PutUint64(v[:], p.nonce)
		copy(b[off:], v[:])
	}
	return b
}

// sink counts and discards what is written to it; ReadFrom reads into one
// reused 1 MiB buffer (as the raw TCP receiver does) instead of
// io.Discard's 8 KiB blocks.
type sink struct {
	n   int64
	buf []byte
}

func newSink() *sink { return &sink{buf: make([]byte, rawBufSize)} }

func (s *sink) Write(b []byte) (int, error) {
	s.n += int64(len(b))
	return len(b), nil
}

func (s *sink) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		n, err := r.Read(s.buf)
		total += int64(n)
		s.n += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
