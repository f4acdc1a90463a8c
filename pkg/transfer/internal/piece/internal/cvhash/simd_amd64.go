package cvhash

import "golang.org/x/sys/cpu"

var haveSIMD = cpu.X86.HasAVX2

// HashF compresses the chunks in input[:length] (at most eight, from chunk
// number counter) and stores chunk j's chaining value transposed: word w
// at out[j+8*w]. chain receives the chaining value before the last
// block's compression (unused here). In hash_amd64.s.
//
//go:noescape
func HashF(input *[8192]byte, length, counter uint64, flags uint32, key *[8]uint32, out *[64]uint32, chain *[8]uint32)

// HashP compresses n (at most eight) parent nodes, the j-th of left and
// right's j-th transposed values, into out transposed. In hash_amd64.s.
//
//go:noescape
func HashP(left, right *[64]uint32, flags uint32, key *[8]uint32, out *[64]uint32, n int)

// setSIMD turns the SIMD kernels off or back on (tests).
func setSIMD(on bool) { haveSIMD = on && cpu.X86.HasAVX2 }
