package dialerr

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"
)

func TestText(t *testing.T) {
	a := ma.StringCast("/ip4/10.0.0.1/tcp/4040")
	b := ma.StringCast("/ip4/10.0.0.1/udp/4040/quic-v1")
	refused := &net.OpError{Op: "dial", Net: "tcp4", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	de := &swarm.DialError{Peer: "12D3KooWpeer", DialErrors: []swarm.TransportError{
		{Address: a, Cause: swarm.ErrDialBackoff},
		{Address: b, Cause: refused},
	}}
	err := fmt.Errorf("failed to dial: %w", de)
	got := Text(err)
	want := "cannot connect: /ip4/10.0.0.1/tcp/4040: a connection attempt moments ago failed, not retried yet; " +
		"/ip4/10.0.0.1/udp/4040/quic-v1: connection refused (nothing listens there)"
	if got != want {
		t.Fatalf("Text:\n got %q\nwant %q", got, want)
	}
	if got := Text(&swarm.DialError{Peer: "p", Cause: swarm.ErrNoAddresses}); got != "cannot connect: no known address" {
		t.Fatalf("no addresses: %q", got)
	}
	if got := Text(errors.New("failed to dial: dial backoff")); strings.Contains(got, "dial backoff") {
		t.Fatalf("a plain error's dial backoff: %q", got)
	}
	if Text(nil) != "" {
		t.Fatal("Text(nil) is not empty")
	}
}
