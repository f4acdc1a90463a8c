package cache

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/stablefile"
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

// BenchmarkGetToFile measures the store's side of a get into a new file
// (256 MiB in 1 MiB chunks per op, arriving verified in memory as from a
// fetch), the old way against the sink (issue 26 item 1), and the cache
// hit into a new file the old way (read, hash, write) against
// CopyChunksTo (hash through a mapping, copy_file_range). Besides the time
// it reports the process's CPU seconds per GiB (cpu-s/GiB). Run with
// -benchtime 5x; the variants alternate op by op within one b.Loop so
// that they see the same machine.
func BenchmarkGetToFile(b *testing.B) {
	const size = 256 << 20
	const cs = blob.DefaultChunkSize
	dir := b.TempDir()
	s := openStore(b, filepath.Join(dir, "store"), 4<<30)
	s.verified = newMemo[blob.Hash, []byte](0) // reads come from the files, as for a blob past the memo
	data := randBytes(size, 41)
	round := 0
	blobOf := func() (*blob.Manifest, [][]byte) {
		round++
		for off := 0; off < size; off += cs {
			data[off], data[off+1] = byte(round), byte(round>>8) // new chunks each round
		}
		m := &blob.Manifest{Size: size, ChunkSize: cs}
		var chunks [][]byte
		for off := 0; off < size; off += cs {
			chunks = append(chunks, data[off:off+cs])
			m.Chunks = append(m.Chunks, blob.HashChunk(data[off:off+cs]))
		}
		if _, err := s.PutManifest(m); err != nil {
			b.Fatal(err)
		}
		return m, chunks
	}
	dropAll := func() {
		s.mu.Lock()
		for _, e := range s.chunks {
			s.removeLocked(e)
		}
		s.mu.Unlock()
	}
	newDst := func() *os.File {
		path := filepath.Join(dir, "dst")
		os.Remove(path)
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		return f
	}
	type variant struct {
		name string
		run  func(m *blob.Manifest, chunks [][]byte, f *os.File) error
		hit  bool // the chunks are stored (as chunk files) before the get
	}
	variants := []variant{
		{"cold-chunkfile+write", func(m *blob.Manifest, chunks [][]byte, f *os.File) error {
			for i, c := range chunks {
				if err := s.PutVerifiedChunk(m.Chunks[i], c); err != nil {
					return err
				}
				if _, err := f.WriteAt(c, int64(m.ChunkOffset(i))); err != nil {
					return err
				}
			}
			return nil
		}, false},
		{"cold-sink", func(m *blob.Manifest, chunks [][]byte, f *os.File) error {
			sk, err := s.LinkSink(f, m.CID(), m)
			if err != nil {
				return err
			}
			for i, c := range chunks {
				if err := s.PutVerifiedChunk(m.Chunks[i], c); err != nil {
					return err
				}
			}
			return sk.Commit()
		}, false},
		{"hit-read+write", func(m *blob.Manifest, _ [][]byte, f *os.File) error {
			for i, h := range m.Chunks {
				c, err := s.ReadChunk(h)
				if err != nil {
					return err
				}
				if _, err := f.WriteAt(c, int64(m.ChunkOffset(i))); err != nil {
					return err
				}
			}
			return nil
		}, true},
		{"hit-copy", func(m *blob.Manifest, _ [][]byte, f *os.File) error {
			return s.CopyChunksTo(m, f, nil, nil)
		}, true},
	}
	took := make([]time.Duration, len(variants))
	cpu := make([]time.Duration, len(variants))
	for b.Loop() {
		for k, v := range variants {
			b.StopTimer()
			dropAll()
			m, chunks := blobOf()
			if v.hit {
				for i, c := range chunks {
					if err := s.PutVerifiedChunk(m.Chunks[i], c); err != nil {
						b.Fatal(err)
					}
				}
			}
			s.verified = newMemo[blob.Hash, []byte](0)
			f := newDst()
			b.StartTimer()
			c0, t0 := cpuTime(), time.Now()
			if err := v.run(m, chunks, f); err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
			took[k] += time.Since(t0)
			cpu[k] += cpuTime() - c0
			f.Close()
		}
	}
	gib := float64(b.N) * size / (1 << 30)
	for k, v := range variants {
		b.ReportMetric(float64(b.N)*size/took[k].Seconds()/1e6, v.name+"-MB/s")
		b.ReportMetric(cpu[k].Seconds()/gib, v.name+"-cpu-s/GiB")
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEvictBlobFile measures an eviction pass over a put's blob file
// of 4096 chunks (64 KiB each: the count of a 4 GiB blob of 1 MiB chunks),
// all evicted at once under the store's lock: each is punched out of the
// file. ns/op is the time the pass holds s.mu; us/chunk per chunk, and
// cpu-us/chunk the CPU time (user and system) of the pass's thread per
// chunk, which a loaded machine disturbs less than the wall time.
func BenchmarkEvictBlobFile(b *testing.B) {
	const cs, n = 64 << 10, 4096
	data := randBytes(cs*n, 33)
	s := openStore(b, b.TempDir(), 4<<30)
	i := 0
	var held, cpu time.Duration
	runtime.LockOSThread() // the pass's CPU time is its thread's
	defer runtime.UnlockOSThread()
	threadCPU := func() time.Duration {
		var ru unix.Rusage
		if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for b.Loop() {
		b.StopTimer()
		data[0], data[1] = byte(i), byte(i>>8) // a new blob each round
		rec, err := s.Ingest(context.Background(), fmt.Sprintf("bench/%d", i), bytes.NewReader(data), cs, "me")
		if err != nil {
			b.Fatal(err)
		}
		if err := s.RemoveName(rec.Name); err != nil {
			b.Fatal(err)
		}
		i++
		s.mu.Lock()
		b.StartTimer()
		start, startCPU := time.Now(), threadCPU()
		err = s.evictLocked(s.capBytes) // everything unpinned
		held += time.Since(start)
		cpu += threadCPU() - startCPU
		b.StopTimer()
		used := s.used
		s.mu.Unlock()
		if err != nil || used != 0 {
			b.Fatalf("evict: %v, %d bytes left", err, used)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(held.Microseconds())/float64(i*n), "us/chunk")
	b.ReportMetric(float64(cpu.Microseconds())/float64(i*n), "cpu-us/chunk")
}

// BenchmarkIngestFile measures Ingest of a regular file read through
// pkg/stablefile (256 MiB per op, 1 MiB chunks, all chunks new; the
// file in the page cache, as a put of a file just written), reporting
// the process's CPU time per GiB put (user + system, every thread)
// beside the wall time. The store hashes without Options.ChunkOutboard
// (the daemon's adds the Bao outboard to the hash).
func BenchmarkIngestFile(b *testing.B) {
	const size = 256 << 20
	data := randBytes(size, 31)
	path := filepath.Join(b.TempDir(), "in")
	s := openStore(b, b.TempDir(), 4<<30)
	b.SetBytes(size)
	var cpu time.Duration
	i := 0
	for b.Loop() {
		b.StopTimer()
		data[0], data[1] = byte(i), byte(i>>8) // new first chunk each round
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
		r, err := stablefile.Open(context.Background(), path)
		if err != nil {
			b.Fatal(err)
		}
		c0 := processCPU()
		b.StartTimer()
		rec, err := s.Ingest(context.Background(), fmt.Sprintf("bench/%d", i), r, blob.DefaultChunkSize, "me")
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += processCPU() - c0
		r.Close()
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
	b.ReportMetric(cpu.Seconds()/(float64(i)*size/(1<<30)), "cpu-s/GiB")
}

// processCPU is the process's user and system time so far.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
