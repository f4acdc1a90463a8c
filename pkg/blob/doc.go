// Package blob holds omst's content-addressing core: chunk hashes, the
// manifest that lists a blob's chunks, the blob ID (a CIDv1 of the manifest),
// the rules for blob names, name records, and the sentinel errors shared by
// every layer.
//
// A blob of Size bytes is cut into chunks of ChunkSize bytes (the last one
// may be shorter). Each chunk is named by its BLAKE3-256 hash. The manifest
// encodes the size, the chunk size and the list of chunk hashes; the blob ID
// is CIDv1(raw, blake3-256(manifest bytes)). Anyone holding a blob ID can
// therefore verify a manifest, and anyone holding a manifest can verify every
// chunk, before storing or forwarding it.
//
// Bounds (manifest.go): a blob has at most MaxChunks chunks (4,194,304, a
// manifest of 128 MiB: 4 TiB in 1 MiB chunks), and at most MaxSmallChunks
// (65,536, a manifest of 2 MiB) when its chunks are smaller than 1 MiB
// (MaxChunksFor, CheckSize; ErrTooBig).
package blob
