// Package exchange holds the in-site exchange's decisions as plain code,
// in the shape of etcd-io/raft's Step: events with their time in,
// decisions out; no clock, goroutines, locks or sockets inside, so that
// each is tested with scripts (testdata/*/*.txt) and without a network.
//
//   - Distributor (distribute.go): a relay's choice, for a child's chunk
//     request, between sending the chunk itself and redirecting the child
//     to a sibling of its site that holds it or is receiving it, so that
//     each chunk crosses the relay's port about once per site.
//   - ServeState (servestate.go): all of the server's decisions, over the
//     Distributor: serve or refuse a fetch stream (MaxUploadStreams), serve
//     a chunk, redirect its asker, or decline a hedge (for the hedge grace,
//     HedgeGraceFor: from the site's pace as the server measured it, the
//     constant HedgeGrace before; past it, while the server has more than
//     HedgeBacklog bytes to write to its children); deflect a 1.4.0
//     child's GET_DIRECT while that backlog is above the bound (a
//     REDIRECT to a holder it wrote the whole chunk to, else BUSY for the
//     time the backlog takes to drain at the rate measured,
//     peerrate.Drain; Distributor.Deflect); who left.
//   - Hedger (hedge.go): what a node does while it follows a redirect to a
//     sibling: when to hedge (ask the relay too), when to give up on the
//     sibling (or not ask one that left its last requests unanswered),
//     which copy wins; and what it learned of each sibling. Its timers
//     come from the rates the node measured of its peers (peerrate.Table),
//     the constants tuned at 200 Mbit/s before any. A relay's REDIRECT
//     of its plain request is followed as the first sibling was
//     (Redirected), a BUSY waited out while a sibling given up on for
//     lateness is asked again (Busy).
//
// Invariants: a child is only ever redirected to a connected child of its
// own group (site), never to itself, and never to a peer that left
// (ServePeerLeft, ServeTargetGone) for what it held before it left; a
// holder feeds at most Fanout siblings per chunk, and a child is sent to
// a holder with room fewer than MaxDepth hops from the relay (not slow
// first), so no copy is more than MaxDepth hops from it; a holder reported failed
// MaxFailures times for a blob is no target for it; one reported slow is
// a target of last resort for the slow backoff (SlowBackoffFor); a
// holder's depth is its feeder's plus one (the relay's copies: 1), and
// hedges are declined no longer than maxGrace; the holders remembered per
// chunk are bounded (maxHolders), and a blob's state is forgotten once it
// was not asked for during Idle. A child's GET_DIRECTs for one chunk are
// deflected at most MaxDeflect times (<= fetchwire.MaxDeflections), never
// to the child nor a holder it named failed, and only while the relay's
// backlog is above HedgeBacklog; a BUSY's retry-after is within [50 ms,
// 2 s]. A followed redirect
// keeps at most one request of each kind open, asks the relay plainly at
// most once, and ends (delivers or fails) exactly once. pkg/transfer's
// server and its redirect follower feed these and carry their decisions
// out.
package exchange
