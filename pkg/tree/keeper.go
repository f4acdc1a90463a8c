package tree

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/internal/wire"
)

var sessionSeq atomic.Uint64

// backToPreferred ends a session on a fallback parent because parent
// index, earlier in the list, can be reached again.
type backToPreferred struct{ index int }

func (b backToPreferred) Error() string {
	return fmt.Sprintf("parent %d of the list is reachable again", b.index)
}

// keepParent keeps one tree session to a parent alive until Close, as
// ParentChoice decides: the current parent while it answers, else the next
// fallback; on a fallback, back to an earlier parent once that one can be
// reached again (see Config.RetryPreferred).
func (t *Tree) keepParent() {
	pc := NewParentChoice(len(t.parents), 3*t.cfg.Keepalive, t.cfg.RetryPreferred)
	var fails failLog // keeperlog.go
	for t.ctx.Err() == nil {
		t.up.cur.Store(int32(pc.Current()))
		up, err := t.parentSession(pc.ProbeEvery(), pc.Probe())
		t.setConnected(false)
		if t.ctx.Err() != nil {
			return
		}
		from := t.parentAddr()
		if err != nil {
			t.setParentErr(err)
		}
		var a KeeperAction
		if back, ok := errors.AsType[backToPreferred](err); ok {
			a = pc.EarlierReachable(back.index)
		} else if errors.Is(err, ErrRefused) {
			a = pc.SessionRefused(rand.Float64())
		} else {
			a = pc.SessionEnded(up, rand.Float64())
		}
		if up > 0 {
			fails.recovered()
		}
		switch {
		case a.Switched:
			t.log.Warn("changing parent", "from", from, "to", addrOf(t.parents[a.Parent]), "why", a.Reason, "err", err)
		default:
			// The first failure is a warning; the same one again, at each
			// retry, only a debug line until the session comes up.
			lvl, n := fails.level(from, err)
			if n == 1 {
				t.log.Log(t.ctx, lvl, "parent session ended", "parent", from, "err", err, "retry_in", a.Wait,
					"note", "retrying; the same failure again is logged at debug level until the parent is back")
			} else {
				t.log.Log(t.ctx, lvl, "parent session ended", "parent", from, "err", err, "retry_in", a.Wait, "failures", n)
			}
		}
		if a.Wait > 0 {
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(a.Wait):
			}
		}
	}
}

// setParentErr records err as why the last parent session failed, for
// Status: without the "parent ADDR: " that Describe put first (Status
// shows the address beside it).
func (t *Tree) setParentErr(err error) {
	msg := err.Error()
	for i := range t.parents {
		for _, d := range []string{"parent " + addrOf(t.parents[i]) + ": ", "fallback parent " + addrOf(t.parents[i]) + ": "} {
			msg = strings.TrimPrefix(msg, d)
		}
	}
	t.mu.Lock()
	t.parentErr = msg
	t.mu.Unlock()
}

func (t *Tree) setConnected(up bool) {
	t.mu.Lock()
	t.connected = up
	t.mu.Unlock()
}

// parentSession runs one session with the current parent: HELLO, WELCOME,
// re-announce, keepalive; on a fallback it probes the earlier parents of
// probe every probeEvery (0: never). It returns how long the session was
// up (0 if it never came up) and why it ended: an error wrapping
// ErrRefused if the parent refused this node as its child.
func (t *Tree) parentSession(probeEvery time.Duration, probe []int) (time.Duration, error) {
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	var upSince time.Time // set once WELCOME arrived
	ended := func(err error) (time.Duration, error) {
		if upSince.IsZero() {
			return 0, err
		}
		return time.Since(upSince), err
	}
	parent := t.parentID()
	// The keeper paces its own attempts (BackoffDelay): past the swarm's
	// dial backoff, which grows to minutes for a peer that was down long.
	if err := t.connect(network.WithForceDirectDial(ctx, "omst: parent keeper"), parent); err != nil {
		return ended(err)
	}
	sctx, scancel := context.WithTimeout(ctx, t.cfg.RequestTimeout)
	s, err := t.h.NewStream(sctx, parent, ProtoTree, ProtoTree10)
	scancel()
	if err != nil {
		return ended(fmt.Errorf("open tree stream to %s: %w", t.Describe(parent), err))
	}
	defer s.Reset()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()

	var addrs []string
	for _, a := range t.h.Addrs() {
		if len(addrs) < maxAddrs && len(a.String()) <= maxAddrLen {
			addrs = append(addrs, a.String())
		}
	}
	br := bufio.NewReader(s)
	_ = s.SetDeadline(time.Now().Add(t.cfg.RequestTimeout))
	if _, err := s.Write(appendFrame(nil, msgHello, encodeHello(hello{Site: t.cfg.Site, Addrs: addrs}))); err != nil {
		return ended(fmt.Errorf("hello to %s: %w", t.Describe(parent), err))
	}
	typ, payload, err := readFrame(br)
	if err != nil {
		return ended(fmt.Errorf("welcome from %s: %w", t.Describe(parent), err))
	}
	if typ == msgRefused {
		return ended(fmt.Errorf("%s: %w: %s", t.Describe(parent), ErrRefused, decodeRefused(payload)))
	}
	if typ != msgWelcome {
		return ended(fmt.Errorf("welcome from %s: %w", t.Describe(parent), malformed("got type 0x%02x", typ)))
	}
	psite, err := decodeWelcome(payload)
	if err != nil {
		return ended(fmt.Errorf("welcome from %s: %w", t.Describe(parent), err))
	}
	_ = s.SetDeadline(time.Time{})
	upSince = time.Now()
	t.mu.Lock()
	t.parentSite, t.parentSeen = psite, true
	t.mu.Unlock()
	t.setConnected(true)
	t.log.Info("connected to parent", "parent", t.parentAddr(), "parent_site", psite)
	// The rules first: a name withdrawn meanwhile is not announced again.
	t.wg.Go(func() { t.syncRules(ctx); t.reannounce(ctx) })

	// Reader: every PONG refreshes the deadline; silence for three
	// keepalive intervals ends the session.
	readErr := make(chan error, 1)
	go func() {
		for {
			_ = s.SetReadDeadline(time.Now().Add(3 * t.cfg.Keepalive))
			typ, payload, err := readFrame(br)
			if err != nil {
				readErr <- err
				return
			}
			if typ == msgRefused {
				readErr <- fmt.Errorf("%w: %s", ErrRefused, decodeRefused(payload))
				return
			}
			if typ != msgPong {
				readErr <- malformed("unexpected tree message 0x%02x", typ)
				return
			}
		}
	}()
	tick := time.NewTicker(t.cfg.Keepalive)
	defer tick.Stop()
	// On a fallback, probe the earlier parents now and then.
	var probeTick <-chan time.Time
	probed := make(chan int, 1)
	probing := false
	if probeEvery > 0 {
		pt := time.NewTicker(probeEvery)
		defer pt.Stop()
		probeTick = pt.C
	}
	var seq uint64
	for {
		select {
		case <-ctx.Done():
			return ended(ctx.Err())
		case err := <-readErr:
			return ended(fmt.Errorf("tree stream to %s: %w", t.Describe(parent), err))
		case <-probeTick:
			if !probing {
				probing = true
				t.wg.Go(func() { probed <- t.firstReachable(ctx, probe) })
			}
		case i := <-probed:
			probing = false
			if i >= 0 {
				return ended(backToPreferred{index: i})
			}
		case <-tick.C:
			seq++
			_ = s.SetWriteDeadline(time.Now().Add(t.cfg.Keepalive))
			if _, err := s.Write(appendFrame(nil, msgPing, binary.BigEndian.AppendUint64(nil, seq))); err != nil {
				return ended(fmt.Errorf("ping %s: %w", t.Describe(parent), err))
			}
		}
	}
}

// firstReachable returns the first index of probe whose parent a
// connection can be made to now, or -1.
func (t *Tree) firstReachable(ctx context.Context, probe []int) int {
	for _, i := range probe {
		if ctx.Err() != nil {
			return -1
		}
		if err := t.connect(network.WithForceDirectDial(ctx, "omst: earlier parent back?"), t.parents[i].ID); err == nil {
			return i
		}
	}
	return -1
}

// handleTree serves a child's tree stream: it lists the child while the
// stream lives and answers its PINGs.
func (t *Tree) handleTree(s network.Stream) {
	defer s.Reset()
	p := s.Conn().RemotePeer()
	if t.parentIndex(p) >= 0 {
		t.log.Warn("refusing tree stream from one of our own parents", "peer", p)
		return
	}
	br := bufio.NewReader(s)
	_ = s.SetDeadline(time.Now().Add(t.cfg.RequestTimeout))
	typ, payload, err := readFrame(br)
	if err == nil && typ != msgHello {
		err = malformed("first tree message is 0x%02x, not HELLO", typ)
	}
	var h hello
	if err == nil {
		h, err = decodeHello(payload)
	}
	if err != nil {
		t.notePeerError(p, "tree hello", err)
		return
	}
	role, err := t.checkChild(p, h.Site)
	if err != nil {
		t.refuse(s, p, h.Site, err)
		return
	}
	var maddrs []ma.Multiaddr
	for _, a := range h.Addrs {
		if m, err := ma.NewMultiaddr(a); err == nil {
			maddrs = append(maddrs, m)
			t.h.Peerstore().AddAddr(p, m, peerstore.RecentlyConnectedAddrTTL)
		}
	}
	session := sessionSeq.Add(1)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.children[p] = &childInfo{site: h.Site, group: t.groupOf(role, h.Site), role: role, addrs: h.Addrs, maddrs: maddrs, session: session, connected: true}
	t.mu.Unlock()
	t.h.ConnManager().Protect(p, protectTag)
	defer func() {
		t.mu.Lock()
		left := false
		if c := t.children[p]; c != nil && c.session == session {
			c.connected = false
			left = true
			t.h.ConnManager().Unprotect(p, protectTag)
		}
		t.mu.Unlock()
		if left && t.eng != nil {
			t.eng.ChildLeft(p)
		}
		t.log.Info("child left", "child", p, "site", h.Site)
	}()
	t.log.Info("child joined", "child", p, "site", h.Site, "addrs", h.Addrs)
	if _, err := s.Write(appendFrame(nil, msgWelcome, appendString16(nil, t.cfg.Site))); err != nil {
		return
	}
	stop := context.AfterFunc(t.ctx, func() { s.Reset() })
	defer stop()
	for {
		_ = s.SetDeadline(time.Now().Add(3 * t.cfg.Keepalive))
		typ, payload, err := readFrame(br)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) {
				return
			}
			t.notePeerError(p, "tree stream", err)
			return
		}
		if typ != msgPing {
			t.notePeerError(p, "tree stream", malformed("unexpected tree message 0x%02x", typ))
			return
		}
		// Its certificate may have changed (renewed with another role) or
		// lapsed since the HELLO.
		now, err := t.checkChild(p, h.Site)
		if err != nil {
			t.refuse(s, p, h.Site, err)
			return
		}
		if now != role { // still allowed, in another role
			role = now
			t.mu.Lock()
			if c := t.children[p]; c != nil && c.session == session {
				c.role, c.group = role, t.groupOf(role, h.Site)
			}
			t.mu.Unlock()
		}
		if _, err := s.Write(appendFrame(nil, msgPong, payload)); err != nil {
			return
		}
	}
}

// refuse ends a tree stream from p, which claimed site, that may not be a
// child here (why): with a REFUSED saying why on tree 1.1.0 (a 1.0.0 child
// just sees the stream reset).
func (t *Tree) refuse(s network.Stream, p peer.ID, site string, why error) {
	t.refusals.Add(1)
	t.log.Warn("refusing a child", "peer", p, "site", site, "err", why)
	if s.Protocol() != ProtoTree {
		return
	}
	_ = s.SetWriteDeadline(time.Now().Add(t.cfg.Keepalive))
	if _, err := s.Write(refusedFrame(why)); err == nil {
		_ = s.CloseWrite()
		// Give the REFUSED time to go out before the deferred reset.
		_ = s.SetReadDeadline(time.Now().Add(t.cfg.Keepalive))
		_, _ = io.Copy(io.Discard, io.LimitReader(s, 64<<10))
	}
}
