// Package rpcbridge is the daemon's local API: a small versioned binary
// protocol over a unix socket ($OMST_HOME/omst.sock, mode 0600; with
// ListenGroup mode 0660 and a chosen group, `omst daemon --socket-group`),
// the server side (serving any Backend; the node implements it) and the Go
// client used by the omst CLI.
//
// The protocol is specified in docs/rpcbridge.md, precisely enough to write
// a client in another language. In short: every frame is an 8-byte header
// (u32 body length, u8 type, three zero bytes) and a body of at most 16 MiB;
// integers are big-endian, strings are u32-length-prefixed. A connection
// starts with HELLO (magic "OMST" + version) both ways, then carries one
// request at a time: PUT (then DATA frames, an empty DATA ends the upload
// and is the only end that stores it, ABORT cancels it, a cut connection
// makes the put reader fail with ErrUploadIncomplete), PUT_FILE, GET (reply
// INFO, DATA..., END or ERROR),
// GET_FILE, STAT, LIST, REMOVE and STATUS (a JSON document). Errors are
// ERROR frames with a numeric Code that maps to the blob sentinel errors,
// so errors.Is works across the socket.
//
// Encoding and decoding are pure functions over bytes (wire.go); the IO
// loops are in server.go and client.go.
package rpcbridge
