package bulk

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/omst-project/omst/internal/p2ptest"
)

// TestClosePeer: ClosePeer closes every connection the listener serves to
// one peer, and no other's (the engine calls it when the peer's libp2p
// session ends: a revoked member is no longer served on the connections
// it holds).
func TestClosePeer(t *testing.T) {
	srv := newEnd(t, Policy{}, nil)
	a, b := p2ptest.NewHost(t), p2ptest.NewHost(t)
	connect(t, a, srv.h)
	connect(t, b, srv.h)
	ctx := context.Background()
	open := func(d *Dialer) *Conn {
		t.Helper()
		c, err := d.Open(ctx, srv.h.ID())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	echo := func(c *Conn) error {
		done := make(chan error, 1)
		go func() {
			if _, err := c.Write([]byte("ping")); err != nil {
				done <- err
				return
			}
			buf := make([]byte, 4)
			_, err := io.ReadFull(c, buf)
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(2 * time.Second):
			return errors.New("no echo within 2 s")
		}
	}
	da, db := &Dialer{Host: a}, &Dialer{Host: b}
	a1, a2, b1 := open(da), open(da), open(db)
	for _, c := range []*Conn{a1, a2, b1} {
		if err := echo(c); err != nil {
			t.Fatalf("before: %v", err)
		}
	}
	if n := srv.l.ClosePeer(a.ID()); n != 2 {
		t.Fatalf("ClosePeer closed %d connections, want a's 2", n)
	}
	for _, c := range []*Conn{a1, a2} {
		if err := echo(c); err == nil {
			t.Fatal("a connection of the closed peer still served")
		}
	}
	if err := echo(b1); err != nil {
		t.Fatalf("another peer's connection: %v", err)
	}
	if n := srv.l.ClosePeer(a.ID()); n != 0 {
		t.Fatalf("ClosePeer again closed %d", n)
	}
}
