package bulk

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Conn is an open bulk connection: its bytes (sealed or plain, by Mode)
// and the peer its ticket was issued to.
type Conn struct {
	Peer peer.ID
	Mode Mode
	raw  net.Conn
	rw   io.ReadWriter // raw, or a sealedConn over it
	ctr  *Counters     // nil: not counted
	shut atomic.Bool   // closed (counted once)
}

func newConn(raw net.Conn, p peer.ID, m Mode, key []byte, dialer bool, ctr *Counters) (*Conn, error) {
	c := &Conn{Peer: p, Mode: m, raw: raw, rw: raw, ctr: ctr}
	if m == ModeSealed {
		sc, err := newSealedConn(raw, key, dialer)
		if err != nil {
			return nil, err
		}
		c.rw = sc
	}
	ctr.opened()
	return c, nil
}

func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.rw.Read(p)
	c.ctr.count(c.Mode, false, n)
	return n, err
}

func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.rw.Write(p)
	c.ctr.count(c.Mode, true, n)
	return n, err
}

// uncount takes c off Counters.Open, once.
func (c *Conn) uncount() {
	if !c.shut.Swap(true) {
		c.ctr.closed()
	}
}

// SetWriteDeadline bounds the writes to come.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.raw.SetWriteDeadline(t) }

// SetReadDeadline bounds the reads to come.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.raw.SetReadDeadline(t) }

// Close closes the connection; bytes written before are still sent.
func (c *Conn) Close() error {
	c.uncount()
	return c.raw.Close()
}

// Reset closes the connection at once, discarding what is unsent.
func (c *Conn) Reset() error {
	if tc, ok := c.raw.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.uncount()
	return c.raw.Close()
}

// CanSendFile reports whether SendFile can send on c: a plain connection
// over TCP (a sealed one's bytes are encrypted in user space).
func (c *Conn) CanSendFile() bool {
	_, tcp := c.raw.(*net.TCPConn)
	return tcp && c.Mode == ModePlain
}

// SendFile writes n bytes of f from offset off to c with sendfile(2): from
// the page cache to the socket, not through user space. It moves f's
// offset. Only where CanSendFile; otherwise an error and nothing sent.
// The bytes sent count in Counters as a Write's do.
func (c *Conn) SendFile(f *os.File, off, n int64) (int64, error) {
	tc, tcp := c.raw.(*net.TCPConn)
	if !tcp || c.Mode != ModePlain {
		return 0, fmt.Errorf("bulk: sendfile on a %s connection", c.Mode)
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return 0, fmt.Errorf("bulk: sendfile: %w", err)
	}
	sent, err := tc.ReadFrom(&io.LimitedReader{R: f, N: n})
	c.ctr.count(c.Mode, true, int(sent))
	return sent, err
}

// RemoteAddr is the address of the other end.
func (c *Conn) RemoteAddr() net.Addr { return c.raw.RemoteAddr() }

// ListenerConfig configures Listen. Table, Serve and Policy are needed.
type ListenerConfig struct {
	// Addr is the TCP address to listen at ("host:port"; port 0: any).
	Addr  string
	Table *Table
	// Policy is this node's: ChooseMode decides each grant's mode with it.
	Policy Policy
	// Member reports whether a ticket's peer may still be served (it is
	// an admitted member connected over libp2p); nil: always. It is asked
	// at the hello and once more when the connection is registered as
	// its peer's (ClosePeer closes those of a peer no longer one).
	Member func(peer.ID) bool
	// Serve serves the fetch protocol on an accepted connection until it
	// ends; it owns c (closes it).
	Serve func(c *Conn)
	// Counters, when set, counts the listener's tickets and connections
	// (shared with the node's Dialer).
	Counters *Counters
	// HelloTimeout bounds the wait for a connection's hello (default 5s).
	HelloTimeout time.Duration
	Log          *slog.Logger
}

// maxHandshakes bounds the connections in their hello at once; more are
// closed at once.
const maxHandshakes = 64

// Stats counts what a Listener saw.
type Stats struct {
	Accepted atomic.Uint64 // connections served
	Refused  atomic.Uint64 // connections refused (bad, unknown, expired, replayed ticket; no member; too many)
	Granted  atomic.Uint64 // tickets issued
}

// Listener accepts bulk connections and issues their tickets
// (HandleTickets, on the libp2p session).
type Listener struct {
	cfg   ListenerConfig
	l     net.Listener
	shake chan struct{}
	Stats Stats

	mu     sync.Mutex
	conns  map[net.Conn]peer.ID // "" until the hello is accepted
	closed bool
	wg     sync.WaitGroup
}

// Listen starts a Listener at cfg.Addr.
func Listen(cfg ListenerConfig) (*Listener, error) {
	if cfg.Table == nil || cfg.Serve == nil {
		return nil, errors.New("bulk: listener needs a ticket table and a server")
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 5 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	l, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("bulk: listen at %s: %w", cfg.Addr, err)
	}
	bl := &Listener{cfg: cfg, l: l, shake: make(chan struct{}, maxHandshakes), conns: map[net.Conn]peer.ID{}}
	bl.wg.Go(bl.accept)
	return bl, nil
}

// Port is the port listened at.
func (bl *Listener) Port() uint16 { return uint16(bl.l.Addr().(*net.TCPAddr).Port) }

// Close stops accepting and closes every connection; it returns once
// their handlers have.
func (bl *Listener) Close() error {
	bl.mu.Lock()
	bl.closed = true
	for c := range bl.conns {
		c.Close()
	}
	bl.mu.Unlock()
	err := bl.l.Close()
	bl.wg.Wait()
	return err
}

// Open is the number of connections the listener holds open now (in
// their handshake or served).
func (bl *Listener) Open() int {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	return len(bl.conns)
}

func (bl *Listener) track(c net.Conn, add bool) bool {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	if add {
		if bl.closed {
			return false
		}
		bl.conns[c] = ""
	} else {
		delete(bl.conns, c)
	}
	return true
}

// ClosePeer closes every connection the listener serves to p, and
// reports how many: the caller found that p may no longer be served (its
// libp2p session ended, as a revoked member's does). Requests pending on
// them are dropped; p may open new ones only with new tickets, which a
// peer without a session does not get.
func (bl *Listener) ClosePeer(p peer.ID) int {
	bl.mu.Lock()
	defer bl.mu.Unlock()
	n := 0
	for c, q := range bl.conns {
		if q == p && p != "" {
			c.Close()
			n++
		}
	}
	return n
}

// admit registers c as p's (ClosePeer finds it) and then asks Member
// once more, so that a peer whose session ended between its hello and now
// (ClosePeer called before c was p's) is not served either.
func (bl *Listener) admit(c net.Conn, p peer.ID) error {
	bl.mu.Lock()
	bl.conns[c] = p
	bl.mu.Unlock()
	if bl.cfg.Member != nil && !bl.cfg.Member(p) {
		return fmt.Errorf("%w: %s", ErrNotMember, p)
	}
	return nil
}

func (bl *Listener) accept() {
	for {
		c, err := bl.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			bl.cfg.Log.Warn("bulk: accept", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if !bl.track(c, true) {
			c.Close()
			return
		}
		select {
		case bl.shake <- struct{}{}:
		default:
			bl.Stats.Refused.Add(1)
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = c.Write([]byte{helloBusy})
			c.Close()
			bl.track(c, false)
			continue
		}
		bl.wg.Go(func() {
			defer bl.track(c, false)
			bc, err := bl.handshake(c)
			<-bl.shake
			if err == nil {
				err = bl.admit(c, bc.Peer)
			}
			if err != nil {
				bl.Stats.Refused.Add(1)
				bl.cfg.Log.Info("bulk connection refused", "from", c.RemoteAddr(), "err", err)
				c.Close()
				return
			}
			bl.Stats.Accepted.Add(1)
			bl.cfg.Serve(bc)
		})
	}
}

// handshake reads c's hello, redeems its ticket and answers; nothing is
// served on a connection it refuses.
func (bl *Listener) handshake(c net.Conn) (*Conn, error) {
	_ = c.SetDeadline(time.Now().Add(bl.cfg.HelloTimeout))
	var hello [HelloLen]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	p, m, key, err := bl.redeem(hello[:])
	if err != nil {
		_, _ = c.Write([]byte{refusalCode(err)})
		return nil, err
	}
	if _, err := c.Write([]byte{helloOK}); err != nil {
		return nil, fmt.Errorf("answer hello of %s: %w", p, err)
	}
	_ = c.SetDeadline(time.Time{})
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	return newConn(c, p, m, key, false, bl.cfg.Counters)
}

// redeem checks a hello: its ticket, and that its peer may still be
// served.
func (bl *Listener) redeem(hello []byte) (peer.ID, Mode, []byte, error) {
	id, err := DecodeHello(hello)
	if err != nil {
		return "", 0, nil, err
	}
	p, m, key, err := bl.cfg.Table.Redeem(id)
	if err == nil && bl.cfg.Member != nil && !bl.cfg.Member(p) {
		err = fmt.Errorf("%w: %s", ErrNotMember, p)
	}
	if err != nil {
		bl.cfg.Counters.redeemed(false)
		return "", 0, nil, err
	}
	bl.cfg.Counters.redeemed(true)
	return p, m, key, nil
}

// HandleTickets serves one ticket request on the libp2p session s (whose
// peer the session admitted: a handler set through a member.Wrap'ed host
// is called only for members): the grant, in the mode ChooseMode picks.
func (bl *Listener) HandleTickets(s network.Stream) {
	defer s.Close()
	p := s.Conn().RemotePeer()
	_ = s.SetDeadline(time.Now().Add(bl.cfg.HelloTimeout))
	b := make([]byte, 4+MaxSiteLen)
	n, err := io.ReadAtLeast(s, b[:4], 4)
	if err == nil && int(b[3]) > n-4 {
		var k int
		k, err = io.ReadFull(s, b[n:4+int(b[3])])
		n += k
	}
	if err != nil {
		s.Reset()
		return
	}
	q, err := DecodeTicketRequest(b[:n])
	if err != nil {
		bl.cfg.Log.Info("bulk: bad ticket request", "peer", p, "err", err)
		bl.refuseRequest(s, AppendUnavailable(nil, err.Error()))
		return
	}
	if bl.cfg.Member != nil && !bl.cfg.Member(p) {
		bl.refuseRequest(s, AppendUnavailable(nil, "not an admitted member"))
		return
	}
	if own := bl.cfg.Policy.Site; !SameSite(own, q.Site) {
		bl.refuseRequest(s, AppendUnavailable(nil, fmt.Sprintf("bulk connections only inside site %q (asked from %q)", own, q.Site)))
		return
	}
	m := ChooseMode(bl.cfg.Policy, Policy{TrustedLAN: q.Trusted, Site: q.Site})
	ts, err := bl.cfg.Table.Issue(p, m, q.Count)
	if err != nil {
		bl.refuseRequest(s, AppendUnavailable(nil, err.Error()))
		return
	}
	bl.Stats.Granted.Add(uint64(len(ts)))
	_, _ = s.Write(AppendGrant(nil, Grant{Mode: m, Port: bl.Port(), TTL: bl.cfg.Table.ttl(), Tickets: ts}))
}

// refuseRequest answers a ticket request with b (its UNAVAILABLE), counted.
func (bl *Listener) refuseRequest(s network.Stream, b []byte) {
	bl.cfg.Counters.requestRefused()
	_, _ = s.Write(b)
}
