package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
)

// Debug lines of the get path (--log-level debug): where a name was found
// (the tree or the DHT), the blob and the sources its fetch starts with,
// and the end of the get with its bytes, time and the peers they came
// from. At other levels none of this costs anything but a level check.

func (n *Node) debugOn() bool { return n.log.Enabled(context.Background(), slog.LevelDebug) }

// debugLookup logs the outcome of one step of a name's lookup (via: "tree"
// or "DHT").
func (n *Node) debugLookup(via, name string, rec blob.Record, start time.Time, err error) {
	if !n.debugOn() {
		return
	}
	if err != nil {
		n.log.Debug("name lookup", "name", name, "via", via, "err", err, "took", time.Since(start).Round(time.Microsecond))
		return
	}
	n.log.Debug("name lookup", "name", name, "via", via, "id", rec.ID, "size", rec.Size, "origin", rec.Origin,
		"took", time.Since(start).Round(time.Microsecond))
}

// debugResolved logs a get's blob and the sources its fetch starts from.
func (n *Node) debugResolved(name string, rec blob.Record, m *blob.Manifest, start time.Time, err error) {
	if !n.debugOn() {
		return
	}
	if err != nil {
		n.log.Debug("get: not resolved", "name", name, "err", err, "took", time.Since(start).Round(time.Microsecond))
		return
	}
	local := n.store.HasBlob(rec.ID)
	var srcs []string
	if !local {
		for _, s := range n.tree.Sources(rec.ID, "") {
			srcs = append(srcs, s.Kind.String()+" "+s.ID.String())
		}
		if n.loc != nil {
			srcs = append(srcs, "then holders found in the DHT")
		}
	}
	sources := strings.Join(srcs, ", ")
	switch {
	case local:
		sources = "none needed: every chunk is here"
	case sources == "":
		sources = "none known"
	}
	n.log.Debug("get: resolved", "name", name, "id", rec.ID, "size", rec.Size, "chunks", len(m.Chunks),
		"chunk_size", m.ChunkSize, "local", local, "sources", sources, "took", time.Since(start).Round(time.Microsecond))
}

// debugReader wraps a get's reader so that its end is logged (with debug
// off, it returns rc itself).
func (n *Node) debugReader(rc io.ReadCloser, name string, id cid.Cid, size uint64, start time.Time) io.ReadCloser {
	if !n.debugOn() {
		return rc
	}
	return &getLogReader{ReadCloser: rc, n: n, name: name, id: id, size: size, start: start}
}

type getLogReader struct {
	io.ReadCloser
	n     *Node
	name  string
	id    cid.Cid
	size  uint64
	start time.Time
	bytes int64
	from  string // the peers the bytes came from, noted with the last bytes
	once  sync.Once
}

// note counts k more bytes; with the last ones it notes where the bytes
// came from (the engine forgets the transfer once its reader is at EOF).
func (r *getLogReader) note(k int) {
	before := r.bytes
	r.bytes += int64(k)
	if uint64(before) < r.size && uint64(r.bytes) >= r.size {
		r.from = r.sources()
	}
}

func (r *getLogReader) Read(p []byte) (int, error) {
	k, err := r.ReadCloser.Read(p)
	r.note(k)
	if err == io.EOF {
		r.done(nil)
	}
	return k, err
}

// WriteTo keeps the inner reader's WriteTo (see providingReader.WriteTo).
func (r *getLogReader) WriteTo(w io.Writer) (int64, error) {
	cw := &noteWriter{w: w, r: r}
	var k int64
	var err error
	if wt, ok := r.ReadCloser.(io.WriterTo); ok {
		k, err = wt.WriteTo(cw)
	} else {
		k, err = io.Copy(cw, r.ReadCloser)
	}
	if err == nil {
		r.done(nil)
	}
	return k, err
}

type noteWriter struct {
	w io.Writer
	r *getLogReader
}

func (c *noteWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.r.note(k)
	return k, err
}

func (r *getLogReader) Close() error {
	err := r.ReadCloser.Close()
	if uint64(r.bytes) < r.size {
		r.done(fmt.Errorf("closed after %d of %d bytes", r.bytes, r.size))
	}
	return err
}

// sources describes the peers the get's transfer had bytes from.
func (r *getLogReader) sources() string {
	var from []string
	for _, t := range r.n.engine.Transfers() {
		if t.ID != r.id {
			continue
		}
		for _, f := range t.From {
			from = append(from, fmt.Sprintf("%s %s: %d", f.Kind, f.ID, f.Bytes))
		}
		break
	}
	if len(from) == 0 {
		return "this node's store"
	}
	return strings.Join(from, ", ")
}

// done logs the end of the get once: complete (err nil) or cut short.
func (r *getLogReader) done(err error) {
	r.once.Do(func() {
		took := time.Since(r.start)
		if err != nil {
			r.n.log.Debug("get: ended early", "name", r.name, "id", r.id, "bytes", r.bytes, "took", took.Round(time.Microsecond), "err", err)
			return
		}
		if r.from == "" {
			r.from = r.sources()
		}
		mbps := 0.0
		if s := took.Seconds(); s > 0 {
			mbps = float64(r.bytes) / s / 1e6
		}
		r.n.log.Debug("get: done", "name", r.name, "id", r.id, "bytes", r.bytes, "took", took.Round(time.Microsecond),
			"MB_per_s", fmt.Sprintf("%.1f", mbps), "from", r.from)
	})
}
