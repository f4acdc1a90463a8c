package transfer

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/transfer/internal/bulk"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
)

// Issue 26's bad input on the bulk path, against a real engine (its fetch
// server behind its bulk listener), from a raw client over real sockets:
// the hello and the fetch requests are written by hand.

// plainTickets asks src, over cli's libp2p session, for n plain tickets
// (cli says its LAN is trusted, of src's site "a").
func plainTickets(t *testing.T, cli host.Host, src *engineNode, n int) bulk.Grant {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := cli.NewStream(ctx, src.h.ID(), bulk.ProtoTickets)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Write(bulk.AppendTicketRequest(nil, bulk.TicketRequest{Count: n, Trusted: true, Site: "a"})); err != nil {
		t.Fatal(err)
	}
	s.CloseWrite()
	b, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	g, err := bulk.DecodeGrant(b, n)
	if err != nil || g.Mode != bulk.ModePlain || len(g.Tickets) != n {
		t.Fatalf("grant: %+v, %v; want %d plain tickets", g, err, n)
	}
	return g
}

// bulkHello dials src's bulk listener, sends the hello of ticket id and
// returns the connection and the listener's answer (0: accepted).
func bulkHello(t *testing.T, src *engineNode, id bulk.TicketID) (net.Conn, byte) {
	t.Helper()
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(src.eng.BulkPort()))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(bulk.AppendHello(nil, id)); err != nil {
		t.Fatal(err)
	}
	var a [1]byte
	if _, err := io.ReadFull(c, a[:]); err != nil {
		t.Fatalf("no answer to the hello: %v", err)
	}
	return c, a[0]
}

// askChunk writes a GET of chunk i of rec's blob (manifest m) on c.
func askChunk(t *testing.T, c net.Conn, id fetchwire.Request, i int) {
	t.Helper()
	q := id
	q.Type, q.Tag, q.Index = fetchwire.MsgGet, uint32(i+1), uint32(i)
	if _, err := c.Write(fetchwire.AppendRequest(nil, q)); err != nil {
		t.Logf("write of a GET: %v", err) // a refused connection may be closed already
	}
}

// TestBulkRefusedServesNothing: at a real engine's bulk listener, a
// connection with an unknown ticket or a replayed one is refused, and a
// GET written after the hello gets no byte back (the connection is
// closed) and nothing is served; the same GET on the ticket's first
// connection gets the chunk. (The expired ticket and the non-member's
// hello, with an injected clock and membership, are bulk's TestRefused.)
func TestBulkRefusedServesNothing(t *testing.T) {
	src := newBulkEngine(t, nil, BulkConfig{Listen: "127.0.0.1:0", TrustedLAN: true, Site: "a"}, 0)
	data := randBlob(2<<20, 61)
	rec := putBlob(t, src.mem, "x", data, 256<<10)
	m, err := src.mem.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	q := fetchwire.Request{ID: rec.ID, Hash: m.Chunks[0]}
	cli := newTestHost(t)
	if err := cli.Connect(context.Background(), peer.AddrInfo{ID: src.h.ID(), Addrs: src.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	refusedNothing := func(what string, c net.Conn, answer byte) {
		t.Helper()
		if answer == 0 {
			t.Fatalf("%s: accepted", what)
		}
		askChunk(t, c, q, 0)
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if n, err := io.Copy(io.Discard, c); n != 0 {
			t.Fatalf("%s: %d bytes after the refusal (%v)", what, n, err)
		}
	}
	var unknown bulk.TicketID
	unknown[0] = 7
	c, a := bulkHello(t, src, unknown)
	refusedNothing("an unknown ticket", c, a)

	g := plainTickets(t, cli, src, 1)
	first, a := bulkHello(t, src, g.Tickets[0].ID)
	if a != 0 {
		t.Fatalf("a fresh ticket refused: answer %d", a)
	}
	c, a = bulkHello(t, src, g.Tickets[0].ID)
	refusedNothing("a replayed ticket", c, a)
	// The listener counts a connection after its answer: wait for them.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if st := src.eng.Status(); st.BulkRefused >= 2 && st.BulkAccepted >= 1 {
			break
		}
	}
	if st := src.eng.Status(); st.BytesServed != 0 || st.BulkRefused != 2 || st.BulkAccepted != 1 {
		t.Fatalf("served %d bytes, refused %d connections, accepted %d; want 0, 2, 1", st.BytesServed, st.BulkRefused, st.BulkAccepted)
	}
	askChunk(t, first, q, 0)
	first.SetDeadline(time.Now().Add(5 * time.Second))
	st, body, err := readReplyErr(bufio.NewReader(first), 1<<20)
	if err != nil || st != fetchwire.StatusOK || !bytes.Equal(body, data[:256<<10]) {
		t.Fatalf("the ticket's own connection: status %d, %d bytes, %v; want chunk 0", st, len(body), err)
	}
}

// TestBulkServesNoFormerMember: a bulk connection whose peer is no longer
// an admitted member (its libp2p session closed: the closed grid's
// revocation does that) is not served once it is not: a GET written on it
// gets no chunk. Before, the listener looked at the peer only at the
// hello, and the open connection was served for as long as its peer kept
// it open.
func TestBulkServesNoFormerMember(t *testing.T) {
	src := newBulkEngine(t, nil, BulkConfig{Listen: "127.0.0.1:0", TrustedLAN: true, Site: "a"}, 0)
	data := randBlob(2<<20, 62)
	rec := putBlob(t, src.mem, "x", data, 256<<10)
	m, err := src.mem.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	cli := newTestHost(t)
	if err := cli.Connect(context.Background(), peer.AddrInfo{ID: src.h.ID(), Addrs: src.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	g := plainTickets(t, cli, src, 1)
	c, a := bulkHello(t, src, g.Tickets[0].ID)
	if a != 0 {
		t.Fatalf("refused: answer %d", a)
	}
	br := bufio.NewReader(c)
	askChunk(t, c, fetchwire.Request{ID: rec.ID, Hash: m.Chunks[0]}, 0)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if st, body, err := readReplyErr(br, 1<<20); err != nil || st != fetchwire.StatusOK || !bytes.Equal(body, data[:256<<10]) {
		t.Fatalf("while a member: status %d, %d bytes, %v; want chunk 0", st, len(body), err)
	}

	// The session ends (as a revoked member's does).
	src.h.Network().ClosePeer(cli.ID())
	for deadline := time.Now().Add(5 * time.Second); src.h.Network().Connectedness(cli.ID()) == network.Connected; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the libp2p session did not end")
		}
	}
	served := src.eng.Status().BytesServed
	askChunk(t, c, fetchwire.Request{ID: rec.ID, Hash: m.Chunks[1]}, 1)
	c.SetDeadline(time.Now().Add(3 * time.Second))
	st, body, err := readReplyErr(br, 1<<20)
	if err == nil && st == fetchwire.StatusOK {
		t.Fatalf("a peer no longer a member was served chunk 1 (%d bytes) on its open bulk connection", len(body))
	}
	t.Logf("after the session ended: status %d, %v", st, err)
	if n := src.eng.Status().BytesServed - served; n != 0 {
		t.Fatalf("%d bytes served to a peer no longer a member", n)
	}
}

// TestBulkCorruptConnectionDropped: a peer that sends wrong bytes over
// plain bulk connections (past its own store's verification: flipConn)
// is caught by the receiver's verification, counted (corrupt_received,
// an error against the peer), and each connection that carried a corrupt
// piece is dropped at once (its other replies unread): the receiver
// counts at most one corrupt chunk per connection the liar accepted, and
// a moment after the get (well before the idle close) the liar holds open
// only connections that carried none; the blob comes whole from the
// honest source.
func TestBulkCorruptConnectionDropped(t *testing.T) {
	liar := newBulkEngine(t, nil, BulkConfig{}, 0)
	l, err := bulk.Listen(bulk.ListenerConfig{Addr: "127.0.0.1:0", Table: &bulk.Table{}, Policy: bulk.Policy{TrustedLAN: true, Site: "a"},
		Serve: func(c *bulk.Conn) { liar.eng.server.Serve(flipConn{c}, c.Peer, true) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	liar.h.SetStreamHandler(bulk.ProtoTickets, l.HandleTickets)
	honest := newBulkEngine(t, nil, BulkConfig{Listen: "127.0.0.1:0", TrustedLAN: true, Site: "a"}, 0)
	data := randBlob(4<<20, 63)
	rec := putBlob(t, liar.mem, "x", data, 256<<10)
	putBlob(t, honest.mem, "x", data, 256<<10)
	dst := newBulkEngine(t, nil, BulkConfig{Conns: 4, TrustedLAN: true, Site: "a", Idle: time.Minute}, 0, liar, honest)
	if got := readBlob(t, dst, rec); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	cs := dst.eng.Status()
	accepted := l.Stats.Accepted.Load()
	t.Logf("corrupt received %d over %d connections the liar accepted; errors against it %d", cs.CorruptReceived, accepted, cs.ErrorsByPeer[liar.h.ID()])
	if cs.CorruptReceived == 0 || accepted == 0 || cs.ErrorsByPeer[liar.h.ID()] == 0 {
		t.Fatalf("corrupt received %d, liar's connections %d, errors against it %d: the liar was never caught", cs.CorruptReceived, accepted, cs.ErrorsByPeer[liar.h.ID()])
	}
	if cs.CorruptReceived > accepted {
		t.Fatalf("%d corrupt chunks counted over %d connections: a connection was read on after a corrupt piece", cs.CorruptReceived, accepted)
	}
	// Each connection that carried a corrupt piece is closed: at most
	// accepted-corrupt stay open (those that carried none, e.g. only the
	// manifest, wait for their idle close).
	most := int(accepted - cs.CorruptReceived)
	for deadline := time.Now().Add(time.Second); l.Open() > most; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the liar still holds %d of its %d bulk connections 1 s after the get, %d of which carried a corrupt chunk (idle close: 1 minute): want at most %d, the others dropped",
				l.Open(), accepted, cs.CorruptReceived, most)
		}
	}
}
