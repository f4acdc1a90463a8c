package transfer

import (
	"context"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/source"
)

// ProtoFetch is the fetch protocol's ID; docs/protocol.md specifies every
// message byte by byte. 1.1.0 added REPORT, MANIFEST (manifests moved here
// from the names protocol), GET_DIRECT and the REDIRECT reply; 1.2.0 adds
// GET_SIBLING, a GET that says the asker is of the server's site; 1.3.0
// lets a chunk's reply come in verified pieces; 1.4.0 lets a relay deflect
// a child's GET_DIRECT (a REDIRECT to a complete holder, or BUSY).
const ProtoFetch = fetchwire.ProtoFetch

// ProtoFetch130 is the version before deflected GET_DIRECTs, still served
// and spoken.
const ProtoFetch130 = fetchwire.ProtoFetch130

// ProtoFetch120 is the version before pieces, still served and spoken.
const ProtoFetch120 = fetchwire.ProtoFetch120

// ProtoFetch110 is the previous version, still served and spoken: a 1.1.0
// stream carries no GET_SIBLING (a client sends a plain GET instead).
const ProtoFetch110 = fetchwire.ProtoFetch110

// SourceKind says how a peer relates to this node: where the bytes a node
// receives come from, and where those it sends go, by kind, is what its
// status reports (Status.BytesIn, Status.BytesOut, by its String: parent,
// child, sibling, other).
type SourceKind = source.Kind

// The kinds of peers.
const (
	// KindParent is the node's parent or one of its fallback parents.
	KindParent = source.KindParent
	// KindChild is a child of the node (for a source: the child a blob
	// came up through, it was put below).
	KindChild = source.KindChild
	// KindSibling is another node of the same site.
	KindSibling = source.KindSibling
	// KindOther is any other peer (e.g. a provider found in a DHT).
	KindOther = source.KindOther
)

// Source is a peer that may serve a blob's manifest and chunks: its ID and
// Kind (what it is to this node).
type Source = source.Source

// Provider supplies the sources of blobs: the tree does (the child a blob
// was announced through, then the parents); siblings of the same site and
// a DHT are further providers. Its methods are safe for concurrent use.
type Provider interface {
	// Sources returns the peers to fetch blob id from, best first. It
	// never includes this node, nor exclude (the peer whose request this
	// node is serving, so that pull-through never loops back), nor the
	// same peer twice. An empty list means that from here the blob has no
	// source.
	Sources(id cid.Cid, exclude peer.ID) []Source
	// Describe names p for messages and logs, e.g. "parent
	// /ip4/10.0.0.1/tcp/4040/p2p/12D3KooW...".
	Describe(p peer.ID) string
	// Relation returns what p is to this node: KindParent (a parent or a
	// fallback), KindChild, or KindOther for any other peer.
	Relation(p peer.ID) SourceKind
}

// Grouper is implemented by a Provider that knows which peers asking this
// node are its children, and their groups (the tree: a relay's children
// and their sites). A relay with Config.SiblingExchange sends a child that
// asks for a chunk to a sibling of the same group.
type Grouper interface {
	// Group returns p's group and addresses if p is a connected child.
	Group(p peer.ID) (group string, addrs []ma.Multiaddr, ok bool)
}

// Want is what a Finder is asked for: the sources of one blob.
type Want struct {
	ID cid.Cid
	// Exclude is the peer whose request this node is serving ("" for a
	// fetch of its own): never a source, so that pull-through never loops.
	Exclude peer.ID
	// Origin is the peer ID (text) of the node that put the blob, when
	// known; "" if not.
	Origin string
	// Force asks for a search even where the policy would not make one:
	// the sources given have failed.
	Force bool
}

// Finder looks for sources beyond a Provider's own (e.g. the nodes that
// announced a blob in a DHT). Its methods are safe for concurrent use.
type Finder interface {
	// Find returns the sources to fetch w.ID from, best first: the
	// Provider's own (given, as Sources returned them) with the sources
	// found beyond them ranked in. It searches, within ctx, only when its
	// policy says a closer source may exist or w.Force is set; otherwise
	// it returns what it found before (or given) at once. Like Sources, it
	// never returns this node, w.Exclude, or a peer twice.
	Find(ctx context.Context, w Want, given []Source) []Source
}
