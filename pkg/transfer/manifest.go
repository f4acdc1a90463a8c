package transfer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
)

// Manifest returns the manifest of blob id: from the store, else fetched
// from the blob's sources, verified against id and stored.
func (e *Engine) Manifest(ctx context.Context, id cid.Cid) (*blob.Manifest, error) {
	return e.manifestFor(ctx, Want{ID: id})
}

// manifestFor is Manifest for w: from the store, else from w's sources,
// else (they failed) from the sources a forced search finds.
func (e *Engine) manifestFor(ctx context.Context, w Want) (*blob.Manifest, error) {
	m, err := e.store.Manifest(w.ID)
	if err == nil {
		return m, nil
	}
	if !errors.Is(err, blob.ErrNotFound) {
		return nil, fmt.Errorf("manifest %s: local store: %w", w.ID, err)
	}
	srcs := e.sourcesFor(ctx, w)
	m, err = e.fetchManifest(ctx, w.ID, srcs)
	if err == nil {
		return m, nil
	}
	if more := e.moreSources(ctx, w, srcs); len(more) > 0 {
		m, err2 := e.fetchManifest(ctx, w.ID, more)
		if err2 == nil {
			return m, nil
		}
		if nf, ok := errors.AsType[*manifestNotFound](err); ok {
			if nf2, ok := errors.AsType[*manifestNotFound](err2); ok {
				return nil, &manifestNotFound{id: w.ID, asked: append(nf.asked, nf2.asked...)}
			}
		}
		err = fmt.Errorf("%w; then from sources found beyond: %w", err, err2)
	}
	return nil, err
}

// manifestNotFound is fetchManifest's error when every source asked
// answered NOT_FOUND (or there was none to ask): said once, with who was
// asked. Each source's answer is its own chain of the hops above it,
// ending in the same "not found"; repeating them made a get of an unknown
// ID print the ID and "not found" once per hop. It wraps blob.ErrNotFound.
type manifestNotFound struct {
	id    cid.Cid
	asked []string // the sources, described
}

func (e *manifestNotFound) Error() string {
	if len(e.asked) == 0 {
		return fmt.Sprintf("manifest %s: %v (no source to ask)", e.id, blob.ErrNotFound)
	}
	return fmt.Sprintf("manifest %s: %v (asked %s)", e.id, blob.ErrNotFound, strings.Join(e.asked, ", "))
}

func (e *manifestNotFound) Unwrap() error { return blob.ErrNotFound }

// sourcesFor returns the sources of w.ID: the Provider's, with the
// Finder's ranked in (Finder.Find).
func (e *Engine) sourcesFor(ctx context.Context, w Want) []Source {
	given := e.sources.Sources(w.ID, w.Exclude)
	if e.cfg.Finder == nil {
		return given
	}
	return e.cfg.Finder.Find(ctx, w, given)
}

// moreSources is a forced search for w, after tried failed: the sources
// found that are not in tried (none without a Finder).
func (e *Engine) moreSources(ctx context.Context, w Want, tried []Source) []Source {
	if e.cfg.Finder == nil || ctx.Err() != nil {
		return nil
	}
	w.Force = true
	var out []Source
	for _, s := range e.cfg.Finder.Find(ctx, w, e.sources.Sources(w.ID, w.Exclude)) {
		if !slices.ContainsFunc(tried, func(t Source) bool { return t.ID == s.ID }) {
			out = append(out, s)
		}
	}
	if len(out) > 0 {
		e.log.Info("sources failed: found more beyond them", "blob", w.ID, "found", len(out), "first", e.describe(out[0].ID))
	}
	return out
}

// fetchManifest asks each source in turn for the manifest of id.
func (e *Engine) fetchManifest(ctx context.Context, id cid.Cid, sources []Source) (*blob.Manifest, error) {
	if len(sources) == 0 {
		return nil, &manifestNotFound{id: id}
	}
	var errs []error
	notFound := true // every source answered NOT_FOUND
	for _, src := range sources {
		b, err := e.client.Request(ctx, src.ID, fetchwire.Request{Type: fetchwire.MsgManifest, ID: id})
		if err != nil {
			if !errors.Is(err, blob.ErrNotFound) && ctx.Err() == nil {
				e.notePeerError(src.ID, "fetch manifest", err)
			}
			errs = append(errs, err)
			notFound = notFound && errors.Is(err, blob.ErrNotFound) && !errors.Is(err, blob.ErrUnreachable)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		m, err := blob.VerifyManifest(id, b)
		if err != nil {
			e.notePeerError(src.ID, "manifest", err)
			errs = append(errs, fmt.Errorf("%s: %w", e.describe(src.ID), err))
			notFound = false
			continue
		}
		if _, err := e.store.PutManifest(m); err != nil {
			e.log.Warn("store manifest", "id", id, "err", err)
		}
		return m, nil
	}
	if notFound && ctx.Err() == nil {
		asked := make([]string, len(sources))
		for i, src := range sources {
			asked[i] = e.describe(src.ID)
		}
		return nil, &manifestNotFound{id: id, asked: asked}
	}
	return nil, fmt.Errorf("manifest %s: %w", id, errors.Join(errs...))
}
