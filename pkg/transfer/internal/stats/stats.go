// Package stats holds the transfer engine's counters: what its parts (the
// fetch client, the coalescing of chunk fetches, the server, pushes and
// replications) count as they go, read together by the engine's Status.
// Every counter is safe for concurrent use; the zero Counters is ready.
package stats

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/transfer/internal/source"
)

// MaxErrorPeers bounds the peers ErrorsByPeer keeps counts for.
const MaxErrorPeers = 64

// Counters are the engine's counters; pkg/transfer's Status documents what
// each counts.
type Counters struct {
	ReplyHeld      atomic.Int64  // reply bytes held for peers now
	ReplWaiting    atomic.Int64  // records waiting in the Replicate queues
	ReplDropped    atomic.Uint64 // records Replicate did not copy (a full queue)
	ReplBatched    atomic.Uint64 // small puts Replicate copied with CopyMany
	BytesServed    atomic.Uint64
	BytesFetched   atomic.Uint64
	BytesIn        [source.NumKinds]atomic.Uint64 // verified chunk bytes received, by kind of source
	BytesOut       [source.NumKinds]atomic.Uint64 // chunk bytes sent, by the asker's relation to us
	UploadsRefused atomic.Uint64
	Hedges         atomic.Uint64 // sibling requests doubled by a GET_DIRECT
	HedgesDeclined atomic.Uint64 // hedges this relay declined (HedgeGrace, backlog, budget)
	HedgesBusy     atomic.Uint64 // of HedgesDeclined, those declined for the backlog or the budget
	HedgesServed   atomic.Uint64 // hedges this relay answered with the chunk
	HedgesDeferred atomic.Uint64 // hedges this node did not send for its hedge budget
	Directs        atomic.Uint64 // plain GET_DIRECTs this node sent after giving up on a sibling
	DirectsServed  atomic.Uint64 // plain GET_DIRECTs this relay answered with the chunk
	// DirectsRedirected and DirectsBusy: plain GET_DIRECTs this relay
	// answered (fetch 1.4.0) with a REDIRECT to a complete holder, and
	// with BUSY.
	DirectsRedirected, DirectsBusy atomic.Uint64
	BytesPassedOn                  atomic.Uint64 // chunk bytes sent in pieces before the whole chunk was here
	PushSent                       atomic.Uint64 // chunk bytes pushed after a FOUND
	PushReceived                   atomic.Uint64 // verified chunk bytes a parent pushed
	RedirectsSent                  atomic.Uint64
	RedirectsTaken                 atomic.Uint64
	SiblingFailures                atomic.Uint64
	PeerErrors                     atomic.Uint64
	CorruptReceived                atomic.Uint64
	ReportsReceived                atomic.Uint64
	ServedUnhashed                 atomic.Uint64 // chunks read from the store and sent in pieces with a kept outboard, not hashed here
	ServedSendfile                 atomic.Uint64 // of those, chunks sent from their file with sendfile (a plain bulk connection)
	BulkOpened                     atomic.Uint64 // bulk connections opened to peers
	BulkFallbacks                  atomic.Uint64 // bulk connections that could not be opened (libp2p streams used)

	errMu     sync.Mutex
	peerFails map[peer.ID]uint64 // failures blamed on each peer (at most MaxErrorPeers peers)
}

// PeerError counts a failure blamed on p: in PeerErrors, and in p's own
// count while fewer than MaxErrorPeers peers have one.
func (c *Counters) PeerError(p peer.ID) {
	c.PeerErrors.Add(1)
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.peerFails == nil {
		c.peerFails = map[peer.ID]uint64{}
	}
	if _, ok := c.peerFails[p]; ok || len(c.peerFails) < MaxErrorPeers {
		c.peerFails[p]++
	}
}

// ErrorsByPeer returns a copy of the failures counted against each peer.
func (c *Counters) ErrorsByPeer() map[peer.ID]uint64 {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.peerFails == nil {
		return map[peer.ID]uint64{}
	}
	return maps.Clone(c.peerFails)
}
