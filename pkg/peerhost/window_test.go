package peerhost

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestStreamWindow: a new stream may carry StreamWindow bytes before its
// reader has read any (yamux's own initial window is 256 KiB: a sender
// stalls after that until the reader's first window update, a round trip
// later), and not much more: a reader that does not read holds its
// sender back.
func TestStreamWindow(t *testing.T) {
	a, b := newLoopbackHost(t, "a"), newLoopbackHost(t, "b")
	const proto = "/omst-test/window"
	release := make(chan struct{})
	got := make(chan []byte, 1)
	b.SetStreamHandler(proto, func(s network.Stream) {
		defer s.Close()
		<-release // read nothing until the sender is done or stuck
		data, _ := io.ReadAll(s)
		got <- data
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
	s, err := a.NewStream(ctx, b.ID(), proto)
	if err != nil {
		t.Fatal(err)
	}
	// The protocol's negotiation takes a few bytes of the window too.
	payload := bytes.Repeat([]byte("w"), StreamWindow-1024)
	_ = s.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Write(payload); err != nil {
		t.Fatalf("write of %d bytes to a stream whose reader has not read yet: %v (the initial window is smaller)", len(payload), err)
	}
	// Beyond the window the sender waits for the reader.
	_ = s.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
	extra := bytes.Repeat([]byte("x"), StreamWindow)
	n, err := s.Write(extra)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("write past the window: %d bytes, err %v; want a deadline error (the window does not bound the sender)", n, err)
	}
	close(release)
	_ = s.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Write(extra[n:]); err != nil {
		t.Fatalf("write after the reader started: %v", err)
	}
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case data := <-got:
		if want := len(payload) + len(extra); len(data) != want {
			t.Fatalf("reader got %d bytes, want %d", len(data), want)
		}
	case <-ctx.Done():
		t.Fatal("reader got nothing")
	}
}
