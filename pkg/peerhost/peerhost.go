// Package peerhost builds the libp2p host every omst node runs: a persisted
// identity, TCP (TLS + yamux) and QUIC listeners on the given addresses,
// relay, NAT port mapping and public bootstrap off, and resource limits
// that bound what one peer can make the node hold (DHT streams above all)
// while leaving omst's transfer protocols unlimited (see Limits).
//
// New is the one place where connections are admitted: with
// Options.Admission, the host refuses revoked peers at the door, serves
// and asks only peers that showed a valid membership certificate
// (pkg/member), on TCP and QUIC alike, and gives a peer not admitted yet
// a few streams and little memory (UnadmittedLimits).
package peerhost

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	libp2pquic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/omst-project/omst/pkg/member"
)

// DefaultPort is the TCP and UDP (QUIC) port a node listens on when no
// --listen address is given.
const DefaultPort = 4040

// DefaultListen returns the listen addresses used when none are given: all
// IPv4 interfaces, TCP and QUIC, on DefaultPort.
func DefaultListen() []string {
	return []string{
		fmt.Sprintf("/ip4/0.0.0.0/tcp/%d", DefaultPort),
		fmt.Sprintf("/ip4/0.0.0.0/udp/%d/quic-v1", DefaultPort),
	}
}

// KadProtocol is the protocol of omst's private DHT: pkg/dht's Prefix +
// "/kad/1.0.0". It is spelled out here rather than imported: pkg/dht's
// tests build hosts with this package (an import cycle), and the host
// should not pull in kad-dht. pkg/dht's tests check that the two agree.
const KadProtocol protocol.ID = "/omst/kad/1.0.0"

// Resource limits of New's host (see Limits).
const (
	// KadInboundStreamsPerPeer bounds the DHT streams one peer may have
	// open to this node at once. kad-dht (v0.42.2, internal/net
	// message_manager.go) sends all its requests to a peer over one
	// reused stream, serialized by a lock; it opens a second only after
	// resetting the first on an error (or, after repeated errors, one
	// stream per request, closed after the reply), and the receiver
	// resets a stream idle for a minute. So an honest peer holds one
	// inbound stream here, two for a moment while one is torn down: 16
	// leaves 8x that. Each stream is a handler goroutine and a message
	// buffer of the length the peer announces (up to 4 MiB,
	// network.MessageSizeMax, allocated before the bytes arrive), so one
	// peer can make the DHT hold at most 16 goroutines and 64 MiB.
	KadInboundStreamsPerPeer = 16
	// KadInboundStreams bounds the inbound DHT streams of all peers
	// together. One per peer that sent a request in the last minute is
	// the honest load: a blob's provider records go to the same 20
	// closest nodes, so after a broadcast those receive a request from
	// every worker that got the blob. 512 covers sites of hundreds of
	// workers; beyond it a request is refused, the sender retries once
	// and its lookup goes on with other peers.
	KadInboundStreams = 512
	// KadMemoryPerPeer and KadMemory bound the memory reserved in the
	// scope of DHT streams (per peer, and all together). kad-dht reserves
	// none today and yamux charges its windows to the connection, so the
	// stream counts above are what bound a flood's memory; these are a
	// ceiling should a layer start reserving there.
	KadMemoryPerPeer = 64 << 20
	KadMemory        = 512 << 20
	// PeerInboundConns bounds the connections one peer may have open to
	// this node. A peer normally has one (libp2p reuses it), at most a
	// few for a moment (TCP and QUIC dialled at once, simultaneous dials
	// from both ends, a restarted peer's old connection not yet timed
	// out).
	PeerInboundConns = 16
	// PeerInboundStreams bounds the streams, of all protocols, one peer
	// may have open to this node, including those still negotiating
	// their protocol. A child opens 2 fetch streams to its parent, one
	// tree session, a names stream per lookup in flight and one DHT
	// stream; a QUIC connection already holds a peer to 256 concurrent
	// inbound streams. 4096 is far above omst's use and still bounds
	// what a flood of streams on any protocol costs.
	PeerInboundStreams = 4096
)

// Limits of a peer that is not (yet) an admitted member, with
// Options.Admission (see UnadmittedLimits).
const (
	// UnadmittedConnsInbound bounds its connections to this node.
	UnadmittedConnsInbound = 4
	// UnadmittedStreamsInbound bounds the streams it may have open to
	// this node: what a peer on its way in needs (identify, its HELLO, a
	// join), with room for the streams a member opens in the moment
	// before this node has read its HELLO.
	UnadmittedStreamsInbound = 8
	// UnadmittedStreams bounds its streams both ways (this node's HELLO
	// and identify to it among them).
	UnadmittedStreams = 2 * UnadmittedStreamsInbound
	// UnadmittedMemory bounds the memory reserved in its scope. yamux
	// reserves 256 KiB per stream as its SYN arrives, before the stream is
	// counted (and refused beyond the bounds above, which releases it),
	// and closes the whole connection when a reservation fails: this is
	// 64 streams' worth, so that a burst of a member's streams in the
	// moment before its HELLO is read is refused stream by stream, while
	// a flood of more closes an outsider's connection. What an admitted
	// stream may buffer is its window (StreamWindow).
	UnadmittedMemory = 64 * 256 << 10
)

// UnadmittedLimits returns the per-peer limits of a peer that is not an
// admitted member: a few streams and little memory. Once admitted it
// gets the members' (Limits' PeerDefault).
func UnadmittedLimits() rcmgr.BaseLimit {
	return rcmgr.BaseLimit{
		Streams:         UnadmittedStreams,
		StreamsInbound:  UnadmittedStreamsInbound,
		StreamsOutbound: UnadmittedStreams,
		Conns:           UnadmittedConnsInbound + 4,
		ConnsInbound:    UnadmittedConnsInbound,
		ConnsOutbound:   4,
		FD:              UnadmittedConnsInbound + 4,
		Memory:          UnadmittedMemory,
	}
}

// admissionLimiter is a fixed limiter whose per-peer limits depend on the
// peer's admission, asked on every reservation: a peer's scope has
// UnadmittedLimits until the peer is admitted, the members' then, and the
// small ones again if it stops being a member. (The resource manager keeps
// the Limit a peer's scope was made with; this one looks the peer up each
// time.)
type admissionLimiter struct {
	rcmgr.Limiter
	member   func(peer.ID) bool
	outsider rcmgr.BaseLimit
}

// NewLimiter returns the resource manager's limiter: Limits, with the
// per-peer limits of a peer for which member reports false at
// UnadmittedLimits. member is asked on every reservation in the peer's
// scope: it must be cheap and must not call into the host.
func NewLimiter(member func(peer.ID) bool) rcmgr.Limiter {
	return &admissionLimiter{Limiter: rcmgr.NewFixedLimiter(Limits()), member: member, outsider: UnadmittedLimits()}
}

func (l *admissionLimiter) GetPeerLimits(p peer.ID) rcmgr.Limit {
	return &peerLimit{p: p, l: l, members: l.Limiter.GetPeerLimits(p)}
}

// peerLimit is one peer's limits, by its admission now.
type peerLimit struct {
	p       peer.ID
	l       *admissionLimiter
	members rcmgr.Limit
}

func (pl *peerLimit) now() rcmgr.Limit {
	if pl.l.member(pl.p) {
		return pl.members
	}
	return pl.l.outsider
}

func (pl *peerLimit) GetMemoryLimit() int64 { return pl.now().GetMemoryLimit() }

func (pl *peerLimit) GetStreamLimit(d network.Direction) int { return pl.now().GetStreamLimit(d) }

func (pl *peerLimit) GetStreamTotalLimit() int { return pl.now().GetStreamTotalLimit() }

func (pl *peerLimit) GetConnLimit(d network.Direction) int { return pl.now().GetConnLimit(d) }

func (pl *peerLimit) GetConnTotalLimit() int { return pl.now().GetConnTotalLimit() }

func (pl *peerLimit) GetFDLimit() int { return pl.now().GetFDLimit() }

// Limits is the resource manager configuration of New's host. Everything
// omst's own protocols (/omst/fetch, /omst/tree, /omst/names) and the
// system and transient scopes use stays unlimited, as before there were
// limits: the transfer path needs large stream windows, which libp2p's
// autoscaled defaults can starve, and a relay may serve many children.
// What is bounded is what a single peer can make the node hold:
// connections and streams per peer (generously), and the DHT protocol,
// whose handler serves any peer's requests, per peer and in total.
// Outbound streams are not bounded: they are this node's own.
func Limits() rcmgr.ConcreteLimitConfig {
	cfg := rcmgr.PartialLimitConfig{
		PeerDefault: rcmgr.ResourceLimits{
			ConnsInbound:   rcmgr.LimitVal(PeerInboundConns),
			StreamsInbound: rcmgr.LimitVal(PeerInboundStreams),
		},
		Protocol: map[protocol.ID]rcmgr.ResourceLimits{
			KadProtocol: {
				StreamsInbound: rcmgr.LimitVal(KadInboundStreams),
				Memory:         rcmgr.LimitVal64(KadMemory),
			},
		},
		ProtocolPeer: map[protocol.ID]rcmgr.ResourceLimits{
			KadProtocol: {
				StreamsInbound: rcmgr.LimitVal(KadInboundStreamsPerPeer),
				Memory:         rcmgr.LimitVal64(KadMemoryPerPeer),
			},
		},
	}
	// Every limit not set above is taken from InfiniteLimits.
	return cfg.Build(rcmgr.InfiniteLimits)
}

// Options configures New.
type Options struct {
	// Key is the node's identity. Use LoadOrCreateKey to persist it.
	Key crypto.PrivKey
	// Listen holds multiaddrs to listen on; empty means DefaultListen().
	Listen []string
	// Gater, when non-nil, admits or refuses every connection.
	Gater connmgr.ConnectionGater
	// Admission, when non-nil, decides who is a member: it is the
	// connection gater (Gater must then be nil) and New's host is wrapped
	// by member.Wrap.
	Admission *member.Admission
	// Registerer, when non-nil, receives go-libp2p's own metrics (swarm,
	// identify, event bus, resource manager...). When nil, go-libp2p
	// keeps none but its event bus's: no one would read them, and the
	// resource manager's
	// alone took about 1% of a worker's CPU in a broadcast (a gauge
	// updated by label on every stream and connection opened or closed).
	Registerer prometheus.Registerer
}

// New starts a libp2p host listening on opts.Listen. It fails, naming the
// address, if an address is malformed or cannot be bound (every one must
// be: see ErrListen), and names the process holding a port in use.
func New(opts Options) (host.Host, error) {
	if opts.Key == nil {
		return nil, errors.New("peerhost: no identity key")
	}
	listen := opts.Listen
	if len(listen) == 0 {
		listen = DefaultListen()
	}
	addrs := make([]ma.Multiaddr, 0, len(listen))
	for _, s := range listen {
		a, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("listen address %q: %w", s, err)
		}
		addrs = append(addrs, a)
	}
	if err := precheckListen(addrs); err != nil {
		return nil, err
	}
	limiter := rcmgr.NewFixedLimiter(Limits())
	if opts.Admission != nil {
		limiter = NewLimiter(opts.Admission.Member)
	}
	var rmOpts []rcmgr.Option
	if opts.Registerer == nil {
		rmOpts = append(rmOpts, rcmgr.WithMetricsDisabled())
	}
	rm, err := rcmgr.NewResourceManager(limiter, rmOpts...)
	if err != nil {
		return nil, fmt.Errorf("resource manager: %w", err)
	}
	o := []libp2p.Option{
		libp2p.Identity(opts.Key),
		libp2p.ListenAddrs(addrs...),
		// No port reuse for outgoing TCP: two nodes that dial each other
		// in the same moment (heads that find each other in the DHT)
		// otherwise meet in one TCP simultaneous open, where both ends
		// act as the dialer and both handshakes fail; the dial backoff
		// then keeps them apart (measured on the emulated WAN: the
		// head-to-head path failed in 10 of 12 runs). omst needs no NAT
		// hole punching, the one thing reuse is for.
		libp2p.Transport(tcp.NewTCPTransport, tcp.DisableReuseport()),
		libp2p.Transport(libp2pquic.NewTransport),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Muxer(yamux.ID, muxer()),
		libp2p.DisableRelay(),
		libp2p.ResourceManager(rm),
		libp2p.UserAgent("omst"),
	}
	if opts.Registerer != nil {
		o = append(o, libp2p.PrometheusRegisterer(opts.Registerer))
	} else {
		// go-libp2p (v0.51) keeps its event bus's counters even so, in
		// the default registry: a few events per connection.
		o = append(o, libp2p.DisableMetrics())
	}
	switch {
	case opts.Admission != nil && opts.Gater != nil:
		return nil, errors.New("peerhost: both a gater and an admission")
	case opts.Admission != nil:
		o = append(o, libp2p.ConnectionGater(opts.Admission.Gater()))
	case opts.Gater != nil:
		o = append(o, libp2p.ConnectionGater(opts.Gater))
	}
	h, err := libp2p.New(o...)
	if err != nil {
		return nil, fmt.Errorf("start libp2p host on %v: %w", listen, err)
	}
	// libp2p starts if any address could be bound: require them all.
	if err := checkBound(addrs, h.Network().ListenAddresses()); err != nil {
		h.Close()
		return nil, err
	}
	if opts.Admission != nil {
		return member.Wrap(h, opts.Admission), nil
	}
	return h, nil
}

// FullAddrs returns h's listen addresses with /p2p/<ID> appended, each
// usable as another node's --parent.
func FullAddrs(h host.Host) []string {
	info := peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}
	full, err := peer.AddrInfoToP2pAddrs(&info)
	if err != nil {
		return nil
	}
	out := make([]string, len(full))
	for i, a := range full {
		out[i] = a.String()
	}
	return out
}

// ParsePeerAddr parses a multiaddr ending in /p2p/<ID>.
func ParsePeerAddr(s string) (*peer.AddrInfo, error) {
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return nil, fmt.Errorf("peer address %q: %w", s, err)
	}
	info, err := peer.AddrInfoFromP2pAddr(a)
	if err != nil {
		return nil, fmt.Errorf("peer address %q (must end in /p2p/<peer ID>): %w", s, err)
	}
	return info, nil
}

// LoadOrCreateKey reads the Ed25519 identity key at path, creating it (mode
// 0600) on first use.
func LoadOrCreateKey(path string) (crypto.PrivKey, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		k, err := crypto.UnmarshalPrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("identity key %s: %w", path, err)
		}
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("identity key: %w", err)
	}
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return nil, fmt.Errorf("generate identity key: %w", err)
	}
	b, err = crypto.MarshalPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("marshal identity key: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, fmt.Errorf("write identity key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("write identity key: %w", err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	return k, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// StreamWindow is the receive window each new yamux stream grants its
// sender at once (with the stream's first window update), in place of
// yamux's 256 KiB. With 256 KiB a stream carries at most that much per
// round trip until yamux's auto-tuning has doubled it a few times, once
// per window update: on the emulated WAN (100 Mbit/s, 40 ms round trip,
// a 500 KB bandwidth-delay product) a 4 MiB get took 0.66 s, with 1 MiB
// 0.59 s (2 or 4 MiB: the same; docs/benchmarks.md). The window is a
// promise, not an allocation: yamux buffers only what arrives, and a
// handler that does not read stops its peer after 1 MiB per stream (the
// resource manager bounds the streams).
const StreamWindow = 1 << 20

// muxer is go-libp2p's yamux transport (16 MiB windows at most, no
// logging) with StreamWindow as the initial window.
func muxer() *yamux.Transport {
	c := *yamux.DefaultTransport
	c.InitialStreamWindowSize = StreamWindow
	return &c
}
