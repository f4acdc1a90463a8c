package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// blobInfo is what the putter publishes about a blob, for verification.
type blobInfo struct {
	Name   string `json:"name"`
	ID     string `json:"id"` // the CID the daemon returned to the putter
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Site   int    `json:"site"`
	Index  int    `json:"index"`
}

// errWrongBytes marks a verification failure: a transfer that completed
// with another blob ID, size or content than the putter's.
var errWrongBytes = errors.New("wrong bytes")

// putPayload puts size deterministic bytes (seed, stream) under name and
// returns what a fetcher must see.
func putPayload(ctx context.Context, cl *rpcbridge.Client, name string, seed, stream, size, chunkSize int64) (blobInfo, error) {
	dg := newDigest()
	info, err := cl.Put(ctx, name, io.TeeReader(payload(seed, stream, size), dg), rpcbridge.PutOptions{ChunkSize: int(chunkSize)})
	if err != nil {
		return blobInfo{}, fmt.Errorf("put %s (%d bytes): %w", name, size, err)
	}
	if dg.n != size || int64(info.Size) != size {
		return blobInfo{}, fmt.Errorf("put %s: sent %d bytes, daemon stored %d, want %d", name, dg.n, info.Size, size)
	}
	return blobInfo{Name: name, ID: info.ID, Size: size, SHA256: dg.Sum()}, nil
}

// fetchVerify gets want.Name through the local daemon, hashing the bytes as
// they arrive, and checks the blob ID, the size and the SHA-256 against the
// putter's. A failed GET (name not announced yet, parent unreachable, ...)
// is retried until ctx ends; the attempts are counted in rec. A transfer
// that completes with other bytes is never retried: it fails with
// errWrongBytes.
func fetchVerify(ctx context.Context, cl *rpcbridge.Client, want blobInfo, rec *record, logf func(string, ...interface{})) error {
	var last error
	for attempt := 1; ; attempt++ {
		dg := newDigest()
		info, err := cl.Get(ctx, want.Name, dg)
		rec.Attempts, rec.Bytes = attempt, dg.n
		if err == nil {
			rec.ID = info.ID
			switch {
			case info.ID != want.ID:
				return fmt.Errorf("%w: %s has blob ID %s, the putter's is %s", errWrongBytes, want.Name, info.ID, want.ID)
			case dg.n != want.Size || int64(info.Size) != want.Size:
				return fmt.Errorf("%w: %s: got %d bytes (info says %d), want %d", errWrongBytes, want.Name, dg.n, info.Size, want.Size)
			case dg.Sum() != want.SHA256:
				return fmt.Errorf("%w: %s: SHA-256 %s, the putter's is %s", errWrongBytes, want.Name, dg.Sum(), want.SHA256)
			}
			return nil
		}
		last = err
		switch rpcbridge.CodeOf(err) {
		case rpcbridge.CodeInvalidName, rpcbridge.CodeBadRequest:
			return fmt.Errorf("get %s: %w", want.Name, err)
		}
		if attempt <= 3 || attempt%20 == 0 {
			logf("get %s: attempt %d failed after %d bytes: %v", want.Name, attempt, dg.n, err)
		}
		backoff := time.Duration(attempt) * 50 * time.Millisecond
		if backoff > time.Second {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("get %s: gave up after %d attempts: %w (last error: %v)", want.Name, attempt, ctx.Err(), last)
		case <-time.After(backoff):
		}
	}
}
