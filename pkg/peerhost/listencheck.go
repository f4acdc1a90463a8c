package peerhost

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"

	ma "github.com/multiformats/go-multiaddr"
)

// go-libp2p's swarm (Swarm.Listen, v0.51) succeeds as soon as one of the
// listen addresses could be bound: an address it cannot bind is only
// logged. A node asked to listen on TCP and QUIC on a port whose UDP side
// another process holds would start on TCP alone, silently, and the other
// process would go on answering QUIC dials meant for this one. So New
// checks every address twice: before the host starts (a plain bind, to
// fail with a clear error naming the port and the process that holds it),
// and after (the addresses the swarm actually listens on, which is
// authoritative: the port may have been taken in between).

// ErrListen is wrapped by New's error when a listen address cannot be
// bound.
var ErrListen = errors.New("cannot listen")

// listenSocket is the IP socket a listen multiaddr binds: network "tcp4",
// "tcp6", "udp4" or "udp6", host and port. ok is false for addresses this
// check does not understand (DNS names, other transports): those are left
// to libp2p.
type listenSocket struct {
	network string
	ip      net.IP
	port    int
}

func socketOf(a ma.Multiaddr) (s listenSocket, ok bool) {
	comps := []ma.Component(a)
	if len(comps) < 2 {
		return s, false
	}
	switch comps[0].Protocol().Code {
	case ma.P_IP4:
		s.network = "4"
	case ma.P_IP6:
		s.network = "6"
	default:
		return s, false
	}
	s.ip = net.ParseIP(comps[0].Value())
	switch comps[1].Protocol().Code {
	case ma.P_TCP:
		s.network = "tcp" + s.network
	case ma.P_UDP:
		s.network = "udp" + s.network
	default:
		return s, false
	}
	p, err := strconv.Atoi(comps[1].Value())
	if err != nil || s.ip == nil {
		return s, false
	}
	s.port = p
	return s, true
}

func (s listenSocket) String() string {
	return fmt.Sprintf("%s port %d", strings.ToUpper(s.network[:3]), s.port)
}

// precheckListen binds each of addrs with a fixed port the way libp2p will
// (no SO_REUSEPORT) and releases it at once. It fails for the first one
// that is taken, naming its port and, when it can be found, the process
// that holds it.
func precheckListen(addrs []ma.Multiaddr) error {
	for _, a := range addrs {
		s, ok := socketOf(a)
		if !ok || s.port == 0 {
			continue
		}
		hp := net.JoinHostPort(s.ip.String(), strconv.Itoa(s.port))
		var err error
		if strings.HasPrefix(s.network, "tcp") {
			var l net.Listener
			if l, err = net.Listen(s.network, hp); err == nil {
				l.Close()
			}
		} else {
			var c net.PacketConn
			if c, err = net.ListenPacket(s.network, hp); err == nil {
				c.Close()
			}
		}
		if err != nil {
			return listenError(a, s, err)
		}
	}
	return nil
}

// listenError describes why a could not be bound.
func listenError(a ma.Multiaddr, s listenSocket, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		who := "another process"
		if h := portHolder(s.network, s.port); h != "" {
			who = h
		}
		return fmt.Errorf("%w on %s: %s is in use by %s; stop it, or give this daemon other ports with --listen",
			ErrListen, a, s, who)
	}
	var se *net.OpError
	if errors.As(err, &se) && se.Err != nil {
		err = se.Err
	}
	return fmt.Errorf("%w on %s: %v", ErrListen, a, err)
}

// unbound returns the addresses of want that no address of have (a
// host's listen addresses) matches. An address matches when its protocols
// and values are the same, except that a requested port 0 matches any
// port.
func unbound(want, have []ma.Multiaddr) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, w := range want {
		found := false
		for _, h := range have {
			if sameListen(w, h) {
				found = true
				break
			}
		}
		if !found {
			out = append(out, w)
		}
	}
	return out
}

func sameListen(want, have ma.Multiaddr) bool {
	wc, hc := []ma.Component(want), []ma.Component(have)
	if len(wc) != len(hc) {
		return false
	}
	for i := range wc {
		if wc[i].Protocol().Code != hc[i].Protocol().Code {
			return false
		}
		code := wc[i].Protocol().Code
		if (code == ma.P_TCP || code == ma.P_UDP) && wc[i].Value() == "0" {
			continue
		}
		if wc[i].Value() != hc[i].Value() {
			return false
		}
	}
	return true
}

// checkBound fails, naming each one, if some of want is not among the
// addresses the host listens on.
func checkBound(want, have []ma.Multiaddr) error {
	missing := unbound(want, have)
	if len(missing) == 0 {
		return nil
	}
	var why []string
	for _, a := range missing {
		s, ok := socketOf(a)
		switch {
		case !ok:
			why = append(why, a.String()+" was not bound")
		case portHolder(s.network, s.port) != "":
			why = append(why, fmt.Sprintf("%s: %s is in use by %s", a, s, portHolder(s.network, s.port)))
		default:
			why = append(why, fmt.Sprintf("%s: %s could not be bound", a, s))
		}
	}
	return fmt.Errorf("%w on every address asked for: %s; stop what holds the port, or give this daemon other ports with --listen",
		ErrListen, strings.Join(why, "; "))
}
