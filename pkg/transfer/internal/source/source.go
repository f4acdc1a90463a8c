// Package source holds what the transfer engine's parts share about the
// peers bytes come from and go to: a Source (a peer that may serve a
// blob's manifest and chunks) and its Kind, the peer's relation to this
// node. pkg/transfer exports both (Source, SourceKind and the Kind
// constants are aliases of these).
package source

import "github.com/libp2p/go-libp2p/core/peer"

// Kind says how a peer relates to this node: where the bytes a node
// receives come from, and where those it sends go, by kind, is what its
// status reports.
type Kind uint8

const (
	// KindParent is the node's parent or one of its fallback parents.
	KindParent Kind = iota
	// KindChild is a child of the node (for a source: the child a blob
	// came up through, it was put below).
	KindChild
	// KindSibling is another node of the same site.
	KindSibling
	// KindOther is any other peer (e.g. a provider found in a DHT).
	KindOther

	// NumKinds is the number of kinds: counters indexed by Kind have it.
	NumKinds = 4
)

// String names k as the status reports it: parent, child, sibling, other.
func (k Kind) String() string {
	switch k {
	case KindParent:
		return "parent"
	case KindChild:
		return "child"
	case KindSibling:
		return "sibling"
	}
	return "other"
}

// Source is a peer that may serve a blob's manifest and chunks, and what
// it is to this node.
type Source struct {
	ID   peer.ID
	Kind Kind
}
