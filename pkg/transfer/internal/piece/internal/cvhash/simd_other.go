//go:build !amd64

package cvhash

const haveSIMD = false

func HashF(input *[8192]byte, length, counter uint64, flags uint32, key *[8]uint32, out *[64]uint32, chain *[8]uint32) {
	panic("cvhash: no SIMD kernel")
}

func HashP(left, right *[64]uint32, flags uint32, key *[8]uint32, out *[64]uint32, n int) {
	panic("cvhash: no SIMD kernel")
}

func setSIMD(bool) {}
