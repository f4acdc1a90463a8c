// Package sim is a discrete-event simulation of a broadcast on a grid of
// sites, at sizes no machine here can emulate (a thousand workers per
// site, ten sites), that drives omst's own decision code over modelled
// links: each head's and worker's exchange.ServeState (the Distributor's
// serve-or-redirect, HedgeGrace), each worker's exchange.Hedger (hedges,
// the sibling timeout, slow siblings) and schedule.Schedule (the window,
// the reader's bound, retries), fed what the engine feeds them, with the
// simulated time as their clock. cmd/omst-sim runs it; docs/benchmarks.md
// says how it was calibrated against the emulated grid and what it
// predicts.
//
// What is modelled (site.go), after pkg/transfer and its internal parts:
//
//   - the grid: the root holds the blob; per site a head behind its own
//     WAN link (a rate each way, a latency) and W workers, every host (the
//     head too) with one LAN port (a rate up and down), a LAN latency;
//   - a get: LOOKUP_GET (a LAN and a WAN round trip; the root pushes the
//     first PushBytes of the blob to the head after the site's first
//     FOUND), then the worker's Schedule asks its head for Window chunks
//     at a time, at most 2 × Window past the reader, as an Open does;
//   - the fetch streams: StreamsPerPeer streams per client and server,
//     the client putting each request on the least loaded; a server
//     writes one reply at a time per stream, in the order they became
//     ready (a REDIRECT or NOT_FOUND waits behind a chunk being written);
//   - serving (server.serveChunk): from the store, else by pull-through
//     from the node's parent, coalesced with the fetch of the chunk in
//     flight (coalesce.Chunks); a hedge (GET_DIRECT if-present) only from
//     the store; a head's decisions are its ServeState's, and a chunk
//     counts as sent into the site when its reply is ready (ServeSent);
//   - following a redirect (coalesce.fromSibling): the Hedger's actions
//     carried out, its timers on simulated time and derived, as the
//     engine's, from a peerrate.Table each worker feeds with its own
//     requests (coalesce.measured: a chunk's time, a REDIRECT's or a
//     declined hedge's round trip; Config.ConstantTimers: none fed); a
//     request given up on is forgotten (its timing lost) but its reply
//     still crosses the links and is dropped; a plain GET_DIRECT carries
//     the deflect flag (fetch 1.4.0; Config.NoDeflect: not), so that a
//     head whose port is busy may answer it with a REDIRECT to a worker
//     it wrote the whole chunk to (its last byte left: ServeDelivered) or
//     with BUSY and the time its backlog takes to drain at the rate its
//     asks measured (the Backlog's bytes handed on), which the Hedger
//     follows (Redirected) or waits out (Busy);
//   - forwarding: whole chunks, each verified before it is served (today),
//     or, with PieceSize, each piece as soon as it is in (the protocol of
//     issue 25): a reply then starts with the first piece of its chunk
//     and holds its stream until the last;
//   - links (links.go): per-connection max-min sharing of every port and
//     WAN link, TCP's goodput share of the rate, a WAN connection's slow
//     start from InitWindow, bytes as a fluid.
//
// Not modelled: CPU (hashing, TLS, copies: on the emulated grid they slow
// everything at full rate, see docs/benchmarks.md), packet loss and TCP's
// dynamics beyond slow start, disks, the DHT, failures and departures.
// Sites share nothing but the root, which serves each over its own link,
// so each is simulated on its own (in parallel).
//
// Invariants: a run is deterministic for its Config (Seed included); every
// decision of the real code is taken at the simulated time of the event
// that causes it; a reply's bytes never reach a node before the bytes it
// forwards (a flow stays a piece behind its feeder); a run ends when every
// worker has every chunk, or at MaxTime with the unfinished counted; a
// stall (no event left, workers unfinished) is an error, never a hang.
package sim
