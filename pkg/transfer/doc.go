// Package transfer is omst's chunk transfer engine: it serves the fetch
// protocol and fetches a blob's manifest and chunks from the sources a
// Provider names (the tree: the child a blob came up through, the parents;
// siblings and a DHT are further providers), with coalescing, cut-through
// forwarding, retries and corruption reports.
//
// One protocol, specified byte by byte in docs/protocol.md:
//
//	/omst/fetch/1.3.0  tagged GET, GET_SIBLING, GET_DIRECT, REPORT and
//	                   MANIFEST requests; replies as they are ready
//	                   (REDIRECT: ask a sibling), a chunk in verified
//	                   pieces (OUTBOARD, then PIECEs) that a relay passes
//	                   on as they arrive (1.2.0, chunks whole, and 1.1.0,
//	                   without GET_SIBLING, are served and spoken too)
//
// Files: engine.go (Config, Engine, Status), sources.go (Source, Provider:
// the seam to the tree and other providers), coalesce.go (one upstream
// fetch per chunk hash; following a redirect), client.go (pipelined
// streams to a peer), server.go (the handler, the per-peer reply budget),
// manifest.go, open.go (Open, Fetch, Preheat), replicate.go (Replicate's
// per-child queues). Internal parts: internal/schedule (a blob fetch's
// pure decisions: which chunk next, from which source, retry or give up),
// internal/exchange (the in-site exchange's pure decisions: the relay's
// Distributor and ServeState, which the server feeds; the Hedger, which
// the follower of a redirect feeds), internal/fetchwire (the protocol's
// messages: encoders, decoders and their fuzz targets), internal/piece (a
// chunk's outboard, the verification of pieces, and Partial: a chunk as
// it arrives, read by whoever passes it on).
//
// Invariants:
//
//   - Every chunk is verified against its hash on arrival, before it is
//     stored or handed to any reader or downstream peer (one that comes in
//     pieces, piece by piece against its verified outboard, and a piece
//     is passed on only once verified); a manifest is
//     verified against the blob ID (blob.VerifyManifest) before use. A
//     corrupt chunk is dropped, logged, counted against the peer that sent
//     it (Status.PeerErrors, Status.CorruptReceived), reported to that peer
//     (REPORT) and requested again: once more from the same source, then
//     from the other sources, at most schedule.DefaultMaxTries times.
//   - A node serves only bytes verified since they were last read from its
//     disk (the Store's ReadChunk contract). A stored chunk found damaged is
//     dropped by the store and the request is served from a fresh copy
//     pulled from this node's sources. A REPORT makes the node re-read and
//     re-verify its copy (Store.RecheckChunk; Status.CorruptReports).
//   - At most one upstream fetch per chunk hash is in flight on a node
//     (coalescing): local readers and downstream requests that want the
//     same chunk wait on that fetch, which is cancelled only when its last
//     waiter leaves; a request made for a peer never waits on a fetch from
//     that same peer.
//   - A verified chunk is handed to its waiters the moment it arrives
//     (cut-through): a relay serves chunk i while chunks i+1.. are still in
//     flight upstream, and Open's reader delivers chunk i once chunks 0..i
//     are in. A blob fetch keeps at most Config.Window chunks in flight and
//     holds at most 2*Window verified chunks ahead of its reader. At most
//     coalesce.DefaultStoreSlots verified chunks are written to the store
//     at once, and at most coalesce.DefaultHeldChunks are handed on and
//     not yet stored: a chunk verified beyond them waits (its pieces still
//     go on as they arrive), so a fetch faster than its disk holds its
//     window and those chunks, not every chunk not yet written, while a
//     reader or a relay's children stay up to HeldChunks ahead of it.
//   - A request for a peer is never sent back to that peer: the Provider
//     excludes it from the sources it returns.
//   - With SiblingExchange, a relay sends each chunk itself to one child
//     per site and redirects the others to siblings (Distributor), each
//     feeding at most Fanout per chunk; a redirected child that does not
//     get the chunk from the sibling in time (a few times what the rates
//     it measured expect, at most SiblingTimeout) asks the relay
//     directly (GET_DIRECT), as does one whose sibling is merely slow
//     (a hedged request: the first verified copy wins), and the relay
//     stops naming a sibling that failed MaxFailures times for a blob.
//     Redirects never cross sites.
//   - Uploads obey MaxUploadRate (all peers together) and MaxUploadStreams
//     (streams of peers that are neither children nor parents).
//   - What a peer makes this node hold is bounded: at most PeerReplyBytes
//     of replies (being made or waiting to be written) over all its fetch
//     streams, a stream whose peer takes no reply bytes for WriteStall is
//     ended (server.go), and a child's puts are copied one at a time with
//     at most ReplicateQueue more waiting (replicate.go).
//   - Transfers lists every blob fetch under way and what each peer
//     delivered to it.
//   - Decoders are pure, check every length against an explicit limit
//     (which for a reply depends on the request) before allocating, and
//     never panic; a malformed request gets an ERROR reply and the stream
//     is closed.
package transfer
