// Package member admits peers to a grid: only a peer that has shown a
// valid membership certificate (pkg/grid) is served or asked anything.
//
// An Admission holds this node's grid material: the grid's public key, its
// own certificate, the newest revocation list. Wrap puts it in front of a
// libp2p host, on TCP and QUIC alike:
//
//   - Right after a connection is up, each side sends its certificate (and
//     its revocation list) on a HELLO stream, /omst/member/1.0.0, and the
//     other answers OK or why not. A peer whose certificate checks (this
//     grid's signature, this peer, within its validity, not revoked) is
//     admitted until the certificate ends or is revoked.
//   - Every stream handler registered through the wrapped host (tree,
//     names, fetch, INFO, the DHT) first waits, bounded, until the remote
//     peer is admitted, and resets the stream otherwise; every NewStream
//     through it waits until the peer it opens to is admitted. A peer
//     admitted before (a reconnect) costs no wait.
//   - A connection whose peer has not been admitted within Timeout is
//     closed, and the gater refuses, for ShunFor, peers that showed a
//     revoked certificate (a newer one, not on the list, admits them
//     again). A stream to a new member waits until it answered this
//     node's HELLO (its limits before admission are small: pkg/peerhost).
//   - /omst/join/1.0.0, the one protocol served to non-members, redeems a
//     join token (or renews a member's certificate) at the root,
//     forwarded up the tree by each member that is not the root. A
//     request is read and checked before it takes a slot; redemptions and
//     renewals have slots of their own; a peer that is not a member has
//     one join stream at a time, and each subject a rate (joinlimit.go).
//
// A newer revocation list, learnt from a HELLO or installed locally, is
// kept, checked against every connected peer (revoked ones are cut off)
// and sent on to every connected peer: it floods the grid in a round
// trip per hop.
//
// An Admission without grid material is open: everything passes, as for a
// quick start on one machine. It can be closed later (SetMaterial).
package member
