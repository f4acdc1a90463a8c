package main

// The rendezvous of `omst slurm up` and its tasks: up listens on a TCP
// port of the host it runs on; each task (one per node, started by srun)
// connects to it, says which node it is, gets the arguments of its daemon
// (a worker waits for the head's addresses), starts the daemon and reports
// whether it is up. Messages are JSON objects, one per line, of at most
// rdvMaxLine bytes; a task proves it was started by this up with a random
// token passed in srun's environment (Slurm carries it to the nodes).

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"
)

// Environment of the tasks: the rendezvous' port and token (its host is
// $SLURM_LAUNCH_NODE_IPADDR, which srun sets, else rdvHostEnv).
const (
	rdvPortEnv  = "OMST_SLURM_RDV_PORT"
	rdvHostEnv  = "OMST_SLURM_RDV_HOST"
	rdvTokenEnv = "OMST_SLURM_RDV_TOKEN"
	rdvMaxLine  = 64 << 10
)

// rdvHello is a task's first message.
type rdvHello struct {
	Token string `json:"token"`
	Node  string `json:"node"`
	Step  string `json:"step,omitempty"`
	Pid   int    `json:"pid,omitempty"`
}

// rdvAssign is up's answer: the daemon's arguments (after --home) and, for
// a worker, the head's addresses to insert as its first --parent; or why
// this node gets no daemon.
type rdvAssign struct {
	Args      []string `json:"args,omitempty"`
	HeadAddrs []string `json:"head_addrs,omitempty"`
	Error     string   `json:"error,omitempty"`
}

// rdvReport is a task's last message: its daemon is up (and connected to
// its parent), with these addresses, or it failed.
type rdvReport struct {
	Node  string   `json:"node"`
	OK    bool     `json:"ok"`
	Addrs []string `json:"addrs,omitempty"`
	Home  string   `json:"home,omitempty"`
	Error string   `json:"error,omitempty"`
}

// rdvAck is up's answer to a report: it counted it. A task whose report
// is not acknowledged stops its daemon (up gave up waiting for it).
type rdvAck struct {
	OK bool `json:"ok"`
}

// errRdvLine is returned for a rendezvous line that is too long or not
// the JSON object expected.
var errRdvLine = errors.New("bad rendezvous message")

// decodeRdv decodes one message line into v.
func decodeRdv(line []byte, v any) error {
	if len(line) > rdvMaxLine {
		return fmt.Errorf("%w: %d bytes (at most %d)", errRdvLine, len(line), rdvMaxLine)
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("%w: %v", errRdvLine, err)
	}
	return nil
}

// readRdv reads one message line from r into v.
func readRdv(r *bufio.Reader, v any) error {
	var line []byte
	for {
		part, more, err := r.ReadLine()
		if err != nil {
			if errors.Is(err, io.EOF) && len(line) > 0 {
				break
			}
			return err
		}
		line = append(line, part...)
		if len(line) > rdvMaxLine {
			return fmt.Errorf("%w: longer than %d bytes", errRdvLine, rdvMaxLine)
		}
		if !more {
			break
		}
	}
	return decodeRdv(line, v)
}

// writeRdv writes v as one message line.
func writeRdv(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// nodeResult is what up learned of one node.
type nodeResult struct {
	OK    bool
	Addrs []string
	Home  string
	Err   string
}

// rdvServer is up's side of the rendezvous.
type rdvServer struct {
	ln      net.Listener
	token   string
	plan    daemonPlan
	ioWait  time.Duration // a task has this long for its hello; its report comes within startWait
	repWait time.Duration

	mu       sync.Mutex
	closed   bool
	seen     map[string]bool
	results  map[string]nodeResult
	headDone chan struct{} // closed once the head reported
	changed  chan struct{} // gets a value after each result
	wg       sync.WaitGroup
}

func newRdvServer(ln net.Listener, token string, plan daemonPlan, repWait time.Duration) *rdvServer {
	return &rdvServer{ln: ln, token: token, plan: plan, ioWait: 30 * time.Second, repWait: repWait,
		seen: map[string]bool{}, results: map[string]nodeResult{}, headDone: make(chan struct{}), changed: make(chan struct{}, 1)}
}

// serve accepts tasks until the listener is closed.
func (s *rdvServer) serve(ctx context.Context) {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			s.handle(ctx, c)
		}()
	}
}

// record keeps node's result (the first one only; none once closed).
func (s *rdvServer) record(node string, r nodeResult) {
	s.mu.Lock()
	s.recordLocked(node, r)
	s.mu.Unlock()
	s.notify()
}

// recordLocked is record with s.mu held; it reports whether r was kept.
func (s *rdvServer) recordLocked(node string, r nodeResult) bool {
	if _, ok := s.results[node]; ok || s.closed {
		return false
	}
	s.results[node] = r
	if node == s.plan.Head {
		close(s.headDone)
	}
	return true
}

func (s *rdvServer) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// snapshot returns a copy of the results so far.
func (s *rdvServer) snapshot() map[string]nodeResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]nodeResult, len(s.results))
	for k, v := range s.results {
		out[k] = v
	}
	return out
}

func (s *rdvServer) handle(ctx context.Context, c net.Conn) {
	r := bufio.NewReader(c)
	c.SetDeadline(time.Now().Add(s.ioWait))
	var h rdvHello
	if err := readRdv(r, &h); err != nil {
		return
	}
	if subtle.ConstantTimeCompare([]byte(h.Token), []byte(s.token)) != 1 {
		writeRdv(c, rdvAssign{Error: "wrong rendezvous token"})
		return
	}
	s.mu.Lock()
	known, dup := slices.Contains(s.plan.Nodes, h.Node), s.seen[h.Node]
	s.seen[h.Node] = true
	s.mu.Unlock()
	switch {
	case !known:
		writeRdv(c, rdvAssign{Error: fmt.Sprintf("node %q is not one of this allocation's", h.Node)})
		return
	case dup:
		writeRdv(c, rdvAssign{Error: fmt.Sprintf("node %s has a task already", h.Node)})
		return
	}
	a := rdvAssign{Args: s.plan.daemonArgs(h.Node)}
	if h.Node != s.plan.Head {
		c.SetDeadline(time.Time{})
		select {
		case <-s.headDone:
		case <-ctx.Done():
			return
		}
		hr := s.snapshot()[s.plan.Head]
		if !hr.OK {
			msg := "not started: its head " + s.plan.Head + " failed"
			writeRdv(c, rdvAssign{Error: msg})
			s.record(h.Node, nodeResult{Err: msg})
			return
		}
		a.HeadAddrs = hr.Addrs
	}
	c.SetDeadline(time.Now().Add(s.ioWait))
	if err := writeRdv(c, a); err != nil {
		s.record(h.Node, nodeResult{Err: "rendezvous: " + err.Error()})
		return
	}
	c.SetDeadline(time.Now().Add(s.repWait))
	var rep rdvReport
	if err := readRdv(r, &rep); err != nil {
		s.record(h.Node, nodeResult{Err: "its task ended without a report (" + err.Error() + ")"})
		return
	}
	if rep.Node != h.Node {
		s.record(h.Node, nodeResult{Err: fmt.Sprintf("its task reported for node %q", rep.Node)})
		return
	}
	var res nodeResult
	if rep.OK {
		res = nodeResult{OK: true, Addrs: rep.Addrs, Home: rep.Home}
	} else {
		res = nodeResult{Err: rep.Error, Home: rep.Home}
	}
	// Acknowledged only if counted, and counted as up only if
	// acknowledged: after up has given up (closed), a late daemon is told
	// nothing and stops. The lock is held over the write so that close
	// waits for it.
	s.mu.Lock()
	if s.recordLocked(h.Node, res) {
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := writeRdv(c, rdvAck{OK: true}); err != nil && res.OK {
			s.results[h.Node] = nodeResult{Err: "its report could not be acknowledged: " + err.Error(), Home: res.Home}
		}
	}
	s.mu.Unlock()
	s.notify()
}

// close stops counting reports: the tasks not yet acknowledged get no
// acknowledgement (and stop their daemons).
func (s *rdvServer) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.ln.Close()
}

// rdvClient is a task's side: it connects, says hello and returns up's
// assignment and the connection to report on.
func rdvClient(ctx context.Context, addr string, h rdvHello) (rdvAssign, net.Conn, *bufio.Reader, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return rdvAssign{}, nil, nil, fmt.Errorf("rendezvous with omst slurm up at %s: %w", addr, err)
	}
	if err := writeRdv(c, h); err != nil {
		c.Close()
		return rdvAssign{}, nil, nil, fmt.Errorf("rendezvous with omst slurm up at %s: %w", addr, err)
	}
	r := bufio.NewReader(c)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	var a rdvAssign
	if err := readRdv(r, &a); err != nil {
		c.Close()
		return rdvAssign{}, nil, nil, fmt.Errorf("rendezvous with omst slurm up at %s: %w", addr, err)
	}
	return a, c, r, nil
}
