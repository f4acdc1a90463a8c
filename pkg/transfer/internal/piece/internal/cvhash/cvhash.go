package cvhash

import (
	"lukechampine.com/blake3/guts"
)

// ChunkSize is BLAKE3's chunk: 1 KiB.
const ChunkSize = guts.ChunkSize

// CV is a chaining value: the first eight words of a node's compression.
type CV = [8]uint32

// lanes is how many chunks or parents the SIMD kernels compress at once.
const lanes = 8

// ChunkCVs sets out[i] to the chaining value of the i-th 1 KiB chunk of
// data, taken as chunk number counter+i of a BLAKE3 tree that has more
// than one chunk (no chunk is the root). len(data) must be a multiple of
// ChunkSize and out must hold len(data)/ChunkSize values; it panics
// otherwise.
func ChunkCVs(data []byte, counter uint64, out []CV) {
	n := len(data) / ChunkSize
	if len(data)%ChunkSize != 0 || len(out) < n {
		panic("cvhash: ChunkCVs of a partial chunk or into too short an out")
	}
	i := 0
	if haveSIMD {
		var t [lanes * 8]uint32
		var chain CV
		for ; i+lanes <= n; i += lanes {
			HashF((*[lanes * ChunkSize]byte)(data[i*ChunkSize:]), lanes*ChunkSize, counter+uint64(i), 0, &guts.IV, &t, &chain)
			for j := range lanes {
				for w := range 8 {
					out[i+j][w] = t[j+lanes*w]
				}
			}
		}
	}
	for ; i < n; i++ {
		out[i] = guts.ChainingValue(guts.CompressChunk(data[i*ChunkSize:(i+1)*ChunkSize], &guts.IV, counter+uint64(i), 0))
	}
}

// Parents replaces each pair in[2i], in[2i+1] by the chaining value of
// their (non-root) parent node, in[i], and carries an odd last value over
// as is: one level up a BLAKE3 tree, whose left subtrees are whole powers
// of two. It returns in[:(len(in)+1)/2].
func Parents(in []CV) []CV {
	pairs := len(in) / 2
	i := 0
	if haveSIMD {
		var l, r, t [lanes * 8]uint32
		for ; i < pairs; i += lanes {
			k := min(lanes, pairs-i)
			for j := range k {
				a, b := &in[2*(i+j)], &in[2*(i+j)+1]
				for w := range 8 {
					l[j+lanes*w], r[j+lanes*w] = a[w], b[w]
				}
			}
			if k == 1 {
				break // one parent: not worth the vector setup
			}
			HashP(&l, &r, guts.FlagParent, &guts.IV, &t, k)
			for j := range k {
				for w := range 8 {
					in[i+j][w] = t[j+lanes*w]
				}
			}
		}
	}
	for ; i < pairs; i++ {
		in[i] = guts.ChainingValue(guts.ParentNode(in[2*i], in[2*i+1], &guts.IV, 0))
	}
	if len(in)%2 == 1 {
		in[pairs] = in[len(in)-1]
	}
	return in[:(len(in)+1)/2]
}
