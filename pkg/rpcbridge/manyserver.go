package rpcbridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/omst-project/omst/pkg/blob"
)

// Server side of GET_MANY and PUT_MANY (many.go; docs/rpcbridge.md §6.14).

const (
	// manyParallel is how many names of a GET_MANY a Backend without
	// OpenMany opens at once, and how many items of a PUT_MANY are stored
	// at once.
	manyParallel = 64
	// manyBuffer: a blob of at most this size is read whole before its
	// entry is sent (so entries interleave by completion); a bigger one is
	// streamed with the connection held.
	manyBuffer = 256 << 10
	// manyPublish: a ManyPutter's stored items are published in groups
	// of this many as they accumulate (while later items are stored), the
	// rest after the batch's end.
	manyPublish = 256
)

// manyWriter serialises the entries of a GET_MANY reply on the connection
// and counts them for the SUMMARY.
type manyWriter struct {
	sc     *conn
	mu     sync.Mutex
	sum    ManySummary
	broken bool // a write failed: the connection is gone
	cancel context.CancelFunc
}

// fail sends the ENTRY_ERROR of entry i.
func (w *manyWriter) fail(i int, name string, err error) {
	e := errorFor(err)
	if !strings.Contains(e.Message, name) {
		e = &Error{Code: e.Code, Message: fmt.Sprintf("get %q: %s", name, e.Message)}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sum.Entries++
	w.sum.Failed++
	if w.broken {
		return
	}
	off := w.sc.fc.begin(FrameEntryError)
	w.sc.fc.wbuf = appendEntryError(w.sc.fc.wbuf, i, name, e)
	w.sc.fc.end(off)
	w.flush()
}

func (w *manyWriter) flush() {
	if err := w.sc.fc.flush(); err != nil {
		w.broken = true
		w.cancel()
	}
}

// send sends entry i: its ENTRY and its bytes, read from rc (closed
// here). A blob of at most manyBuffer bytes is read before the connection
// is taken; a bigger one is streamed with it held, and a failure midway is
// the entry's ENTRY_ERROR after the bytes sent.
func (w *manyWriter) send(ctx context.Context, i int, info Info, rc io.ReadCloser) {
	defer rc.Close()
	name := info.Name
	if info.Size <= manyBuffer {
		buf := bytes.NewBuffer(make([]byte, 0, info.Size+1))
		_, err := buf.ReadFrom(io.LimitReader(rc, int64(info.Size)+1))
		switch {
		case err != nil:
			w.fail(i, name, err)
			return
		case uint64(buf.Len()) != info.Size:
			w.fail(i, name, &Error{Code: CodeSizeMismatch,
				Message: fmt.Sprintf("get %q: blob yields %d bytes, not %d", name, buf.Len(), info.Size)})
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.sum.Entries++
		w.sum.OK++
		w.sum.Bytes += info.Size
		if w.broken {
			return
		}
		off := w.sc.fc.begin(FrameEntry)
		w.sc.fc.wbuf = appendEntry(w.sc.fc.wbuf, i, &info)
		w.sc.fc.end(off)
		for p := buf.Bytes(); len(p) > 0; {
			k := min(len(p), DataFrameSize)
			if err := w.sc.fc.data(p[:k]); err != nil {
				w.broken = true
				w.cancel()
				return
			}
			p = p[k:]
		}
		w.flush()
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.broken {
		w.sum.Entries++
		w.sum.Failed++
		return
	}
	off := w.sc.fc.begin(FrameEntry)
	w.sc.fc.wbuf = appendEntry(w.sc.fc.wbuf, i, &info)
	w.sc.fc.end(off)
	dw := &dataWriter{fc: w.sc.fc, limit: info.Size}
	var rerr error
	if wt, ok := rc.(io.WriterTo); ok {
		_, rerr = wt.WriteTo(dw)
	} else {
		bp := dataBufPool.Get().(*[]byte)
		_, rerr = io.CopyBuffer(struct{ io.Writer }{dw}, rc, *bp)
		dataBufPool.Put(bp)
	}
	w.sum.Entries++
	switch {
	case dw.werr != nil:
		w.broken = true
		w.cancel()
		w.sum.Failed++
		return
	case dw.sent == info.Size:
		// Every byte is out, verified: the entry is complete whatever
		// the reader said after (docs: never an ENTRY_ERROR after them).
		w.sum.OK++
		w.sum.Bytes += info.Size
		w.flush()
		return
	case rerr == nil:
		rerr = &Error{Code: CodeSizeMismatch, Message: fmt.Sprintf("get %q: blob yields %d bytes, not %d", name, dw.sent, info.Size)}
	}
	w.sum.Failed++
	e := errorFor(rerr)
	if !strings.Contains(e.Message, name) {
		e = &Error{Code: e.Code, Message: fmt.Sprintf("get %q: %s", name, e.Message)}
	}
	off = w.sc.fc.begin(FrameEntryError)
	w.sc.fc.wbuf = appendEntryError(w.sc.fc.wbuf, i, name, e)
	w.sc.fc.end(off)
	w.flush()
}

// getMany serves GET_MANY.
func (sc *conn) getMany(ctx context.Context, cancel context.CancelFunc, body []byte) bool {
	flags, prefix, names, err := decodeGetManyReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	if flags&GetManyByPrefix != 0 {
		if err := blob.ValidatePrefix(prefix); err != nil {
			return sc.sendError(&Error{Code: CodeInvalidName, Message: err.Error()})
		}
		if nl, ok := sc.s.b.(NameLister); ok {
			names, err = nl.ListNames(ctx, prefix)
		} else {
			var infos []Info
			infos, err = sc.s.b.List(ctx, prefix)
			names = make([]string, len(infos))
			for i := range infos {
				names[i] = infos[i].Name
			}
		}
		if err != nil {
			return sc.sendError(errorFor(err))
		}
	}
	w := &manyWriter{sc: sc, cancel: cancel}
	// Names that break the rules are their entries' errors; the others
	// are opened.
	idx := make([]int, 0, len(names))
	valid := make([]string, 0, len(names))
	for i, n := range names {
		if err := checkName(n); err != nil {
			w.fail(i, n, err)
			continue
		}
		idx = append(idx, i)
		valid = append(valid, n)
	}
	each := func(j int, info Info, rc io.ReadCloser, err error) {
		i := idx[j]
		if err != nil {
			w.fail(i, valid[j], err)
			return
		}
		info.Name = valid[j]
		w.send(ctx, i, info, rc)
	}
	if mb, ok := sc.s.b.(ManyBackend); ok {
		if err := mb.OpenMany(ctx, valid, each); err != nil && ctx.Err() == nil {
			sc.s.log.Warn("local API: get many", "err", err)
		}
	} else {
		sc.openParallel(ctx, valid, each)
	}
	if w.broken || (ctx.Err() != nil && sc.s.ctx.Err() == nil) {
		return false // the client hung up
	}
	if sc.s.ctx.Err() != nil {
		sc.sendError(&Error{Code: CodeAborted, Message: "get many: daemon shutting down"})
		return false
	}
	off := sc.fc.begin(FrameSummary)
	sc.fc.wbuf = appendSummary(sc.fc.wbuf, w.sum)
	sc.fc.end(off)
	return sc.fc.flush() == nil
}

// openParallel opens names with the Backend's Open, manyParallel at once.
func (sc *conn) openParallel(ctx context.Context, names []string, each func(int, Info, io.ReadCloser, error)) {
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(manyParallel, len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if ctx.Err() != nil {
					each(j, Info{}, nil, ctx.Err())
					continue
				}
				info, rc, err := sc.s.b.Open(ctx, names[j])
				each(j, info, rc, err)
			}
		}()
	}
	for j := range names {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
}

// putMany serves PUT_MANY: it reads the items, stores each once its bytes
// are complete (small ones manyParallel at once), and answers after the
// batch's end with an ENTRY (or ENTRY_ERROR) per item, in order, and the
// SUMMARY. With a ManyPutter backend the items are stored as they come and
// published together (manyPublish at a time while the batch goes on, the
// rest at its end, and all stored so far before an item whose name the
// batch already had), each entry answered after its item was published.
func (sc *conn) putMany(ctx context.Context, body []byte) bool {
	cs, err := decodePutManyReq(body)
	if err != nil {
		return sc.badRequest(err)
	}
	csErr := checkChunkSize(cs)
	var (
		mu      sync.Mutex
		entries []ManyEntry
		wg      sync.WaitGroup
		sem     = make(chan struct{}, manyParallel)
		seen    = map[string]bool{} // names put in this batch
		mp, _   = sc.s.b.(ManyPutter)
		pending []pendingPut // stored by mp, not yet published
		pubWG   sync.WaitGroup
	)
	record := func(e ManyEntry) {
		mu.Lock()
		entries = append(entries, e)
		mu.Unlock()
	}
	opts := PutOptions{ChunkSize: int(cs)}
	publish := func(ps []pendingPut) {
		sps := make([]StoredPut, len(ps))
		for i := range ps {
			sps[i] = ps[i].sp
		}
		infos, errs := mp.PublishMany(ctx, sps)
		for i, p := range ps {
			e := ManyEntry{Index: p.index, Name: p.name}
			if i < len(errs) && errs[i] != nil {
				e.Err = errs[i]
			} else if i < len(infos) {
				e.Info = infos[i]
			} else {
				e.Err = fmt.Errorf("put %q: the backend published %d of %d items", p.name, len(infos), len(ps))
			}
			record(e)
		}
	}
	// stored takes an item mp stored; a full group is published at once,
	// while the batch goes on.
	stored := func(index int, name string, sp StoredPut) {
		mu.Lock()
		pending = append(pending, pendingPut{index, name, sp})
		var ps []pendingPut
		if len(pending) >= manyPublish {
			ps, pending = pending, nil
		}
		mu.Unlock()
		if ps != nil {
			pubWG.Add(1)
			go func() {
				defer pubWG.Done()
				publish(ps)
			}()
		}
	}
	// settle waits for the items being stored and publishes every item
	// stored so far.
	settle := func() {
		wg.Wait()
		if mp == nil {
			return
		}
		mu.Lock()
		ps := pending
		pending = nil
		mu.Unlock()
		if len(ps) > 0 {
			publish(ps)
		}
		pubWG.Wait()
	}
	// put stores an item: with mp, stored to be published (sp not nil);
	// else the Backend's Put, published when it returns.
	put := func(name string, r io.Reader) (Info, StoredPut, error) {
		if mp == nil {
			info, err := sc.s.b.Put(ctx, name, r, opts)
			return info, nil, err
		}
		sp, err := mp.Store(ctx, name, r, opts)
		return Info{}, sp, err
	}
	broken := func(err error) bool {
		settle() // the items completed before stand
		switch {
		case errors.Is(err, errMalformed):
			return sc.badRequest(err)
		case errors.Is(err, ErrUploadIncomplete):
			sc.s.log.Warn("local API: put many: the batch ended without its closing empty DATA frame",
				"items", len(entries), "err", err)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				sc.sendError(&Error{Code: CodeTimeout, Message: fmt.Sprintf("put many: %v", err)})
			}
		case sc.s.ctx.Err() != nil:
			sc.sendError(&Error{Code: CodeAborted, Message: "put many: daemon shutting down; the item in progress discarded"})
		}
		return false
	}
	for index := 0; ; index++ {
		pr := &putReader{sc: sc}
		if !sc.setReadDeadline(sc.s.iot) {
			return broken(pr.lost(context.Canceled, "between items"))
		}
		h, err := sc.fc.readHeader()
		if err != nil {
			return broken(pr.lost(err, "between items"))
		}
		switch {
		case h.Type == FrameData && h.Len == 0: // the end of the batch
		case h.Type == FrameAbort && h.Len == 0: // the batch aborted: the items so far stand
		case h.Type == FramePutItem && h.Len <= MaxRequestBody:
			ib, err := sc.fc.readBody(h.Len)
			if err != nil {
				return broken(pr.lost(err, "in a PUT_ITEM"))
			}
			name, size, err := decodePutItem(ib)
			if err != nil {
				return broken(err)
			}
			ir := &itemReader{pr: pr, rem: size}
			var perr error
			switch {
			case csErr != nil:
				perr = csErr
			default:
				perr = checkName(name)
			}
			if perr == nil && size <= manyBuffer {
				buf := make([]byte, size)
				_, rerr := io.ReadFull(ir, buf)
				if rerr != nil && !ir.aborted {
					return broken(ir.err)
				}
				if ir.aborted {
					record(ManyEntry{Index: index, Name: name, Err: &Error{Code: CodeAborted, Message: fmt.Sprintf("put %q: aborted by the client", name)}})
					continue
				}
				if seen[name] {
					// The same name again: its puts land in batch order.
					settle()
				}
				seen[name] = true
				sem <- struct{}{}
				wg.Add(1)
				go func(index int, name string) {
					defer wg.Done()
					defer func() { <-sem }()
					info, sp, err := put(name, bytes.NewReader(buf))
					if err == nil && sp != nil {
						stored(index, name, sp)
						return
					}
					record(ManyEntry{Index: index, Name: name, Info: info, Err: err})
				}(index, name)
				continue
			}
			var info Info
			var sp StoredPut
			if perr == nil {
				if seen[name] {
					settle() // earlier items of the same name land first
				} else {
					wg.Wait()
				}
				seen[name] = true
				info, sp, perr = put(name, ir)
			}
			if ir.rem > 0 && ir.err == nil {
				if derr := ir.drain(); derr != nil {
					return broken(derr)
				}
			}
			switch {
			case ir.err != nil && !ir.aborted:
				return broken(ir.err)
			case ir.aborted:
				perr = &Error{Code: CodeAborted, Message: fmt.Sprintf("put %q: aborted by the client", name)}
			}
			if sp != nil && perr == nil {
				stored(index, name, sp)
				continue
			}
			record(ManyEntry{Index: index, Name: name, Info: info, Err: perr})
			continue
		default:
			return broken(malformed("unexpected %v frame (%d bytes) in a PUT_MANY", h.Type, h.Len))
		}
		break
	}
	settle()
	if csErr != nil {
		return sc.sendError(errorFor(csErr))
	}
	sortEntries(entries)
	sum := ManySummary{Entries: len(entries)}
	for _, e := range entries {
		if e.Err != nil {
			sum.Failed++
			e2 := errorFor(e.Err)
			if !strings.Contains(e2.Message, e.Name) {
				e2 = &Error{Code: e2.Code, Message: fmt.Sprintf("put %q: %s", e.Name, e2.Message)}
			}
			off := sc.fc.begin(FrameEntryError)
			sc.fc.wbuf = appendEntryError(sc.fc.wbuf, e.Index, e.Name, e2)
			sc.fc.end(off)
		} else {
			sum.OK++
			sum.Bytes += e.Info.Size
			off := sc.fc.begin(FrameEntry)
			sc.fc.wbuf = appendEntry(sc.fc.wbuf, e.Index, &e.Info)
			sc.fc.end(off)
		}
		if len(sc.fc.wbuf) >= bufSize {
			if sc.fc.flush() != nil {
				return false
			}
		}
	}
	off := sc.fc.begin(FrameSummary)
	sc.fc.wbuf = appendSummary(sc.fc.wbuf, sum)
	sc.fc.end(off)
	return sc.fc.flush() == nil
}

// pendingPut is a PUT_MANY item a ManyPutter stored and has not published.
type pendingPut struct {
	index int
	name  string
	sp    StoredPut
}

func sortEntries(es []ManyEntry) {
	// Insertion into index order: entries arrive nearly sorted.
	for i := 1; i < len(es); i++ {
		for j := i; j > 0 && es[j].Index < es[j-1].Index; j-- {
			es[j], es[j-1] = es[j-1], es[j]
		}
	}
}

// itemReader reads the bytes of one PUT_ITEM: exactly rem bytes of DATA
// frames, then io.EOF. An ABORT in their midst aborts the item
// (ErrAborted); an empty DATA or another frame is malformed.
type itemReader struct {
	pr      *putReader
	rem     uint64
	aborted bool
	err     error // sticky: ErrAborted, or the stream is broken
}

func (r *itemReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.rem == 0 {
		return 0, io.EOF
	}
	pr := r.pr
	for pr.rem == 0 {
		if !pr.sc.setReadDeadline(pr.sc.s.iot) {
			r.err = pr.lost(context.Canceled, "between frames")
			return 0, r.err
		}
		h, err := pr.sc.fc.readHeader()
		if err != nil {
			r.err = pr.lost(err, "waiting for a frame header")
			return 0, r.err
		}
		switch {
		case h.Type == FrameData && h.Len > 0 && uint64(h.Len) <= r.rem:
			pr.rem, pr.frameLen = h.Len, h.Len
		case h.Type == FrameAbort && h.Len == 0:
			r.aborted = true
			r.err = ErrAborted
			return 0, r.err
		case h.Type == FrameData:
			r.err = pr.lost(malformed("DATA of %d bytes in a PUT_ITEM with %d bytes to go", h.Len, r.rem), "")
			return 0, r.err
		default:
			r.err = pr.lost(malformed("unexpected %v frame in a PUT_ITEM's bytes", h.Type), "")
			return 0, r.err
		}
	}
	if uint64(len(p)) > r.rem {
		p = p[:r.rem]
	}
	n, err := pr.Read(p)
	r.rem -= uint64(n)
	if err != nil {
		r.err = err
		return n, err
	}
	return n, nil
}

// drain skips the rest of the item's bytes (the backend stopped early).
func (r *itemReader) drain() error {
	var sink [32 << 10]byte
	for r.rem > 0 && r.err == nil {
		r.Read(sink[:])
	}
	if r.aborted {
		return nil
	}
	return r.err
}
