// Package cache is omst's node-local store.
//
// Layout of a store directory:
//
//	DIR/chunks/ab/<hex hash>     chunk bytes, one file per chunk, named by its BLAKE3-256 hash
//	DIR/tmp/                     chunk files being written (renamed into chunks/ when complete)
//	DIR/index/                   BadgerDB: name records and their history, manifests,
//	                             chunk sizes and last use, pins
//
// Chunk bytes live in plain files (they wrote twice as fast as Badger values
// and free their space on unlink); Badger holds only small index values.
//
// Invariants:
//   - A chunk file exists only under its content hash, complete: writes go to
//     a temp file that is renamed into place. Open deletes leftover temp files.
//   - Chunk bytes are bounded by Options.MaxBytes. Putting a chunk evicts the
//     least recently used chunks that no pinned blob (and no ingest in
//     progress) references; when that cannot make room the put fails with
//     blob.ErrNoSpace, as it does when the disk itself is full.
//   - Reads mark chunks used in memory only; last use reaches the index in
//     background batches and at Close. After a crash Open reconciles the index
//     with the files: unindexed chunk files are adopted, entries without a file
//     are dropped.
//   - A name becomes visible only when its whole blob is stored: Ingest
//     commits the manifest, the pin and the record in one index transaction
//     after the last chunk is written. A crash or an error before that leaves
//     no name and no pin; the chunks already written are ordinary evictable
//     cache entries. The input is whole only at its explicit end: io.EOF
//     itself from Ingest's reader (any other error, io.ErrUnexpectedEOF
//     included, is a cut input); read through pkg/stablefile, a regular file
//     ends at the size it had when it was opened, and only if it is
//     unchanged at the end.
//   - Pins are per blob, owned by Pin ("") or by the name that ingested the
//     blob; a chunk is pinned while any pinned blob lists it.
//   - Chunk bytes handed out (ReadChunk, ReadChunkInto, ReadChunkVerifiedBy)
//     have been verified against their hash since they were last read from
//     disk: a read from a file is hashed (or, for ReadChunkVerifiedBy,
//     checked by the caller's verification, e.g. the chunk's Bao outboard
//     computed in the same pass), and a bounded memory
//     (Options.VerifiedMemoBytes) keeps recently verified bytes. A file
//     whose bytes do not match, or that is cut short or gone, is dropped
//     with its entry and counted in Usage.DamagedChunks; it is never
//     handed out.
//   - A chunk that no stored manifest lists is an orphan (what an ingest cut
//     by a crash leaves): never pinned, counted in Usage.OrphanedBytes and
//     evicted before any other chunk; a manifest that lists it adopts it.
//
// A minimal use:
//
//	s, err := cache.Open(dir, cache.Options{MaxBytes: 10 << 30})
//	...
//	f, err := stablefile.Open(ctx, path) // fails the ingest if the file changes
//	rec, err := s.Ingest(ctx, "shared/input.dat", f, blob.DefaultChunkSize, peerID)
//	m, err := s.Manifest(rec.ID)
//	data, err := s.ReadChunk(m.Chunks[0])
package cache
