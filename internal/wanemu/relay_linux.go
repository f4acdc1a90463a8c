package wanemu

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// ControlAddr is where, inside every host namespace, the control relay
// listens (see StartControlRelay). SYNC_SERVICE_HOST and SYNC_SERVICE_PORT
// point at it.
const (
	ControlHost = "127.0.0.1"
	ControlPort = "5050"
)

// relay accepts connections in one namespace and pipes each to a new
// connection from dial.
type relay struct {
	ln   net.Listener
	dial func() (net.Conn, error)

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartControlRelay listens on ControlHost:ControlPort inside every host
// namespace and forwards each connection to a new connection made by dial
// (typically to a service in the host namespace, or, with DialIn, in the
// run's control namespace). The relay is the control path: it does not
// touch the shaped links and adds no address anywhere.
func (e *Emulator) StartControlRelay(dial func() (net.Conn, error)) error {
	for _, h := range e.Plan.Hosts {
		ln, err := ListenIn(h.Netns, net.JoinHostPort(ControlHost, ControlPort))
		if err != nil {
			return err
		}
		r := &relay{ln: ln, dial: dial, conns: map[net.Conn]struct{}{}}
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			ln.Close()
			return errors.New("emulator closed")
		}
		e.relays = append(e.relays, r)
		e.mu.Unlock()
		r.wg.Add(1)
		go r.serve()
	}
	return nil
}

// DialHostTCP dials addr from the host namespace, for StartControlRelay.
func DialHostTCP(addr string) func() (net.Conn, error) {
	return func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 5*time.Second) }
}

// DialNetnsTCP dials addr from inside namespace ns, for StartControlRelay.
func DialNetnsTCP(ns, addr string) func() (net.Conn, error) {
	return func() (net.Conn, error) { return DialIn(ns, addr, 5*time.Second) }
}

func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) forget(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

func (r *relay) serve() {
	defer r.wg.Done()
	for {
		in, err := r.ln.Accept()
		if err != nil {
			return
		}
		if !r.track(in) {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer r.forget(in)
			out, err := r.dial()
			if err != nil {
				return
			}
			if !r.track(out) {
				return
			}
			defer r.forget(out)
			done := make(chan struct{}, 2)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				done <- struct{}{}
			}
			go pipe(out, in)
			go pipe(in, out)
			<-done
			<-done
		}()
	}
}

func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	r.ln.Close()
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
