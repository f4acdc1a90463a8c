package peerhost

import (
	"context"
	"errors"
	"io"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/member"
)

// newMemberHost starts a host of New on loopback (TCP) with an Admission
// of grid k whose certificate is the peer's own; timeout is the
// admission's.
func newMemberHost(t *testing.T, k grid.Key, name string, timeout time.Duration) (host.Host, *member.Admission) {
	t.Helper()
	key, err := LoadOrCreateKey(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(key)
	now := time.Now()
	cert, err := k.Issue(grid.Cert{Peer: id, Role: grid.RoleWorker, Prefixes: []string{"w/"}, NotBefore: now.Add(-time.Minute).Unix(), NotAfter: now.Add(time.Hour).Unix(), Serial: uint64(now.UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := member.New(member.Config{Timeout: timeout}, member.Material{GridKey: k.Public(), Cert: cert})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Key: key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Admission: adm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, adm
}

// openWaiting opens n streams of proto from a to b at once, each sending
// a byte; it counts those b refused for a resource limit and those still
// open (unanswered) after wait. Any other failure fails the test.
func openWaiting(t *testing.T, a host.Host, b peer.ID, proto protocol.ID, n int, wait time.Duration) (open []network.Stream, refused int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			s, err := a.NewStream(ctx, b, proto)
			if err == nil {
				_ = s.SetReadDeadline(time.Now().Add(wait))
				if _, err = s.Write([]byte{1}); err == nil {
					_, err = io.ReadFull(s, make([]byte, 1))
				}
			}
			var se *network.StreamError
			mu.Lock()
			defer mu.Unlock()
			switch {
			case isTimeout(err): // still waiting for its admission
				open = append(open, s)
			case errors.As(err, &se) && se.Remote && se.ErrorCode == network.StreamResourceLimitExceeded:
				refused++
				s.Reset()
			default:
				if s != nil {
					s.Reset()
				}
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("stream of %s: %v", proto, err)
	}
	return open, refused
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// A peer that is not admitted gets UnadmittedStreamsInbound streams and
// UnadmittedMemory at most; an admitted member, on the same host, hundreds.
func TestUnadmittedPeerLimits(t *testing.T) {
	k, err := grid.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	const proto = protocol.ID("/omst/fetch/1.2.0")
	n, nadm := newMemberHost(t, k, "node", 10*time.Second) // long: the outsider stays connected
	n.SetStreamHandler(proto, echoAndHold)                 // served to members only
	outsider := newLoopbackHost(t, "outsider")
	m, _ := newMemberHost(t, k, "member", 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, h := range []host.Host{outsider, m} {
		if err := h.Connect(ctx, peer.AddrInfo{ID: n.ID(), Addrs: n.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}

	const many = 40
	waiting, refused := openWaiting(t, outsider, n.ID(), proto, many, 1500*time.Millisecond)
	if len(waiting) > UnadmittedStreamsInbound || refused < many-UnadmittedStreamsInbound {
		t.Fatalf("outsider: %d streams held open, %d refused; want at most %d held, the rest refused", len(waiting), refused, UnadmittedStreamsInbound)
	}
	view := func(p peer.ID) (st network.ScopeStat) {
		_ = n.Network().ResourceManager().ViewPeer(p, func(s network.PeerScope) error { st = s.Stat(); return nil })
		return st
	}
	if st := view(outsider.ID()); st.NumStreamsInbound > UnadmittedStreamsInbound || st.Memory > UnadmittedMemory {
		t.Fatalf("outsider's scope %+v", st)
	}
	for _, s := range waiting {
		s.Reset()
	}

	for deadline := time.Now().Add(5 * time.Second); !nadm.Member(m.ID()); {
		if time.Now().After(deadline) {
			t.Fatal("the member was not admitted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	held, refused := holdStreams(t, m, n.ID(), proto, 300)
	if refused != 0 || len(held) != 300 {
		t.Fatalf("member: %d streams admitted, %d refused; want all 300", len(held), refused)
	}
	if st := view(m.ID()); st.NumStreamsInbound < 300 || st.Memory <= UnadmittedMemory {
		t.Fatalf("member's scope %+v: want 300 streams and more memory than an outsider's bound", st)
	}
	for _, s := range held {
		s.Reset()
	}
}

// The limiter's per-peer limits follow the peer's admission, asked on
// every call (the resource manager keeps the Limit a scope was made with).
func TestLimiterFollowsAdmission(t *testing.T) {
	var mu sync.Mutex
	admitted := false
	l := NewLimiter(func(peer.ID) bool { mu.Lock(); defer mu.Unlock(); return admitted })
	pl := l.GetPeerLimits("p")
	if pl.GetStreamLimit(network.DirInbound) != UnadmittedStreamsInbound || pl.GetMemoryLimit() != UnadmittedMemory ||
		pl.GetConnLimit(network.DirInbound) != UnadmittedConnsInbound {
		t.Fatalf("a peer not admitted: streams %d, memory %d, conns %d", pl.GetStreamLimit(network.DirInbound), pl.GetMemoryLimit(), pl.GetConnLimit(network.DirInbound))
	}
	mu.Lock()
	admitted = true
	mu.Unlock()
	if pl.GetStreamLimit(network.DirInbound) != PeerInboundStreams || pl.GetConnLimit(network.DirInbound) != PeerInboundConns ||
		pl.GetMemoryLimit() != math.MaxInt64 {
		t.Fatalf("admitted: streams %d, conns %d, memory %d", pl.GetStreamLimit(network.DirInbound), pl.GetConnLimit(network.DirInbound), pl.GetMemoryLimit())
	}
	if l.GetProtocolPeerLimits(KadProtocol).GetStreamLimit(network.DirInbound) != KadInboundStreamsPerPeer {
		t.Fatal("the other limits are not Limits'")
	}
}
