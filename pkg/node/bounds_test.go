package node

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// zeros reads as a stream of zero bytes, counting them.
type zeros struct{ n atomic.Int64 }

func (z *zeros) Read(p []byte) (int, error) {
	clear(p)
	z.n.Add(int64(len(p)))
	return len(p), nil
}

// A worker's put of a stream of zeros in 4 KiB chunks past the chunk
// bound (issue 24: 64 GiB of them made its head replicate a manifest of
// 16 million chunks) fails at the worker's own daemon once the stream
// passes 256 MiB, naming the chunk size that would do; its head learns
// nothing of it.
func TestPutPastChunkBound(t *testing.T) {
	dir := t.TempDir()
	head := startNode(t, filepath.Join(dir, "head"), "", "")
	worker := startNode(t, filepath.Join(dir, "w"), head.Addrs()[0], "a")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	z := &zeros{}
	_, err := dial(t, filepath.Join(dir, "w")).Put(ctx, "results/zeros", io.LimitReader(z, 64<<30), rpcbridge.PutOptions{ChunkSize: blob.MinChunkSize})
	if err == nil || !strings.Contains(err.Error(), "use a chunk size of 1 MiB or more") {
		t.Fatalf("put of 64 GiB of zeros in 4 KiB chunks: %v", err)
	}
	t.Logf("refused after %d MiB: %v", z.n.Load()>>20, err)
	if z.n.Load() > 1<<30 {
		t.Fatalf("the client sent %d bytes before the put failed", z.n.Load())
	}
	for _, n := range []*Node{worker, head} {
		if _, err := n.store.Record("results/zeros"); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("a refused put left a record: %v", err)
		}
	}
}
