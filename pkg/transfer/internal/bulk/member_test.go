package bulk

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"

	"github.com/omst-project/omst/internal/p2ptest"
	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/member"
)

// TestClosedGridTickets: on a closed grid's host (member.Wrap), a member
// gets a ticket and a bulk connection; an outsider connected over libp2p
// gets neither (the ticket handler is never reached), and nothing is
// served to it.
func TestClosedGridTickets(t *testing.T) {
	key, err := grid.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	serial := uint64(0)
	wrap := func(h host.Host) (host.Host, *member.Admission) {
		serial++
		now := time.Now()
		cert, err := key.Issue(grid.Cert{Peer: h.ID(), Role: grid.RoleWorker, NotBefore: now.Add(-time.Minute).Unix(), NotAfter: now.Add(time.Hour).Unix(), Serial: serial})
		if err != nil {
			t.Fatal(err)
		}
		adm, err := member.New(member.Config{Timeout: time.Second, Logger: slog.New(slog.DiscardHandler)}, member.Material{GridKey: key.Public(), Cert: cert})
		if err != nil {
			t.Fatal(err)
		}
		return member.Wrap(h, adm), adm
	}
	srv, adm := wrap(p2ptest.NewHost(t))
	l, err := Listen(ListenerConfig{Addr: "127.0.0.1:0", Table: &Table{}, Member: adm.Admitted,
		Serve: func(c *Conn) { defer c.Close(); io.Copy(c, c) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	srv.SetStreamHandler(ProtoTickets, l.HandleTickets)

	ctx := context.Background()
	outsider := p2ptest.NewHost(t)
	connect(t, outsider, srv)
	if _, err := (&Dialer{Host: outsider}).Open(ctx, srv.ID()); err == nil {
		t.Fatal("an outsider opened a bulk connection")
	}
	if g := l.Stats.Granted.Load(); g != 0 {
		t.Fatalf("%d tickets granted to an outsider", g)
	}

	cli, _ := wrap(p2ptest.NewHost(t))
	connect(t, cli, srv)
	bc, err := (&Dialer{Host: cli}).Open(ctx, srv.ID())
	if err != nil {
		t.Fatalf("member: %v", err)
	}
	defer bc.Close()
	go bc.Write([]byte("ping"))
	b := make([]byte, 4)
	if _, err := io.ReadFull(bc, b); err != nil || string(b) != "ping" {
		t.Fatalf("member's connection: %q %v", b, err)
	}
	if g := l.Stats.Granted.Load(); g != 1 {
		t.Errorf("%d tickets granted, want 1 (the member's)", g)
	}
}
