// Package tree is omst's overlay tree: root (the master) -> a head node per
// site -> workers, on go-libp2p. It resolves names up the tree, announces
// puts towards the root, and moves blob bytes pull-through, with request
// coalescing and cut-through forwarding at chunk granularity.
//
// Three protocols, specified byte by byte in docs/protocol.md:
//
//	/omst/tree/1.0.0   child -> parent session: HELLO, WELCOME, PING/PONG
//	/omst/names/1.0.0  LOOKUP, ANNOUNCE, MANIFEST; one request per stream
//	/omst/fetch/1.0.0  pipelined chunk requests, replies in request order
//
// Files: tree.go (Config, Tree, Status), keeper.go (parent session and the
// child registry), parentchoice.go (the keeper's decisions), names.go (Lookup, Announce, Manifest), fetch.go
// (coalescing, the fetch client and server), open.go (Open, Fetch),
// schedule.go (the pure decisions), wire.go (encoders and decoders).
//
// Invariants:
//
//   - Every chunk is verified against its hash on arrival, before it is
//     stored or handed to any reader or downstream peer; a manifest is
//     verified against the blob ID (blob.VerifyManifest) before use. A
//     corrupt chunk is dropped, logged, counted against the peer that sent
//     it (Status.PeerErrors, Status.CorruptReceived), reported to that peer
//     (a fetch REPORT) and requested again: once more from the same source,
//     then from the other sources, at most DefaultMaxTries times.
//   - A node serves only bytes verified since they were last read from its
//     disk (the Store's ReadChunk contract). A stored chunk found damaged is
//     dropped by the store, and the request is served from a fresh copy
//     pulled from this node's sources. A REPORT makes the node re-read and
//     re-verify its copy (Store.RecheckChunk; Status.CorruptReports).
//   - At most one upstream fetch per chunk hash is in flight on a node
//     (coalescing): local readers and downstream fetch handlers that want
//     the same chunk wait on that fetch, which is cancelled only when its
//     last waiter leaves.
//   - A verified chunk is handed to its waiters the moment it arrives
//     (cut-through): a relay serves chunk i while chunks i+1.. are still in
//     flight upstream, and Open's reader delivers chunk i once chunks 0..i
//     are in. A blob fetch keeps at most Config.Window chunks in flight and
//     holds at most 2*Window verified chunks ahead of its reader.
//   - A request never goes back to the peer that asked for it: sources are
//     the child the blob was announced through (Record.Via) then the
//     parent, minus the asker (SourcesFor), so pull-through cannot loop.
//   - Records converge: a node keeps a record only if it is Newer than the
//     one it holds. Via is local routing state: it never crosses the wire
//     and is set only from the tree session of the child that announced it.
//     Only live children may ANNOUNCE.
//   - Every record that originated in a node's subtree (put there, or
//     announced by a child) is re-announced to the parent each time the
//     parent session is (re)established, so a parent restart loses nothing.
//   - Decoders are pure, check every length against an explicit limit
//     before allocating, reject invalid names (blob.ValidateName), and
//     never panic; a malformed message gets an error reply and the stream
//     is closed.
//   - Decisions are plain code with no sockets or clocks: which chunk
//     next, from which source, retry or give up (schedule.go); which parent
//     to hold a session with, how long to back off, when to fall back and
//     when to return (parentchoice.go, scripted tests in testdata/keeper).
//   - With fallback parents, the keeper moves to the next parent after
//     two failed sessions in a row (NextParent), and from a fallback
//     returns to an earlier parent once it can be reached again
//     (Config.RetryPreferred).
//
// Not implemented: in-site peer exchange between workers (pkg/dht), parent
// choice among several candidates by measurement.
package tree
