// Package gridstore keeps a node's grid material on disk, in HOME/grid/
// (mode 0700):
//
//	grid.key     the grid key's 32-byte ed25519 seed, 0600 (the root only)
//	grid.pub     the grid's public key, 32 raw bytes (every member)
//	member.cert  this node's certificate (grid's signed binary form)
//	revocations  the newest signed revocation list this node has seen
//	ledger.json  the root's record: next serial, revocation sequence,
//	             redeemed token nonces, the certificates it issued
//	lock         flock(2)ed around every read-modify-write
//
// The root's daemon (redeeming tokens, renewing certificates) and the CLI
// (omst grid admit, revoke) change the ledger concurrently: every change
// to it, and to the revocations file, happens under an exclusive flock of
// the lock file, so that a token is redeemed once and a serial issued once
// across processes. Every write is atomic (a temporary file in the same
// directory, fsynced, renamed over the old one, the directory fsynced), so
// readers without the lock see the old file or the new one, never a part.
package gridstore
