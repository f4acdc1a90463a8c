package transfer

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// groupedSources is a Provider and Grouper: staticSources, with children
// in one group whose connection the test switches.
type groupedSources struct {
	staticSources
	cmu      sync.Mutex
	children map[peer.ID][]ma.Multiaddr // connected children and their addresses
}

func (g *groupedSources) Group(p peer.ID) (string, []ma.Multiaddr, bool) {
	g.cmu.Lock()
	defer g.cmu.Unlock()
	addrs, ok := g.children[p]
	return "S", addrs, ok
}

func (g *groupedSources) Relation(p peer.ID) SourceKind {
	g.cmu.Lock()
	_, ok := g.children[p]
	g.cmu.Unlock()
	if ok {
		return KindChild
	}
	return g.staticSources.Relation(p)
}

func (g *groupedSources) connect(n *engineNode, on bool) {
	g.cmu.Lock()
	defer g.cmu.Unlock()
	if on {
		g.children[n.h.ID()] = n.h.Addrs()
	} else {
		delete(g.children, n.h.ID())
	}
}

// A relay sends a child to a sibling that holds the chunks while that
// sibling is a connected child, and never to one its Grouper no longer
// lists, even before the child's departure reached the engine (ChildLeft):
// the server finds the target gone, and its decision state decides again
// (exchange.ServeTargetGone). The target's veto used to be a callback into the
// Grouper under the distribution's lock.
func TestRedirectOnlyToConnectedChildren(t *testing.T) {
	gs := &groupedSources{children: map[peer.ID][]ma.Multiaddr{}}
	relay := newEngineWith(t, func(c *Config) { c.Sources = gs; c.SiblingExchange = true })
	x := randBlob(8*16<<10, 31)
	rx := putBlob(t, relay.mem, "x", x, 16<<10)
	y := randBlob(8*16<<10, 32)
	ry := putBlob(t, relay.mem, "y", y, 16<<10)
	var ws []*engineNode
	for range 3 {
		w := newEngine(t, nil, relay)
		gs.connect(w, true)
		ws = append(ws, w)
	}
	w1, w2, w3 := ws[0], ws[1], ws[2]
	for _, w := range ws[1:] {
		w.h.Peerstore().AddAddrs(w1.h.ID(), w1.h.Addrs(), time.Hour)
	}

	// Connected: w2 is sent to w1, which read x first.
	if got := readBlob(t, w1, rx); !bytes.Equal(got, x) {
		t.Fatal("w1: wrong bytes")
	}
	if got := readBlob(t, w2, rx); !bytes.Equal(got, x) {
		t.Fatal("w2: wrong bytes")
	}
	if st := w2.eng.Status(); st.RedirectsTaken == 0 {
		t.Fatalf("w2 was never sent to w1, the holder of x: the test proves nothing (%+v)", st)
	}

	// w1 read y, then left: w3 gets y from the relay, not from w1.
	if got := readBlob(t, w1, ry); !bytes.Equal(got, y) {
		t.Fatal("w1: wrong bytes")
	}
	gs.connect(w1, false)
	if got := readBlob(t, w3, ry); !bytes.Equal(got, y) {
		t.Fatal("w3: wrong bytes")
	}
	if st := w3.eng.Status(); st.RedirectsTaken != 0 || st.SiblingFailures != 0 {
		t.Fatalf("w3 was sent to a sibling %d times (%d failed), though the only holder of y had left", st.RedirectsTaken, st.SiblingFailures)
	}
}
