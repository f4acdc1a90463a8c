// Package node assembles one omst daemon: the home directory (lock,
// identity key, socket), the local store (pkg/cache), the libp2p host
// (pkg/peerhost), the overlay tree (pkg/tree) and the local API server
// (pkg/rpcbridge). Node implements rpcbridge.Backend by composing the
// store and the tree; it holds no distribution logic of its own.
//
// Home directory layout:
//
//	lock          flock'ed by the running daemon; holds its pid
//	identity.key  the libp2p identity (Ed25519), mode 0600
//	cache/        the store (chunk files and the Badger index)
//	omst.sock     the local API socket, mode 0600
//
// With Config.SocketGroup the socket is mode 0660 and the home 0710, both
// with that group, and cache/ 0700 (shareHome).
package node
