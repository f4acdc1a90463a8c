package cache

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/omst-project/omst/pkg/blob"
)

// benchOutboardLen is the length of a 1 MiB chunk's Bao outboard
// (pkg/transfer's piece.OutboardLen(1 MiB): 63 parents of 64 bytes and the
// 8-byte length).
const benchOutboardLen = 4040

// indexFill is what fillIndex measured.
type indexFill struct {
	chunks     int
	fill       time.Duration // writing the N entries and outboards, and the final flush
	ix         indexStats    // the flush loop's compactions
	maxPut     time.Duration // the longest chunk entry + PutOutboard
	maxCommit  time.Duration // the longest PutManifest (a fetched blob's index commit)
	lsm, vlog  int64         // index bytes on disk after Close: tables, value log
	other      int64         // the rest (MANIFEST, DISCARD, KEYREGISTRY, memtable files)
	open       time.Duration // Open after a restart, index files out of the page cache
	cold, warm []time.Duration
	idleCPU    time.Duration // the process's CPU time while the reopened store idled for idleFor
}

// idleFor is how long fillIndex lets the reopened store idle.
const idleFor = 5 * time.Second

// procCPU returns the process's user and system CPU time so far.
func procCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchChunkHash is chunk i's stand-in hash: random-looking, as real
// chunk hashes are (every table of the index overlaps every other).
func benchChunkHash(i int) blob.Hash {
	return blob.HashChunk(binary.BigEndian.AppendUint64(nil, uint64(i)))
}

// benchOutboard is a stand-in outboard for a 1 MiB chunk: its length and
// incompressible bytes, as a real one's hashes are.
func benchOutboard(i int) []byte {
	ob := binary.LittleEndian.AppendUint64(make([]byte, 0, benchOutboardLen), blob.DefaultChunkSize)
	return append(ob, randBytes(benchOutboardLen-8, uint64(i))...)
}

// addBenchChunk enters chunk i as storeChunk does for a new 1 MiB chunk,
// its file a sparse file of the chunk's size (the bytes are not what is
// measured), and keeps its outboard (PutOutboard). It returns the time
// the store took (the entry and the outboard, not the file).
func addBenchChunk(t testing.TB, s *Store, i int) time.Duration {
	h := benchChunkHash(i)
	f, err := os.Create(s.chunkPath(h))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(blob.DefaultChunkSize); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ob := benchOutboard(i)
	start := time.Now()
	s.mu.Lock()
	s.addEntryLocked(&chunkEntry{hash: h, size: blob.DefaultChunkSize, lastUse: time.Now().UnixNano()}, false)
	s.mu.Unlock()
	s.PutOutboard(h, ob)
	return time.Since(start)
}

// fillIndex writes n chunks of 1 MiB into a new store's index as a fetch
// does (an entry and an outboard per chunk, a manifest per 1,024 chunks,
// the flush loop writing them and compacting the index), closes it and
// measures its size, reopens it with its files out of the page cache and
// reads outboards, cold and again warm.
func fillIndex(t testing.TB, dir string, n int) indexFill {
	r := indexFill{chunks: n}
	s, err := Open(dir, Options{MaxBytes: int64(n+1) << 20})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	const perBlob = 1024
	for i := 0; i < n; i += perBlob {
		m := &blob.Manifest{ChunkSize: blob.DefaultChunkSize}
		for j := i; j < min(i+perBlob, n); j++ {
			r.maxPut = max(r.maxPut, addBenchChunk(t, s, j))
			m.Chunks = append(m.Chunks, benchChunkHash(j))
		}
		m.Size = uint64(len(m.Chunks)) * blob.DefaultChunkSize
		t0 := time.Now()
		if _, err := s.PutManifest(m); err != nil {
			t.Fatal(err)
		}
		r.maxCommit = max(r.maxCommit, time.Since(t0))
	}
	// Until the flush loop has caught up (Close would flush the rest
	// without the loop's compaction).
	for {
		s.mu.Lock()
		d := len(s.dirty)
		s.mu.Unlock()
		if d == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.fill = time.Since(start)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r.ix = s.indexStats()
	ents, err := os.ReadDir(filepath.Join(dir, "index"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, "index", e.Name())
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasSuffix(e.Name(), ".sst"):
			r.lsm += info.Size()
		case strings.HasSuffix(e.Name(), ".vlog"):
			r.vlog += info.Size()
		default:
			r.other += info.Size()
		}
		// Out of the page cache: the reopen and the first reads are cold.
		if f, err := os.Open(p); err == nil {
			f.Sync()
			unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			f.Close()
		}
	}
	start = time.Now()
	s, err = Open(dir, Options{MaxBytes: int64(n+1) << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r.open = time.Since(start)
	const reads = 1000
	step := max(n/reads, 1)
	for pass := 0; pass < 2; pass++ {
		for i := 0; i < n && i/step < reads; i += step {
			t0 := time.Now()
			ob, ok := s.Outboard(benchChunkHash(i))
			d := time.Since(t0)
			if !ok || len(ob) != benchOutboardLen {
				t.Fatalf("chunk %d: outboard of %d bytes (%v) after the reopen", i, len(ob), ok)
			}
			if pass == 0 {
				r.cold = append(r.cold, d)
			} else {
				r.warm = append(r.warm, d)
			}
		}
	}
	c0 := procCPU()
	time.Sleep(idleFor)
	r.idleCPU = procCPU() - c0
	return r
}

// quantile returns the q-quantile of ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

func (r indexFill) String() string {
	gib := float64(r.chunks) / 1024
	return fmt.Sprintf("%d chunks (%.0f GiB of cache): fill %.1f s; index %.1f MiB (%.0f B/chunk: tables %.1f MiB, value log %.1f MiB, other %.1f MiB); "+
		"%d flattens, %.1f s in all, longest %.2f s, %.0f MiB written (%.1f MiB per GiB of chunks); longest flush-loop round %.2f s; "+
		"value log files rewritten %d; longest entry+outboard %v, longest manifest commit %v; "+
		"Open after restart (cold) %v; outboard read cold p50 %v p99 %v max %v, warm p50 %v p99 %v; CPU while idle %v in %v",
		r.chunks, gib, r.fill.Seconds(), float64(r.lsm+r.vlog+r.other)/(1<<20), float64(r.lsm+r.vlog+r.other)/float64(r.chunks),
		float64(r.lsm)/(1<<20), float64(r.vlog)/(1<<20), float64(r.other)/(1<<20),
		r.ix.compactions, r.ix.compactTime.Seconds(), r.ix.maxCompact.Seconds(), float64(r.ix.compactBytes)/(1<<20),
		float64(r.ix.compactBytes)/(1<<20)/gib, r.ix.maxRound.Seconds(), r.ix.gcRewrites,
		r.maxPut.Round(time.Microsecond), r.maxCommit.Round(time.Microsecond), r.open.Round(time.Millisecond),
		quantile(r.cold, 0.5).Round(time.Microsecond), quantile(r.cold, 0.99).Round(time.Microsecond), slices.Max(r.cold).Round(time.Microsecond),
		quantile(r.warm, 0.5).Round(time.Microsecond), quantile(r.warm, 0.99).Round(time.Microsecond),
		r.idleCPU.Round(time.Millisecond), idleFor)
}

// BenchmarkIndexFill measures the index of a large cache: N chunks of
// 1 MiB (OMST_INDEX_CHUNKS, default 16,384: a 16 GiB cache) written as a
// fetch writes them, in the outboards' layouts: "lsm" (values up to
// 1 MiB in the LSM tree, as before), "vlog" (the store's layout: values
// of indexValueThreshold bytes or more in the value log) and
// "vlog-compactors" (that, with Badger's compactors (2, its least) instead of the flush
// loop's compactIndex). Run with
//
//	go test -run '^$' -bench IndexFill -benchtime 1x ./pkg/cache
func BenchmarkIndexFill(b *testing.B) {
	n := 16384
	if v := os.Getenv("OMST_INDEX_CHUNKS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			b.Fatalf("OMST_INDEX_CHUNKS=%q: want a positive number", v)
		}
	}
	for _, layout := range []struct {
		name       string
		threshold  int64
		compactors int
	}{{"lsm", 1 << 20, 0}, {"vlog", indexValueThreshold, 0}, {"vlog-compactors", indexValueThreshold, 2}} {
		b.Run(layout.name, func(b *testing.B) {
			oldT, oldC := indexValueThreshold, indexCompactors
			indexValueThreshold, indexCompactors = layout.threshold, layout.compactors
			defer func() { indexValueThreshold, indexCompactors = oldT, oldC }()
			for b.Loop() {
				r := fillIndex(b, b.TempDir(), n)
				b.Log(r)
				b.ReportMetric(float64(r.lsm+r.vlog+r.other)/float64(n), "index-B/chunk")
				b.ReportMetric(float64(r.ix.compactBytes)/float64(n), "compacted-B/chunk")
				b.ReportMetric(r.ix.maxRound.Seconds(), "max-round-s")
				b.ReportMetric(r.open.Seconds(), "open-s")
			}
		})
	}
}
