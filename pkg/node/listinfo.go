package node

import (
	"context"
	"sync"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// A name this node knows without its blob's manifest (announced from
// below, or looked up) lists with no chunk size and count, where stat,
// which fetches the manifest, shows them. List fetches the missing ones,
// bounded so that ls stays quick: at most listManifests per call,
// listManifestWorkers at once, all within listManifestTime. A manifest
// fetched is kept, so the next ls has it at once; one that could not be
// had in time leaves the fields 0 ("unknown here").
const (
	listManifests       = 256
	listManifestWorkers = 8
	listManifestTime    = 3 * time.Second
)

// fillManifests sets the chunk size and count of the entries of out
// (List's, built from recs) whose manifest is not in the store.
func (n *Node) fillManifests(ctx context.Context, recs []blob.Record, out []rpcbridge.Info) {
	var missing []int
	for i := range out {
		if out[i].ChunkSize == 0 && len(missing) < listManifests {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 || n.engine == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, listManifestTime)
	defer cancel()
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(listManifestWorkers, len(missing)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				m, err := n.engine.Manifest(ctx, recs[i].ID)
				if err != nil {
					n.log.Debug("ls: manifest not available", "name", recs[i].Name, "id", recs[i].ID, "err", err)
					continue
				}
				out[i].ChunkSize = m.ChunkSize
				out[i].Chunks = uint32(len(m.Chunks))
			}
		}()
	}
	for _, i := range missing {
		select {
		case work <- i:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
}
