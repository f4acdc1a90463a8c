package blob

import (
	"crypto/sha256"
	"testing"
)

// BenchmarkChunkHash compares the two candidate chunk hashes on 1 MiB chunks
// (the measurement behind choosing BLAKE3; see docs/benchmarks.md).
func BenchmarkChunkHash(b *testing.B) {
	data := randBytes(DefaultChunkSize, 1)
	b.Run("blake3", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			HashChunk(data)
		}
	})
	b.Run("sha256", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			sha256.Sum256(data)
		}
	})
}
