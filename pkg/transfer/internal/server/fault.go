package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

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

// The lies a relay built for the fault suite tells its connected children
// (faultinject.BusyRelay, RedirectRelay): it serves them no chunk, and
// answers in ways fetch 1.4.0 allows one at a time but not forever. Each
// lie is logged (lieToChildLog) with its kind (lie=redirect-get, busy,
// redirect-direct or decline-hedge), the child's peer ID, the blob, the
// chunk and, for a REDIRECT, its target (non-member, child, self, asker);
// the suite (relay-busy, relay-redirect) reads them per child and chunk.

// lieToChildLog is what a lie to a child logs.
const lieToChildLog = "fault injection: lying to a child"

// relayBusyRetry is the retry-after of a lying relay's BUSY: within the
// protocol's bounds, short enough that the suite's case stays brief.
const relayBusyRetry = time.Second

// relayLies is the lying relay's state: how many GETs it has redirected
// (the rotation of their targets) and the children it has seen. Its zero
// value is ready; only a fault-injection build refers to it.
var relayLies struct {
	mu       sync.Mutex
	n        int
	children map[peer.ID][]ma.Multiaddr
}

// nonMember is a made-up peer (a fresh key: no member of any grid) at a
// closed port of the loopback address.
func nonMember() fetchwire.Redirect {
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		panic(err) // never: the system's randomness failed
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return fetchwire.Redirect{Peer: id, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/127.0.0.1/tcp/1")}}
}

// lieToChild answers q from p, if p is a connected child and the daemon is
// a lying relay, with the lie its mode tells, fills sl with it and reports
// whether it did; any other request (and a plain GET_DIRECT that allows
// no REDIRECT or BUSY) is left to be served. Both modes REDIRECT a plain
// GET (busy-relay to a made-up non-member; redirect-relay, in turn, to a
// non-member, to another connected child, which may not hold the chunk,
// to the relay itself and to the asker: the last two malformed) and
// decline a hedge (NOT_FOUND); a GET_DIRECT that allows it is answered
// BUSY (busy-relay) or REDIRECTed to a made-up non-member
// (redirect-relay), every time.
func (srv *Server) lieToChild(p peer.ID, q fetchwire.Request, sl *fetchSlot) bool {
	mode := faultinject.Current()
	if (mode != faultinject.BusyRelay && mode != faultinject.RedirectRelay) || sl.asker != source.KindChild || srv.grouper == nil {
		return false
	}
	_, addrs, ok := srv.grouper.Group(p)
	if !ok {
		return false
	}
	relayLies.mu.Lock()
	if relayLies.children == nil {
		relayLies.children = map[peer.ID][]ma.Multiaddr{}
	}
	relayLies.children[p] = addrs
	var lie, target string
	redirect := func(rd fetchwire.Redirect) {
		sl.status, sl.body = fetchwire.StatusRedirect, fetchwire.AppendRedirect(nil, rd)
	}
	switch {
	case q.Type == fetchwire.MsgGet:
		lie, target = "redirect-get", "non-member"
		rd := nonMember()
		if mode == faultinject.RedirectRelay {
			switch relayLies.n % 4 {
			case 1:
				for c, a := range relayLies.children {
					if c != p {
						target, rd = "child", fetchwire.Redirect{Peer: c, Addrs: a}
						break
					}
				}
			case 2: // malformed
				target, rd = "self", fetchwire.Redirect{Peer: srv.cfg.Self}
			case 3: // malformed
				target, rd = "asker", fetchwire.Redirect{Peer: p, Addrs: addrs}
			}
			relayLies.n++
		}
		redirect(rd)
	case q.Type == fetchwire.MsgGetDirect && q.IfPresent:
		lie = "decline-hedge"
		srv.reply(sl, nil, fmt.Errorf("chunk %d of %s: %w (fault injection)", q.Index, q.ID, blob.ErrNotFound))
	case q.Deflectable() && mode == faultinject.BusyRelay:
		lie = "busy"
		sl.status, sl.body = fetchwire.StatusBusy, fetchwire.AppendBusy(nil, relayBusyRetry)
	case q.Deflectable():
		lie, target = "redirect-direct", "non-member"
		redirect(nonMember())
	}
	relayLies.mu.Unlock()
	if lie == "" {
		return false
	}
	srv.cfg.Log.Warn(lieToChildLog, "lie", lie, "child", p.String(), "blob", q.ID, "chunk", q.Index, "target", target)
	return true
}
