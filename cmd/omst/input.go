package main

import (
	"context"
	"io"
)

// interruptible returns a reader of r whose Read fails as soon as ctx ends,
// even while a Read of r blocks (standard input from a pipe or a terminal):
// r is read ahead by a goroutine. After ctx ends the pending Read of r is
// abandoned and its bytes dropped. Close stops the goroutine once its
// pending Read returns.
//
// With it, a put interrupted by SIGINT or SIGTERM sends ABORT at once
// (rpcbridge.Client.Put checks ctx after each Read) instead of waiting for
// more input.
func interruptible(ctx context.Context, r io.Reader) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		_, err := io.CopyBuffer(pw, r, make([]byte, 1<<20))
		pw.CloseWithError(err) // nil: io.EOF for the reader
	}()
	stop := context.AfterFunc(ctx, func() { pr.CloseWithError(context.Cause(ctx)) })
	return &ctxPipe{PipeReader: pr, stop: stop}
}

type ctxPipe struct {
	*io.PipeReader
	stop func() bool
}

func (p *ctxPipe) Close() error {
	p.stop()
	return p.PipeReader.Close()
}
