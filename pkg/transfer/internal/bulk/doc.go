// Package bulk is omst's bulk path: plain TCP connections, opened with
// one-time tickets that the admitted libp2p session issues, that carry
// the fetch protocol's chunk requests and replies beside libp2p's
// multiplexed, encrypted streams (docs/protocol.md, "The bulk path").
package bulk
