package tree

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
)

// Engine is the transfer engine's side of the tree (transfer.Engine
// implements it): the pushes it serves and takes (Pusher), and the events
// the tree tells it. The engine is built after the tree, which it reads
// its sources from, and subscribes to these events with Subscribe before
// the tree starts. Its methods are safe for concurrent use.
type Engine interface {
	Pusher
	// Preheat fetches r's blob into the store and returns when it is
	// there (or ctx ends): a parent's PREHEAT asks for it (see
	// Tree.Preheat); its error is the PREHEAT's answer.
	Preheat(ctx context.Context, r blob.Record) error
	// Replicate is called, on a node with a parent and in its own
	// goroutine, with every record that a child announced about a blob it
	// put itself: a relay copies such blobs, so that a result is durable
	// once its head node holds a copy.
	Replicate(r blob.Record)
	// ChildLeft is called with a child's peer ID each time its session
	// ends (its tree stream closed, failed or went silent), after Group
	// stopped listing it, unless a newer session of the same peer has
	// replaced it: a relay's engine forgets the child as a holder of
	// chunks. It must not block.
	ChildLeft(p peer.ID)
}

// Subscribe makes e receive the tree's events and serve its pushes. It
// must be called before Start, at most once; without it the tree pushes
// nothing, takes no push and answers a PREHEAT with an error.
func (t *Tree) Subscribe(e Engine) error {
	if e == nil {
		return errors.New("tree: subscribe: no engine")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.started || t.closed:
		return errors.New("tree: subscribe after start")
	case t.eng != nil:
		return errors.New("tree: an engine has subscribed already")
	}
	t.eng = e
	return nil
}

// Parents is a node's parents in the order it tries them (the parent,
// then its fallbacks) and which of them is current; the tree moves the
// current one as it fails over (keeper.go). NewParents makes it before the
// tree, so that a part built before the tree can follow the tree's
// parents: the daemon's admission, which its libp2p host needs before the
// tree can exist, forwards join requests up through IDs. Config.Parents
// hands it to the tree. Safe for concurrent use.
type Parents struct {
	list []peer.AddrInfo
	cur  atomic.Int32
}

// NewParents returns parent then fallbacks as a node's parents (none for a
// root: parent nil). Fallbacks without a parent, or a parent given twice,
// are refused.
func NewParents(parent *peer.AddrInfo, fallbacks []peer.AddrInfo) (*Parents, error) {
	p := &Parents{}
	if parent == nil {
		if len(fallbacks) > 0 {
			return nil, errors.New("tree: fallback parents without a parent")
		}
		return p, nil
	}
	p.list = append(append(p.list, *parent), fallbacks...)
	for i, a := range p.list {
		for _, b := range p.list[:i] {
			if a.ID == b.ID {
				return nil, fmt.Errorf("tree: parent %s given twice", a.ID)
			}
		}
	}
	return p, nil
}

// IDs returns the parents' peer IDs, the current one first (nil at the
// root).
func (p *Parents) IDs() []peer.ID {
	if p == nil || len(p.list) == 0 {
		return nil
	}
	c := int(p.cur.Load())
	out := []peer.ID{p.list[c].ID}
	for i, q := range p.list {
		if i != c {
			out = append(out, q.ID)
		}
	}
	return out
}
