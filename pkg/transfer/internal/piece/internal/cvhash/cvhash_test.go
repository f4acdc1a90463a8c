package cvhash

import (
	"math/rand/v2"
	"testing"

	"lukechampine.com/blake3/guts"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// paths runs f with the SIMD kernels (where this machine has them) and
// with the fallback.
func paths(t *testing.T, f func(t *testing.T)) {
	simd := haveSIMD
	t.Run("fallback", func(t *testing.T) {
		setSIMD(false)
		defer setSIMD(simd)
		f(t)
	})
	if simd {
		t.Run("simd", f)
	} else {
		t.Log("no SIMD kernel on this machine: fallback only")
	}
}

// Every chunk's chaining value, for 0 to 40 chunks from several counters,
// is guts' (the reference).
func TestChunkCVs(t *testing.T) {
	paths(t, func(t *testing.T) {
		data := randBytes(40*ChunkSize, 1)
		for n := 0; n <= 40; n++ {
			for _, counter := range []uint64{0, 1, 7, 64, 1 << 33} {
				out := make([]CV, n)
				ChunkCVs(data[:n*ChunkSize], counter, out)
				for i := range n {
					want := guts.ChainingValue(guts.CompressChunk(data[i*ChunkSize:(i+1)*ChunkSize], &guts.IV, counter+uint64(i), 0))
					if out[i] != want {
						t.Fatalf("%d chunks from %d: chunk %d's CV differs", n, counter, i)
					}
				}
			}
		}
	})
}

// A level of parents, for 1 to 40 values, is guts' pairwise, an odd last
// value carried over.
func TestParents(t *testing.T) {
	paths(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(3, 4))
		for n := 1; n <= 40; n++ {
			in := make([]CV, n)
			for i := range in {
				for w := range in[i] {
					in[i][w] = r.Uint32()
				}
			}
			var want []CV
			for i := 0; i+1 < n; i += 2 {
				want = append(want, guts.ChainingValue(guts.ParentNode(in[i], in[i+1], &guts.IV, 0)))
			}
			if n%2 == 1 {
				want = append(want, in[n-1])
			}
			got := Parents(append([]CV(nil), in...))
			if len(got) != len(want) {
				t.Fatalf("%d values: %d parents, want %d", n, len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("%d values: parent %d differs", n, i)
				}
			}
		}
	})
}

// A whole tree built from ChunkCVs and Parents hashes to guts' root of
// the same bytes (bytes a power of two chunks long: the root's flag is the
// caller's).
func TestSubtree(t *testing.T) {
	paths(t, func(t *testing.T) {
		data := randBytes(64*ChunkSize, 5)
		cvs := make([]CV, 64)
		ChunkCVs(data, 0, cvs)
		for len(cvs) > 2 {
			cvs = Parents(cvs)
		}
		root := guts.ChainingValue(guts.ParentNode(cvs[0], cvs[1], &guts.IV, guts.FlagRoot))
		if root != rootOf(data) {
			t.Fatal("root of 64 chunks differs from guts'")
		}
	})
}

// rootOf is the BLAKE3 root chaining value of data (a power of two
// chunks, at least two) by guts alone.
func rootOf(data []byte) CV {
	n := guts.CompressEigentree(data, &guts.IV, 0, 0)
	n.Flags |= guts.FlagRoot
	return guts.ChainingValue(n)
}

func BenchmarkChunkCVs(b *testing.B) {
	data := randBytes(1<<20, 1)
	out := make([]CV, len(data)/ChunkSize)
	for _, simd := range []bool{true, false} {
		name := "fallback"
		if simd {
			name = "simd"
		}
		b.Run(name, func(b *testing.B) {
			if simd && !haveSIMD {
				b.Skip("no SIMD kernel on this machine")
			}
			old := haveSIMD
			setSIMD(simd)
			defer setSIMD(old)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				ChunkCVs(data, 0, out)
				cvs := out
				for len(cvs) > 1 {
					cvs = Parents(cvs)
				}
			}
		})
	}
}
