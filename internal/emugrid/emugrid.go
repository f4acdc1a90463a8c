// Package emugrid builds an emulated grid inside one process: real omst
// nodes (real stores, real tree protocol) on go-libp2p's mocknet, whose
// links have a bandwidth and a latency. A root (the master), one head node
// per site linked to the root over WAN links, and workers linked to their
// head and to each other (a site's LAN) over LAN links. It backs `omst
// demo` and in-process tests.
//
// mocknet limits each link with one rate limiter shared by both directions
// and every stream on it, so a link behaves as one shared pipe. Its limiter
// grants a burst of up to one second of bandwidth after idle; Grid.Reset
// clears that allowance, and callers reset right before a timed transfer.
package emugrid

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/omst-project/omst/pkg/node"
	"github.com/omst-project/omst/pkg/peerhost"
)

// Link describes an emulated link.
type Link struct {
	Bandwidth float64       // bytes per second; 0 = unlimited
	Latency   time.Duration // one way
}

// Topology describes a grid.
type Topology struct {
	Sites          int
	WorkersPerSite int
	WAN            Link // root <-> head
	LAN            Link // head <-> worker
	// Star, when set, links every worker straight to the root over a link
	// of WAN.Bandwidth / (number of workers): the fair share of the
	// master's uplink when it sends to every worker itself. No head nodes.
	Star   bool
	Window int // chunks in flight per fetch (0 = default)
}

// Grid is a running emulated grid.
type Grid struct {
	Root    *node.Node
	Heads   []*node.Node   // one per site (empty for a star)
	Workers [][]*node.Node // per site
	net     mocknet.Mocknet
	links   []linkSpec
	dir     string
	ownDir  bool
}

type linkSpec struct {
	l    mocknet.Link
	opts mocknet.LinkOptions
}

// Build starts the nodes of t with home directories under dir (a fresh
// temporary directory when dir is ""), and waits until every node is
// connected to its parent.
func Build(ctx context.Context, t Topology, dir string) (g *Grid, err error) {
	if t.Sites < 1 || t.WorkersPerSite < 1 {
		return nil, fmt.Errorf("emugrid: need at least one site and one worker per site, got %d x %d", t.Sites, t.WorkersPerSite)
	}
	g = &Grid{net: mocknet.New(), dir: dir}
	if dir == "" {
		if g.dir, err = os.MkdirTemp("", "omst-emugrid-"); err != nil {
			return nil, err
		}
		g.ownDir = true
	}
	defer func() {
		if err != nil {
			g.Close()
			g = nil
		}
	}()
	if g.Root, err = g.start(ctx, "root", nil, "", t.Window, node.Config{}); err != nil {
		return nil, err
	}
	nWorkers := t.Sites * t.WorkersPerSite
	for s := 0; s < t.Sites; s++ {
		site := fmt.Sprintf("site%d", s)
		parent, uplink := g.Root, t.LAN
		if t.Star {
			uplink = Link{Bandwidth: t.WAN.Bandwidth / float64(nWorkers), Latency: t.WAN.Latency}
		} else {
			head, err := g.start(ctx, site+"-head", g.Root, site, t.Window, node.Config{})
			if err != nil {
				return nil, err
			}
			if err := g.link(g.Root, head, t.WAN); err != nil {
				return nil, err
			}
			g.Heads = append(g.Heads, head)
			parent = head
		}
		var ws []*node.Node
		for w := 0; w < t.WorkersPerSite; w++ {
			wn, err := g.start(ctx, fmt.Sprintf("%s-w%d", site, w), parent, site, t.Window, node.Config{NoReplicate: true})
			if err != nil {
				return nil, err
			}
			if err := g.link(parent, wn, uplink); err != nil {
				return nil, err
			}
			ws = append(ws, wn)
		}
		if !t.Star {
			// A site's workers reach each other over its LAN, as the
			// head assumes when it redirects a worker to a sibling;
			// without a link every such request failed, and some
			// stalled the worker for 2 s first.
			for i := range ws {
				for j := i + 1; j < len(ws); j++ {
					if err := g.link(ws[i], ws[j], t.LAN); err != nil {
						return nil, err
					}
				}
			}
		}
		g.Workers = append(g.Workers, ws)
	}
	return g, g.waitConnected(ctx)
}

// start creates a mocknet host and a node on it. The link to the parent is
// made by the caller right after; the node's parent keeper retries until then.
func (g *Grid) start(ctx context.Context, name string, parent *node.Node, site string, window int, extra node.Config) (*node.Node, error) {
	h, err := g.net.GenPeer()
	if err != nil {
		return nil, fmt.Errorf("emugrid: new peer %s: %w", name, err)
	}
	cfg := extra
	cfg.Home = filepath.Join(g.dir, name)
	cfg.Host = h
	cfg.NoSocket = true
	cfg.Site = site
	cfg.Window = window
	cfg.CacheSize = 1 << 30
	if parent != nil {
		cfg.Parent = peerhost.FullAddrs(parent.Host())[0]
	}
	n, err := node.Start(ctx, cfg)
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("emugrid: start %s: %w", name, err)
	}
	return n, nil
}

func (g *Grid) link(a, b *node.Node, l Link) error {
	ml, err := g.net.LinkPeers(a.ID(), b.ID())
	if err != nil {
		return fmt.Errorf("emugrid: link: %w", err)
	}
	o := mocknet.LinkOptions{Latency: l.Latency, Bandwidth: l.Bandwidth}
	ml.SetOptions(o)
	g.links = append(g.links, linkSpec{l: ml, opts: o})
	return nil
}

// Reset clears every link's burst allowance: call it right before a timed
// transfer so the links run at their configured bandwidth from the start.
func (g *Grid) Reset() {
	for _, s := range g.links {
		s.l.SetOptions(s.opts)
	}
}

// AllWorkers returns every worker, site by site.
func (g *Grid) AllWorkers() []*node.Node {
	var out []*node.Node
	for _, ws := range g.Workers {
		out = append(out, ws...)
	}
	return out
}

func (g *Grid) waitConnected(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var nodes []*node.Node
	nodes = append(nodes, g.Heads...)
	nodes = append(nodes, g.AllWorkers()...)
	for _, n := range nodes {
		for {
			st, err := n.Status(ctx)
			if err == nil && st.ParentConnected {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("emugrid: node %s not connected to its parent: %w", n.ID(), ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// Close stops every node and removes the home directories Build created.
func (g *Grid) Close() error {
	var errs []error
	all := append([]*node.Node{}, g.AllWorkers()...)
	all = append(all, g.Heads...)
	if g.Root != nil {
		all = append(all, g.Root)
	}
	for _, n := range all {
		errs = append(errs, n.Close())
	}
	errs = append(errs, g.net.Close())
	if g.ownDir {
		errs = append(errs, os.RemoveAll(g.dir))
	}
	return errors.Join(errs...)
}

// Hosts returns the libp2p hosts of every node (root first).
func (g *Grid) Hosts() []host.Host { return g.net.Hosts() }
