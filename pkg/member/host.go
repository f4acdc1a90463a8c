package member

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
	msmux "github.com/multiformats/go-multistream"
)

// Protocols.
const (
	// HelloProto carries each side's certificate right after connect.
	HelloProto protocol.ID = "/omst/member/1.0.0"
	// JoinProto redeems join tokens and renews certificates; the one
	// protocol served to peers that are not (yet) members.
	JoinProto protocol.ID = "/omst/join/1.0.0"
)

// attachment is an Admission bound to its host.
type attachment struct {
	a     *Admission
	inner host.Host
	ctx   context.Context
	stop  context.CancelFunc
	// joinSlots and renewSlots bound the redemptions and the renewals
	// served at once (JoinSlots, RenewSlots).
	joinSlots, renewSlots chan struct{}

	joinMu sync.Mutex
	// joinStreams counts the open join streams per asking peer.
	joinStreams map[peer.ID]int
	// inJoin counts the requests per asking peer that were read and are
	// being served (or wait for a slot): its connection is not closed
	// for want of a certificate meanwhile (see deadline).
	inJoin map[peer.ID]int
	// inflight holds the subjects a request is being served for.
	inflight map[peer.ID]bool
	// rate limits the requests per subject.
	rate *joinRate
}

func (at *attachment) joining(p peer.ID) bool {
	at.joinMu.Lock()
	defer at.joinMu.Unlock()
	return at.inJoin[p] > 0
}

// openJoin admits a join stream from remote: one at a time from a peer
// that is not an admitted member, MemberJoinStreams from a member. It
// returns the function that closes it.
func (at *attachment) openJoin(remote peer.ID, member bool) (func(), error) {
	limit := 1
	if member {
		limit = MemberJoinStreams
	}
	at.joinMu.Lock()
	defer at.joinMu.Unlock()
	if at.joinStreams[remote] >= limit {
		if limit == 1 {
			return nil, fmt.Errorf("%w: one join request at a time per peer", ErrBusy)
		}
		return nil, fmt.Errorf("%w: %d join requests at once from %s", ErrBusy, limit, remote)
	}
	at.joinStreams[remote]++
	return func() {
		at.joinMu.Lock()
		defer at.joinMu.Unlock()
		if at.joinStreams[remote]--; at.joinStreams[remote] <= 0 {
			delete(at.joinStreams, remote)
		}
	}, nil
}

// beginJoin starts serving a request of remote for subject at now: within
// the subject's rate, and none other for it being served. It returns the
// function that ends it.
func (at *attachment) beginJoin(remote, subject peer.ID, now time.Time) (func(), error) {
	at.joinMu.Lock()
	defer at.joinMu.Unlock()
	if at.inflight[subject] {
		return nil, fmt.Errorf("%w: a request for %s is being served", ErrBusy, subject)
	}
	if ok, wait := at.rate.allow(subject, now); !ok {
		return nil, fmt.Errorf("%w: too many requests for %s (%d, then one per %v): try again in %v", ErrBusy, subject, JoinBurst, JoinEvery, wait.Round(time.Second))
	}
	at.inflight[subject] = true
	at.inJoin[remote]++
	return func() {
		at.joinMu.Lock()
		defer at.joinMu.Unlock()
		delete(at.inflight, subject)
		if at.inJoin[remote]--; at.inJoin[remote] <= 0 {
			delete(at.inJoin, remote)
		}
	}, nil
}

// Wrap binds a to h: it serves HELLO and JOIN on h, sends this node's
// HELLO on every new connection, closes connections whose peer is not
// admitted within the timeout, and returns h wrapped so that handlers set
// and streams opened through it serve and ask admitted members only. Use
// the returned host everywhere; Close it to close h. a must also be h's
// connection gater (Gater) for revoked peers to be refused at the door.
func Wrap(h host.Host, a *Admission) host.Host {
	ctx, stop := context.WithCancel(context.Background())
	at := &attachment{a: a, inner: h, ctx: ctx, stop: stop,
		joinSlots: make(chan struct{}, JoinSlots), renewSlots: make(chan struct{}, RenewSlots),
		joinStreams: map[peer.ID]int{}, inJoin: map[peer.ID]int{}, inflight: map[peer.ID]bool{},
		rate: newJoinRate(JoinBurst, JoinEvery, maxRateEntries)}
	a.mu.Lock()
	a.attached = at
	a.mu.Unlock()
	h.SetStreamHandler(HelloProto, at.handleHello)
	h.SetStreamHandler(JoinProto, at.handleJoin)
	h.Network().Notify(&network.NotifyBundle{ConnectedF: at.connected, DisconnectedF: at.disconnected})
	go at.sweep()
	return &gated{Host: h, at: at}
}

// connected starts the exchange on a new connection (when closed to
// outsiders): our HELLO, and the deadline for theirs.
func (at *attachment) connected(_ network.Network, c network.Conn) {
	if at.a.Open() {
		return
	}
	p := c.RemotePeer()
	at.a.expect(p)
	go at.sendHello(p)
	at.deadline(c)
}

func (at *attachment) disconnected(n network.Network, c network.Conn) {
	if n.Connectedness(c.RemotePeer()) != network.Connected {
		at.a.forget(c.RemotePeer())
	}
}

// deadline closes c if its peer is not admitted within the timeout. A
// join request of the peer's being served (read, and waiting for its
// answer) holds it open, but not beyond maxUnadmitted after it was opened.
func (at *attachment) deadline(c network.Conn) {
	time.AfterFunc(at.a.cfg.Timeout, func() {
		if c.IsClosed() || at.a.Admitted(c.RemotePeer()) {
			return
		}
		if at.joining(c.RemotePeer()) && time.Since(c.Stat().Opened) < at.maxUnadmitted() {
			at.deadline(c) // its join is being served: wait for its answer
			return
		}
		_, _, err := at.a.admitted(c.RemotePeer())
		if err == nil {
			at.a.count(func(s *Stats) { s.Unshown++ })
			err = fmt.Errorf("no certificate shown within %v", at.a.cfg.Timeout)
		}
		at.a.log.Warn("disconnecting a peer that is not a member", "peer", c.RemotePeer(), "addr", c.RemoteMultiaddr(), "err", err)
		at.a.shun(c.RemotePeer())
		_ = c.Close()
	})
}

// maxUnadmitted is the longest a connection of a peer that is not admitted
// stays open, 6 timeouts: more than a join of its takes to be read (half
// the timeout), wait for a slot (the timeout) and be served (three), with
// the timeout before and after (its HELLO with the new certificate).
func (at *attachment) maxUnadmitted() time.Duration { return 6 * at.a.cfg.Timeout }

// helloAll sends this node's HELLO to every connected peer; with
// deadlines, each connection must also see the peer admitted in time (the
// node was just closed to outsiders).
func (at *attachment) helloAll(deadlines bool) {
	for _, p := range at.inner.Network().Peers() {
		go at.sendHello(p)
		if deadlines {
			for _, c := range at.inner.Network().ConnsToPeer(p) {
				at.deadline(c)
			}
		}
	}
}

// helloAllBut sends this node's HELLO to every connected peer but those
// in skip.
func (at *attachment) helloAllBut(skip []peer.ID) {
	for _, p := range at.inner.Network().Peers() {
		if !slices.Contains(skip, p) {
			go at.sendHello(p)
		}
	}
}

// sendHello sends this node's certificate and revocation list to p and
// reads its answer; a refusal is logged (it says why this node is not let
// in there).
//
// It does not wait for identify, as the host's NewStream does (a round
// trip after the connection is up): the stream is opened on the network
// and HelloProto proposed optimistically, its first bytes going out with
// the certificate. A peer that does not speak it (a libp2p node that is
// not omst) just fails the stream.
func (at *attachment) sendHello(p peer.ID) {
	defer at.a.heardFrom(p)
	ctx, cancel := context.WithTimeout(at.ctx, at.a.cfg.Timeout)
	defer cancel()
	ns, err := at.inner.Network().NewStream(network.WithNoDial(ctx, "hello"), p)
	if err != nil {
		at.a.log.Debug("membership hello", "peer", p, "err", err)
		return
	}
	if err := ns.SetProtocol(HelloProto); err != nil {
		_ = ns.Reset()
		return
	}
	s := msmux.NewMSSelect(ns, HelloProto)
	defer s.Close()
	_ = ns.SetDeadline(time.Now().Add(at.a.cfg.Timeout))
	if _, err := s.Write(encodeHello(at.a.hello())); err != nil {
		_ = ns.Reset()
		return
	}
	_ = ns.CloseWrite()
	b, err := readAll(s, 2+1+MaxMessage)
	if err == nil {
		err = decodeReply(b)
	}
	if errors.Is(err, ErrRefused) {
		at.a.log.Warn("a peer refused this node's membership", "peer", p, "err", err)
		at.a.noteRefusal(p, err)
	}
}

// handleHello admits (or refuses) the sender of a HELLO and adopts a
// newer revocation list it carries.
func (at *attachment) handleHello(s network.Stream) {
	defer s.Close()
	p := s.Conn().RemotePeer()
	_ = s.SetDeadline(time.Now().Add(at.a.cfg.Timeout))
	b, err := readAll(s, maxHello)
	var h hello
	if err == nil {
		h, err = decodeHello(b)
	}
	if err != nil {
		at.a.log.Warn("bad membership hello", "peer", p, "err", err)
		_ = s.Reset()
		return
	}
	err = at.a.admit(p, h.Cert)
	_, _ = s.Write(encodeReply(err))
	if err != nil {
		at.a.log.Warn("refused a peer's certificate", "peer", p, "err", err)
		return
	}
	if h.Revocations != nil {
		if _, err := at.a.AdoptRevocations(h.Revocations); err != nil {
			at.a.log.Warn("bad revocation list from a member", "peer", p, "err", err)
		}
	}
}

// cutOff closes every connection to p.
func (at *attachment) cutOff(p peer.ID) {
	for _, c := range at.inner.Network().ConnsToPeer(p) {
		_ = c.Close()
	}
}

// sweep closes, every few seconds, connections of peers whose certificate
// expired or was revoked (Wait re-checks on every stream; this frees the
// connections of peers that open none).
func (at *attachment) sweep() {
	t := time.NewTicker(at.a.cfg.Timeout)
	defer t.Stop()
	for {
		select {
		case <-at.ctx.Done():
			return
		case <-t.C:
		}
		if at.a.Open() {
			continue
		}
		for _, p := range at.inner.Network().Peers() {
			at.a.mu.Lock()
			st := at.a.peers[p]
			was := st != nil && st.admitted
			at.a.mu.Unlock()
			if was && !at.a.Admitted(p) {
				at.a.log.Warn("disconnecting a peer whose certificate no longer holds", "peer", p)
				at.cutOff(p)
			}
		}
	}
}

// gated is a host that serves and asks admitted members only.
type gated struct {
	host.Host
	at *attachment
}

// guard wraps a stream handler: the stream is served once its peer is
// admitted, reset otherwise.
func (g *gated) guard(h network.StreamHandler) network.StreamHandler {
	return func(s network.Stream) {
		if err := g.at.a.Wait(g.at.ctx.Done(), s.Conn().RemotePeer()); err != nil {
			g.at.a.count(func(st *Stats) { st.Denied++ })
			g.at.a.log.Debug("stream refused", "protocol", s.Protocol(), "err", err)
			_ = s.Reset()
			return
		}
		h(s)
	}
}

func (g *gated) SetStreamHandler(pid protocol.ID, h network.StreamHandler) {
	g.Host.SetStreamHandler(pid, g.guard(h))
}

func (g *gated) SetStreamHandlerMatch(pid protocol.ID, m func(protocol.ID) bool, h network.StreamHandler) {
	g.Host.SetStreamHandlerMatch(pid, m, g.guard(h))
}

// NewStream opens a stream once p is admitted (connecting first if
// needed), and p has answered this node's HELLO: a peer that is not a
// member is asked nothing, not even a name, and a member is not sent
// streams before it has admitted this node.
func (g *gated) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	if why := g.at.a.openRefusal(p); why != "" {
		return nil, fmt.Errorf("%s: %w", why, ErrNotMember)
	}
	if !g.at.a.Admitted(p) {
		if g.at.a.Shunned(p) {
			return nil, fmt.Errorf("peer %s showed no valid membership certificate on its last connection (not asked again for %v): %w", p, ShunFor, ErrNotMember)
		}
		if err := g.Host.Connect(ctx, peer.AddrInfo{ID: p}); err != nil {
			g.at.a.forget(p) // no connection, so no disconnect event will drop its state
			return nil, g.at.a.explain(p, err)
		}
		if err := g.at.a.Wait(ctx.Done(), p); err != nil {
			return nil, err
		}
	}
	g.at.a.waitHeard(ctx.Done(), p)
	s, err := g.Host.NewStream(ctx, p, pids...)
	if err != nil {
		return nil, g.at.a.explain(p, err)
	}
	return s, nil
}

// Connect is the host's, with a failure explained when membership is the
// likely cause (see Admission.explain).
func (g *gated) Connect(ctx context.Context, ai peer.AddrInfo) error {
	if err := g.Host.Connect(ctx, ai); err != nil {
		return g.at.a.explain(ai.ID, err)
	}
	return nil
}

func (g *gated) Close() error {
	g.at.stop()
	return g.Host.Close()
}

// Gater returns a's connection gater: it refuses, at dial and after the
// security handshake, peers that showed a revoked certificate in the last
// ShunFor (see Revoked). Everyone else gets in and must show a
// certificate (HELLO).
func (a *Admission) Gater() *Gater { return &Gater{a: a} }

// Gater is a libp2p ConnectionGater backed by an Admission.
type Gater struct{ a *Admission }

// InterceptPeerDial refuses to dial peers that showed a revoked
// certificate (Revoked), or were disconnected for showing no valid
// certificate, less than ShunFor ago.
func (g *Gater) InterceptPeerDial(p peer.ID) bool { return !g.a.Revoked(p) && !g.a.Shunned(p) }

func (g *Gater) InterceptAddrDial(peer.ID, ma.Multiaddr) bool { return true }

func (g *Gater) InterceptAccept(network.ConnMultiaddrs) bool { return true }

func (g *Gater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return !g.a.Revoked(p)
}

func (g *Gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
