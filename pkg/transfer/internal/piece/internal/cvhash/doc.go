// Package cvhash computes BLAKE3 chaining values of whole chunks and of
// parent nodes, the inner values of a BLAKE3 tree that a Bao outboard
// holds, at the speed of the whole-input hasher omst verifies chunks with
// (github.com/zeebo/blake3).
//
// Neither BLAKE3 library omst uses exports that: zeebo/blake3 hashes only
// whole inputs to a root, and lukechampine.com/blake3/guts, which exports
// chaining values, hashes 1 KiB chunks at about two thirds of zeebo's
// speed on AVX2 (2.0 against 3.1 GB/s, measured: BenchmarkChunkCVs). So on
// amd64 with AVX2 this package runs zeebo/blake3's AVX2 kernels, copied
// unchanged from github.com/zeebo/blake3 v0.2.4
// (internal/alg/hash/hash_avx2/impl_amd64.s, released under CC0 1.0, public
// domain): HashF compresses eight consecutive chunks at once, HashP eight
// parents. Elsewhere it falls back to lukechampine.com/blake3/guts. The
// tests check both paths against guts on every input length they try.
package cvhash
