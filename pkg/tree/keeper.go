package tree

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"
)

// Backoff of the parent keeper between connection attempts.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// BackoffDelay returns the wait before reconnect attempt n (0-based):
// backoffMin doubling up to backoffMax, scaled by jitter in [0.5, 1.5).
func BackoffDelay(n int, jitter float64) time.Duration {
	d := backoffMin
	for i := 0; i < n && d < backoffMax; i++ {
		d *= 2
	}
	d = min(d, backoffMax)
	return time.Duration(float64(d) * (0.5 + jitter))
}

var sessionSeq atomic.Uint64

// switchAfter is the number of failed sessions in a row after which the
// keeper moves on to the next parent (when fallbacks are configured).
const switchAfter = 2

// NextParent decides the keeper's next parent index: after switchAfter
// failures in a row on parent cur of n, the next one (wrapping around),
// else cur. It reports whether it switched.
func NextParent(cur, n, failures int) (int, bool) {
	if n > 1 && failures >= switchAfter {
		return (cur + 1) % n, true
	}
	return cur, false
}

// backToPreferred ends a session on a fallback parent because parent
// index, earlier in the list, can be reached again.
type backToPreferred struct{ index int }

func (b backToPreferred) Error() string {
	return fmt.Sprintf("parent %d of the list is reachable again", b.index)
}

// keepParent keeps one tree session to a parent alive until Close: the
// current parent while it answers, else the next fallback (see NextParent);
// on a fallback, it goes back to an earlier parent once that one can be
// reached again (see Config.RetryPreferred).
func (t *Tree) keepParent() {
	attempt, failures := 0, 0
	for t.ctx.Err() == nil {
		began := time.Now()
		err := t.parentSession()
		t.setConnected(false)
		if t.ctx.Err() != nil {
			return
		}
		if back, ok := errors.AsType[backToPreferred](err); ok {
			t.log.Info("earlier parent reachable again: going back to it", "from", t.parentAddr(),
				"to", addrOf(t.parents[back.index]))
			t.cur.Store(int32(back.index))
			attempt, failures = 0, 0
			continue
		}
		failures++
		if time.Since(began) > 3*t.cfg.Keepalive {
			attempt, failures = 0, 1 // the session was up for a while: start over
		}
		cur := int(t.cur.Load())
		if next, switched := NextParent(cur, len(t.parents), failures); switched {
			t.log.Warn("parent unreachable: switching to the next parent", "from", addrOf(t.parents[cur]),
				"to", addrOf(t.parents[next]), "err", err)
			t.cur.Store(int32(next))
			attempt, failures = 0, 0
			continue
		}
		d := BackoffDelay(attempt, rand.Float64())
		attempt++
		t.log.Info("parent session ended", "parent", t.parentAddr(), "err", err, "retry_in", d)
		select {
		case <-t.ctx.Done():
			return
		case <-time.After(d):
		}
	}
}

func (t *Tree) setConnected(up bool) {
	t.mu.Lock()
	t.connected = up
	t.mu.Unlock()
}

// parentSession runs one session: HELLO, WELCOME, re-announce, keepalive.
func (t *Tree) parentSession() error {
	ctx, cancel := context.WithCancel(t.ctx)
	defer cancel()
	parent := t.parentID()
	// The keeper paces its own attempts (BackoffDelay): past the swarm's
	// dial backoff, which grows to minutes for a peer that was down long.
	if err := t.connect(network.WithForceDirectDial(ctx, "omst: parent keeper"), parent); err != nil {
		return err
	}
	sctx, scancel := context.WithTimeout(ctx, t.cfg.RequestTimeout)
	s, err := t.h.NewStream(sctx, parent, ProtoTree)
	scancel()
	if err != nil {
		return fmt.Errorf("open tree stream to %s: %w", t.describe(parent), err)
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
		return fmt.Errorf("hello to %s: %w", t.describe(parent), err)
	}
	typ, payload, err := readFrame(br)
	if err != nil {
		return fmt.Errorf("welcome from %s: %w", t.describe(parent), err)
	}
	if typ != msgWelcome {
		return fmt.Errorf("welcome from %s: %w", t.describe(parent), malformed("got type 0x%02x", typ))
	}
	psite, err := decodeWelcome(payload)
	if err != nil {
		return fmt.Errorf("welcome from %s: %w", t.describe(parent), err)
	}
	_ = s.SetDeadline(time.Time{})
	t.setConnected(true)
	t.log.Info("connected to parent", "parent", t.parentAddr(), "parent_site", psite)
	t.wg.Go(func() { t.reannounce(ctx) })

	// Reader: every PONG refreshes the deadline; silence for three
	// keepalive intervals ends the session.
	readErr := make(chan error, 1)
	go func() {
		for {
			_ = s.SetReadDeadline(time.Now().Add(3 * t.cfg.Keepalive))
			typ, _, err := readFrame(br)
			if err != nil {
				readErr <- err
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
	if cur := int(t.cur.Load()); cur > 0 && t.cfg.RetryPreferred > 0 {
		pt := time.NewTicker(t.cfg.RetryPreferred)
		defer pt.Stop()
		probeTick = pt.C
	}
	var seq uint64
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			return fmt.Errorf("tree stream to %s: %w", t.describe(parent), err)
		case <-probeTick:
			if !probing {
				probing = true
				cur := int(t.cur.Load())
				t.wg.Go(func() { probed <- t.firstReachable(ctx, cur) })
			}
		case i := <-probed:
			probing = false
			if i >= 0 {
				return backToPreferred{index: i}
			}
		case <-tick.C:
			seq++
			_ = s.SetWriteDeadline(time.Now().Add(t.cfg.Keepalive))
			if _, err := s.Write(appendFrame(nil, msgPing, binary.BigEndian.AppendUint64(nil, seq))); err != nil {
				return fmt.Errorf("ping %s: %w", t.describe(parent), err)
			}
		}
	}
}

// firstReachable returns the index of the first of parents[:n] that a
// connection can be made to now, or -1.
func (t *Tree) firstReachable(ctx context.Context, n int) int {
	for i := range n {
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
	for _, a := range h.Addrs {
		if m, err := ma.NewMultiaddr(a); err == nil {
			t.h.Peerstore().AddAddr(p, m, peerstore.RecentlyConnectedAddrTTL)
		}
	}
	session := sessionSeq.Add(1)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.children[p] = &childInfo{site: h.Site, addrs: h.Addrs, session: session, connected: true}
	t.mu.Unlock()
	t.h.ConnManager().Protect(p, protectTag)
	defer func() {
		t.mu.Lock()
		if c := t.children[p]; c != nil && c.session == session {
			c.connected = false
			t.h.ConnManager().Unprotect(p, protectTag)
		}
		t.mu.Unlock()
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
			if !errors.Is(err, errMalformed) {
				return
			}
			t.notePeerError(p, "tree stream", err)
			return
		}
		if typ != msgPing {
			t.notePeerError(p, "tree stream", malformed("unexpected tree message 0x%02x", typ))
			return
		}
		if _, err := s.Write(appendFrame(nil, msgPong, payload)); err != nil {
			return
		}
	}
}
