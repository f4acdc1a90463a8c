package server

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/transfer/internal/exchange"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/peerrate"
	"github.com/omst-project/omst/pkg/transfer/internal/source"
)

// The site's pace, as this node measures it: how fast its children take
// its chunk replies. Each OK chunk reply (fetch 1.2.0) to a connected child is timed from
// the moment its writer takes it up (before the upload limit's wait) to
// the moment its last byte was handed to the stream (peerrate.Table: with
// two streams to a child, the replies that overlap count their own bytes
// only). A write returns once its bytes are in the connection's buffers,
// so a lone reply is counted faster than it moves; under load, when the
// buffers are full, writes take what the wire takes. The decision state
// gets the result as ServeEvent.Pace (exchange.HedgeGraceFor,
// SlowBackoffFor).

// drainStart starts timing reply sl to p, if it is a whole chunk sent in
// one OK reply (fetch 1.2.0) to a connected child; the zero Pending
// otherwise. A chunk sent in pieces (1.3.0) is not timed: the pieces a
// relay passes on leave at its source's pace, not its child's, and
// measured so they made the grace a fraction of a second and the relay
// serve the hedges (2 x 16 on the emulated WAN at a quarter of the rates:
// the head sent 1.4-7 copies into its site instead of 1; timing only
// chunks sent whole in one PIECE, one run in three sent 2.1). Over 1.3.0
// the relay keeps the priors, HedgeGrace and SlowBackoff.
func (srv *Server) drainStart(p peer.ID, sl *fetchSlot) peerrate.Pending {
	if !sl.chunk || sl.status != fetchwire.StatusOK || sl.asker != source.KindChild || srv.grouper == nil {
		return peerrate.Pending{}
	}
	srv.drainMu.Lock()
	defer srv.drainMu.Unlock()
	return srv.drains.Sent(time.Now(), p)
}

// drainEnd ends the timing of a reply of n bytes: written whole (ok) or
// not.
func (srv *Server) drainEnd(r peerrate.Pending, n int, ok bool) {
	if !r.Started() {
		return
	}
	now := time.Now()
	srv.drainMu.Lock()
	defer srv.drainMu.Unlock()
	if ok {
		srv.drains.Replied(now, r, n)
	} else {
		srv.drains.Lost(r)
	}
}

// pace is the site's pace for chunk q of its blob: what the children's
// figures (their medians) expect of a reply of the chunk's length (from
// the blob's manifest if held, else the length of the replies measured
// lately). Zero while nothing was measured.
func (srv *Server) pace(q fetchwire.Request) exchange.Pace {
	size := int(replySize(q.Type, q.Index, q.Hash, srv.manifestHeld(q.ID), 0))
	srv.drainMu.Lock()
	defer srv.drainMu.Unlock()
	_, site := srv.drains.Expect("", size)
	if site.From == peerrate.None {
		return exchange.Pace{}
	}
	return exchange.Pace{Hop: site.Time, Dev: site.Dev}
}
