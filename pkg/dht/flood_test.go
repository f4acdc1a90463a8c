package dht

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	pb "github.com/libp2p/go-libp2p-kad-dht/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	"github.com/multiformats/go-multihash"

	"github.com/omst-project/omst/internal/p2ptest"
	"github.com/omst-project/omst/pkg/peerhost"
)

// kadProto is the DHT's protocol; peerhost bounds it under its own copy of
// the name.
const kadProto = protocol.ID(Prefix + "/kad/1.0.0")

func TestPeerhostBoundsTheDHTProtocol(t *testing.T) {
	if peerhost.KadProtocol != kadProto {
		t.Fatalf("peerhost bounds %s, the DHT speaks %s", peerhost.KadProtocol, kadProto)
	}
}

// Parameters of the flood.
const (
	floodFor       = 3 * time.Second
	floodWorkers   = 256 // attacker goroutines, each with a stream open or opening
	holdFor        = 300 * time.Millisecond
	bigMsg         = network.MessageSizeMax // announced by holders; kad allocates it before reading
	probeBound     = 2 * time.Second        // an honest request must complete within this
	honestSlack    = 8                      // honest DHT streams allowed above the baseline during the flood
	heapSlack      = 64 << 20               // live heap allowed above the admitted streams' buffers
	goroutineSlack = 30                     // goroutines allowed above the baseline after the flood
)

// newNodeHost starts a host as omst nodes build it (peerhost.New, with its
// resource limits) on 127.0.0.1.
func newNodeHost(t *testing.T) host.Host {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h, err := peerhost.New(peerhost.Options{Key: k, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// kadFrame is one kad message as kad-dht frames it (a uvarint length, then
// the pb.Message protobuf), built by hand: type (field 1) and key (field 2).
func kadFrame(typ pb.Message_MessageType, key []byte) []byte {
	msg := []byte{0x08, byte(typ), 0x12}
	msg = binary.AppendUvarint(msg, uint64(len(key)))
	msg = append(msg, key...)
	return append(binary.AppendUvarint(nil, uint64(len(msg))), msg...)
}

// readKadFrame reads one framed kad message.
func readKadFrame(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > network.MessageSizeMax {
		return nil, fmt.Errorf("reply of %d bytes", n)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, err
}

func randomKey(t *testing.T, typ pb.Message_MessageType) []byte {
	b := make([]byte, 32)
	rand.Read(b)
	if typ == pb.Message_FIND_NODE {
		return b
	}
	mh, err := multihash.Sum(b, multihash.SHA2_256, -1)
	if err != nil {
		t.Error(err)
	}
	return mh
}

// refusedForLimit reports whether err is the reset a host sends when a
// stream would exceed its resource limits.
func refusedForLimit(err error) bool {
	var se *network.StreamError
	return errors.As(err, &se) && se.Remote && se.ErrorCode == network.StreamResourceLimitExceeded
}

// floodStats counts what the attacker saw.
type floodStats struct {
	opened   atomic.Int64 // streams the attacker opened
	refused  atomic.Int64 // refused by the victim's resource manager
	answered atomic.Int64 // requests the victim answered
	held     atomic.Int64 // big-message streams the victim kept for holdFor
	other    atomic.Int64 // streams that ended otherwise
	mu       sync.Mutex
	firstErr error // the first of those
}

func (st *floodStats) noteOther(err error) {
	st.other.Add(1)
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.firstErr == nil {
		st.firstErr = err
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// flood runs one attacker worker until ctx ends. Even workers flood kad
// requests (FIND_NODE and GET_PROVIDERS for random keys) on a stream as
// fast as the victim answers, opening a new stream whenever one ends; odd
// workers announce a message of bigMsg bytes, send a few and stall, which
// makes the victim's handler allocate the whole message, then reset after
// holdFor.
func flood(ctx context.Context, t *testing.T, attacker host.Host, victim peer.ID, worker int, st *floodStats) {
	for ctx.Err() == nil {
		s, err := attacker.NewStream(ctx, victim, kadProto)
		if err != nil {
			if ctx.Err() == nil {
				st.noteOther(err)
				time.Sleep(time.Millisecond)
			}
			continue
		}
		st.opened.Add(1)
		stop := context.AfterFunc(ctx, func() { s.Reset() })
		r := bufio.NewReader(s)
		if worker%2 == 1 {
			hdr := binary.AppendUvarint(nil, uint64(bigMsg))
			_, err = s.Write(append(hdr, make([]byte, 16)...))
			if err == nil {
				_ = s.SetReadDeadline(time.Now().Add(holdFor))
				_, err = r.ReadByte()
			}
			switch {
			case isTimeout(err):
				st.held.Add(1)
			case refusedForLimit(err):
				st.refused.Add(1)
			case ctx.Err() == nil:
				st.noteOther(err)
			}
		} else {
			for i := 0; ; i++ {
				typ := pb.Message_FIND_NODE
				if i%2 == 1 {
					typ = pb.Message_GET_PROVIDERS
				}
				if _, err = s.Write(kadFrame(typ, randomKey(t, typ))); err == nil {
					_, err = readKadFrame(r)
				}
				if err != nil {
					break
				}
				st.answered.Add(1)
			}
			switch {
			case refusedForLimit(err):
				st.refused.Add(1)
			case ctx.Err() == nil:
				st.noteOther(err)
			}
		}
		stop()
		s.Reset()
	}
}

// kadInbound is the number of inbound DHT streams h's resource manager
// counts, all peers together.
func kadInbound(t *testing.T, h host.Host) int {
	var n int
	err := h.Network().ResourceManager().ViewProtocol(kadProto, func(s network.ProtocolScope) error {
		n = s.Stat().NumStreamsInbound
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	return n
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// probeSteps names what probe does, in its order.
var probeSteps = [...]string{"ping", "GET_PROVIDERS to the victim", "provider lookup"}

// probe does, from honest nodes, what a node does with the victim during
// a flood: a libp2p ping and a GET_PROVIDERS request on a stream of its
// own (from honest), and a whole provider lookup through the DHT (by
// seeker), which asks the victim among others. It adds how long each step
// took to took (the slowest of each), and fails when a step fails or takes
// more than probeBound.
func probe(victim, honest host.Host, seeker *DHT, id cid.Cid, provider peer.ID, took *[len(probeSteps)]time.Duration) error {
	steps := [len(probeSteps)]func(ctx context.Context) error{
		func(ctx context.Context) error {
			return (<-ping.Ping(ctx, honest, victim.ID())).Error
		},
		func(ctx context.Context) error {
			s, err := honest.NewStream(ctx, victim.ID(), kadProto)
			if err != nil {
				return err
			}
			defer s.Reset()
			stop := context.AfterFunc(ctx, func() { s.Reset() })
			defer stop()
			if _, err := s.Write(kadFrame(pb.Message_GET_PROVIDERS, id.Hash())); err != nil {
				return err
			}
			reply, err := readKadFrame(bufio.NewReader(s))
			if err != nil {
				return err
			}
			if !bytes.Contains(reply, []byte(provider)) {
				return fmt.Errorf("the reply (%d bytes) does not name the provider", len(reply))
			}
			return nil
		},
		func(ctx context.Context) error {
			for _, ai := range seeker.Providers(ctx, id, 0) {
				if ai.ID == provider {
					return nil
				}
			}
			return errors.New("provider not found")
		},
	}
	for i, step := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), probeBound+time.Second)
		start := time.Now()
		err := step(ctx)
		d := time.Since(start)
		cancel()
		took[i] = max(took[i], d)
		if err == nil && d > probeBound {
			err = fmt.Errorf("took %v", d)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", probeSteps[i], err)
		}
	}
	return nil
}

// One peer floods a DHT node with hundreds of concurrent streams of kad
// requests and of announced 4 MiB messages for a few seconds. The victim's
// resource manager admits at most peerhost.KadInboundStreamsPerPeer of
// them at once and refuses the rest; honest peers' pings, requests and
// lookups through the victim keep completing within probeBound; the
// victim's live heap stays within what the admitted streams may buffer,
// and its goroutines and DHT streams return to the baseline afterwards.
func TestFloodFromOnePeer(t *testing.T) {
	if testing.Short() {
		t.Skip("floods a DHT node for a few seconds")
	}
	// A DHT of four nodes: the victim, and three honest ones bootstrapped
	// from it. Node 1 provides a blob, whose records the others store.
	var hosts []host.Host
	var dhts []*DHT
	for i := range 4 {
		h := newNodeHost(t)
		c := Config{Host: h}
		if i > 0 {
			c.Bootstrap = []peer.AddrInfo{info(hosts[0])}
		}
		d, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		hosts, dhts = append(hosts, h), append(dhts, d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, d := range dhts {
		for d.RoutingTableSize() < 3 {
			if ctx.Err() != nil {
				t.Fatalf("node %d knows %d DHT peers after 10 s, want 3", i, d.RoutingTableSize())
			}
			if err := d.Refresh(ctx); err != nil {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	victim := hosts[0]
	id := blobID(t, "flood/blob")
	if err := dhts[1].Provide(ctx, id); err != nil {
		t.Fatal(err)
	}
	providersOf(t, dhts[3], id, hosts[1].ID())
	var took [len(probeSteps)]time.Duration
	if err := probe(victim, hosts[2], dhts[3], id, hosts[1].ID(), &took); err != nil {
		t.Fatalf("before the flood: %v", err)
	}

	// The attacker has no limits of its own and is not in the DHT.
	attacker := p2ptest.NewHost(t)
	if err := attacker.Connect(ctx, info(victim)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let identify and the connection settle
	baseGoroutines := runtime.NumGoroutine()
	baseHeap := liveHeap()
	baseKad := kadInbound(t, victim)

	fctx, fcancel := context.WithTimeout(context.Background(), floodFor)
	defer fcancel()
	var st floodStats
	var workers sync.WaitGroup
	for w := range floodWorkers {
		workers.Go(func() { flood(fctx, t, attacker, victim.ID(), w, &st) })
	}

	// While it lasts: sample the victim's DHT streams (often) and live
	// heap (a collection each time, so less often), and probe it from the
	// honest nodes.
	var maxKad atomic.Int64
	var maxHeap atomic.Uint64
	var samplers sync.WaitGroup
	samplers.Go(func() {
		for fctx.Err() == nil {
			if n := int64(kadInbound(t, victim)); n > maxKad.Load() {
				maxKad.Store(n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	})
	samplers.Go(func() {
		for fctx.Err() == nil {
			if h := liveHeap(); h > maxHeap.Load() {
				maxHeap.Store(h)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	probes := 0
	took = [len(probeSteps)]time.Duration{}
	var probeErr error
	for fctx.Err() == nil && probeErr == nil {
		probeErr = probe(victim, hosts[2], dhts[3], id, hosts[1].ID(), &took)
		probes++
		time.Sleep(50 * time.Millisecond)
	}
	fcancel()
	workers.Wait()
	samplers.Wait()

	t.Logf("flood: %d streams opened, %d refused, %d requests answered, %d big messages held, %d other (first: %v); "+
		"victim: at most %d inbound DHT streams (%d before), live heap %d MiB at most (%d before); "+
		"%d probes, slowest %s %v, %s %v, %s %v",
		st.opened.Load(), st.refused.Load(), st.answered.Load(), st.held.Load(), st.other.Load(), st.firstErr,
		maxKad.Load(), baseKad, maxHeap.Load()>>20, baseHeap>>20,
		probes, probeSteps[0], took[0], probeSteps[1], took[1], probeSteps[2], took[2])
	if probeErr != nil {
		t.Errorf("during the flood (probe %d): %v", probes, probeErr)
	}
	// (a) The victim refused the excess, and admitted no more than its
	// limit from the attacker. The count sampled is of all peers: the
	// honest ones hold a stream each (baseKad), plus the probes' streams,
	// which are counted until the victim's handler sees their reset
	// (honestSlack; an unbounded victim holds hundreds). The flood did
	// reach the limit, or the test proves nothing.
	if st.refused.Load() == 0 {
		t.Errorf("the victim refused none of %d streams", st.opened.Load())
	}
	if got, limit := maxKad.Load(), int64(baseKad+peerhost.KadInboundStreamsPerPeer+honestSlack); got > limit {
		t.Errorf("the victim had %d inbound DHT streams open, want at most %d (%d per peer, %d before the flood, %d for the probes)",
			got, limit, peerhost.KadInboundStreamsPerPeer, baseKad, honestSlack)
	}
	if got := maxKad.Load(); got < peerhost.KadInboundStreamsPerPeer {
		t.Errorf("the flood got only %d DHT streams open at once, below the limit: it does not test it", got)
	}
	if st.held.Load() == 0 || st.answered.Load() == 0 {
		t.Errorf("the victim served none of the attacker's %s", map[bool]string{true: "big messages", false: "requests"}[st.held.Load() == 0])
	}
	// (c) The heap held what the admitted streams may buffer, no more
	// (unbounded, every holder's stream would have a 4 MiB buffer).
	if limit := baseHeap + peerhost.KadInboundStreamsPerPeer*bigMsg + heapSlack; maxHeap.Load() > limit {
		t.Errorf("live heap reached %d MiB during the flood, want at most %d MiB", maxHeap.Load()>>20, limit>>20)
	}
	// After the flood the victim's handlers end: goroutines, DHT streams
	// and heap return to the baseline (the attacker stays connected).
	deadline := time.Now().Add(10 * time.Second)
	for {
		g, k, h := runtime.NumGoroutine(), kadInbound(t, victim), liveHeap()
		if g <= baseGoroutines+goroutineSlack && k <= baseKad+1 && h <= baseHeap+heapSlack {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the flood: %d goroutines (%d before), %d inbound DHT streams (%d before), live heap %d MiB (%d before)",
				g, baseGoroutines, k, baseKad, h>>20, baseHeap>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := probe(victim, hosts[2], dhts[3], id, hosts[1].ID(), &took); err != nil {
		t.Fatalf("after the flood: %v", err)
	}
}
