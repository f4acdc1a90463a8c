package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/peerhost"
)

// Two baselines that bound a cold parent fetch from below the raw TCP
// limit, measured in the same run so that the cause of a gap is on record:
//
//   - libp2p-stream: one stream between two libp2p hosts over the same
//     transport omst uses (TCP + TLS 1.3 + yamux on 127.0.0.1), in this
//     process: the cost of the encrypted, multiplexed link.
//   - chunk-files: writing the blob as fresh 1 MiB files (create a temp
//     file, write, close, rename) in the directory where the daemons keep
//     their caches: the cost of caching every chunk on this filesystem.

const libp2pProto = "/omst-bench/raw/1.0.0"

// libp2pPair is a sender and a receiver host, connected.
type libp2pPair struct {
	a, b host.Host
}

func newLibp2pPair(ctx context.Context) (*libp2pPair, error) {
	mk := func() (host.Host, error) {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			return nil, err
		}
		return peerhost.New(peerhost.Options{Key: k, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	}
	a, err := mk()
	if err != nil {
		return nil, err
	}
	b, err := mk()
	if err != nil {
		a.Close()
		return nil, err
	}
	b.SetStreamHandler(libp2pProto, func(s network.Stream) {
		buf := make([]byte, rawBufSize)
		io.CopyBuffer(io.Discard, s, buf)
		s.Write([]byte{'k'}) // everything arrived
		s.Close()
	})
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		a.Close()
		b.Close()
		return nil, fmt.Errorf("libp2p baseline: connect: %w", err)
	}
	return &libp2pPair{a: a, b: b}, nil
}

func (p *libp2pPair) Close() {
	p.a.Close()
	p.b.Close()
}

// run copies size bytes from a to b over one stream and times it until b
// confirms it has read them all.
func (p *libp2pPair) run(ctx context.Context, size int64, buf []byte) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout(size))
	defer cancel()
	s, err := p.a.NewStream(ctx, p.b.ID(), libp2pProto)
	if err != nil {
		return 0, fmt.Errorf("libp2p baseline: open stream: %w", err)
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	start := time.Now()
	for left := size; left > 0; {
		n := int64(len(buf))
		if n > left {
			n = left
		}
		if _, err := s.Write(buf[:n]); err != nil {
			return 0, fmt.Errorf("libp2p baseline: write: %w", err)
		}
		left -= n
	}
	if err := s.CloseWrite(); err != nil {
		return 0, err
	}
	var ack [1]byte
	if _, err := io.ReadFull(s, ack[:]); err != nil {
		return 0, fmt.Errorf("libp2p baseline: no acknowledgement: %w", err)
	}
	return time.Since(start), nil
}

// chunkFilesRun writes size bytes from data as fresh files of chunk bytes
// under dir the way the cache stores chunks, and removes them afterwards.
func chunkFilesRun(dir string, data []byte, chunk int) (time.Duration, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	for i, off := 0, 0; off < len(data); i, off = i+1, off+chunk {
		end := min(off+chunk, len(data))
		f, err := os.CreateTemp(dir, "chunk-*")
		if err != nil {
			return 0, err
		}
		_, werr := f.Write(data[off:end])
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return 0, werr
		}
		if err := os.Rename(f.Name(), filepath.Join(dir, fmt.Sprintf("c%06d", i))); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}
