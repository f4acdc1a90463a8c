// Package locate finds the sources of a blob beyond the tree. It asks the
// private DHT (pkg/dht) for the nodes that announced the blob, learns each
// one's site and place (the /omst/info/1.0.0 protocol: whether it is its
// site's gateway, i.e. the root or a head node), and ranks them among the
// tree's own sources (Rank): the child the blob came up through, then nodes
// of this node's site, then (on a gateway) the gateways of other sites,
// head to head, then the parents, then anything else. So a site still
// pays each WAN transfer once: a worker never fetches across the WAN from
// another site while its head can, and a head fetches from another site's
// head instead of through the root.
//
// The decisions are plain code (rank.go: ShouldSearch, Rank); the edge
// (locate.go) searches, caches what it found per blob for a short time, and
// shares one search among concurrent callers; info.go holds the protocol.
//
// A Locator is a transfer.Finder: the transfer engine asks it for sources
// before a fetch (it searches only when ShouldSearch says a closer source
// may exist) and again, forcing a search, when the tree's sources failed
// (the parent is down, or the tree does not know the blob).
package locate
