package transfer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/coalesce"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchclient"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/schedule"
)

// blobFetch drives the Schedule for one blob: it issues the requests the
// schedule returns, feeds results back, and (for a reader) keeps the
// verified chunks that arrived ahead of the reader.
type blobFetch struct {
	e       *Engine
	r       blob.Record
	m       *blob.Manifest
	sources []Source
	want    Want // for a search when every source has failed
	keep    bool // hold fetched chunks for a reader
	// searched: a search for more sources was made (at most one);
	// searching: it is under way (chunks that give up meanwhile wait).
	searched, searching bool

	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	cond  *sync.Cond
	sch   *schedule.Schedule
	ready map[int][]byte
	err   error
	// from counts the chunk bytes each peer delivered to this fetch.
	from map[Source]uint64
}

func (e *Engine) startFetch(ctx context.Context, r blob.Record, m *blob.Manifest, keep bool) *blobFetch {
	w := Want{ID: r.ID, Origin: r.Origin}
	return e.startFetchFrom(ctx, r, m, keep, w, e.sourcesFor(ctx, w))
}

func (e *Engine) startFetchFrom(ctx context.Context, r blob.Record, m *blob.Manifest, keep bool, w Want, sources []Source) *blobFetch {
	bf := &blobFetch{e: e, r: r, m: m, keep: keep, want: w, sources: sources, ready: map[int][]byte{}, from: map[Source]uint64{}}
	bf.cond = sync.NewCond(&bf.mu)
	bf.ctx, bf.cancel = context.WithCancel(ctx)
	present := make([]bool, len(m.Chunks))
	missing := false
	for i, h := range m.Chunks {
		present[i] = e.store.HasChunk(h)
		missing = missing || !present[i]
	}
	var release func()
	if missing && e.cfg.BlobSink != nil {
		release = e.cfg.BlobSink(r.ID, m)
	}
	bf.sch = schedule.New(len(m.Chunks), e.cfg.Window, len(bf.sources), present)
	if keep {
		bf.sch.SetAhead(2 * e.cfg.Window)
	}
	stopT := context.AfterFunc(e.ctx, bf.cancel)
	e.mu.Lock()
	e.active[bf] = struct{}{}
	e.mu.Unlock()
	context.AfterFunc(bf.ctx, func() {
		stopT()
		e.mu.Lock()
		delete(e.active, bf)
		e.mu.Unlock()
		bf.mu.Lock()
		if bf.err == nil && !bf.sch.Complete() {
			bf.err = fmt.Errorf("get %q (%s): %w", r.Name, r.ID, context.Cause(bf.ctx))
		}
		bf.cond.Broadcast()
		bf.mu.Unlock()
		if release != nil {
			// The chunks still being stored go into the sink too (the
			// engine closing: at once).
			if !e.goTracked(func() {
				for _, h := range m.Chunks {
					e.chunks.WaitStored(e.ctx, h)
				}
				release()
			}) {
				release()
			}
		}
	})
	bf.mu.Lock()
	bf.pump()
	bf.mu.Unlock()
	return bf
}

// pump issues what the schedule says; bf.mu is held.
func (bf *blobFetch) pump() {
	if bf.err != nil {
		return
	}
	if !bf.sch.Complete() && !bf.keep { // a reader fails only at a chunk it lacks (wait)
		if err := bf.noSource(-1, nil); err != nil {
			bf.err = err
			bf.cond.Broadcast()
			return
		}
	}
	for _, req := range bf.sch.Next() {
		if !bf.e.goTracked(func() { bf.run(req) }) {
			bf.sch.Failed(req.Chunk, schedule.FailUnreachable)
			bf.err = fmt.Errorf("get %q (%s): %w", bf.r.Name, bf.r.ID, errClosed)
			bf.cond.Broadcast()
			return
		}
	}
}

func (bf *blobFetch) run(req schedule.Request) {
	i := req.Chunk
	q := fetchwire.Request{Type: fetchwire.MsgGet, ID: bf.r.ID, Index: uint32(i), Hash: bf.m.Chunks[i]}
	var data []byte
	var from Source
	err := coalesce.Pause(bf.ctx, req.Attempt)
	if err == nil {
		data, from, err = bf.e.chunks.Get(bf.ctx, q, bf.sources[req.Source], "")
	}
	if err == nil && len(data) != bf.m.ChunkLen(i) {
		err = fmt.Errorf("chunk %d of %s has %d bytes, manifest says %d: %w", i, bf.r.ID, len(data), bf.m.ChunkLen(i), blob.ErrCorrupt)
	}
	bf.mu.Lock()
	defer bf.mu.Unlock()
	if bf.err != nil {
		return
	}
	if err != nil {
		if bf.ctx.Err() != nil {
			return
		}
		a := bf.sch.Failed(i, fetchclient.FailKind(err))
		bf.e.log.Info("chunk request failed", "blob", bf.r.ID, "chunk", i, "err", err, "decision", a)
		if a == schedule.GiveUp {
			switch {
			case bf.searching:
			case !bf.searched && bf.e.cfg.Finder != nil:
				bf.searched, bf.searching = true, true
				if !bf.e.goTracked(func() { bf.searchMore(i, err) }) {
					bf.giveUp(i, errClosed)
				}
			default:
				bf.giveUp(i, err)
			}
			return
		}
		bf.pump()
		return
	}
	bf.sch.Done(i)
	if from.ID != "" {
		bf.from[from] += uint64(len(data))
	}
	if bf.keep {
		bf.ready[i] = data
	}
	bf.pump()
	bf.cond.Broadcast()
}

// noSource is the rule for chunks this fetch lacks when it has no source
// to ask: the get fails with blob.ErrUnavailable (the name exists, its
// bytes cannot be had), naming chunk i (i < 0: the chunks missing when the
// fetch started) and wrapping cause, why the copy here could not be used
// (nil: there was none). It returns nil while there is a source; bf.mu
// is held.
func (bf *blobFetch) noSource(i int, cause error) error {
	if len(bf.sources) > 0 {
		return nil
	}
	what, it := "chunks are missing", "them"
	if i >= 0 {
		what, it = fmt.Sprintf("chunk %d is missing", i), "it"
	}
	err := fmt.Errorf("get %q (%s): %w: %s here and there is no source to fetch %s from", bf.r.Name, bf.r.ID, blob.ErrUnavailable, what, it)
	if cause != nil {
		err = fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// giveUp fails the fetch: chunk i could not be had (err, the last
// failure); bf.mu is held.
func (bf *blobFetch) giveUp(i int, err error) {
	bf.err = fmt.Errorf("get %q (%s): chunk %d: %w", bf.r.Name, bf.r.ID, i, err)
	if errors.Is(err, blob.ErrNotFound) { // no source has it
		bf.err = fmt.Errorf("get %q (%s): chunk %d: %w: %w", bf.r.Name, bf.r.ID, i, blob.ErrUnavailable, err)
	}
	bf.cond.Broadcast()
	bf.cancel()
}

// searchMore looks for sources beyond those that failed chunk i (err) and
// goes on with them, or gives up when there are none.
func (bf *blobFetch) searchMore(i int, err error) {
	more := bf.e.moreSources(bf.ctx, bf.want, bf.sources)
	bf.mu.Lock()
	defer bf.mu.Unlock()
	bf.searching = false
	if bf.err != nil {
		return
	}
	if len(more) == 0 || bf.ctx.Err() != nil {
		bf.giveUp(i, err)
		return
	}
	bf.sources = append(bf.sources, more...)
	bf.sch.AddSources(len(more))
	bf.pump()
}

// wait blocks until chunk i is available and returns it, verified.
func (bf *blobFetch) wait(i int) ([]byte, error) {
	h := bf.m.Chunks[i]
	bf.mu.Lock()
	defer bf.mu.Unlock()
	for {
		if data, ok := bf.ready[i]; ok {
			delete(bf.ready, i)
			bf.sch.Deliver(i)
			bf.pump()
			return data, nil
		}
		if bf.err != nil {
			return nil, bf.err
		}
		if bf.sch.IsDone(i) { // present in the store before we started
			bf.mu.Unlock()
			data, err := bf.e.store.ReadChunk(h) // verified; a damaged copy is dropped
			bf.mu.Lock()
			if err == nil {
				bf.sch.Deliver(i)
				bf.pump()
				return data, nil
			}
			bf.e.log.Info("local chunk unusable, fetching it again", "blob", bf.r.ID, "chunk", i, "err", err)
			if nerr := bf.noSource(i, err); nerr != nil {
				bf.err = nerr
				return nil, nerr
			}
			bf.sch.Lost(i)
			bf.pump()
			continue
		}
		if err := bf.noSource(i, nil); err != nil {
			bf.err = err
			return nil, err
		}
		bf.cond.Wait()
	}
}

// blobReader is the io.ReadCloser Open returns.
type blobReader struct {
	bf   *blobFetch
	next int
	cur  []byte
	err  error
}

func (br *blobReader) Read(p []byte) (int, error) {
	for len(br.cur) == 0 {
		if br.err != nil {
			return 0, br.err
		}
		if br.next == len(br.bf.m.Chunks) {
			br.err = io.EOF
			br.bf.cancel()
			return 0, io.EOF
		}
		data, err := br.bf.wait(br.next)
		if err != nil {
			br.err = err
			br.bf.cancel()
			return 0, err
		}
		br.cur = data
		br.next++
	}
	n := copy(p, br.cur)
	br.cur = br.cur[n:]
	return n, nil
}

// WriteTo writes the blob to w chunk by chunk, without an extra copy.
func (br *blobReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if len(br.cur) > 0 {
			n, err := w.Write(br.cur)
			total += int64(n)
			br.cur = br.cur[n:]
			if err != nil {
				return total, err
			}
		}
		if br.err != nil {
			if br.err == io.EOF {
				return total, nil
			}
			return total, br.err
		}
		if br.next == len(br.bf.m.Chunks) {
			br.err = io.EOF
			br.bf.cancel()
			continue
		}
		data, err := br.bf.wait(br.next)
		if err != nil {
			br.err = err
			br.bf.cancel()
			continue
		}
		br.cur = data
		br.next++
	}
}

func (br *blobReader) Close() error {
	br.bf.cancel()
	if br.err == nil {
		br.err = errors.New("read after close")
	}
	return nil
}

// Open returns the bytes of r's blob in order, every chunk verified. Chunks
// missing locally are fetched with the window and stored; the reader
// delivers chunk i as soon as chunks 0..i are in. Errors name the peer.
// Close cancels the outstanding fetches, and so does cancelling ctx.
func (e *Engine) Open(ctx context.Context, r blob.Record) (io.ReadCloser, error) {
	m, err := e.Manifest(ctx, r.ID)
	if err != nil {
		return nil, fmt.Errorf("open %q: %w", r.Name, err)
	}
	return e.OpenManifest(ctx, r, m)
}

// OpenManifest is Open for a caller that already holds the blob's
// manifest m (as Manifest returned it for r.ID: a get resolves the name and
// its manifest once and carries them through). m must be r's blob's (its
// CID is checked: its chunk hashes are what every chunk is verified
// against).
func (e *Engine) OpenManifest(ctx context.Context, r blob.Record, m *blob.Manifest) (io.ReadCloser, error) {
	if m == nil || m.CID() != r.ID {
		return nil, fmt.Errorf("open %q: manifest does not match the record's blob %s", r.Name, r.ID)
	}
	return &blobReader{bf: e.startFetch(ctx, r, m, true)}, nil
}

// Fetch makes sure every chunk of r's blob is in the local store: when it
// returns nil, every chunk has been written (chunks are handed downstream
// before they are stored, so it waits for those writes too). A chunk that
// could not be stored (the cache is full of pinned data) is an error.
func (e *Engine) Fetch(ctx context.Context, r blob.Record) error {
	return e.fetchAll(ctx, r, Want{ID: r.ID, Origin: r.Origin})
}

// FetchManifest is Fetch for a caller that already holds the blob's
// manifest m (a get resolves the name and its manifest once and carries
// them through, as for OpenManifest): m is not read again. m must be r's
// blob's (its CID is checked).
func (e *Engine) FetchManifest(ctx context.Context, r blob.Record, m *blob.Manifest) error {
	if m == nil || m.CID() != r.ID {
		return fmt.Errorf("fetch %q: manifest does not match the record's blob %s", r.Name, r.ID)
	}
	return e.fetchWith(ctx, r, m, Want{ID: r.ID, Origin: r.Origin})
}

// fetchAll is Fetch for w (w.Exclude: the peer whose request it serves).
func (e *Engine) fetchAll(ctx context.Context, r blob.Record, w Want) error {
	m, err := e.manifestFor(ctx, w)
	if err != nil {
		return fmt.Errorf("fetch %q: %w", r.Name, err)
	}
	return e.fetchWith(ctx, r, m, w)
}

// fetchWith is fetchAll with the blob's manifest m.
func (e *Engine) fetchWith(ctx context.Context, r blob.Record, m *blob.Manifest, w Want) error {
	bf := e.startFetchFrom(ctx, r, m, false, w, e.sourcesFor(ctx, w))
	defer bf.cancel()
	bf.mu.Lock()
	for !bf.sch.Complete() && bf.err == nil {
		bf.cond.Wait()
	}
	complete, ferr := bf.sch.Complete(), bf.err
	bf.mu.Unlock()
	if !complete {
		return ferr
	}
	for i, h := range m.Chunks {
		if e.store.HasChunk(h) {
			continue
		}
		if err := e.chunks.WaitStored(ctx, h); err != nil {
			return fmt.Errorf("fetch %q: chunk %d: %w", r.Name, i, err)
		}
		if !e.store.HasChunk(h) {
			return fmt.Errorf("fetch %q: chunk %d (%s) arrived but could not be stored (see the log): %w", r.Name, i, h, blob.ErrNoSpace)
		}
	}
	if e.cfg.OnComplete != nil {
		e.cfg.OnComplete(r.ID)
	}
	return nil
}

// Preheat fetches r's blob into the store in the background (sharing a
// fetch of it already under way, as Replicate) and waits until it is done
// or ctx ends; the fetch goes on after ctx ends.
func (e *Engine) Preheat(ctx context.Context, r blob.Record) error {
	c := e.background(r)
	if c == nil {
		return errClosed
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// backgroundFetch is a fetch of a whole blob that no reader waits on.
type backgroundFetch struct {
	done chan struct{}
	err  error
}

// background starts a fetch of r's blob unless one is under way, and
// returns it (nil once the engine is closed).
func (e *Engine) background(r blob.Record) *backgroundFetch {
	e.mu.Lock()
	if c := e.replicas[r.ID]; c != nil {
		e.mu.Unlock()
		return c
	}
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	c := &backgroundFetch{done: make(chan struct{})}
	e.replicas[r.ID] = c
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		c.err = e.Fetch(e.ctx, r)
		e.mu.Lock()
		delete(e.replicas, r.ID)
		e.mu.Unlock()
		close(c.done)
		if c.err != nil {
			e.log.Warn("background fetch failed", "name", r.Name, "id", r.ID, "err", c.err)
			return
		}
		e.log.Info("fetched in the background", "name", r.Name, "id", r.ID, "size", r.Size)
	}()
	return c
}

// Transfer is a blob fetch under way: how far it is and where its bytes
// came from.
type Transfer struct {
	Name         string
	ID           cid.Cid
	Chunks, Done int
	// From is the chunk bytes each peer delivered (the store's own
	// chunks are not counted), with the peer's kind.
	From []TransferSource
}

// TransferSource is what one peer delivered to a transfer.
type TransferSource struct {
	Source
	Bytes uint64
}

// Transfers lists the blob fetches under way (a get's reader, a
// replication or preheat, a store-and-forward relay's), most advanced
// first.
func (e *Engine) Transfers() []Transfer {
	e.mu.Lock()
	fetches := make([]*blobFetch, 0, len(e.active))
	for bf := range e.active {
		fetches = append(fetches, bf)
	}
	e.mu.Unlock()
	out := make([]Transfer, 0, len(fetches))
	for _, bf := range fetches {
		bf.mu.Lock()
		t := Transfer{Name: bf.r.Name, ID: bf.r.ID, Chunks: len(bf.m.Chunks), Done: bf.sch.NumDone()}
		for src, n := range bf.from {
			t.From = append(t.From, TransferSource{Source: src, Bytes: n})
		}
		bf.mu.Unlock()
		slices.SortFunc(t.From, func(a, b TransferSource) int { return cmp.Compare(b.Bytes, a.Bytes) })
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Transfer) int { return cmp.Compare(b.Done, a.Done) })
	return out
}
