package piece

import (
	"context"
	"sync"

	"github.com/omst-project/omst/pkg/blob"
)

// Partial is one chunk as it arrives: filled in order from offset 0 by
// whoever delivers verified bytes (Add, Complete), and read meanwhile by
// whoever passes it on (State). The bytes below the verified length never
// change once published, so a reader uses State's Data without a lock.
// Its methods are safe for concurrent use.
type Partial struct {
	h blob.Hash

	mu   sync.Mutex
	ob   []byte // the verified outboard; nil until a sender's passed
	n    int    // the chunk's length; 0 until known
	data []byte // n bytes; [0, have) verified and published
	have int
	err  error
	// wake is closed at the next change; nil when no State since the
	// last change handed one out (made on demand: a chunk passed on by
	// nobody makes none, one per piece before).
	wake chan struct{}
}

// NewPartial returns an empty Partial for the chunk with hash h.
func NewPartial(h blob.Hash) *Partial {
	return &Partial{h: h}
}

// Hash is the chunk's hash.
func (p *Partial) Hash() blob.Hash { return p.h }

// State is what a Partial holds at one moment.
type State struct {
	Outboard []byte // nil until known
	Len      int    // the chunk's length; 0 until known
	Data     []byte // the verified prefix
	Err      error  // set once the fetch failed (Data stays valid)
	// Changed is closed at the Partial's next change.
	Changed <-chan struct{}
}

// Done reports whether the whole chunk is there.
func (s State) Done() bool { return s.Len > 0 && len(s.Data) == s.Len }

// State returns what p holds now.
func (p *Partial) State() State {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.wake == nil {
		p.wake = make(chan struct{})
	}
	return State{Outboard: p.ob, Len: p.n, Data: p.data[:p.have:p.have], Err: p.err, Changed: p.wake}
}

// changed wakes those waiting on a State's Changed (p.mu held).
func (p *Partial) changed() {
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
}

// Begin records the chunk's outboard, which the caller verified
// (VerifyOutboard) and which states a chunk of n bytes. The first call
// sets it; later ones (another sender's outboard of the same chunk, the
// same bytes) change nothing.
func (p *Partial) Begin(ob []byte, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ob != nil || (p.n != 0 && p.n != n) {
		return
	}
	p.ob = ob
	if p.n == 0 {
		p.n, p.data = n, make([]byte, n)
	}
	p.changed()
}

// Add publishes verified bytes b found at offset off (VerifyPiece passed
// against the outboard given to Begin). Bytes already published are
// skipped; b is ignored unless it starts at or before the verified end
// (each sender sends its pieces in order from offset 0).
func (p *Partial) Add(off int, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 || off > p.have || off+len(b) <= p.have || off+len(b) > p.n {
		return
	}
	p.have += copy(p.data[p.have:], b[p.have-off:])
	p.changed()
}

// Complete publishes the whole chunk, verified by the caller (a reply of
// the whole chunk, a push, the store). data is not copied and must not
// change. Verified whole, data settles the chunk's length: when the
// outboard given to Begin stated another (an outboard alone does not
// prove its length, VerifyOutboard), that outboard is dropped (State's
// Outboard is nil again) with the buffer; the bytes published under it
// were verified groups of the chunk, data's own, so a prefix read before
// stays true.
func (p *Partial) Complete(data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(data) == 0 || (p.n != 0 && p.have == p.n) {
		return
	}
	if p.n != len(data) {
		p.ob = nil
	}
	p.n, p.data, p.have = len(data), data, len(data)
	p.changed()
}

// Fail records that no more bytes will come through this Partial (err,
// or a generic error if nil); what is published stays.
func (p *Partial) Fail(err error) {
	if err == nil {
		err = errFailed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil || (p.n != 0 && p.have == p.n) {
		return
	}
	p.err = err
	p.changed()
}

type watchKey struct{}

// WithWatch returns a context that carries w: a chunk fetch made under it
// (coalesce.Chunks.Get) hands w the Partial of every fetch it waits on, as
// it joins or starts it, so that the caller can pass the chunk on piece by
// piece while it arrives. w must not block.
func WithWatch(ctx context.Context, w func(*Partial)) context.Context {
	return context.WithValue(ctx, watchKey{}, w)
}

// WatchFrom returns the w of WithWatch that ctx carries, or nil.
func WatchFrom(ctx context.Context) func(*Partial) {
	w, _ := ctx.Value(watchKey{}).(func(*Partial))
	return w
}
