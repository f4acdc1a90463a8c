package tree

import (
	"context"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/omst-project/omst/pkg/blob"
)

// BenchmarkParentFetch measures a worker fetching a 128 MiB blob (1 MiB
// chunks) from its parent over loopback libp2p (TCP+TLS+yamux), against the
// limit measured side by side: one raw libp2p stream between the same hosts.
//
//	go test -run '^$' -bench ParentFetch -benchtime 3x ./pkg/tree
func BenchmarkParentFetch(b *testing.B) {
	const size = 128 << 20
	root := newNode(b, nil, "master", nil)
	data := randBlob(size, 9)
	rec := put(b, root, "bench", data, blob.DefaultChunkSize)

	// The limit: a plain stream copy between two hosts.
	sink := newTestHost(b)
	const rawProto = "/omst-bench/raw"
	sink.SetStreamHandler(rawProto, func(s network.Stream) { io.Copy(io.Discard, s); s.Close() })
	ctx := context.Background()
	if err := root.h.Connect(ctx, *(&testNode{h: sink}).info()); err != nil {
		b.Fatal(err)
	}
	raw := func() float64 {
		s, err := root.h.NewStream(ctx, sink.ID(), rawProto)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for off := 0; off < size; off += 1 << 20 {
			if _, err := s.Write(data[off : off+1<<20]); err != nil {
				b.Fatal(err)
			}
		}
		s.CloseWrite()
		io.Copy(io.Discard, s)
		return size / time.Since(start).Seconds() / 1e6
	}

	var omst, limit float64
	for b.Loop() {
		w := newNode(b, root, "siteA", nil, func(c *nodeCfg) {
			if n, err := strconv.Atoi(os.Getenv("TREE_BENCH_STREAMS")); err == nil {
				c.Engine.StreamsPerPeer = n
			}
			if n, err := strconv.Atoi(os.Getenv("TREE_BENCH_WINDOW")); err == nil {
				c.Engine.Window = n
			}
		})
		start := time.Now()
		if err := w.eng.Fetch(ctx, rec); err != nil {
			b.Fatal(err)
		}
		omst += size / time.Since(start).Seconds() / 1e6
		w.stop()
		limit += raw()
	}
	omst /= float64(b.N)
	limit /= float64(b.N)
	b.ReportMetric(omst, "MB/s")
	b.ReportMetric(limit, "raw-stream-MB/s")
	b.ReportMetric(omst/limit, "ratio")
	b.Logf("parent fetch %.0f MB/s; one raw libp2p stream %.0f MB/s (limit); ratio %.2f", omst, limit, omst/limit)
}
