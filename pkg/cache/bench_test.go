package cache

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

// BenchmarkIngest measures Ingest from memory into a fresh store
// (256 MiB per op, 1 MiB chunks, all chunks new).
func BenchmarkIngest(b *testing.B) {
	const size = 256 << 20
	data := randBytes(size, 31)
	s := openStore(b, b.TempDir(), 4<<30)
	b.SetBytes(size)
	i := 0
	for b.Loop() {
		data[0], data[1] = byte(i), byte(i>>8) // new first chunk each round
		rec, err := s.Ingest(context.Background(), fmt.Sprintf("bench/%d", i), bytes.NewReader(data), blob.DefaultChunkSize, "me")
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		// Drop the blob's chunks so the next round writes them again.
		if err := s.RemoveName(rec.Name); err != nil {
			b.Fatal(err)
		}
		m, _ := s.Manifest(rec.ID)
		s.mu.Lock()
		for _, h := range m.Chunks {
			if e := s.chunks[h]; e != nil {
				s.removeLocked(e)
			}
		}
		s.mu.Unlock()
		i++
		b.StartTimer()
	}
}

// BenchmarkReadChunk measures ReadChunk of a 1 MiB chunk (from page cache).
func BenchmarkReadChunk(b *testing.B) {
	s := openStore(b, b.TempDir(), 1<<30)
	h := putChunk(b, s, blob.DefaultChunkSize, 32)
	b.SetBytes(blob.DefaultChunkSize)
	for b.Loop() {
		if _, err := s.ReadChunk(h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadChunkInto is BenchmarkReadChunk into a reused buffer.
func BenchmarkReadChunkInto(b *testing.B) {
	s := openStore(b, b.TempDir(), 1<<30)
	h := putChunk(b, s, blob.DefaultChunkSize, 33)
	buf := make([]byte, blob.DefaultChunkSize)
	b.SetBytes(blob.DefaultChunkSize)
	for b.Loop() {
		if _, err := s.ReadChunkInto(h, buf); err != nil {
			b.Fatal(err)
		}
	}
}
