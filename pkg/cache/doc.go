// Package cache is omst's node-local store.
//
// Layout of a store directory:
//
//	DIR/blobs/<cid>.s<n>         a blob file of the store's own (a put's, or a fetch's not
//	                             into a caller's file: OwnSink): the chunks of the blob it
//	                             stored at their offsets, holes elsewhere (see below); mode
//	                             0400 once handed out (GET_FD, see below), 0600 before
//	DIR/blobs/<cid>.<n>          a get's destination file, linked here, holding the chunks
//	                             it fetched at their offsets (see below)
//	DIR/chunks/ab/<hex hash>     chunk bytes, one file per chunk, named by its BLAKE3-256 hash:
//	                             chunks fetched one by one or of a blob of one chunk, a
//	                             put's blob of one chunk, and chunks moved out of a get's
//	                             destination (PromoteChunk, before GET_FD hands them out)
//	DIR/tmp/                     chunk files being written (renamed into chunks/ when complete),
//	                             put-* files of puts in progress and blob-* links of gets in
//	                             progress (moved into blobs/)
//	DIR/index/                   BadgerDB: name records and their history, manifests,
//	                             chunk sizes and last use, pins, chunk outboards (in
//	                             its value log, as values of 1 KiB or more are)
//
// Chunk bytes live in plain files (they wrote twice as fast as Badger values
// and free their space on unlink or a punched hole); Badger holds only
// small index values.
//
// A put writes its blob into one file (DIR/tmp/put-*), not a file per
// chunk: a regular input file (read through pkg/stablefile) is copied in
// the kernel (copy_file_range: shared extents where the filesystem can)
// and each chunk is then read back from the store's copy and hashed, by
// GOMAXPROCS goroutines, so that the bytes stored are the bytes hashed
// whatever the caller does to its file; a stream's chunks are hashed and
// written at their offsets. A chunk the store holds already is entered
// once: its range in the file is a hole. A blob of one chunk keeps it in
// a chunk file (small objects stay in the sharded DIR/chunks). The file is moved to
// DIR/blobs/<cid>.s<n> just before the index commit that names its blob
// (a crash between the two leaves a file whose blob has no manifest:
// Open removes it). A chunk that leaves such a file (evicted, dropped,
// promoted) is punched out of it (fallocate PUNCH_HOLE|KEEP_SIZE,
// through a descriptor of the file kept open from one punch to the next
// and closed at each flush round), so the cap bounds the disk; a get's destination is never punched (its
// bytes are its owner's). At Open, a put's file locates only the chunks
// that are not holes (SEEK_HOLE; a chunk of zeros is, a hole reads as
// them).
//
// A fetch of a whole blob that is not into a caller's file (a stream get,
// GET_FD's fetch, a relay fetching for its children) writes the chunks it
// stores into one such file too (OwnSink, opened by the node for the
// fetch): a crash leaves the chunks written, located at the next Open.
//
// GET_FD hands clients descriptors to map (OpenChunkShared). A chunk in a
// committed file of the store's own is handed out in that file at its
// offset, without a copy; the file is marked handed out first (mode 0400,
// read back at Open) and is never punched again, since a client's mapping
// of a punched range would read zeros. What that costs the cap: the
// chunks evicted from a handed-out file keep their bytes on disk, beyond
// Options.MaxBytes, until the file's last chunk is evicted and it is
// unlinked (the space then comes back as the last client closes it); after
// a restart such a file locates every chunk whose bytes it still holds,
// so that they count against the cap again. A chunk in a get's destination
// (its owner may change it) is moved into a chunk file before it is
// handed out (PromoteChunk).
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
//     no name, no pin and no chunk: the put's blob file goes with every
//     entry located in it (a chunk another put relies on meanwhile is moved
//     to a chunk file first). The input is whole only at its explicit end: io.EOF
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
//     (a put's file gives a chunk's disk space back when the chunk leaves
//     it, a get's destination when the last one does, and its owner keeps
//     the file whatever the store does: the store only ever unlinks its
//     own link). The bytes of a destination are its owner's to change:
//     reads verify them as any read from disk does, and
//     the ranges GET_FD hands out (which clients map, and which must
//     never change) are in chunk files or in handed-out files of the
//     store's own, never in a destination (a chunk is moved out of one
//     first, PromoteChunk). Entries in a blob file not committed stay out
//     of the index, so a crash mid-get leaves no entry without its file;
//     at Open a committed blob file locates every chunk of its blob's
//     stored manifest that has no chunk file.
//   - A chunk that no stored manifest lists is an orphan (a put's, until
//     its commit; what an ingest cut by a crash left in chunk files before
//     puts wrote blob files): never pinned, counted in Usage.OrphanedBytes and
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
