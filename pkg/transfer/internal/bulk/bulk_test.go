package bulk

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/p2ptest"
	"github.com/omst-project/omst/internal/wire"
)

func TestWireRoundTrip(t *testing.T) {
	q := TicketRequest{Count: 3, Trusted: true, Site: "siteA"}
	got, err := DecodeTicketRequest(AppendTicketRequest(nil, q))
	if err != nil || got != q {
		t.Fatalf("request: %+v, %v", got, err)
	}
	g := Grant{Mode: ModeSealed, Port: 7000, TTL: 10 * time.Second, Tickets: []Ticket{{ID: TicketID{1}, Key: bytes.Repeat([]byte{2}, KeyLen)}}}
	gg, err := DecodeGrant(AppendGrant(nil, g), 1)
	if err != nil || gg.Mode != g.Mode || gg.Port != g.Port || gg.TTL != g.TTL || gg.Tickets[0].ID != g.Tickets[0].ID || !bytes.Equal(gg.Tickets[0].Key, g.Tickets[0].Key) {
		t.Fatalf("grant: %+v, %v", gg, err)
	}
	if _, err := DecodeGrant(AppendGrant(nil, g), 0); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("grant of more tickets than asked: %v", err)
	}
	if _, err := DecodeGrant(AppendUnavailable(nil, "none here"), 1); !errors.Is(err, ErrUnavailable) {
		t.Errorf("unavailable: %v", err)
	}
	for name, b := range map[string][]byte{
		"empty":       nil,
		"version":     {2, 1, 0, 0},
		"no tickets":  {1, 0, 0, 0},
		"too many":    {1, MaxTickets + 1, 0, 0},
		"flags":       {1, 1, 4, 0},
		"short site":  {1, 1, 0, 3, 'a'},
		"long site":   {1, 1, 0, 0, 'a'},
		"bad utf8":    {1, 1, 0, 1, 0xff},
		"grant short": nil,
	} {
		if name == "grant short" {
			if _, err := DecodeGrant([]byte{statusGrant, byte(ModePlain), 0}, 1); !errors.Is(err, wire.ErrMalformed) {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if _, err := DecodeTicketRequest(b); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	id := TicketID{9, 8, 7}
	if h, err := DecodeHello(AppendHello(nil, id)); err != nil || h != id {
		t.Fatalf("hello: %v %v", h, err)
	}
	if _, err := DecodeHello(append([]byte("GET / HTTP/1.1\r\n"), make([]byte, HelloLen-16)...)); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("an HTTP request as hello: %v", err)
	}
}

func TestChooseMode(t *testing.T) {
	a := Policy{TrustedLAN: true, Site: "a"}
	for _, c := range []struct {
		s, c Policy
		want Mode
	}{
		{a, a, ModePlain},
		{a, Policy{TrustedLAN: false, Site: "a"}, ModeSealed},
		{Policy{TrustedLAN: false, Site: "a"}, a, ModeSealed},
		{a, Policy{TrustedLAN: true, Site: "b"}, ModeSealed}, // across sites: always sealed
		{Policy{TrustedLAN: true}, Policy{TrustedLAN: true}, ModeSealed},
	} {
		if got := ChooseMode(c.s, c.c); got != c.want {
			t.Errorf("ChooseMode(%+v, %+v) = %v, want %v", c.s, c.c, got, c.want)
		}
	}
}

func TestTickets(t *testing.T) {
	now := time.Unix(1000, 0)
	tb := &Table{Now: func() time.Time { return now }, TTL: 10 * time.Second}
	p, q := peer.ID("p"), peer.ID("q")
	ts, err := tb.Issue(p, ModeSealed, 3)
	if err != nil || len(ts) != 3 || len(ts[0].Key) != KeyLen || ts[0].ID == ts[1].ID || bytes.Equal(ts[0].Key, ts[1].Key) {
		t.Fatalf("issue: %v %v", ts, err)
	}
	got, m, key, err := tb.Redeem(ts[0].ID)
	if err != nil || got != p || m != ModeSealed || !bytes.Equal(key, ts[0].Key) {
		t.Fatalf("redeem: %v %v %v", got, m, err)
	}
	if _, _, _, err := tb.Redeem(ts[0].ID); !errors.Is(err, ErrReplayedTicket) {
		t.Errorf("replayed: %v", err)
	}
	if _, _, _, err := tb.Redeem(TicketID{1}); !errors.Is(err, ErrUnknownTicket) {
		t.Errorf("unknown: %v", err)
	}
	now = now.Add(10 * time.Second)
	if _, _, _, err := tb.Redeem(ts[1].ID); !errors.Is(err, ErrExpiredTicket) {
		t.Errorf("expired: %v", err)
	}
	if _, err := tb.Issue(q, ModePlain, MaxPerPeer+1); !errors.Is(err, ErrBusy) {
		t.Errorf("too many for one peer: %v", err)
	}
	if _, err := tb.Issue(q, ModePlain, MaxPerPeer); err != nil {
		t.Errorf("as many as allowed: %v", err)
	}
	now = now.Add(time.Minute) // all swept
	if _, _, _, err := tb.Redeem(ts[2].ID); !errors.Is(err, ErrUnknownTicket) {
		t.Errorf("long expired: %v", err)
	}
	if n := tb.Outstanding(q); n != 0 {
		t.Errorf("%d outstanding after expiry", n)
	}
}

// TestSealedConn: bytes round-trip both ways; a byte changed on the wire
// fails authentication and nothing of its frame is returned.
func TestSealedConn(t *testing.T) {
	key := make([]byte, KeyLen)
	rand.Read(key)
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	sa, _ := newSealedConn(a, key, true)
	sb, _ := newSealedConn(b, key, false)
	msg := bytes.Repeat([]byte("omst"), 40000) // more than two frames
	go func() { sa.Write(msg) }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(sb, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("round trip: %v", err)
	}
	go func() { sb.Write([]byte("back")) }()
	back := make([]byte, 4)
	if _, err := io.ReadFull(sa, back); err != nil || string(back) != "back" {
		t.Fatalf("back: %q %v", back, err)
	}

	// A frame with one byte flipped.
	c, d := net.Pipe()
	defer c.Close()
	defer d.Close()
	var wireBytes bytes.Buffer
	sw, _ := newSealedConn(&recordConn{Conn: c, w: &wireBytes}, key, true)
	go func() { sw.Write([]byte("hello, bulk")) }()
	raw := make([]byte, frameHeaderLen+len("hello, bulk")+16)
	if _, err := io.ReadFull(d, raw); err != nil {
		t.Fatal(err)
	}
	raw[frameHeaderLen+3] ^= 1
	x, y := net.Pipe()
	defer x.Close()
	defer y.Close()
	sr, _ := newSealedConn(y, key, false)
	go func() { x.Write(raw) }()
	n, err := sr.Read(make([]byte, 64))
	if n != 0 || !errors.Is(err, ErrAuth) {
		t.Fatalf("tampered frame: %d bytes, %v", n, err)
	}
	// A frame sealed by the reader's own direction (reflected) fails too.
	u, v := net.Pipe()
	defer u.Close()
	defer v.Close()
	su, _ := newSealedConn(u, key, false)
	sv, _ := newSealedConn(v, key, false)
	go func() { su.Write([]byte("mirror")) }()
	if _, err := sv.Read(make([]byte, 64)); !errors.Is(err, ErrAuth) {
		t.Fatalf("reflected frame: %v", err)
	}
}

type recordConn struct {
	net.Conn
	w io.Writer
}

// end is a libp2p host with a listener whose connections echo what they
// read (in place of the fetch server).
type end struct {
	h      host.Host
	l      *Listener
	member atomic.Bool
	served atomic.Int32
}

func newEnd(t *testing.T, pol Policy, now func() time.Time) *end {
	e := &end{h: p2ptest.NewHost(t)}
	e.member.Store(true)
	l, err := Listen(ListenerConfig{Addr: "127.0.0.1:0", Table: &Table{Now: now}, Policy: pol,
		Member: func(peer.ID) bool { return e.member.Load() },
		Serve: func(c *Conn) {
			e.served.Add(1)
			defer c.Close()
			io.Copy(c, c)
		}, HelloTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	e.l = l
	e.h.SetStreamHandler(ProtoTickets, l.HandleTickets)
	return e
}

func connect(t *testing.T, a, b host.Host) {
	if err := a.Connect(context.Background(), peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

// TestOpen: a ticket over libp2p opens a sealed connection (or a plain one
// between two trusted nodes of one site) that carries bytes both ways, as
// the ticket's peer.
func TestOpen(t *testing.T) {
	for _, c := range []struct {
		srv, cli Policy
		want     Mode
	}{
		{Policy{}, Policy{}, ModeSealed},
		{Policy{TrustedLAN: true, Site: "a"}, Policy{TrustedLAN: true, Site: "a"}, ModePlain},
		{Policy{TrustedLAN: true, Site: "a"}, Policy{TrustedLAN: true}, ModeSealed}, // an asker naming no site
	} {
		srv := newEnd(t, c.srv, nil)
		cli := p2ptest.NewHost(t)
		connect(t, cli, srv.h)
		d := &Dialer{Host: cli, Policy: c.cli}
		bc, err := d.Open(context.Background(), srv.h.ID())
		if err != nil {
			t.Fatal(err)
		}
		if bc.Mode != c.want {
			t.Errorf("%+v/%+v: mode %v, want %v", c.srv, c.cli, bc.Mode, c.want)
		}
		msg := bytes.Repeat([]byte{7}, 300<<10)
		go bc.Write(msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(bc, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("echo: %v", err)
		}
		bc.Close()
		if srv.l.Stats.Accepted.Load() != 1 {
			t.Errorf("accepted %d", srv.l.Stats.Accepted.Load())
		}
	}
}

// TestOtherSite: a listener grants no ticket to an asker of another
// named site (bulk connections are a site's; across sites chunks go over
// the libp2p session), and SameSite is that rule.
func TestOtherSite(t *testing.T) {
	srv := newEnd(t, Policy{TrustedLAN: true, Site: "a"}, nil)
	cli := p2ptest.NewHost(t)
	connect(t, cli, srv.h)
	d := &Dialer{Host: cli, Policy: Policy{TrustedLAN: true, Site: "b"}}
	_, err := d.Open(context.Background(), srv.h.ID())
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), `inside site \"a\"`) {
		t.Errorf("an asker of site b: %v, want ErrUnavailable naming site a", err)
	}
	if n := srv.l.Stats.Granted.Load(); n != 0 {
		t.Errorf("%d tickets granted to another site", n)
	}
	for _, c := range []struct {
		srv, cli string
		want     bool
	}{{"a", "a", true}, {"a", "b", false}, {"", "b", true}, {"a", "", true}, {"", "", true}} {
		if got := SameSite(c.srv, c.cli); got != c.want {
			t.Errorf("SameSite(%q, %q) = %v", c.srv, c.cli, got)
		}
	}
}

// TestRefused: a connection without a valid ticket (none, garbage, one of
// another node, a replayed one, an expired one) or whose ticket's peer is
// no longer a member is refused, and nothing is served on it.
func TestRefused(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	srv := newEnd(t, Policy{}, clock)
	other := newEnd(t, Policy{}, nil)
	cli := p2ptest.NewHost(t)
	connect(t, cli, srv.h)
	connect(t, cli, other.h)
	d := &Dialer{Host: cli}
	ctx := context.Background()
	addr := func(e *end) string { return net.JoinHostPort("127.0.0.1", itoa(int(e.l.Port()))) }

	// Raw hellos: an HTTP request, nothing at all, an unknown ticket.
	hello := func(b []byte) byte {
		c, err := net.Dial("tcp", addr(srv))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		c.Write(b)
		var a [1]byte
		if _, err := io.ReadFull(c, a[:]); err != nil {
			return 255 // closed without an answer
		}
		// Nothing follows a refusal: the connection is closed.
		if n, _ := c.Read(make([]byte, 8)); n != 0 {
			t.Errorf("%d bytes after the answer", n)
		}
		return a[0]
	}
	if a := hello([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n1234567890123")); a != helloMalformed {
		t.Errorf("HTTP request: answer %d", a)
	}
	if a := hello(AppendHello(nil, TicketID{1, 2, 3})); a != helloUnknown {
		t.Errorf("unknown ticket: answer %d", a)
	}
	if a := hello(nil); a != 255 {
		t.Errorf("no hello: answer %d", a)
	}

	// A ticket of another node.
	g, ip, err := d.tickets(ctx, other.h.ID(), 1)
	if err != nil {
		t.Fatal(err)
	}
	g.Port = srv.l.Port()
	if _, err := d.connect(ctx, srv.h.ID(), ip, g, g.Tickets[0]); !errors.Is(err, ErrUnknownTicket) {
		t.Errorf("another node's ticket: %v", err)
	}

	// A replayed ticket.
	g, ip, err = d.tickets(ctx, srv.h.ID(), 2)
	if err != nil {
		t.Fatal(err)
	}
	c1, err := d.connect(ctx, srv.h.ID(), ip, g, g.Tickets[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	if _, err := d.connect(ctx, srv.h.ID(), ip, g, g.Tickets[0]); !errors.Is(err, ErrReplayedTicket) {
		t.Errorf("replayed ticket: %v", err)
	}
	// An expired one.
	mu.Lock()
	now = now.Add(DefaultTTL + time.Millisecond)
	mu.Unlock()
	if _, err := d.connect(ctx, srv.h.ID(), ip, g, g.Tickets[1]); !errors.Is(err, ErrExpiredTicket) {
		t.Errorf("expired ticket: %v", err)
	}
	// A peer no longer a member: no connection, no ticket.
	g, ip, err = d.tickets(ctx, srv.h.ID(), 1)
	if err != nil {
		t.Fatal(err)
	}
	srv.member.Store(false)
	if _, err := d.connect(ctx, srv.h.ID(), ip, g, g.Tickets[0]); !errors.Is(err, ErrNotMember) {
		t.Errorf("non-member: %v", err)
	}
	if _, err := d.Open(ctx, srv.h.ID()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ticket for a non-member: %v", err)
	}
	if n := srv.served.Load(); n != 1 {
		t.Errorf("%d connections served, want 1 (the first of the replayed ticket)", n)
	}
	// A refusal is counted after its answer is written: the client may
	// read the last one first.
	for deadline := time.Now().Add(5 * time.Second); srv.l.Stats.Refused.Load() < 7 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if n := srv.l.Stats.Refused.Load(); n != 7 {
		t.Errorf("%d refused, want 7", n)
	}
}

// TestOlderPeer: a peer that does not serve the ticket protocol is
// unavailable (the caller falls back to libp2p streams).
func TestOlderPeer(t *testing.T) {
	old := p2ptest.NewHost(t)
	cli := p2ptest.NewHost(t)
	connect(t, cli, old)
	if _, err := (&Dialer{Host: cli}).Open(context.Background(), old.ID()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("older peer: %v", err)
	}
}

// TestPlainGrantRefused: a grant of plain text to a node whose own
// operator did not say its LAN is trusted is taken as a lie.
func TestPlainGrantRefused(t *testing.T) {
	srv := p2ptest.NewHost(t)
	srv.SetStreamHandler(ProtoTickets, func(s network.Stream) {
		defer s.Close()
		s.Write(AppendGrant(nil, Grant{Mode: ModePlain, Port: 9, TTL: time.Second, Tickets: []Ticket{{ID: TicketID{1}}}}))
	})
	cli := p2ptest.NewHost(t)
	connect(t, cli, srv)
	if _, err := (&Dialer{Host: cli}).Open(context.Background(), srv.ID()); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("plain grant to an untrusted node: %v", err)
	}
}

func itoa(n int) string {
	var b [8]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		if n /= 10; n == 0 {
			return string(b[i:])
		}
	}
}
