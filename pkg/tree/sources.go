package tree

import (
	"slices"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer"
)

// The tree is a transfer.Provider: it knows, for a blob, the child it came
// up through and the parents above; and a transfer.Grouper: it knows its
// children and their sites.
var (
	_ transfer.Provider = (*Tree)(nil)
	_ transfer.Grouper  = (*Tree)(nil)
)

// Relation says whether p is one of this node's parents, one of its
// children (connected or not), or another peer.
func (t *Tree) Relation(p peer.ID) transfer.SourceKind {
	if t.parentIndex(p) >= 0 {
		return transfer.KindParent
	}
	t.mu.Lock()
	_, child := t.children[p]
	t.mu.Unlock()
	if child {
		return transfer.KindChild
	}
	return transfer.KindOther
}

// Group returns the group and addresses of p if p is a connected child:
// the site it claimed, but for a worker under the root (a fallback) the
// fallback workers of that site (FallbackGroup), apart from its head.
func (t *Tree) Group(p peer.ID) (string, []ma.Multiaddr, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.children[p]
	if !ok || !c.connected {
		return "", nil, false
	}
	return c.group, c.maddrs, true
}

// Sources returns where to fetch blob id from, best first (SourcesFor):
// the child it was announced through, then the current parent, then the
// fallbacks; never this node nor exclude.
func (t *Tree) Sources(id cid.Cid, exclude peer.ID) []transfer.Source {
	t.mu.Lock()
	v := t.via[id]
	t.mu.Unlock()
	var out []transfer.Source
	for _, p := range SourcesFor(v, t.parentIDs(), t.self, exclude) {
		kind := transfer.KindParent
		if p == v {
			kind = transfer.KindChild
		}
		out = append(out, transfer.Source{ID: p, Kind: kind})
	}
	return out
}

// SourcesFor returns, in order of preference, the peers to fetch a blob
// from: the child it was announced through (via) first, then the parents
// (the current one first, then the fallbacks); self and exclude (the peer
// asking us, so a request never goes back where it came from) are left out,
// and so are empty IDs and repeats.
func SourcesFor(via peer.ID, parents []peer.ID, self, exclude peer.ID) []peer.ID {
	var out []peer.ID
	for _, p := range append([]peer.ID{via}, parents...) {
		if p == "" || p == self || p == exclude || slices.Contains(out, p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// Origin returns the origin (the peer ID, as text, of the node that made
// the put) of the newest record this node has seen for blob id, or "" if
// it has seen none.
func (t *Tree) Origin(id cid.Cid) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.origins[id]
}

// Gateway reports whether this node is its site's way in and out: it has
// no parent (the root, or a node of a flat cluster), or its parent is in
// another site (a head node). It goes by the last parent that welcomed it
// (a head whose parent is down stays a gateway); a node no parent has
// welcomed yet is not a gateway.
func (t *Tree) Gateway() bool {
	if len(t.parents) == 0 {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.parentSeen && t.parentSite != t.cfg.Site
}

// Welcomed reports whether a parent has welcomed this node (so that
// Gateway is known); always true on a node with no parent.
func (t *Tree) Welcomed() bool {
	if len(t.parents) == 0 {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.parentSeen
}

// Site returns this node's site label.
func (t *Tree) Site() string { return t.cfg.Site }

// learnOrigin remembers r's origin for its blob.
func (t *Tree) learnOrigin(r blob.Record) {
	if r.Origin == "" || !r.ID.Defined() {
		return
	}
	t.mu.Lock()
	t.origins[r.ID] = r.Origin
	t.mu.Unlock()
}

// loadRoutes learns, from the store, which blobs came up through which
// child, and the origin of every blob it has a record of.
func (t *Tree) loadRoutes() error {
	routes, err := t.store.Routes()
	if err != nil {
		return err
	}
	recs, err := t.store.List("")
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range recs {
		if r.Origin != "" {
			t.origins[r.ID] = r.Origin
		}
		if v, err := peer.Decode(routes[r.Name]); err == nil {
			t.via[r.ID] = v
		}
	}
	return nil
}
