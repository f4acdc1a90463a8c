package node

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/transfer"
)

// Providers returns who holds the blob named name (or whose ID name is)
// in full: this node if it does, then the nodes that announced it in the
// DHT, with the site and place each told.
func (n *Node) Providers(ctx context.Context, name string) (rpcbridge.Providers, error) {
	id, ok := blob.ParseID(name)
	if !ok {
		if err := blob.ValidateName(name); err != nil {
			return rpcbridge.Providers{}, err
		}
		rec, _, err := n.lookup(ctx, name, false)
		if err != nil {
			return rpcbridge.Providers{}, err
		}
		id = rec.ID
	}
	if n.loc == nil {
		return rpcbridge.Providers{}, fmt.Errorf("providers of %q: this daemon runs without the DHT (--no-dht)", name)
	}
	out := rpcbridge.Providers{ID: id.String()}
	if n.store.HasBlob(id) {
		out.Providers = append(out.Providers, rpcbridge.Provider{
			Peer: n.host.ID().String(), Site: n.cfg.Site, Gateway: n.tree.Gateway(), Known: true, Self: true})
	}
	for _, p := range n.loc.Providers(ctx, id) {
		out.Providers = append(out.Providers, rpcbridge.Provider{Peer: p.ID.String(), Site: p.Site, Gateway: p.Gateway, Known: p.Known})
	}
	return out, nil
}

// peers lists the connected peers with their role: parent, child, sibling
// (a node that told this one it is of its site), dht (in the routing
// table), other; by role, then ID.
func (n *Node) peers() []rpcbridge.Peer {
	rank := map[string]int{"parent": 0, "child": 1, "sibling": 2, "dht": 3, "other": 4}
	var out []rpcbridge.Peer
	for _, p := range n.host.Network().Peers() {
		pe := rpcbridge.Peer{ID: p.String()}
		pe.Role, pe.Site = n.roleOf(p)
		for _, c := range n.host.Network().ConnsToPeer(p) {
			pe.Addrs = append(pe.Addrs, c.RemoteMultiaddr().String())
		}
		out = append(out, pe)
	}
	slices.SortFunc(out, func(a, b rpcbridge.Peer) int {
		return cmp.Or(rank[a.Role]-rank[b.Role], cmp.Compare(a.ID, b.ID))
	})
	return out
}

func (n *Node) roleOf(p peer.ID) (role, site string) {
	known := false
	if n.loc != nil {
		if in, ok := n.loc.Known(p); ok {
			site, known = in.Site, true
		}
	}
	switch n.tree.Relation(p) {
	case transfer.KindParent:
		return "parent", site
	case transfer.KindChild:
		if s, _, ok := n.tree.Group(p); ok {
			site = s
		}
		return "child", site
	}
	switch {
	case known && site == n.cfg.Site:
		return "sibling", site
	case n.dht != nil && n.dht.InRoutingTable(p):
		return "dht", site
	}
	return "other", site
}
