package member

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/grid"
)

// handleJoin serves a join or renewal request: at the root (Issuer set)
// by issuing, elsewhere by forwarding it up the tree. Anyone may ask for
// itself; only an admitted member may ask for another peer (it forwards),
// and only a member may ask for a renewal.
//
// What a request may hold, in order: a join stream (one at a time per
// peer that is not a member); half the timeout to send its request
// (maxJoin bytes at most); the checks of checkJoin; its subject's rate and
// no other request for that subject being served; then a slot, redemptions
// and renewals each of their own, awaited up to the timeout; and three
// timeouts for the answer. A peer that sends nothing holds one stream
// for half the timeout, and no slot.
func (at *attachment) handleJoin(s network.Stream) {
	defer s.Close()
	remote := s.Conn().RemotePeer()
	member := at.a.Admitted(remote)
	closeJoin, err := at.openJoin(remote, member)
	if err != nil {
		at.refuseJoin(s, remote, err)
		return
	}
	defer closeJoin()
	_ = s.SetReadDeadline(time.Now().Add(at.joinReadTimeout()))
	b, err := readAll(s, maxJoin)
	var q joinRequest
	if err == nil {
		q, err = decodeJoin(b)
	}
	if err != nil {
		at.a.log.Debug("bad join request", "peer", remote, "err", err)
		_ = s.Reset()
		return
	}
	_ = s.SetDeadline(time.Now().Add(at.slotWait() + at.joinServeTimeout()))
	at.a.count(func(st *Stats) { st.Joins++ })
	now := at.a.cfg.Now()
	if err := at.a.checkJoin(remote, member, q, now); err != nil {
		at.refuseJoin(s, remote, err)
		return
	}
	end, err := at.beginJoin(remote, q.Subject, now)
	if err != nil {
		at.refuseJoin(s, remote, err)
		return
	}
	defer end()
	slots, what := at.joinSlots, "redemptions"
	if q.Kind == kindRenew {
		slots, what = at.renewSlots, "renewals"
	}
	wait := time.NewTimer(at.slotWait())
	defer wait.Stop()
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	case <-wait.C:
		at.refuseJoin(s, remote, fmt.Errorf("%w: %d %s being served, try again", ErrBusy, cap(slots), what))
		return
	case <-at.ctx.Done():
		_ = s.Reset()
		return
	}
	ctx, cancel := context.WithTimeout(at.ctx, at.joinServeTimeout())
	defer cancel()
	reply := at.serveJoin(ctx, q)
	if _, err := s.Write(reply); err != nil {
		at.a.log.Debug("join reply", "peer", remote, "err", err)
	}
}

// refuseJoin answers a join stream with err (not read further).
func (at *attachment) refuseJoin(s network.Stream, remote peer.ID, err error) {
	at.a.log.Debug("join request refused", "peer", remote, "err", err)
	_ = s.SetWriteDeadline(time.Now().Add(at.joinReadTimeout()))
	_, _ = s.Write(encodeReply(err))
}

// joinReadTimeout is how long a join request may take to arrive.
func (at *attachment) joinReadTimeout() time.Duration { return at.a.cfg.Timeout / 2 }

// slotWait is how long a request waits for a slot.
func (at *attachment) slotWait() time.Duration { return at.a.cfg.Timeout }

// joinServeTimeout bounds the serving of a request (forwarded up the tree).
func (at *attachment) joinServeTimeout() time.Duration { return 3 * at.a.cfg.Timeout }

// serveJoin answers q: issued here, or forwarded to the first parent that
// answers.
func (at *attachment) serveJoin(ctx context.Context, q joinRequest) []byte {
	a := at.a
	if iss := a.issuer(); iss != nil {
		var cert []byte
		var err error
		now := a.cfg.Now()
		if q.Kind == kindRedeem {
			cert, err = iss.Redeem(string(q.Payload), q.Subject, now)
		} else {
			cert, err = iss.Renew(q.Payload, q.Subject, now)
		}
		if err != nil {
			a.log.Warn("join refused", "subject", q.Subject, "err", err)
			return encodeReply(err)
		}
		a.log.Info("certificate issued", "subject", q.Subject, "renewal", q.Kind == kindRenew)
		a.mu.Lock()
		defer a.mu.Unlock()
		return encodeJoinReply(joinReply{GridKey: a.pub, Cert: cert, Revocations: a.revB})
	}
	var up []peer.ID
	if a.cfg.Up != nil {
		up = a.cfg.Up()
	}
	if len(up) == 0 {
		return encodeReply(fmt.Errorf("this node is neither the grid's root nor connected to a parent"))
	}
	var last error
	for _, p := range up {
		b, err := at.call(ctx, p, q)
		if err == nil {
			return b
		}
		last = err
	}
	return encodeReply(fmt.Errorf("forwarding up the tree: %w", last))
}

// call sends q to p and returns its reply's bytes (a join reply or a
// refusal).
func (at *attachment) call(ctx context.Context, p peer.ID, q joinRequest) ([]byte, error) {
	s, err := at.inner.NewStream(ctx, p, JoinProto)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	if _, err := s.Write(encodeJoin(q)); err != nil {
		_ = s.Reset()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	_ = s.CloseWrite()
	b, err := readAll(s, maxJoinReply)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return b, nil
}

// Join redeems a join token through peer to (the parent, or the root
// itself; it must be reachable: its addresses in the peerstore) and
// returns the material it yields, checked: a certificate for this node,
// signed by the grid key the token names. The caller keeps it and
// installs it (SetMaterial). Requires Wrap.
func (a *Admission) Join(ctx context.Context, to peer.AddrInfo, token string) (Material, error) {
	tok, err := grid.ParseToken(token)
	if err != nil {
		return Material{}, fmt.Errorf("--join: %w", err)
	}
	at := a.attachment()
	if err := at.inner.Connect(ctx, to); err != nil {
		return Material{}, fmt.Errorf("join through %s: %w", to.ID, err)
	}
	return at.ask(ctx, to.ID, joinRequest{Kind: kindRedeem, Subject: at.inner.ID(), Payload: []byte(token)}, tok.GridKey)
}

// ask sends q to p, and checks the reply's material for this node in the
// grid of key pub.
func (at *attachment) ask(ctx context.Context, p peer.ID, q joinRequest, pub []byte) (Material, error) {
	b, err := at.call(ctx, p, q)
	if err != nil {
		return Material{}, err
	}
	rep, err := decodeJoinReply(b)
	if err != nil {
		return Material{}, fmt.Errorf("%s: %w", p, err)
	}
	if string(rep.GridKey) != string(pub) {
		return Material{}, fmt.Errorf("%s answered for another grid (%s)", p, grid.IDOf(rep.GridKey))
	}
	c, err := grid.DecodeCert(rep.Cert, rep.GridKey)
	if err != nil {
		return Material{}, fmt.Errorf("%s: certificate issued: %w", p, err)
	}
	if c.Peer != at.inner.ID() {
		return Material{}, fmt.Errorf("%s: certificate issued for %s, not this node", p, c.Peer)
	}
	return Material{GridKey: rep.GridKey, Cert: rep.Cert, Revocations: rep.Revocations}, nil
}

// RenewDue reports whether certificate c should be renewed at now: once
// two thirds of its life have passed.
func RenewDue(c grid.Cert, now time.Time) bool {
	life := c.NotAfter - c.NotBefore
	return now.Unix() >= c.NotBefore+life*2/3
}

// Renew obtains a fresh certificate for this node (from the Issuer at the
// root, else up the tree), installs it, sends it to every connected peer,
// and returns it for the caller to keep.
func (a *Admission) Renew(ctx context.Context) ([]byte, error) {
	a.mu.Lock()
	pub, cert := a.pub, a.cert
	a.mu.Unlock()
	if cert == nil {
		return nil, fmt.Errorf("renew: this node has no certificate")
	}
	at := a.attachment()
	var m Material
	var err error
	if iss := a.issuer(); iss != nil {
		var b []byte
		if b, err = iss.Renew(cert, at.inner.ID(), a.cfg.Now()); err == nil {
			m = Material{GridKey: pub, Cert: b}
		}
	} else {
		err = fmt.Errorf("no parent to renew through")
		q := joinRequest{Kind: kindRenew, Subject: at.inner.ID(), Payload: cert}
		var up []peer.ID
		if a.cfg.Up != nil {
			up = a.cfg.Up()
		}
		for _, p := range up {
			if m, err = at.ask(ctx, p, q, pub); err == nil {
				break
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("renew certificate: %w", err)
	}
	if err := a.SetMaterial(m); err != nil {
		return nil, err
	}
	return m.Cert, nil
}

func (a *Admission) attachment() *attachment {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.attached == nil {
		panic("member: Admission used before Wrap")
	}
	return a.attached
}

// SetIssuer makes this node the one that issues certificates (the root,
// once it holds the grid key).
func (a *Admission) SetIssuer(iss Issuer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cfg.Issuer = iss
}

func (a *Admission) issuer() Issuer {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg.Issuer
}
