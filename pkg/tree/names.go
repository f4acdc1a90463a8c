package tree

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/dialerr"
	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

// namesCall sends one request on a fresh names stream to p and returns the
// reply. Errors name the peer; transport failures wrap blob.ErrUnreachable.
func (t *Tree) namesCall(ctx context.Context, p peer.ID, q namesRequest) (namesReply, error) {
	return t.namesCallTimeout(ctx, p, q, t.cfg.RequestTimeout)
}

// namesCallTimeout is namesCall with its own bound on the reply.
func (t *Tree) namesCallTimeout(ctx context.Context, p peer.ID, q namesRequest, timeout time.Duration) (namesReply, error) {
	rep, _, err := t.namesExchange(ctx, p, q, timeout, false)
	return rep, err
}

// namesExchange is namesCallTimeout that, with keep, returns the stream of
// a FOUND answering a LOOKUP_GET (names 1.2.0), positioned after the reply,
// for the pushed chunks that may follow (push.go); the caller then owns
// it. Otherwise the stream is closed and the second result is nil.
func (t *Tree) namesExchange(ctx context.Context, p peer.ID, q namesRequest, timeout time.Duration, keep bool) (namesReply, *pushStream, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := t.connect(ctx, p); err != nil {
		return namesReply{}, nil, err
	}
	s, err := t.h.NewStream(ctx, p, t.protos...)
	if err != nil {
		return namesReply{}, nil, fmt.Errorf("%s: %w: %s", t.Describe(p), blob.ErrUnreachable, dialerr.Text(err))
	}
	kept := false
	defer func() {
		if !kept {
			s.Reset()
		}
	}()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	if q.Type == msgLookupGet && !namesVersionHas(s.Protocol(), msgLookupGet) {
		q.Type = msgLookup // a peer of before LOOKUP_GET
	}
	if !namesVersionHas(s.Protocol(), q.Type) {
		return namesReply{}, nil, fmt.Errorf("%s: %w (it speaks %s)", t.Describe(p), errOldNames, s.Protocol())
	}
	if _, err := s.Write(encodeNamesRequest(q)); err != nil {
		return namesReply{}, nil, fmt.Errorf("%s: %w: %v", t.Describe(p), blob.ErrUnreachable, err)
	}
	_ = s.CloseWrite()
	br := bufio.NewReader(s)
	typ, payload, err := readFrame(br)
	if err != nil {
		if errors.Is(err, wire.ErrMalformed) {
			t.notePeerError(p, "names reply", err)
			return namesReply{}, nil, fmt.Errorf("%s: %w", t.Describe(p), err)
		}
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
			err = fmt.Errorf("no reply within %v", timeout)
		}
		return namesReply{}, nil, fmt.Errorf("%s: %w: %v", t.Describe(p), blob.ErrUnreachable, err)
	}
	rep, err := decodeNamesReply(typ, payload)
	if err != nil {
		t.notePeerError(p, "names reply", err)
		return namesReply{}, nil, fmt.Errorf("%s: %w", t.Describe(p), err)
	}
	if rep.Type == msgError {
		return rep, nil, remoteError(t.Describe(p), rep)
	}
	if keep && q.Type == msgLookupGet && rep.Type == msgFound && stop() {
		kept = true
		return rep, &pushStream{s: s, br: br, from: p}, nil
	}
	return rep, nil, nil
}

// Lookup resolves name. The root answers from its store. Other nodes ask
// the parent (bounded by RequestTimeout), keep the newer of the local and
// the parent's record (storing the parent's, with no route, when it wins)
// and return it. If the parent is unreachable the local record, if
// any, is returned (it may be stale); else the error wraps
// blob.ErrUnreachable and names the parent. If neither has the name the
// error wraps blob.ErrNotFound. name must be valid (blob.ValidateName):
// the callers' trust boundaries check it (the node's local API; a child's
// names request, in decodeNamesRequest), and the tree does not again.
func (t *Tree) Lookup(ctx context.Context, name string) (blob.Record, error) {
	r, _, err := t.lookup(ctx, name, msgLookup)
	return r, err
}

// LookupToGet is Lookup by a node about to fetch the blob: it asks its
// parent with LOOKUP_GET, whose answer may bring the blob's first chunks
// along (Config.Pusher): the fetch then saves a round trip to the parent.
// It also returns the blob's manifest when the parent's answer brought it
// (verified against the record's blob ID, and stored), else nil: the
// caller carries it to the fetch instead of reading it again.
func (t *Tree) LookupToGet(ctx context.Context, name string) (blob.Record, *blob.Manifest, error) {
	return t.lookup(ctx, name, msgLookupGet)
}

// lookup is Lookup, asking the parent with a request of type typ
// (msgLookup or msgLookupGet), and returning the manifest the parent's
// answer brought for the record returned (nil if none).
func (t *Tree) lookup(ctx context.Context, name string, typ byte) (blob.Record, *blob.Manifest, error) {
	local, lerr := t.store.Record(name)
	haveLocal := lerr == nil
	if lerr != nil && !errors.Is(lerr, blob.ErrNotFound) {
		return blob.Record{}, nil, fmt.Errorf("lookup %q: local store: %w", name, lerr)
	}
	if len(t.parents) == 0 {
		if !haveLocal {
			return blob.Record{}, nil, fmt.Errorf("lookup %q: %w", name, blob.ErrNotFound)
		}
		return local, nil, nil
	}
	q := namesRequest{Type: typ, Name: name}
	if typ == msgLookupGet {
		var release func()
		q, release = t.pushRequest(ctx, q, local, haveLocal)
		defer release()
	}
	rep, parent, ps, err := t.lookupUp(ctx, q)
	if ps != nil {
		defer ps.close() // a no-op once receivePush has taken it
	}
	if err != nil {
		if haveLocal {
			t.log.Warn("parent unreachable: answering from the local record, which may be stale",
				"name", name, "parent", t.parentAddr(), "err", err)
			return local, nil, nil
		}
		return blob.Record{}, nil, fmt.Errorf("lookup %q: %w", name, err)
	}
	var m *blob.Manifest // the parent's, verified against rep.Record.ID
	switch rep.Type {
	case msgFound:
		r := rep.Record
		if r.Name != name {
			t.notePeerError(parent, "lookup", fmt.Errorf("asked for %q, got a record of %q", name, r.Name))
			break
		}
		if err := t.checkRecord(r); err != nil {
			t.notePeerError(parent, "lookup", err)
			break
		}
		if rep.Manifest != nil {
			// Checked against the blob ID before it is kept: a parent
			// cannot pass off other chunks for the blob.
			if vm, err := blob.VerifyManifest(r.ID, rep.Manifest); err != nil {
				t.notePeerError(parent, "lookup", fmt.Errorf("manifest sent with %q: %w", name, err))
			} else if _, err := t.store.PutManifest(vm); err != nil {
				t.log.Warn("store manifest from parent", "id", r.ID, "err", err)
			} else {
				m = vm
				if ps != nil {
					t.receivePush(ps, r, vm)
				}
			}
		}
		if haveLocal && !r.Newer(local) {
			t.learnOrigin(local)
			if local.ID != r.ID {
				m = nil
			}
			return local, m, nil
		}
		if _, err := t.store.PutRecordFrom(r, ""); errors.Is(err, blob.ErrNotFound) {
			// A namespace rule here withdraws it (the parent has not
			// taken the rule yet): no such name.
			return blob.Record{}, nil, fmt.Errorf("lookup %q: %w", name, err)
		} else if err != nil {
			t.log.Warn("store record from parent", "name", name, "err", err)
		}
		t.learnOrigin(r)
		return r, m, nil
	case msgNotFound:
	default:
		t.notePeerError(parent, "lookup", malformed("reply 0x%02x to LOOKUP", rep.Type))
	}
	if haveLocal {
		return local, nil, nil
	}
	return blob.Record{}, nil, fmt.Errorf("lookup %q: %w", name, blob.ErrNotFound)
}

// lookupUp asks the current parent q (a LOOKUP or LOOKUP_GET) and, if it
// cannot be reached, each fallback parent in turn; it returns the reply,
// who gave it and, for a FOUND answering a LOOKUP_GET, the stream pushed
// chunks may follow on (the caller closes it); or the first parent's
// error.
func (t *Tree) lookupUp(ctx context.Context, q namesRequest) (namesReply, peer.ID, *pushStream, error) {
	var first error
	for _, p := range t.parentIDs() {
		rep, ps, err := t.namesExchange(ctx, p, q, t.cfg.RequestTimeout, q.Type == msgLookupGet)
		if err == nil {
			return rep, p, ps, nil
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, blob.ErrUnreachable) || ctx.Err() != nil {
			break
		}
	}
	return namesReply{}, "", nil, first
}

// handleNames serves one names request.
func (t *Tree) handleNames(s network.Stream) {
	defer s.Close()
	p := s.Conn().RemotePeer()
	_ = s.SetDeadline(time.Now().Add(t.cfg.RequestTimeout))
	typ, payload, err := readFrame(bufio.NewReader(s))
	var q namesRequest
	if err == nil {
		q, err = decodeNamesRequest(typ, payload)
	}
	if err == nil && !namesVersionHas(s.Protocol(), q.Type) {
		err = malformed("names request 0x%02x is not part of %s", q.Type, s.Protocol())
	}
	if err != nil {
		t.log.Warn("bad names request", "peer", p, "err", err)
		_, _ = s.Write(errorFrame(err))
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, t.cfg.RequestTimeout)
	defer cancel()
	if q.Type == msgPreheat {
		_ = s.SetDeadline(time.Now().Add(PreheatTimeout))
	}
	var reply []byte
	var push [][]byte
	switch q.Type {
	case msgLookup, msgLookupGet:
		reply, push = t.serveLookup(ctx, p, q)
	case msgAnnounce:
		reply = t.serveAnnounce(ctx, p, q.Record)
	case msgAnnounceBatch:
		reply = t.serveAnnounceBatch(ctx, p, q.Batch)
	case msgPreheat:
		reply = t.servePreheat(p, q.Record)
	case msgRule:
		reply = t.serveRule(ctx, p, q.Rule)
	case msgSyncRules:
		reply = t.serveSyncRules(p, q)
	case msgList:
		reply = t.serveList(ctx, p, q.List)
	}
	if _, err := s.Write(reply); err != nil {
		t.log.Debug("names reply", "peer", p, "err", err)
		return
	}
	if len(push) > 0 {
		t.sendPush(ctx, s, p, push)
	}
}

// serveLookup answers LOOKUP and LOOKUP_GET q from p; for a LOOKUP_GET it
// also returns the chunks to push after the reply (pushFor), if any.
func (t *Tree) serveLookup(ctx context.Context, p peer.ID, q namesRequest) ([]byte, [][]byte) {
	r, _, err := t.lookup(ctx, q.Name, q.Type)
	if errors.Is(err, blob.ErrNotFound) {
		return appendFrame(nil, msgNotFound, nil), nil
	}
	if err != nil {
		return errorFrame(err), nil
	}
	// The manifest rides along when it is here and small: the asker
	// then needs no round trip for it before the first chunk.
	var mb []byte
	if m, err := t.store.Manifest(r.ID); err == nil && blob.EncodedManifestLen(len(m.Chunks)) <= maxInlineManifest {
		mb = m.Encode()
	}
	var push [][]byte
	if q.Type == msgLookupGet && mb != nil {
		push = t.pushFor(p, r, q.Have)
	}
	return encodeFound(r, mb), push
}

// PreheatTimeout bounds how long a parent waits for a child to fetch a
// blob it was asked to preheat (the fetch itself goes on past it).
const PreheatTimeout = time.Hour

// PreheatResult is one child's answer to a PREHEAT.
type PreheatResult struct {
	Child   peer.ID
	Site    string
	Err     error // nil: the child holds the whole blob
	Elapsed time.Duration
}

// Preheat asks every connected child of this node (of the given sites
// only, if sites is not empty) to fetch r's blob now, before their own
// children ask for it, and waits for their answers (each bounded by ctx
// and PreheatTimeout). A child stores r as a record from its parent and
// holds the whole blob when it answers without an error.
func (t *Tree) Preheat(ctx context.Context, r blob.Record, sites []string) []PreheatResult {
	t.mu.Lock()
	var out []PreheatResult
	for id, c := range t.children {
		if c.connected && (len(sites) == 0 || slices.Contains(sites, c.site)) {
			out = append(out, PreheatResult{Child: id, Site: c.site})
		}
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b PreheatResult) int { return strings.Compare(string(a.Child), string(b.Child)) })
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			start := time.Now()
			out[i].Err = t.preheatChild(ctx, out[i].Child, r)
			out[i].Elapsed = time.Since(start)
		})
	}
	wg.Wait()
	return out
}

func (t *Tree) preheatChild(ctx context.Context, child peer.ID, r blob.Record) error {
	ctx, cancel := context.WithTimeout(ctx, PreheatTimeout)
	defer cancel()
	rep, err := t.namesCallTimeout(ctx, child, namesRequest{Type: msgPreheat, Record: r}, PreheatTimeout)
	if err != nil {
		return err
	}
	if rep.Type != msgAck {
		return fmt.Errorf("%s: %w", t.Describe(child), malformed("reply 0x%02x to PREHEAT", rep.Type))
	}
	return nil
}

// servePreheat answers a PREHEAT from one of this node's parents: keep the
// record, fetch the blob (Engine.Preheat), answer ACK once it is here.
func (t *Tree) servePreheat(p peer.ID, r blob.Record) []byte {
	if t.parentIndex(p) < 0 {
		return errorFrame(fmt.Errorf("preheat %q: %s is not a parent of %s", r.Name, p, t.self))
	}
	if t.eng == nil {
		return errorFrame(fmt.Errorf("preheat %q: this node does not preheat", r.Name))
	}
	if err := t.checkRecord(r); err != nil {
		return errorFrame(fmt.Errorf("preheat at %s: %w", t.self, err))
	}
	if _, err := t.store.PutRecordFrom(r, ""); err != nil {
		return errorFrame(fmt.Errorf("preheat %q: %w", r.Name, err))
	}
	t.learnOrigin(r)
	ctx, cancel := context.WithTimeout(t.ctx, PreheatTimeout)
	defer cancel()
	start := time.Now()
	if err := t.eng.Preheat(ctx, r); err != nil {
		return errorFrame(fmt.Errorf("preheat %q at %s: %w", r.Name, t.self, err))
	}
	t.log.Info("preheated", "name", r.Name, "id", r.ID, "size", r.Size, "took", time.Since(start))
	return appendFrame(nil, msgAck, nil)
}
