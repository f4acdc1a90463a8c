// Package cache is omst's node-local store.
//
// Layout of a store directory:
//
//	DIR/chunks/ab/<hex hash>     chunk bytes, one file per chunk, named by its BLAKE3-256 hash
//	DIR/blobs/<cid>.<n>          blob files: a get's destination file, linked here, holding
//	                             the chunks it fetched at their offsets (see below)
//	DIR/tmp/                     chunk files being written (renamed into chunks/ when complete),
//	                             and blob-* links of gets in progress (moved into blobs/)
//	DIR/index/                   BadgerDB: name records and their history, manifests,
//	                             chunk sizes and last use, pins
//
// Chunk bytes live in plain files (they wrote twice as fast as Badger values
// and free their space on unlink); Badger holds only small index values.
//
// A get into a file writes each fetched byte once (LinkSink): the
// destination, a regular file of the store's user (not writable by group
// or others) on the store's filesystem, is hardlinked into DIR/tmp, and
// while the sink is open the chunks of its blob that the store is given
// (the fetch's verified chunks) are written into it at their offsets
// instead of into chunk files; the store serves them from there. Chunks
// the store held already are copied in (CopyChunkTo: read and verified,
// then copy_file_range, which shares extents where the filesystem can and
// copies in the kernel where it cannot). Commit moves
// the link to DIR/blobs; Abort, or a crash (DIR/tmp is cleared at Open),
// removes it with every entry located in the file. A destination the
// store cannot share (another filesystem, owner or kind) is written by
// the caller and the store keeps chunk files as before.
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
//   - A chunk entry is located in a chunk file or in one blob file at its
//     offset; a blob file stays linked while an entry is located in it
//     (its disk space returns when the last one is evicted, and the
//     destination's owner keeps the file whatever the store does: the
//     store only ever unlinks its own link). The bytes there are the
//     owner's to change: reads verify them as any read from disk does, and
//     the files handed out by GET_FD (which clients map, and which must
//     never change) are chunk files, a chunk moved out of a blob file
//     first (PromoteChunk). Entries in a blob file not committed stay out
//     of the index, so a crash mid-get leaves no entry without its file;
//     at Open a committed blob file locates every chunk of its blob's
//     stored manifest that has no chunk file.
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
