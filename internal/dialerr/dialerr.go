// Package dialerr turns go-libp2p's dial errors into short messages for
// users: "failed to dial: failed to dial <ID>: all dials failed\n  *
// [/ip4/10.0.0.1/tcp/4040] dial backoff" becomes "cannot connect:
// /ip4/10.0.0.1/tcp/4040: a connection attempt moments ago failed, not
// retried yet".
package dialerr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/libp2p/go-libp2p/p2p/net/swarm"
)

// Text describes err, an error from dialing a peer (host.Connect,
// host.NewStream), in a line: what failed at each address, without the
// layers of wrapping. Errors that are not dial errors are returned as
// they are, with "dial backoff" explained if it occurs.
func Text(err error) string {
	if err == nil {
		return ""
	}
	var de *swarm.DialError
	if errors.As(err, &de) {
		var parts []string
		for _, te := range de.DialErrors {
			parts = append(parts, fmt.Sprintf("%s: %s", te.Address, cause(te.Cause)))
		}
		if len(parts) == 0 && de.Cause != nil {
			parts = append(parts, cause(de.Cause))
		}
		if de.Skipped > 0 {
			parts = append(parts, fmt.Sprintf("and %d more addresses", de.Skipped))
		}
		if len(parts) == 0 {
			return "cannot connect"
		}
		return "cannot connect: " + strings.Join(parts, "; ")
	}
	return cause(err)
}

// cause describes the failure behind one address.
func cause(err error) string {
	switch {
	case errors.Is(err, swarm.ErrDialBackoff):
		return "a connection attempt moments ago failed, not retried yet"
	case errors.Is(err, swarm.ErrNoAddresses):
		return "no known address"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused (nothing listens there)"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to the host"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "no answer in time"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		var se *os.SyscallError
		if errors.As(oe.Err, &se) {
			return se.Err.Error()
		}
		return oe.Err.Error()
	}
	return strings.ReplaceAll(err.Error(), swarm.ErrDialBackoff.Error(), "a connection attempt moments ago failed, not retried yet")
}
