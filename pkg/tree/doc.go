// Package tree is omst's overlay tree: root (the master) -> a head node per
// site -> workers, on go-libp2p. It keeps a node's session with its parent
// (and falls back to other parents), knows its children, resolves names up
// the tree and announces puts towards the root. For the transfer engine
// (pkg/transfer) it is a provider of sources: for a blob, the child it came
// up through, then the parents.
//
// Two protocols, specified byte by byte in docs/protocol.md:
//
//	/omst/tree/1.1.0   child -> parent session: HELLO, WELCOME or
//	                   REFUSED, PING/PONG (1.0.0, without REFUSED, is
//	                   served too)
//	/omst/names/1.3.0  LOOKUP (the reply carries the manifest when small),
//	                   LOOKUP_GET (the same, followed across sites by the
//	                   blob's first chunks: PUSH, CHUNK), ANNOUNCE,
//	                   ANNOUNCE_BATCH (many records, with small manifests:
//	                   BATCH_ACK, an entry per record), PREHEAT (parent ->
//	                   child), RULE and SYNC_RULES (namespace rules); one
//	                   request per stream. 1.2.0 (no ANNOUNCE_BATCH, no
//	                   rules) and 1.1.0 (no LOOKUP_GET either) are served
//	                   too, and spoken to peers that know no newer one.
//
// Files: tree.go (Config, Tree, Status), keeper.go (the parent session and
// the child registry), parentchoice.go (the keeper's decisions as plain
// code), roles.go (who may be a child, which records a child's ANNOUNCE
// routes, in a closed grid: plain code), names.go (Lookup, Preheat),
// announce.go (Announce, the batching queue, the re-announce), rules.go
// (namespace rules), push.go (chunks pushed with a LOOKUP_GET's answer), sources.go (the
// transfer.Provider), wire.go (encoders and decoders).
//
// Invariants:
//
//   - Sources never include the peer that asked (SourcesFor): a relay's
//     pull-through never goes back where the request came from, so it
//     cannot loop.
//   - Records converge: a node keeps a record only if it is Newer than the
//     one it holds. The child a current record came up through (its route,
//     kept by the Store beside the record) is local routing state: it never
//     crosses the wire and is set only for the live child that announced
//     the record, and in a closed grid only if that child put it or may
//     write its name (MayRoute). Only live children may ANNOUNCE.
//   - In a closed grid a peer is a child only if its certificate's role
//     and claimed site allow it where this node stands (MayAdopt),
//     checked at its HELLO and again at every PING.
//   - Every record that originated in a node's subtree (put there, or
//     announced by a child) is re-announced to the parent each time the
//     parent session is (re)established, so a parent restart loses nothing.
//   - A node has at most AnnounceWindow ANNOUNCE_BATCHes to its parent in
//     flight; the records queued meanwhile make the next ones, so nothing
//     waits on a timer. A relay answers a child's batch once the records new to it
//     have gone up (or half the request timeout passed): when Announce
//     returns nil the root has the name, unless a relay on the way could
//     not pass it on (logged there, repaired by its re-announce).
//   - Decoders are pure, check every length against an explicit limit
//     before allocating, reject invalid names (blob.ValidateName), and
//     never panic; a malformed message gets an error reply and the stream
//     is closed.
//   - The keeper's decisions are plain code with no sockets or clocks
//     (ParentChoice, scripted tests in testdata/keeper): which parent to
//     hold a session with, how long to back off, when to fall back (after
//     two failed sessions in a row, NextParent) and when to return to an
//     earlier parent (Config.RetryPreferred).
//
// Not implemented: parent choice among several candidates by measurement.
package tree
