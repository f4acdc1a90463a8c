package peerhost

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
)

// newLoopbackHost starts a host of New on 127.0.0.1 (TCP), closed when the
// test ends.
func newLoopbackHost(t *testing.T, name string) host.Host {
	t.Helper()
	k, err := LoadOrCreateKey(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Key: k, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// holdStreams opens n streams of proto from a to b at once; each sends a
// byte and waits for the handler's echo, which proves the stream was
// admitted. It returns the admitted streams (open until the caller resets
// them) and how many b refused for a resource limit; any other failure
// fails the test.
func holdStreams(t *testing.T, a host.Host, b peer.ID, proto protocol.ID, n int) ([]network.Stream, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var open []network.Stream
	var refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			s, err := a.NewStream(ctx, b, proto)
			if err == nil {
				_ = s.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err = s.Write([]byte{1}); err == nil {
					_, err = io.ReadFull(s, make([]byte, 1))
				}
			}
			var se *network.StreamError
			switch {
			case err == nil:
				mu.Lock()
				open = append(open, s)
				mu.Unlock()
			case errors.As(err, &se) && se.Remote && se.ErrorCode == network.StreamResourceLimitExceeded:
				refused.Add(1)
				if s != nil {
					s.Reset()
				}
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
	return open, int(refused.Load())
}

// echoAndHold answers each stream's byte and keeps the stream open until
// the peer resets it.
func echoAndHold(s network.Stream) {
	defer s.Reset()
	b := make([]byte, 1)
	if _, err := io.ReadFull(s, b); err != nil {
		return
	}
	if _, err := s.Write(b); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, s)
}

// One peer gets at most KadInboundStreamsPerPeer DHT streams at once and
// the rest are refused with a resource-limit reset, while omst's own
// protocols take hundreds of concurrent streams from the same peer; a
// refused peer gets streams again once its others are gone.
func TestPerPeerLimits(t *testing.T) {
	a, b := newLoopbackHost(t, "a"), newLoopbackHost(t, "b")
	fetch := protocol.ID("/omst/fetch/1.2.0")
	b.SetStreamHandler(KadProtocol, echoAndHold)
	b.SetStreamHandler(fetch, echoAndHold)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}

	transfers, refused := holdStreams(t, a, b.ID(), fetch, 300)
	if refused != 0 || len(transfers) != 300 {
		t.Fatalf("fetch: %d streams admitted, %d refused; want all 300 admitted", len(transfers), refused)
	}

	kad, refused := holdStreams(t, a, b.ID(), KadProtocol, 3*KadInboundStreamsPerPeer)
	if len(kad) != KadInboundStreamsPerPeer || refused != 2*KadInboundStreamsPerPeer {
		t.Fatalf("kad: %d streams admitted, %d refused; want %d admitted, the rest refused",
			len(kad), refused, KadInboundStreamsPerPeer)
	}
	for _, s := range append(kad, transfers...) {
		s.Reset()
	}

	// The handler sees the resets and the scope is released: the peer is
	// served again.
	deadline := time.Now().Add(5 * time.Second)
	for {
		again, refused := holdStreams(t, a, b.ID(), KadProtocol, KadInboundStreamsPerPeer)
		for _, s := range again {
			s.Reset()
		}
		if len(again) == KadInboundStreamsPerPeer && refused == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the resets: %d kad streams admitted, %d refused", len(again), refused)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The limits bound the DHT and per-peer admission only: the system,
// transient and every other protocol's scopes stay unlimited, so the
// transfer path's windows are never refused memory.
func TestLimitsLeaveTransfersUnlimited(t *testing.T) {
	cfg := Limits().ToPartialLimitConfig()
	unlimited := func(what string, l rcmgr.ResourceLimits) {
		t.Helper()
		if l.Memory != rcmgr.Unlimited64 || l.Streams != rcmgr.Unlimited || l.StreamsInbound != rcmgr.Unlimited ||
			l.StreamsOutbound != rcmgr.Unlimited || l.Conns != rcmgr.Unlimited || l.FD != rcmgr.Unlimited {
			t.Errorf("%s limits %+v, want unlimited", what, l)
		}
	}
	unlimited("system", cfg.System)
	unlimited("transient", cfg.Transient)
	unlimited("protocol default", cfg.ProtocolDefault)
	unlimited("protocol-peer default", cfg.ProtocolPeerDefault)
	unlimited("stream", cfg.Stream)
	unlimited("conn", cfg.Conn)
	for _, p := range []protocol.ID{"/omst/fetch/1.1.0", "/omst/fetch/1.2.0", "/omst/tree/1.0.0", "/omst/names/1.1.0", "/omst/names/1.2.0"} {
		if _, ok := cfg.Protocol[p]; ok {
			t.Errorf("protocol %s has its own limits", p)
		}
		if _, ok := cfg.ProtocolPeer[p]; ok {
			t.Errorf("protocol %s has its own per-peer limits", p)
		}
	}
	if p := cfg.PeerDefault; p.Memory != rcmgr.Unlimited64 || p.StreamsOutbound != rcmgr.Unlimited ||
		p.StreamsInbound != PeerInboundStreams || p.ConnsInbound != PeerInboundConns {
		t.Errorf("per-peer limits %+v", p)
	}
	if k := cfg.ProtocolPeer[KadProtocol]; k.StreamsInbound != KadInboundStreamsPerPeer || k.Memory != KadMemoryPerPeer ||
		k.StreamsOutbound != rcmgr.Unlimited {
		t.Errorf("kad per-peer limits %+v", k)
	}
	if k := cfg.Protocol[KadProtocol]; k.StreamsInbound != KadInboundStreams || k.Memory != KadMemory {
		t.Errorf("kad limits %+v", k)
	}
}
