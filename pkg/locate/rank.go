package locate

import (
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/transfer"
)

// Self is this node's place, as the decisions need it.
type Self struct {
	ID      peer.ID
	Site    string
	Gateway bool // the root, a head node, or a node of a flat cluster
}

// Peer is a node found beyond the tree (a provider of a blob) and what was
// learned of it.
type Peer struct {
	ID      peer.ID
	Site    string
	Gateway bool
	// Known: its info was obtained; an unknown peer ranks last.
	Known bool
}

// ShouldSearch decides whether to look beyond the tree for sources of a
// blob, given the tree's sources (given, best first) and the blob's origin
// (the peer ID, as text, of the node that put it; "" if unknown):
//   - force (the given sources failed) or no given source: search;
//   - the blob came up through a child (given[0] is a child): no, it is
//     below us;
//   - not a gateway: no, the parent is in this site and searches itself;
//   - the origin is one of the given sources (e.g. the parent made the
//     put): no, the tree's path is the direct one;
//   - else (a gateway about to fetch through its parent a blob put
//     elsewhere, or of unknown origin): search, another site's head may
//     hold it.
func ShouldSearch(self Self, given []transfer.Source, origin string, force bool) bool {
	switch {
	case force || len(given) == 0:
		return true
	case given[0].Kind == transfer.KindChild:
		return false
	case !self.Gateway:
		return false
	case origin != "" && slices.ContainsFunc(given, func(s transfer.Source) bool { return s.ID.String() == origin }):
		return false
	case origin == self.ID.String():
		return false
	}
	return true
}

// Tiers of Rank, best first.
const (
	tierChild    = iota // the child the blob came up through
	tierSameSite        // a found node of this node's site
	tierGateway         // a found gateway of another site (on a gateway)
	tierTree            // the parents, in the tree's order
	tierFarGate         // a found gateway of another site (on a non-gateway)
	tierElse            // any other found node: another site's worker, unknown
)

// Rank merges the tree's sources (given, best first) with the peers found
// beyond the tree, best first: the child the blob came up through; nodes
// of this site; on a gateway, the gateways of other sites (head to head);
// the parents; on a non-gateway, the gateways of other sites; then the
// rest (other sites' non-gateways, peers whose info is unknown). The order
// within a tier is the given order, then the found order. self.ID, exclude
// and repeats are left out; a found peer that is also given keeps its
// given place and kind.
func Rank(self Self, given []transfer.Source, found []Peer, exclude peer.ID) []transfer.Source {
	type ranked struct {
		src  transfer.Source
		tier int
	}
	var out []ranked
	seen := map[peer.ID]bool{self.ID: true, exclude: true, "": true}
	for _, s := range given {
		if seen[s.ID] {
			continue
		}
		seen[s.ID] = true
		tier := tierTree
		if s.Kind == transfer.KindChild {
			tier = tierChild
		}
		out = append(out, ranked{s, tier})
	}
	for _, p := range found {
		if seen[p.ID] {
			continue
		}
		seen[p.ID] = true
		src := transfer.Source{ID: p.ID, Kind: transfer.KindOther}
		tier := tierElse
		switch {
		case !p.Known:
		case p.Site == self.Site:
			src.Kind, tier = transfer.KindSibling, tierSameSite
		case p.Gateway && self.Gateway:
			tier = tierGateway
		case p.Gateway:
			tier = tierFarGate
		}
		out = append(out, ranked{src, tier})
	}
	slices.SortStableFunc(out, func(a, b ranked) int { return a.tier - b.tier })
	srcs := make([]transfer.Source, len(out))
	for i, r := range out {
		srcs[i] = r.src
	}
	return srcs
}
