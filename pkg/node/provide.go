package node

import (
	"context"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/dht"
)

// provideQueue bounds the blobs waiting to be announced in the DHT; past
// it a blob waits for the next reprovide.
const provideQueue = 256

// provideTimeout bounds one announcement.
const provideTimeout = time.Minute

// provide queues blob id, held here in full, for an announcement in the
// DHT (no-op without a DHT; never blocks), unless it was announced (or is
// queued) already within the reprovide interval: every get of a held blob
// ends here, and its records live for days.
func (n *Node) provide(id cid.Cid) {
	if n.provQ == nil {
		return
	}
	n.announcedMu.Lock()
	at, seen := n.announced[id]
	if seen && (at.IsZero() || time.Since(at) < dht.DefaultReprovideEvery) {
		n.announcedMu.Unlock()
		return
	}
	n.announced[id] = time.Time{} // queued
	n.announcedMu.Unlock()
	if !n.queueProvide(provideItem{id: id}) {
		n.announceDone(id, false)
	}
}

// announceDone records the outcome of blob id's announcement: the time of
// success, or nothing (so that a later provide tries again).
func (n *Node) announceDone(id cid.Cid, ok bool) {
	n.announcedMu.Lock()
	defer n.announcedMu.Unlock()
	if ok {
		n.announced[id] = time.Now()
	} else {
		delete(n.announced, id)
	}
}

// publishName queues r, put on this node, for its signed record in the
// DHT (no-op without a DHT; never blocks).
func (n *Node) publishName(r blob.Record) { n.queueProvide(provideItem{id: r.ID, rec: &r}) }

// withdrawName queues the removal from the DHT of rec, a record this node
// put, removed here at time at (Unix nanoseconds): signed and, in a closed
// grid, proved as this node's removal (member.ProveRemoval), which every
// node's validator requires. A removal this node's certificate no longer
// allows (the name outside its rights now) is not sent: the record then
// expires from the DHT unless another node republishes it.
func (n *Node) withdrawName(rec blob.Record, at int64) {
	rm := rec.Unproved()
	rm.Time = at
	rm, err := n.adm.ProveRemoval(n.host.Peerstore().PrivKey(n.host.ID()), rm)
	if err != nil {
		n.log.Warn("name removed here, not withdrawn from the DHT", "name", rec.Name, "err", err)
		return
	}
	n.queueProvide(provideItem{id: rm.ID, rec: &rm, removal: true})
}

// provideItem is a blob to announce (or, with rec, a name record to put;
// with removal too, its removal) and the attempts made so far.
type provideItem struct {
	id      cid.Cid
	rec     *blob.Record
	removal bool
	tries   int
}

// Announcing a blob that failed (e.g. right after the start, before the
// routing table has peers) is tried again after provideRetry, doubled at
// each try, at most provideTries times; then it waits for the reprovide.
const (
	provideRetry = time.Second
	provideTries = 6
)

// queueProvide queues it unless the queue is full; it reports whether it
// did.
func (n *Node) queueProvide(it provideItem) bool {
	if n.provQ == nil {
		return false
	}
	select {
	case n.provQ <- it:
		return true
	default:
		return false
	}
}

// provideLoop announces queued blobs, one at a time, until ctx ends.
func (n *Node) provideLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-n.provQ:
			pctx, cancel := context.WithTimeout(ctx, provideTimeout)
			var err error
			switch {
			case it.removal:
				err = n.dht.RemoveName(pctx, *it.rec)
			case it.rec != nil:
				err = n.dht.PutName(pctx, *it.rec)
			default:
				err = n.dht.Provide(pctx, it.id)
			}
			cancel()
			switch {
			case err == nil && it.rec != nil:
				n.namesN.Add(1)
			case err == nil:
				n.provN.Add(1)
				n.announceDone(it.id, true)
			case ctx.Err() != nil:
				return
			case it.tries+1 < provideTries:
				it.tries++
				time.AfterFunc(provideRetry<<(it.tries-1), func() {
					if !n.queueProvide(it) && it.rec == nil {
						n.announceDone(it.id, false)
					}
				})
			default:
				if it.rec == nil {
					n.announceDone(it.id, false)
				}
				n.log.Info("could not announce in the DHT (announced again at the next reprovide)", "id", it.id, "name_record", it.rec != nil, "err", err)
			}
		}
	}
}

// dhtModeLoop keeps a node with a parent a DHT server while it is a
// gateway (a head: its parent in another site) and makes it a client while
// it is a worker (its parent in its own site), checking as the parent
// session comes and goes (dhtModeWait), until ctx ends. A node with no
// parent stays a server and does not look again.
func (n *Node) dhtModeLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		welcomed := n.tree.Welcomed()
		if welcomed {
			n.dht.SetServer(n.tree.Gateway())
		}
		if len(n.tree.Parents()) == 0 {
			return
		}
		t.Reset(dhtModeWait(welcomed))
	}
}

// dhtModeEvery is how often dhtModeLoop looks until a parent has welcomed
// this node (the first parent session takes a round trip or two);
// dhtModeSettled how often after that, when the mode changes only with
// the parent (a failover to a parent of another site, or back), where a
// few seconds in the old mode do no harm. Looking every 200 ms for good
// was half of an idle worker's wake-ups.
const (
	dhtModeEvery   = 200 * time.Millisecond
	dhtModeSettled = 2 * time.Second
)

// dhtModeWait is how long dhtModeLoop waits before it looks again.
func dhtModeWait(welcomed bool) time.Duration {
	if welcomed {
		return dhtModeSettled
	}
	return dhtModeEvery
}

// holds reports whether every chunk of the blob of manifest m (nil: none)
// is in the store, as store.HasBlob does, from the manifest in hand: a get
// carries its manifest and does not read it again.
func (n *Node) holds(m *blob.Manifest) bool {
	if m == nil {
		return false
	}
	for _, h := range m.Chunks {
		if !n.store.HasChunk(h) {
			return false
		}
	}
	return true
}

// heldBlobs lists the named blobs held here in full (what the DHT
// reprovides).
func (n *Node) heldBlobs() []cid.Cid {
	recs, err := n.store.List("")
	if err != nil {
		return nil
	}
	seen := map[cid.Cid]bool{}
	var out []cid.Cid
	for _, r := range recs {
		if !seen[r.ID] && n.store.HasBlob(r.ID) {
			seen[r.ID] = true
			out = append(out, r.ID)
		}
	}
	return out
}

// ownNames lists the name records put on this node (what the DHT
// republishes: only their origin can sign them).
func (n *Node) ownNames() []blob.Record {
	recs, err := n.store.List("")
	if err != nil {
		return nil
	}
	self := n.host.ID().String()
	out := recs[:0]
	for _, r := range recs {
		if r.Origin == self {
			out = append(out, r)
		}
	}
	return out
}

// provideWhenHeld announces m's blob id in the DHT once every chunk of it
// is in the store: a get hands chunks to its reader before they are
// written, so the last may land just after the reader is done (it waits up
// to 5 s).
func (n *Node) provideWhenHeld(id cid.Cid, m *blob.Manifest) {
	if n.holds(m) {
		n.provide(id)
		return
	}
	go func() {
		for range 50 {
			time.Sleep(100 * time.Millisecond)
			if n.holds(m) {
				n.provide(id)
				return
			}
		}
	}()
}
