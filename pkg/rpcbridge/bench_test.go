package rpcbridge

import (
	"bytes"
	"context"
	"io"
	"testing"
)

// sinkBackend discards uploads (reading them the way the node's chunker
// does: 1 MiB at a time) and serves blobs of zeros.
type sinkBackend struct {
	memBackend
	size int64
}

func (s *sinkBackend) Put(ctx context.Context, name string, r io.Reader, opts PutOptions) (Info, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := io.ReadFull(r, buf)
		n += int64(k)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return Info{Name: name, Size: uint64(n)}, nil
		}
		if err != nil {
			return Info{}, err
		}
	}
}

type zeros struct{ left int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.left == 0 {
		return 0, io.EOF
	}
	n := int64(len(p))
	if n > z.left {
		n = z.left
	}
	z.left -= n
	return int(n), nil
}

func (s *sinkBackend) Open(ctx context.Context, name string) (Info, io.ReadCloser, error) {
	return Info{Name: name, Size: uint64(s.size)}, io.NopCloser(&zeros{s.size}), nil
}

func BenchmarkPut(b *testing.B) {
	const size = 64 << 20
	ts := startServer(b, &sinkBackend{}, ServerOptions{})
	c := dial(b, ts.path)
	data := make([]byte, size)
	b.SetBytes(size)
	for b.Loop() {
		if _, err := c.Put(context.Background(), "x", bytes.NewReader(data), PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	const size = 64 << 20
	ts := startServer(b, &sinkBackend{size: size}, ServerOptions{})
	c := dial(b, ts.path)
	b.SetBytes(size)
	for b.Loop() {
		if _, err := c.Get(context.Background(), "x", io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetSmall(b *testing.B) {
	m := newMem()
	m.store("small", []byte("hello"), PutOptions{})
	ts := startServer(b, m, ServerOptions{})
	c := dial(b, ts.path)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Get(context.Background(), "small", io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStat(b *testing.B) {
	m := newMem()
	m.store("small", []byte("hello"), PutOptions{})
	ts := startServer(b, m, ServerOptions{})
	c := dial(b, ts.path)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Stat(context.Background(), "small"); err != nil {
			b.Fatal(err)
		}
	}
}
