package rpcbridge

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/omst-project/omst/pkg/blob"
)

// Client side of GET_MANY and PUT_MANY (many.go; docs/rpcbridge.md §6.14).

// GetMany fetches the names req selects and calls fn once per entry, in
// the order the daemon answers them (not the order of req.Names: see
// ManyEntry.Index). For an entry without Err, r yields its verified bytes,
// exactly Info.Size of them, then io.EOF; if the daemon fails the entry
// midway, r returns that error (an *Error) instead of io.EOF, and the entry
// counts as failed. What fn leaves unread is discarded. An error fn returns
// stops GetMany, which drops the connection and returns it.
//
// An entry's error is its own: the other entries go on. GetMany's error
// is for the whole call (a prefix the daemon refuses, a lost connection,
// ctx ending); the summary counts the entries received until then.
//
// A daemon of protocol version 6 or less is asked name by name (LIST for a
// prefix, then one GET each); the entries then come in order.
func (c *Client) GetMany(ctx context.Context, req ManyRequest, fn func(e ManyEntry, r io.Reader) error) (ManySummary, error) {
	if req.ByPrefix {
		if len(req.Names) > 0 {
			return ManySummary{}, fmt.Errorf("get many: both names and a prefix given: %w", blob.ErrInvalidName)
		}
		if err := blob.ValidatePrefix(req.Prefix); err != nil {
			return ManySummary{}, err
		}
	} else if len(req.Names) == 0 {
		return ManySummary{}, nil
	}
	if err := c.acquire(ctx); err != nil {
		return ManySummary{}, err
	}
	version := c.version
	c.mu.Unlock()
	if version < ManyVersion {
		return c.getManyOneByOne(ctx, req, fn)
	}
	if req.ByPrefix {
		return c.getManyBatch(ctx, GetManyByPrefix, req.Prefix, nil, 0, fn)
	}
	// Names beyond a request's bounds go in further requests.
	var total ManySummary
	for start := 0; start < len(req.Names); {
		end, size := start, 12
		for end < len(req.Names) && end-start < MaxManyNames && size+4+len(req.Names[end]) <= MaxManyBody {
			size += 4 + len(req.Names[end])
			end++
		}
		if end == start {
			return total, fmt.Errorf("get many: name %d of %d bytes: %w", start, len(req.Names[start]), blob.ErrInvalidName)
		}
		s, err := c.getManyBatch(ctx, 0, "", req.Names[start:end], start, fn)
		total.Entries += s.Entries
		total.OK += s.OK
		total.Failed += s.Failed
		total.Bytes += s.Bytes
		if err != nil {
			return total, err
		}
		start = end
	}
	return total, nil
}

// getManyBatch sends one GET_MANY and reads its reply; base is added to
// the indexes the daemon sends.
func (c *Client) getManyBatch(ctx context.Context, flags uint32, prefix string, names []string, base int,
	fn func(ManyEntry, io.Reader) error) (ManySummary, error) {
	op := "get many"
	if flags&GetManyByPrefix != 0 {
		op = fmt.Sprintf("get many under %q", prefix)
	}
	var sum ManySummary
	if err := c.acquire(ctx); err != nil {
		return sum, err
	}
	defer c.mu.Unlock()
	if err := c.send(FrameGetMany, func(b []byte) []byte { return appendGetManyReq(b, flags, prefix, names) }); err != nil {
		return sum, fmt.Errorf("%s: %w", op, err)
	}
	w := c.watch(ctx)
	fc := c.fc
	first := true
	for {
		h, body, err := readReply(fc)
		if err != nil {
			return sum, c.fail(ctx, w, op, err, false)
		}
		switch h.Type {
		case FrameError:
			if !first {
				return sum, c.fail(ctx, w, op, fmt.Errorf("%w: ERROR in the middle of a GET_MANY reply", errMalformed), false)
			}
			return sum, c.fail(ctx, w, op, replyError(body), true)
		case FrameSummary:
			s, err := decodeSummary(body)
			if err == nil && (s.Entries != sum.Entries || s.OK != sum.OK) {
				err = malformed("SUMMARY says %d entries (%d ok), %d received (%d ok)", s.Entries, s.OK, sum.Entries, sum.OK)
			}
			if err != nil {
				return sum, c.fail(ctx, w, op, err, false)
			}
			if w.release() {
				c.drop()
			}
			return s, nil
		case FrameEntryError:
			i, name, e, err := decodeEntryError(body)
			if err != nil {
				return sum, c.fail(ctx, w, op, err, false)
			}
			sum.Entries++
			sum.Failed++
			if ferr := fn(ManyEntry{Index: base + i, Name: name, Err: e}, nil); ferr != nil {
				c.fail(ctx, w, op, ferr, false)
				return sum, ferr
			}
		case FrameEntry:
			i, info, err := decodeEntry(body)
			if err != nil {
				return sum, c.fail(ctx, w, op, err, false)
			}
			er := &entryReader{fc: fc, index: i, info: info}
			ferr := fn(ManyEntry{Index: base + i, Name: info.Name, Info: info}, er)
			if ferr == nil {
				ferr = er.skip()
			}
			if ferr != nil && !er.entryErr {
				if er.broken {
					return sum, c.fail(ctx, w, op, ferr, false)
				}
				c.fail(ctx, w, op, ferr, false)
				return sum, ferr
			}
			sum.Entries++
			if er.entryErr {
				sum.Failed++
			} else {
				sum.OK++
				sum.Bytes += info.Size
			}
		default:
			return sum, c.fail(ctx, w, op, unexpected(h, "ENTRY, ENTRY_ERROR or SUMMARY"), false)
		}
		first = false
	}
}

// entryReader reads the DATA frames of one ENTRY.
type entryReader struct {
	fc       *frameConn
	index    int
	info     Info
	rem      uint32 // unread bytes of the current DATA frame
	got      uint64
	err      error // sticky
	entryErr bool  // the daemon failed the entry (err is its *Error)
	broken   bool  // the stream is unusable
}

func (r *entryReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	for r.rem == 0 {
		if r.got == r.info.Size {
			r.err = io.EOF
			return 0, io.EOF
		}
		h, err := r.fc.readHeader()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			r.err, r.broken = err, true
			return 0, err
		}
		switch {
		case h.Type == FrameData && h.Len > 0 && r.got+uint64(h.Len) <= r.info.Size:
			r.rem = h.Len
		case h.Type == FrameEntryError:
			body, err := r.fc.readBody(h.Len)
			var i int
			var e *Error
			if err == nil {
				i, _, e, err = decodeEntryError(body)
			}
			if err == nil && i != r.index {
				err = malformed("ENTRY_ERROR of entry %d in the bytes of entry %d", i, r.index)
			}
			if err != nil {
				r.err, r.broken = err, true
				return 0, err
			}
			r.err, r.entryErr = e, true
			return 0, e
		default:
			r.err, r.broken = malformed("%v frame (%d bytes) in entry %d after %d of its %d bytes", h.Type, h.Len, r.index, r.got, r.info.Size), true
			return 0, r.err
		}
	}
	if len(p) == 0 {
		return 0, nil
	}
	if uint32(len(p)) > r.rem {
		p = p[:r.rem]
	}
	n, err := r.fc.br.Read(p)
	r.rem -= uint32(n)
	r.got += uint64(n)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		r.err, r.broken = err, true
		return n, err
	}
	return n, nil
}

// skip reads what is left of the entry; nil at its end or after its
// ENTRY_ERROR, else the error that broke the stream.
func (r *entryReader) skip() error {
	var sink [32 << 10]byte
	for r.err == nil {
		r.Read(sink[:])
	}
	if r.err == io.EOF || r.entryErr {
		return nil
	}
	return r.err
}

// getManyOneByOne serves GetMany on a daemon without GET_MANY.
func (c *Client) getManyOneByOne(ctx context.Context, req ManyRequest, fn func(ManyEntry, io.Reader) error) (ManySummary, error) {
	names := req.Names
	if req.ByPrefix {
		infos, err := c.List(ctx, req.Prefix)
		if err != nil {
			return ManySummary{}, err
		}
		names = make([]string, len(infos))
		for i := range infos {
			names[i] = infos[i].Name
		}
	}
	var sum ManySummary
	for i, name := range names {
		if err := ctx.Err(); err != nil {
			return sum, fmt.Errorf("get many: %w", ctxErr(ctx))
		}
		e := ManyEntry{Index: i, Name: name}
		var rc io.ReadCloser
		var err error
		if e.Err = blob.ValidateName(name); e.Err == nil {
			e.Info, rc, err = c.GetStream(ctx, name)
		}
		var re *Error
		switch {
		case e.Err != nil:
		case err != nil && errors.As(err, &re) && ctx.Err() == nil:
			e.Err = err
		case err != nil:
			return sum, err
		}
		sum.Entries++
		if e.Err != nil {
			sum.Failed++
			if ferr := fn(e, nil); ferr != nil {
				return sum, ferr
			}
			continue
		}
		cr := &countReader{r: rc}
		ferr := fn(e, cr)
		if ferr == nil && cr.err == nil {
			_, cr.err = io.Copy(io.Discard, cr)
			if cr.err == nil {
				cr.err = io.EOF
			}
		}
		rc.Close()
		if ferr != nil {
			return sum, ferr
		}
		if cr.err == io.EOF {
			sum.OK++
			sum.Bytes += e.Info.Size
			continue
		}
		sum.Failed++
		if !errors.As(cr.err, &re) {
			return sum, cr.err
		}
	}
	return sum, nil
}

// countReader remembers a reader's last error.
type countReader struct {
	r   io.Reader
	err error
}

func (r *countReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.r.Read(p)
	if err != nil {
		r.err = err
	}
	return n, err
}

// PutItem is one blob of a PutMany: its name, its size and its bytes.
// Open is called when the item's turn comes, and the reader closed after
// Size bytes; it must yield exactly Size bytes.
type PutItem struct {
	Name string
	Size uint64
	Open func() (io.ReadCloser, error)
}

// ErrItemChanged marks a PutMany item whose reader did not yield its
// Size bytes (a file that changed while it was read): that item is
// aborted, the others go on.
var ErrItemChanged = errors.New("input changed while it was read")

// PutMany uploads items in one PUT_MANY and returns an entry per item, in
// order, and the summary. An item that fails (its name refused, its input
// unreadable or not of its size, the store full) has its entry's Err; the
// others are stored. The error is for the whole call (the connection lost,
// ctx ending: the entries the daemon had not answered are missing).
//
// On a daemon of protocol version 6 or less the items are put one by one.
func (c *Client) PutMany(ctx context.Context, items []PutItem, opts PutOptions) ([]ManyEntry, ManySummary, error) {
	if err := checkOpts(opts); err != nil {
		return nil, ManySummary{}, err
	}
	if err := c.acquire(ctx); err != nil {
		return nil, ManySummary{}, err
	}
	version := c.version
	c.mu.Unlock()
	if version < ManyVersion {
		return c.putManyOneByOne(ctx, items, opts)
	}
	entries := make([]ManyEntry, len(items))
	for i, it := range items {
		entries[i] = ManyEntry{Index: i, Name: it.Name}
	}
	local := make([]error, len(items)) // errors found here
	sent := make([]bool, len(items))   // the items given to the daemon
	const op = "put many"
	if err := c.acquire(ctx); err != nil {
		return nil, ManySummary{}, err
	}
	defer c.mu.Unlock()
	if err := c.send(FramePutMany, func(b []byte) []byte { return appendU32(b, uint32(opts.ChunkSize)) }); err != nil {
		return nil, ManySummary{}, fmt.Errorf("%s: %w", op, err)
	}
	w := c.watch(ctx)
	fc := c.fc
	buf := c.dataBuf(DataFrameSize)
	aborted := false
	for i, it := range items {
		if ctx.Err() != nil {
			aborted = true
			break
		}
		if err := blob.ValidateName(it.Name); err != nil {
			local[i] = err // not sent: the daemon would refuse it
			continue
		}
		rc, err := it.Open()
		if err != nil {
			local[i] = err
			continue
		}
		off := fc.begin(FramePutItem)
		fc.wbuf = appendPutItem(fc.wbuf, it.Name, it.Size)
		fc.end(off)
		sent[i] = true
		rem := it.Size
		var ierr error
		for rem > 0 && ierr == nil {
			n, rerr := rc.Read(buf[:min(uint64(len(buf)), rem)])
			if uint64(n) == rem {
				// The last piece: one byte more means the input grew,
				// and the item is aborted before it is complete.
				var one [1]byte
				if k, _ := io.ReadFull(rc, one[:]); k > 0 {
					ierr = fmt.Errorf("%w: it has more than its %d bytes", ErrItemChanged, it.Size)
					break
				}
			}
			if n > 0 {
				if err := fc.data(buf[:n]); err != nil {
					rc.Close()
					return nil, ManySummary{}, c.writeFailed(ctx, w, op, err)
				}
				rem -= uint64(n)
			}
			if rem > 0 && rerr != nil {
				if rerr == io.EOF {
					rerr = fmt.Errorf("%w: it ended %d bytes short of its %d", ErrItemChanged, rem, it.Size)
				}
				ierr = rerr
			}
		}
		if ierr == nil && it.Size == 0 {
			var one [1]byte
			if k, _ := io.ReadFull(rc, one[:]); k > 0 {
				// Too late to abort an empty item: it is complete
				// with its PUT_ITEM. Its entry says so.
				ierr = fmt.Errorf("%w: it has more than its %d bytes", ErrItemChanged, it.Size)
			}
		}
		rc.Close()
		if ierr != nil {
			local[i] = fmt.Errorf("put %q: %w", it.Name, ierr)
			if rem > 0 {
				fc.frame(FrameAbort, nil) // this item only
			}
		}
		if len(fc.wbuf) >= bufSize {
			if err := fc.flush(); err != nil {
				return nil, ManySummary{}, c.writeFailed(ctx, w, op, err)
			}
		}
	}
	if aborted {
		fc.frame(FrameAbort, nil)
	} else {
		fc.frame(FrameData, nil)
	}
	if err := fc.flush(); err != nil {
		return nil, ManySummary{}, c.writeFailed(ctx, w, op, err)
	}
	var sum ManySummary
	for {
		h, body, err := readReply(fc)
		if err != nil {
			return entries, sum, c.fail(ctx, w, op, err, false)
		}
		switch h.Type {
		case FrameError:
			return entries, sum, c.fail(ctx, w, op, replyError(body), true)
		case FrameEntry, FrameEntryError:
			var i int
			var info Info
			var e *Error
			if h.Type == FrameEntry {
				i, info, err = decodeEntry(body)
			} else {
				i, _, e, err = decodeEntryError(body)
			}
			if err == nil && (i < 0 || i >= len(items)) {
				err = malformed("%v of item %d; %d were sent", h.Type, i, len(items))
			}
			if err != nil {
				return entries, sum, c.fail(ctx, w, op, err, false)
			}
			if e != nil {
				entries[i].Err = e
			} else {
				entries[i].Info = info
			}
		case FrameSummary:
			if sum, err = decodeSummary(body); err != nil {
				return entries, sum, c.fail(ctx, w, op, err, false)
			}
			if w.release() {
				c.drop()
			}
			// The daemon's entries are numbered by the items it got:
			// those refused here were not sent.
			renumber(entries, local, sent)
			sum = ManySummary{Entries: len(items)}
			for _, e := range entries {
				if e.Err != nil {
					sum.Failed++
				} else {
					sum.OK++
					sum.Bytes += e.Info.Size
				}
			}
			if aborted {
				return entries, sum, fmt.Errorf("%s: %w", op, ctxErr(ctx))
			}
			return entries, sum, nil
		default:
			return entries, sum, c.fail(ctx, w, op, unexpected(h, "ENTRY, ENTRY_ERROR or SUMMARY"), false)
		}
	}
}

// renumber moves the daemon's answers (indexed by the items it received,
// in entries[0:k]) to the items they belong to (those sent), and sets the
// errors found here (local), which take precedence.
func renumber(entries []ManyEntry, local []error, sent []bool) {
	got := make([]ManyEntry, len(entries))
	copy(got, entries)
	k := 0
	for i := range entries {
		name := entries[i].Name
		var e ManyEntry
		if sent[i] {
			e = got[k]
			k++
		}
		entries[i] = ManyEntry{Index: i, Name: name, Info: e.Info, Err: e.Err}
		switch {
		case local[i] != nil:
			entries[i] = ManyEntry{Index: i, Name: name, Err: local[i]}
		case e.Err == nil && e.Info.Name == "":
			entries[i].Err = fmt.Errorf("put %q: no answer from the daemon: %w", name, blob.ErrNotFound)
		}
	}
}

// putManyOneByOne serves PutMany on a daemon without PUT_MANY.
func (c *Client) putManyOneByOne(ctx context.Context, items []PutItem, opts PutOptions) ([]ManyEntry, ManySummary, error) {
	entries := make([]ManyEntry, len(items))
	sum := ManySummary{Entries: len(items)}
	for i, it := range items {
		entries[i] = ManyEntry{Index: i, Name: it.Name}
		if err := ctx.Err(); err != nil {
			return entries, sum, fmt.Errorf("put many: %w", ctxErr(ctx))
		}
		rc, err := it.Open()
		if err == nil {
			entries[i].Info, err = c.Put(ctx, it.Name, &exactReader{r: rc, size: it.Size}, opts)
			rc.Close()
		}
		var re *Error
		if err != nil && !errors.As(err, &re) && !errors.Is(err, blob.ErrInvalidName) && !errors.Is(err, ErrItemChanged) && ctx.Err() != nil {
			return entries, sum, err
		}
		entries[i].Err = err
		if err != nil {
			sum.Failed++
		} else {
			sum.OK++
			sum.Bytes += entries[i].Info.Size
		}
	}
	return entries, sum, nil
}

// exactReader yields r's bytes and io.EOF only if they are exactly size.
type exactReader struct {
	r    io.Reader
	size uint64
	got  uint64
}

func (e *exactReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	e.got += uint64(n)
	if e.got > e.size {
		return n, fmt.Errorf("%w: it has more than its %d bytes", ErrItemChanged, e.size)
	}
	if err == io.EOF && e.got != e.size {
		return n, fmt.Errorf("%w: it ended %d bytes short of its %d", ErrItemChanged, e.size-e.got, e.size)
	}
	return n, err
}
