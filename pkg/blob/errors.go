package blob

import "errors"

// Sentinel errors shared by the store, the overlay and the local API. Callers
// compare with errors.Is; producers wrap them with context.
var (
	// ErrNotFound: no such name, manifest or chunk.
	ErrNotFound = errors.New("not found")
	// ErrInvalidName: a name breaks the rules of ValidateName.
	ErrInvalidName = errors.New("invalid name")
	// ErrCorrupt: bytes do not match the hash that names them.
	ErrCorrupt = errors.New("content does not match its hash")
	// ErrBadManifest: a manifest cannot be decoded or is inconsistent.
	ErrBadManifest = errors.New("malformed manifest")
	// ErrNoSpace: the disk or the cache size cap is full.
	ErrNoSpace = errors.New("no space left")
	// ErrUnreachable: the peer that should serve a request cannot be reached.
	ErrUnreachable = errors.New("peer unreachable")
	// ErrSizeMismatch: a blob's size differs from what the caller expected.
	ErrSizeMismatch = errors.New("size mismatch")
	// ErrUnavailable: a name is known but (part of) its blob is nowhere to
	// be had: missing or damaged here, and no source has it. Errors that
	// wrap it may wrap ErrNotFound too (a peer's answer); ErrUnavailable
	// takes precedence.
	ErrUnavailable = errors.New("blob data unavailable")
	// ErrTooBig: a blob exceeds the chunk count its chunk size allows
	// (CheckSize, MaxChunksFor); a bigger chunk size may do.
	ErrTooBig = errors.New("blob too big for its chunk size")
	// ErrForbidden: this node's grid role or name prefixes do not allow
	// the operation (pkg/grid's ErrNotAllowed wraps it).
	ErrForbidden = errors.New("forbidden")
)
