package tree

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

// A get that crosses a WAN hop pays a round trip for the name (LOOKUP)
// and another before its first chunk (the fetch request). With names
// 1.2.0 a node about to fetch asks LOOKUP_GET, and a parent that holds the
// blob, answering a child in another site, sends the blob's first chunks
// (MaxPushBytes of them) right after its FOUND on the same stream: a PUSH
// frame saying which, then one CHUNK frame each. The child registers them
// as chunks in flight from its parent before it answers anyone, so its own
// and its children's requests for them wait on the push instead of asking
// again; each pushed chunk is verified against the manifest like any other.
// Pushes go only across sites (a WAN hop, where the round trip is worth
// saving; inside a site the head's sibling exchange must see every
// request), only when the asker does not hold the blob already (Have), and
// one LOOKUP_GET per name is under way from a node at a time. A push is an
// upload like any other: it obeys the node's upload rate limit
// (Pusher.WaitUpload), and the Pusher may offer fewer chunks under one.

// Pusher is what the tree needs from the transfer engine to push and take
// pushed chunks. Its methods are safe for concurrent use.
type Pusher interface {
	// PushChunks returns the verified bytes of the first chunks of r's
	// blob that this node holds, in order from chunk 0, at most max bytes
	// in all (none if chunk 0 is missing or bigger).
	PushChunks(r blob.Record, max int) [][]byte
	// HoldsStart reports whether this node holds the first chunk of blob
	// id, or is fetching it, so that a push of it would bring nothing new.
	HoldsStart(id cid.Cid) bool
	// WaitUpload blocks until the node's upload rate limit, if it has
	// one, lets n more bytes out; it fails only when ctx ends first.
	WaitUpload(ctx context.Context, n int) error
	// Pushed is told that n chunk bytes were pushed to asker.
	Pushed(asker peer.ID, n int)
	// ExpectPush is called when the FOUND from parent for r announces
	// chunks first .. first+count-1; it registers them as in flight and
	// returns deliver, called with each chunk's bytes as they arrive, and
	// end, called once after the last (nil) or when the rest will not come
	// (why). Both are called from one goroutine. A nil deliver declines
	// the push (the stream is then closed).
	ExpectPush(r blob.Record, parent peer.ID, first, count int) (deliver func(index int, data []byte), end func(error))
}

// pushStream is the names stream of a FOUND answering a LOOKUP_GET, after
// the reply: a PUSH and CHUNK frames may follow.
type pushStream struct {
	s    network.Stream
	br   *bufio.Reader
	from peer.ID
	took bool // receivePush owns it
}

// close resets the stream unless receivePush has taken it.
func (ps *pushStream) close() {
	if !ps.took {
		ps.s.Reset()
	}
}

// pushRequest fills in q (a LOOKUP_GET)'s Have with the local record's
// blob when this node holds its first chunk (a record alone, left by a
// stat, does not stop a push), and turns q into a plain LOOKUP while
// another LOOKUP_GET for the name is under way here (so that concurrent
// gets of one name bring one push), after waiting (within ctx) for that
// one to end: its pushed chunks are then registered as fetches in flight,
// which the gets that follow this lookup wait for instead of asking for
// them again (a plain LOOKUP's FOUND, coming first, used to let them ask,
// and the pushed copies then crossed the WAN for nothing). The returned
// release must be called when the lookup is done.
func (t *Tree) pushRequest(ctx context.Context, q namesRequest, local blob.Record, haveLocal bool) (namesRequest, func()) {
	if t.eng == nil {
		q.Type = msgLookup
		return q, func() {}
	}
	holds := haveLocal && t.eng.HoldsStart(local.ID)
	t.mu.Lock()
	if under := t.pushing[q.Name]; under != nil {
		t.mu.Unlock()
		select {
		case <-under:
		case <-ctx.Done():
		}
		q.Type = msgLookup
		return q, func() {}
	}
	done := make(chan struct{})
	t.pushing[q.Name] = done
	t.mu.Unlock()
	if holds {
		q.Have = local.ID
	}
	return q, func() {
		t.mu.Lock()
		delete(t.pushing, q.Name)
		t.mu.Unlock()
		close(done)
	}
}

// pushFor returns the chunks to push to p after a FOUND of r: only to a
// child in another site that does not hold r's blob already (have).
func (t *Tree) pushFor(p peer.ID, r blob.Record, have cid.Cid) [][]byte {
	if t.eng == nil || (have.Defined() && have.Equals(r.ID)) {
		return nil
	}
	t.mu.Lock()
	c, ok := t.children[p]
	across := ok && c.connected && c.site != t.cfg.Site
	t.mu.Unlock()
	if !across {
		return nil
	}
	return t.eng.PushChunks(r, MaxPushBytes)
}

// sendPush writes chunks (chunk 0 onwards) after a FOUND on s, each once
// the upload limit lets it out; it stops early when ctx ends.
func (t *Tree) sendPush(ctx context.Context, s network.Stream, p peer.ID, chunks [][]byte) {
	if _, err := s.Write(encodePush(pushHeader{First: 0, Count: uint32(len(chunks))})); err != nil {
		t.log.Debug("push", "peer", p, "err", err)
		return
	}
	n := 0
	var frame []byte
	for i, c := range chunks {
		if err := t.eng.WaitUpload(ctx, len(c)); err != nil {
			t.log.Debug("push", "peer", p, "chunk", i, "err", err)
			break
		}
		frame = appendChunkFrame(frame[:0], uint32(i), c)
		if _, err := s.Write(frame); err != nil {
			t.log.Debug("push", "peer", p, "chunk", i, "err", err)
			break
		}
		n += len(c)
	}
	if n > 0 {
		t.eng.Pushed(p, n)
	}
}

// receivePush takes ps after the FOUND of r (whose manifest m is stored):
// it reads the PUSH, if one follows, registers its chunks with the Pusher
// before returning, and reads them in the background, bounded by
// RequestTimeout. A peer that sends anything else is named.
func (t *Tree) receivePush(ps *pushStream, r blob.Record, m *blob.Manifest) {
	if t.eng == nil {
		return
	}
	_ = ps.s.SetDeadline(time.Now().Add(t.cfg.RequestTimeout))
	typ, payload, err := readFrame(ps.br)
	if errors.Is(err, io.EOF) {
		return // nothing pushed
	}
	if err == nil && typ != msgPush {
		err = malformed("message 0x%02x after FOUND", typ)
	}
	var h pushHeader
	if err == nil {
		h, err = decodePush(payload)
	}
	if err == nil && (h.First != 0 || int(h.Count) > len(m.Chunks)) {
		err = malformed("PUSH of chunks %d+%d of a blob of %d", h.First, h.Count, len(m.Chunks))
	}
	if err != nil {
		t.notePeerError(ps.from, "push", err)
		return
	}
	deliver, end := t.eng.ExpectPush(r, ps.from, int(h.First), int(h.Count))
	if deliver == nil {
		return
	}
	ps.took = true
	if !t.goTracked(func() {
		defer ps.s.Reset()
		end(t.readPushed(ps, h, deliver))
	}) {
		ps.took = false
		end(errors.New("node closing"))
	}
}

// readPushed reads h's CHUNK frames from ps in order, handing each to
// deliver; it returns nil after the last or why it stopped.
func (t *Tree) readPushed(ps *pushStream, h pushHeader, deliver func(int, []byte)) error {
	for k := range h.Count {
		typ, payload, err := readFrame(ps.br)
		if err == nil && typ != msgChunk {
			err = malformed("message 0x%02x in a push", typ)
		}
		var index uint32
		var data []byte
		if err == nil {
			index, data, err = decodeChunkFrame(payload)
		}
		if err == nil && index != h.First+k {
			err = malformed("pushed chunk %d where %d was due", index, h.First+k)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			err = fmt.Errorf("%s: push of %d chunks stopped at %d: %w", t.Describe(ps.from), h.Count, k, err)
			if errors.Is(err, wire.ErrMalformed) {
				t.notePeerError(ps.from, "push", err)
			}
			return err
		}
		deliver(int(index), data)
	}
	return nil
}
