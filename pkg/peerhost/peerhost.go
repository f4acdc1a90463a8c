// Package peerhost builds the libp2p host every omst node runs: a persisted
// identity, TCP (TLS + yamux) and QUIC listeners on the given addresses,
// relay, NAT port mapping and public bootstrap off.
//
// New is the one place where connections are admitted: Options.Gater is
// consulted for every inbound and outbound connection, so a membership
// check (a later feature) plugs in here and covers both transports.
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
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	libp2pquic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
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

// Options configures New.
type Options struct {
	// Key is the node's identity. Use LoadOrCreateKey to persist it.
	Key crypto.PrivKey
	// Listen holds multiaddrs to listen on; empty means DefaultListen().
	Listen []string
	// Gater, when non-nil, admits or refuses every connection.
	Gater connmgr.ConnectionGater
}

// New starts a libp2p host listening on opts.Listen. It fails, naming the
// address, if an address is malformed or cannot be bound.
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
	// omst nodes are few and trusted to behave; the transfer path needs
	// large stream windows, which the default autoscaled limits can starve.
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(rcmgr.InfiniteLimits))
	if err != nil {
		return nil, fmt.Errorf("resource manager: %w", err)
	}
	o := []libp2p.Option{
		libp2p.Identity(opts.Key),
		libp2p.ListenAddrs(addrs...),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Transport(libp2pquic.NewTransport),
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.DisableRelay(),
		libp2p.ResourceManager(rm),
		libp2p.UserAgent("omst"),
	}
	if opts.Gater != nil {
		o = append(o, libp2p.ConnectionGater(opts.Gater))
	}
	h, err := libp2p.New(o...)
	if err != nil {
		return nil, fmt.Errorf("start libp2p host on %v: %w", listen, err)
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
