package transfer

import (
	"context"
	"errors"
	"fmt"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
)

// Manifest returns the manifest of blob id: from the store, else fetched
// from the blob's sources, verified against id and stored.
func (e *Engine) Manifest(ctx context.Context, id cid.Cid) (*blob.Manifest, error) {
	m, err := e.store.Manifest(id)
	if err == nil {
		return m, nil
	}
	if !errors.Is(err, blob.ErrNotFound) {
		return nil, fmt.Errorf("manifest %s: local store: %w", id, err)
	}
	return e.fetchManifest(ctx, id, e.sources.Sources(id, ""))
}

// fetchManifest asks each source in turn for the manifest of id.
func (e *Engine) fetchManifest(ctx context.Context, id cid.Cid, sources []Source) (*blob.Manifest, error) {
	if len(sources) == 0 {
		return nil, fmt.Errorf("manifest %s: %w (no source to ask)", id, blob.ErrNotFound)
	}
	var errs []error
	for _, src := range sources {
		b, err := e.request(ctx, src.ID, fetchRequest{Type: msgManifest, ID: id})
		if err != nil {
			if !errors.Is(err, blob.ErrNotFound) && ctx.Err() == nil {
				e.notePeerError(src.ID, "fetch manifest", err)
			}
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		m, err := blob.VerifyManifest(id, b)
		if err != nil {
			e.notePeerError(src.ID, "manifest", err)
			errs = append(errs, fmt.Errorf("%s: %w", e.describe(src.ID), err))
			continue
		}
		if _, err := e.store.PutManifest(m); err != nil {
			e.log.Warn("store manifest", "id", id, "err", err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("manifest %s: %w", id, errors.Join(errs...))
}
