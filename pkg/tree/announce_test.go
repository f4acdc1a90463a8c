package tree

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/cache"
	"github.com/omst-project/omst/pkg/namespace"
)

// streamsFrom counts the names streams peer from opens to n from now on,
// and delays n's answer to each by delay (a WAN round trip).
func streamsFrom(n *testNode, from peer.ID, delay time.Duration) *atomic.Int64 {
	var c atomic.Int64
	for _, proto := range n.tree.protos {
		n.h.SetStreamHandler(proto, func(s network.Stream) {
			if s.Conn().RemotePeer() == from {
				c.Add(1)
				time.Sleep(delay)
			}
			n.tree.handleNames(s)
		})
	}
	return &c
}

// steady gives a node a keepalive of 2 s (ruleNode's is 200 ms) and the
// daemon's request timeout (30 s, newNode's is 10 s): no session or
// batch lost while a loaded machine stores thousands of records under the
// race detector.
func steady(c *nodeCfg) {
	c.Keepalive = 2 * time.Second
	c.RequestTimeout = DefaultRequestTimeout
}

// ingest stores count small blobs under prefix in n's real store (as a
// local put does) and returns their records, not announced.
func ingest(t *testing.T, n *testNode, prefix string, count int) []blob.Record {
	t.Helper()
	s := n.store.(*cache.Store)
	recs := make([]blob.Record, count)
	for i := range count {
		r, err := s.Ingest(context.Background(), fmt.Sprintf("%s%05d", prefix, i), bytes.NewReader(randBlob(1000+i, uint64(i))), blob.MinChunkSize, n.h.ID().String())
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = r
	}
	return recs
}

// TestAnnounceBatches: four workers under a head, each putting 150 names
// 64 at a time (real stores, real libp2p; the root answers the head 50 ms
// late, as over a WAN: more records than AnnounceWindow batches in flight). Every name reaches the root before its put
// returns, and the names travel in batches: the head opens far fewer
// streams to the root than there are names (on the code before names
// 1.3.0, one ANNOUNCE stream per name: 600 or more), and the root holds
// every small blob's manifest without having asked for one.
func TestAnnounceBatches(t *testing.T) {
	root := ruleNode(t, t.TempDir())(nil, "", steady)
	head := ruleNode(t, t.TempDir())(root, "a", steady)
	var workers []*testNode
	for range 4 {
		workers = append(workers, ruleNode(t, t.TempDir())(head, "a", steady))
	}
	waitConnected(t, append([]*testNode{head}, workers...)...)
	up := streamsFrom(root, head.h.ID(), 50*time.Millisecond)

	const perWorker, inFlight = 150, 64
	var wg sync.WaitGroup
	errs := make(chan error, len(workers)*perWorker)
	for wi, w := range workers {
		recs := ingest(t, w, fmt.Sprintf("job/w%d/", wi), perWorker)
		work := make(chan blob.Record)
		for range inFlight {
			wg.Go(func() {
				for r := range work {
					if err := w.tree.Announce(context.Background(), r); err != nil {
						errs <- err
						continue
					}
					// Known at the root once Announce returns.
					if _, err := root.store.Record(r.Name); err != nil {
						errs <- fmt.Errorf("%s not at the root after its announce: %w", r.Name, err)
					}
				}
			})
		}
		wg.Go(func() {
			for _, r := range recs {
				work <- r
			}
			close(work)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := len(workers) * perWorker
	if got := listed(t, root, "job/"); got != total {
		t.Fatalf("the root lists %d names, want %d", got, total)
	}
	streams := up.Load()
	hs := head.tree.Status()
	t.Logf("%d names: the head opened %d streams to the root, sent %d batches", total, streams, hs.BatchesSent)
	if streams > int64(total/4) || hs.BatchesSent == 0 {
		t.Fatalf("the head opened %d streams to the root (%d batches) for %d names: not batched", streams, hs.BatchesSent, total)
	}
	recs, err := root.store.List("job/")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if _, err := root.store.Manifest(r.ID); err != nil {
			t.Fatalf("the root has no manifest for %s (it came with the name): %v", r.Name, err)
		}
	}
}

// TestAnnounceManyAndReannounce: 2,500 names announced at once go up in
// batches bounded by SendBatchRecords; after the root loses its store, the
// head's re-announce sends all of them again in a few batches.
func TestAnnounceManyAndReannounce(t *testing.T) {
	root := ruleNode(t, t.TempDir())(nil, "", steady)
	head := ruleNode(t, t.TempDir())(root, "a", steady)
	w := ruleNode(t, t.TempDir())(head, "a", steady)
	waitConnected(t, head, w)
	const n = 2500
	recs := ingest(t, w, "many/", n)
	start := time.Now()
	if err := w.tree.AnnounceMany(context.Background(), recs); err != nil {
		t.Fatal(err)
	}
	t.Logf("AnnounceMany of %d: %v, worker batches %d, head batches %d", n, time.Since(start), w.tree.Status().BatchesSent, head.tree.Status().BatchesSent)
	if got := listed(t, root, "many/"); got != n {
		t.Fatalf("the root lists %d names after AnnounceMany, want %d", got, n)
	}
	least := (n + SendBatchRecords - 1) / SendBatchRecords
	if b := w.tree.Status().BatchesSent; b < uint64(least) || b > uint64(2*least) {
		t.Fatalf("the worker sent %d batches for %d names (at most %d a batch)", b, n, SendBatchRecords)
	}

	// The root comes back empty: the head re-announces its subtree.
	root.stop()
	waitFor(t, "the head to lose the root", 10*time.Second, func() bool { return !head.tree.Status().ParentConnected })
	before := head.tree.Status().BatchesSent
	root2 := root.restart(t, nil, "")
	waitFor(t, "the head's re-announce", 20*time.Second, func() bool { return listed(t, root2, "many/") == n })
	if b := head.tree.Status().BatchesSent - before; b > uint64(2*least) {
		t.Fatalf("the re-announce of %d names took %d batches", n, b)
	}
}

// TestAnnounceBatchRefusesOne: in a batch of three records, the one the
// head's CheckRecord refuses is refused alone (counted, named in the
// error) and the two others reach the root.
func TestAnnounceBatchRefusesOne(t *testing.T) {
	root := ruleNode(t, t.TempDir())(nil, "")
	head := ruleNode(t, t.TempDir())(root, "a", func(c *nodeCfg) {
		c.CheckRecord = func(r blob.Record) error {
			if strings.HasPrefix(r.Name, "bad/") {
				return errors.New("name record refused: forged")
			}
			return nil
		}
	})
	w := ruleNode(t, t.TempDir())(head, "a")
	waitConnected(t, head, w)
	good := ingest(t, w, "good/", 2)
	bad := ingest(t, w, "bad/", 1)
	err := w.tree.AnnounceMany(context.Background(), []blob.Record{good[0], bad[0], good[1]})
	if err == nil || !strings.Contains(err.Error(), `"bad/00000"`) || !strings.Contains(err.Error(), "forged") || strings.Contains(err.Error(), "good/") {
		t.Fatalf("AnnounceMany: %v; want bad/00000 refused alone, named, with the head's reason", err)
	}
	if got := listed(t, root, "good/"); got != 2 {
		t.Fatalf("the root lists %d of the good names", got)
	}
	if got := listed(t, root, "bad/") + listed(t, head, "bad/"); got != 0 {
		t.Fatal("the refused record was stored")
	}
	if st := head.tree.Status(); st.RecordsRefused != 1 {
		t.Fatalf("head counted %d refused records, want 1", st.RecordsRefused)
	}
}

// TestAnnounceMixedVersions: nodes of names 1.2.0 (no ANNOUNCE_BATCH, no
// rules) and 1.3.0 in one tree. A 1.3.0 worker under a 1.2.0 head falls
// back to one ANNOUNCE per record; a 1.2.0 worker under a 1.3.0 head
// announces as before; all names reach the root, which is 1.3.0 above a
// 1.2.0 head. A rule is not sent to a 1.2.0 neighbour: it is counted as
// not reached, saying why.
func TestAnnounceMixedVersions(t *testing.T) {
	old := speaks(ProtoNames12, ProtoNames11)
	root := newNode(t, nil, "", nil)
	oldHead := newNode(t, root, "a", nil, old)
	newW := newNode(t, oldHead, "a", nil)
	newHead := newNode(t, root, "b", nil)
	oldW := newNode(t, newHead, "b", nil, old)
	waitConnected(t, oldHead, newW, newHead, oldW)

	var wg sync.WaitGroup
	var names []string
	for i := range 20 {
		for _, w := range []*testNode{newW, oldW} {
			name := fmt.Sprintf("mixed/%s/%02d", w.h.ID().String()[len(w.h.ID().String())-4:], i)
			names = append(names, name)
			wg.Go(func() { put(t, w, name, randBlob(100+i, uint64(i)), 4096) })
		}
	}
	wg.Wait()
	for _, name := range names {
		if _, err := root.store.Record(name); err != nil {
			t.Fatalf("%s did not reach the root: %v", name, err)
		}
	}
	if b := newW.tree.Status().BatchesSent; b != 0 {
		t.Fatalf("the 1.3.0 worker sent %d batches to a 1.2.0 head", b)
	}
	if b := newHead.tree.Status().BatchesSent; b == 0 {
		t.Fatal("the 1.3.0 head sent no batch to the 1.3.0 root")
	}
	// And a lookup across: the new worker finds the old worker's name.
	if _, err := newW.tree.Lookup(context.Background(), names[1]); err != nil {
		t.Fatalf("lookup across versions: %v", err)
	}

	// A rule from the 1.3.0 head: its 1.2.0 child cannot take it.
	var taken atomic.Int32
	newHead.tree.cfg.Rules = countRules{&taken}
	rm := namespace.Rule{Kind: namespace.KindRemove, Scope: "mixed/", Time: time.Now().UnixNano(), Origin: newHead.h.ID().String()}
	sp, err := newHead.tree.Publish(context.Background(), rm)
	if err != nil {
		t.Fatal(err)
	}
	if sp.Unreached < 1 || !strings.Contains(strings.Join(sp.Failed, "\n"), string(ProtoNames12)) {
		t.Fatalf("spread %+v: want the 1.2.0 child counted as not reached, naming its version", sp)
	}
}

// countRules is a Rules that takes every rule and counts them.
type countRules struct{ n *atomic.Int32 }

func (c countRules) TakeRule(namespace.Rule) (bool, error) { c.n.Add(1); return true, nil }
func (c countRules) Enforce(namespace.Rule) error          { return nil }
func (c countRules) Rules() []namespace.Rule               { return nil }

// TestNamesVersionGate: a request of names 1.3.0 on a 1.2.0 stream is
// answered with an ERROR naming the version, not served.
func TestNamesVersionGate(t *testing.T) {
	root := newNode(t, nil, "", nil)
	head := newNode(t, root, "a", nil)
	waitConnected(t, head)
	r := blob.Record{Name: "gate/x", ID: put(t, head, "gate/y", []byte("y"), 4096).ID, Size: 1, Time: time.Now().UnixNano(), Origin: head.h.ID().String()}
	for _, tc := range []struct {
		proto protocol.ID
		frame []byte
	}{
		{ProtoNames12, encodeAnnounceBatch([]batchEntry{{Record: r}})},
		{ProtoNames12, encodeNamesRequest(namesRequest{Type: msgRule, Rule: namespace.Rule{Kind: namespace.KindRemove, Scope: "gate/", Time: 1, Origin: head.h.ID().String()}})},
		{ProtoNames11, encodeNamesRequest(namesRequest{Type: msgLookupGet, Name: "gate/y"})},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := head.h.NewStream(ctx, root.h.ID(), tc.proto)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(tc.frame); err != nil {
			t.Fatal(err)
		}
		typ, payload, err := readFrame(bufio.NewReader(s))
		s.Close()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		rep, err := decodeNamesReply(typ, payload)
		if err != nil || rep.Type != msgError || !strings.Contains(rep.Message, string(tc.proto)) {
			t.Fatalf("0x%02x on %s: reply %+v, %v; want an ERROR naming the version", tc.frame[0], tc.proto, rep, err)
		}
	}
	if _, err := root.store.Record("gate/x"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("the batch on a 1.2.0 stream was served: %v", err)
	}
}
