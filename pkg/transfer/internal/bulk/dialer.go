package bulk

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/omst-project/omst/internal/wire"
)

// Dialer opens bulk connections to peers: tickets asked over the libp2p
// session (which must be open), then a TCP connection per ticket to the
// address the session reached the peer at, on the granted port.
type Dialer struct {
	Host   host.Host
	Policy Policy        // this node's
	Dial   time.Duration // bounds the ticket request and each dial (default 2s)
	// Counters, when set, counts the connections opened and their bytes
	// (shared with the node's Listener).
	Counters *Counters
}

// Open opens a bulk connection to p. It fails with an error wrapping
// ErrUnavailable when p serves no bulk path (an older peer, or none
// configured), and otherwise with what failed; the caller then uses
// libp2p streams.
func (d *Dialer) Open(ctx context.Context, p peer.ID) (*Conn, error) {
	g, ip, err := d.tickets(ctx, p, 1)
	if err != nil {
		return nil, err
	}
	return d.connect(ctx, p, ip, g, g.Tickets[0])
}

func (d *Dialer) timeout() time.Duration {
	if d.Dial <= 0 {
		return 2 * time.Second
	}
	return d.Dial
}

// tickets asks p for n tickets over the libp2p session; it returns them
// with the IP the session reached p at.
func (d *Dialer) tickets(ctx context.Context, p peer.ID, n int) (Grant, net.IP, error) {
	var g Grant
	var ip net.IP
	for _, c := range d.Host.Network().ConnsToPeer(p) {
		if a, err := manet.ToIP(c.RemoteMultiaddr()); err == nil {
			ip = a
			break
		}
	}
	if ip == nil {
		return g, nil, fmt.Errorf("%w: no IP connection to %s", ErrUnavailable, p)
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout())
	defer cancel()
	s, err := d.Host.NewStream(ctx, p, ProtoTickets)
	if err != nil {
		return g, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(d.timeout()))
	if _, err := s.Write(AppendTicketRequest(nil, TicketRequest{Count: n, Trusted: d.Policy.TrustedLAN, Site: d.Policy.Site})); err != nil {
		s.Reset()
		return g, nil, fmt.Errorf("ticket request: %w", err)
	}
	_ = s.CloseWrite()
	b, err := io.ReadAll(io.LimitReader(s, maxGrantLen+1))
	if err != nil {
		s.Reset()
		return g, nil, fmt.Errorf("ticket reply: %w", err)
	}
	if len(b) > maxGrantLen {
		return g, nil, wire.Malformed("ticket reply of more than %d bytes", maxGrantLen)
	}
	if g, err = DecodeGrant(b, n); err != nil {
		return g, nil, err
	}
	if g.Mode == ModePlain && ChooseMode(d.Policy, d.Policy) != ModePlain {
		// Our operator did not say the LAN is trusted: a plain grant is
		// the peer's mistake or a lie; take none.
		return g, nil, wire.Malformed("plain bulk grant to a node whose LAN is not trusted")
	}
	return g, ip, nil
}

// connect opens a connection to ip:g.Port with ticket t.
func (d *Dialer) connect(ctx context.Context, p peer.ID, ip net.IP, g Grant, t Ticket) (*Conn, error) {
	nd := net.Dialer{Timeout: d.timeout()}
	addr := net.JoinHostPort(ip.String(), strconv.Itoa(int(g.Port)))
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bulk dial %s: %w", addr, err)
	}
	_ = c.SetDeadline(time.Now().Add(d.timeout()))
	var ans [1]byte
	_, err = c.Write(AppendHello(nil, t.ID))
	if err == nil {
		_, err = io.ReadFull(c, ans[:])
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("bulk hello to %s: %w", addr, err)
	}
	if ans[0] != helloOK {
		c.Close()
		return nil, fmt.Errorf("bulk connection to %s refused: %w", addr, refusalErr(ans[0]))
	}
	_ = c.SetDeadline(time.Time{})
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return newConn(c, p, g.Mode, t.Key, true, d.Counters)
}
