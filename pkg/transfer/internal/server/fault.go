package server

import (
	"bytes"
	"context"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/faultinject"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/source"
)

// The lies a daemon built for the fault suite tells its siblings
// (internal/faultinject). They are called only in a build with the
// omstfault tag: faultinject.Enabled is a constant false in every other
// build, so none of this is linked into them. Each lie is logged once per
// chunk request (the suite counts the lines). Only chunk requests of a
// sibling (GET_SIBLING) are lied to; parents, children and other peers are
// served honestly, and the store is never touched.

// lieLog is what a lie logs.
const lieLog = "fault injection: lying to a sibling"

// refuseSibling answers p's chunk request q, if p asks as a sibling, with
// the lie faultinject.NotFoundServe (NOT_FOUND at once) or SilentServe (no
// reply until the stream ends), and reports whether it did; any other
// request is left to be served.
func (srv *Server) refuseSibling(ctx context.Context, p peer.ID, q fetchwire.Request, sl *fetchSlot) bool {
	mode := faultinject.Current()
	if sl.asker != source.KindSibling || (mode != faultinject.NotFoundServe && mode != faultinject.SilentServe) {
		return false
	}
	srv.cfg.Log.Warn(lieLog, "fault", mode.String(), "peer", srv.cfg.Describe(p), "blob", q.ID, "chunk", q.Index)
	if mode == faultinject.SilentServe {
		<-ctx.Done()
	}
	srv.reply(sl, nil, fmt.Errorf("chunk %d of %s: %w (fault injection)", q.Index, q.ID, blob.ErrNotFound))
	return true
}

// corruptForSibling returns the bytes to send for part of the chunk reply
// sl to p: with faultinject.CorruptServe and p asking as a sibling, the
// first bytes of the chunk (the part at offset 0: the whole chunk in a
// 1.2.0 reply, the first piece in a 1.3.0 one) with one byte flipped, in a
// copy; otherwise part's own bytes.
func (srv *Server) corruptForSibling(p peer.ID, sl *fetchSlot, part framePart) []byte {
	if faultinject.Current() != faultinject.CorruptServe || !sl.chunk || sl.asker != source.KindSibling || part.off != 0 || len(part.body) == 0 {
		return part.body
	}
	srv.cfg.Log.Warn(lieLog, "fault", faultinject.CorruptServe.String(), "peer", srv.cfg.Describe(p), "tag", sl.tag)
	b := bytes.Clone(part.body)
	b[len(b)/2] ^= 0x40
	return b
}
