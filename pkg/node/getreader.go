package node

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
)

// getReader is a get's reader as the node hands it out: the engine's
// reader, and what the node does when the get ends, once: it observes the
// get in the metrics (its time when every byte was read, its failure when
// a read failed; a get the caller closes early is neither), logs its end
// at debug level (bytes, time, the peers they came from), and, when the
// whole blob was read, announces the blob in the DHT once it is held here.
// It keeps the engine reader's WriteTo (chunks written straight into the
// local API's frames, no per-request buffer).
type getReader struct {
	io.ReadCloser
	n     *Node
	name  string
	id    cid.Cid
	m     *blob.Manifest
	size  uint64
	start time.Time
	debug bool // debug logging was on when the get began

	bytes int64
	from  string // the peers the bytes came from, noted with the last bytes
	once  sync.Once
	whole bool // every byte was read (set by end)
}

// newGetReader wraps the engine's reader rc of the blob id (manifest m)
// that a get of name opened at start.
func (n *Node) newGetReader(rc io.ReadCloser, name string, id cid.Cid, m *blob.Manifest, start time.Time) *getReader {
	return &getReader{ReadCloser: rc, n: n, name: name, id: id, m: m, size: m.Size, start: start, debug: n.debugOn()}
}

// note counts k more bytes; with the last ones it notes where the bytes
// came from (the engine forgets the transfer once its reader is at EOF).
func (r *getReader) note(k int) {
	before := r.bytes
	r.bytes += int64(k)
	if r.debug && uint64(before) < r.size && uint64(r.bytes) >= r.size {
		r.from = r.n.getSources(r.id)
	}
}

func (r *getReader) Read(p []byte) (int, error) {
	k, err := r.ReadCloser.Read(p)
	r.note(k)
	if err != nil {
		r.end(err)
	}
	return k, err
}

// WriteTo writes the rest of the blob to w through the engine reader's
// WriteTo when it has one.
func (r *getReader) WriteTo(w io.Writer) (k int64, err error) {
	var dst io.Writer = w
	if r.debug { // count as the bytes go, to note their sources in time
		dst = &noteWriter{w: w, r: r}
	}
	if wt, ok := r.ReadCloser.(io.WriterTo); ok {
		k, err = wt.WriteTo(dst)
	} else {
		k, err = io.Copy(dst, r.ReadCloser)
	}
	if !r.debug {
		r.bytes += k
	}
	r.end(err)
	return k, err
}

// end ends the get once: err nil or io.EOF when every byte was read.
func (r *getReader) end(err error) {
	r.once.Do(func() {
		took := time.Since(r.start)
		if err != nil && err != io.EOF {
			r.n.metrics.getFailed(err)
			if r.debug {
				r.n.log.Debug("get: ended early", "name", r.name, "id", r.id, "bytes", r.bytes, "took", took.Round(time.Microsecond), "err", err)
			}
			return
		}
		r.whole = true
		r.n.metrics.getDone(took)
		if r.debug {
			r.n.debugGetDone(r.name, r.id, r.bytes, took, r.from)
		}
	})
}

// Close closes the engine reader; a get closed before its end is logged
// (not counted as failed), and a whole one announces its blob.
func (r *getReader) Close() error {
	err := r.ReadCloser.Close()
	closedEarly := false
	r.once.Do(func() { closedEarly = true })
	if closedEarly {
		if r.debug {
			r.n.log.Debug("get: ended early", "name", r.name, "id", r.id, "bytes", r.bytes,
				"took", time.Since(r.start).Round(time.Microsecond), "err", fmt.Errorf("closed after %d of %d bytes", r.bytes, r.size))
		}
		return err
	}
	if r.whole {
		r.n.provideWhenHeld(r.id, r.m)
	}
	return err
}

type noteWriter struct {
	w io.Writer
	r *getReader
}

func (c *noteWriter) Write(p []byte) (int, error) {
	k, err := c.w.Write(p)
	c.r.note(k)
	return k, err
}
