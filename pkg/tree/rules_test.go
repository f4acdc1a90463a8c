package tree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/cache"
	"github.com/omst-project/omst/pkg/namespace"
)

// cacheRules is the daemon's Rules over a real store.
type cacheRules struct{ s *cache.Store }

func (c cacheRules) TakeRule(r namespace.Rule) (bool, error) { return c.s.KeepRule(r) }
func (c cacheRules) Enforce(r namespace.Rule) error {
	_, err := c.s.DropWithdrawnBy(r)
	return err
}
func (c cacheRules) Rules() []namespace.Rule { return c.s.Rules("") }

// ruleNode is a tree node on a real store in dir (kept across restarts).
func ruleNode(t *testing.T, dir string, opts ...libp2p.Option) func(parent *testNode, site string, more ...nodeOpt) *testNode {
	return func(parent *testNode, site string, more ...nodeOpt) *testNode {
		t.Helper()
		s, err := cache.Open(dir, cache.Options{MaxBytes: 256 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		o := append([]nodeOpt{func(c *nodeCfg) {
			c.Rules = cacheRules{s}
			c.Keepalive = 200 * time.Millisecond
		}}, more...)
		return newNodeOn(t, newTestHost(t, opts...), parent, site, func(*memStore) nodeStore { return s }, o...)
	}
}

func putMany(t *testing.T, n *testNode, prefix string, count int) {
	t.Helper()
	s := n.store.(*cache.Store)
	for i := range count {
		r, err := s.Ingest(context.Background(), fmt.Sprintf("%s%04d", prefix, i), bytes.NewReader(randBlob(1000+i, uint64(i))), blob.MinChunkSize, n.h.ID().String())
		if err != nil {
			t.Fatal(err)
		}
		if err := n.tree.Announce(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

func listed(t *testing.T, n *testNode, prefix string) int {
	t.Helper()
	recs, err := n.store.List(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return len(recs)
}

// TestRemovePrefixEverywhere: a root, a head and two workers (a grid in
// one process, real stores, real libp2p). 400 names under job1/; the root
// removes job1/ and, when Publish returns, every node that is up has
// forgotten them (list and lookup: not found); a worker that was down
// forgets them when it returns, and announces none of them again; a put
// after the removal lives.
func TestRemovePrefixEverywhere(t *testing.T) {
	root := ruleNode(t, t.TempDir())(nil, "")
	head := ruleNode(t, t.TempDir())(root, "siteA")
	w1 := ruleNode(t, t.TempDir())(head, "siteA")
	w2dir := t.TempDir()
	w2 := ruleNode(t, w2dir)(head, "siteA")
	waitConnected(t, head, w1, w2)
	putMany(t, w1, "job1/w1/", 200)
	putMany(t, w2, "job1/w2/", 200)
	putMany(t, w1, "job2/", 3)
	waitFor(t, "the root to list 400 names", 10*time.Second, func() bool { return listed(t, root, "job1/") == 400 })

	// w2 goes down, the root removes job1/.
	w2addrs := w2.h.Addrs()
	w2key := w2.h.Peerstore().PrivKey(w2.h.ID())
	w2.stop()
	w2.store.(*cache.Store).Close()
	waitFor(t, "the head to see w2 leave", 10*time.Second, func() bool {
		for _, c := range head.tree.Status().Children {
			if c.ID == w2.h.ID() {
				return !c.Connected
			}
		}
		return true
	})
	rm := namespace.Rule{Kind: namespace.KindRemove, Scope: "job1/", Time: time.Now().UnixNano(), Origin: root.h.ID().String()}
	start := time.Now()
	sp, err := root.tree.Publish(context.Background(), rm)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removal of 400 names over 3 live nodes: %v, %+v", time.Since(start), sp)
	if sp.Reached != 3 || sp.Unreached != 1 {
		t.Fatalf("spread %+v, want 3 reached (root, head, w1), 1 unreached (w2)", sp)
	}
	for name, n := range map[string]*testNode{"root": root, "head": head, "w1": w1} {
		if got := listed(t, n, "job1/"); got != 0 {
			t.Errorf("%s lists %d names under job1/", name, got)
		}
		if got := listed(t, n, "job2/"); name != "head" && name != "root" && got != 3 {
			t.Errorf("%s lost job2/: %d", name, got)
		}
		_, err := n.tree.Lookup(context.Background(), "job1/w2/0007")
		if !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("%s: lookup of a removed name: %v", name, err)
		}
	}
	if u := w1.store.(*cache.Store).Usage(); u.PinnedBlobs != 3 {
		t.Errorf("w1 keeps %d pinned blobs, want job2's 3", u.PinnedBlobs)
	}
	if listed(t, root, "job2/") != 3 {
		t.Error("the root lost job2/")
	}

	// w2 comes back with its store: it learns the removal from the head
	// before it re-announces, and forgets its 200 names.
	h := newTestHost(t, libp2p.Identity(w2key), libp2p.ListenAddrs(w2addrs...))
	s2, err := cache.Open(w2dir, cache.Options{MaxBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close() })
	if n := len(mustList(t, s2, "job1/")); n != 200 {
		t.Fatalf("w2's store before its return: %d names", n)
	}
	w2 = newNodeOn(t, h, head, "siteA", func(*memStore) nodeStore { return s2 }, func(c *nodeCfg) { c.Rules = cacheRules{s2} })
	waitConnected(t, w2)
	waitFor(t, "w2 to forget job1/", 10*time.Second, func() bool { return listed(t, w2, "job1/") == 0 })
	waitFor(t, "w2 to unpin job1/", 10*time.Second, func() bool { return s2.Usage().PinnedBytes == 0 })
	time.Sleep(300 * time.Millisecond) // its re-announce
	if got := listed(t, root, "job1/"); got != 0 {
		t.Fatalf("a returning node brought back %d names", got)
	}

	// A put after the removal lives everywhere.
	putMany(t, w1, "job1/w1/again-", 1)
	waitFor(t, "the root to list a put made after the removal", 5*time.Second, func() bool { return listed(t, root, "job1/") == 1 })
}

func mustList(t *testing.T, s *cache.Store, prefix string) []blob.Record {
	t.Helper()
	recs, err := s.List(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestRuleRefused: a worker that lies (a removal of another worker's
// prefix, sent by a modified daemon) is refused by its head, which counts
// it; nothing of the other's is removed anywhere but on the liar itself.
func TestRuleRefused(t *testing.T) {
	var w1id string
	check := func(r namespace.Rule) error {
		if r.Origin == w1id && !strings.HasPrefix(r.Scope, "job1/w1/") {
			return errors.New("role worker may write only under \"job1/w1/\"")
		}
		return nil
	}
	withCheck := func(c *nodeCfg) { c.CheckRule = check }
	root := ruleNode(t, t.TempDir())(nil, "", withCheck)
	head := ruleNode(t, t.TempDir())(root, "siteA", withCheck)
	w1 := ruleNode(t, t.TempDir())(head, "siteA", withCheck)
	w2 := ruleNode(t, t.TempDir())(head, "siteA", withCheck)
	w1id = w1.h.ID().String()
	waitConnected(t, head, w1, w2)
	putMany(t, w2, "job1/w2/", 5)
	waitFor(t, "the root to list w2's names", 5*time.Second, func() bool { return listed(t, root, "job1/w2/") == 5 })

	lie := namespace.Rule{Kind: namespace.KindRemove, Scope: "job1/w2/", Time: time.Now().UnixNano(), Origin: w1id}
	sp, err := w1.tree.Publish(context.Background(), lie)
	if err != nil {
		t.Fatal(err)
	}
	if sp.Unreached != 1 || len(sp.Failed) != 1 || !strings.Contains(sp.Failed[0], "may write only under") {
		t.Fatalf("spread of a lie: %+v", sp)
	}
	if got := head.tree.Status().RulesRefused; got != 1 {
		t.Fatalf("head counted %d refusals", got)
	}
	for name, n := range map[string]*testNode{"root": root, "head": head, "w2": w2} {
		if got := listed(t, n, "job1/w2/"); got != 5 {
			t.Errorf("%s lists %d of w2's 5 names after a refused removal", name, got)
		}
	}
	// Within its own prefix, the same worker's removal goes everywhere.
	putMany(t, w1, "job1/w1/", 5)
	waitFor(t, "the root to list w1's names", 5*time.Second, func() bool { return listed(t, root, "job1/w1/") == 5 })
	own := namespace.Rule{Kind: namespace.KindRemove, Scope: "job1/w1/", Time: time.Now().UnixNano(), Origin: w1id}
	if sp, err := w1.tree.Publish(context.Background(), own); err != nil || sp.Reached != 4 {
		t.Fatalf("own removal: %+v, %v", sp, err)
	}
	if listed(t, root, "job1/w1/") != 0 || listed(t, w2, "job1/w2/") != 5 {
		t.Fatal("own removal did not apply as it should")
	}
}

// TestRuleBadInput: a RULE from a peer that is neither parent nor child,
// and malformed rules, get clear errors and change nothing.
func TestRuleBadInput(t *testing.T) {
	root := ruleNode(t, t.TempDir())(nil, "")
	stranger := ruleNode(t, t.TempDir())(nil, "")
	putMany(t, root, "job1/", 2)
	r := namespace.Rule{Kind: namespace.KindRemove, Scope: "job1/", Time: time.Now().UnixNano(), Origin: stranger.h.ID().String()}
	stranger.h.Peerstore().AddAddrs(root.h.ID(), root.h.Addrs(), time.Minute)
	_, err := stranger.tree.sendRule(context.Background(), root.h.ID(), r)
	if err == nil || !strings.Contains(err.Error(), "neither a parent nor a child") {
		t.Fatalf("a stranger's rule: %v", err)
	}
	if listed(t, root, "job1/") != 2 {
		t.Fatal("a stranger's rule applied")
	}
	for _, bad := range []namespace.Rule{
		{Kind: namespace.KindRemove, Scope: "", Time: 1, Origin: "o"},
		{Kind: namespace.KindRemove, Scope: "/", Time: 1, Origin: "o"},
		{Kind: namespace.KindRemove, Scope: "../", Time: 1, Origin: "o"},
		{Kind: 9, Scope: "a/", Time: 1, Origin: "o"},
	} {
		if _, err := root.tree.Publish(context.Background(), bad); err == nil {
			t.Errorf("Publish(%+v) accepted", bad)
		} else {
			t.Logf("%q: %v", bad.Scope, err)
		}
		fr := encodeNamesRequest(namesRequest{Type: msgRule, Rule: bad})
		typ, p, err := decodeFrame(fr)
		if err == nil {
			_, err = decodeNamesRequest(typ, p)
		}
		if err == nil {
			t.Errorf("decoded a RULE of %+v", bad)
		}
	}
}

// TestRulesSyncBothWays: rules a child made while away reach its parent
// (and the parent's other children) when its session comes up, and it
// takes the parent's, before either re-announces.
func TestRulesSyncBothWays(t *testing.T) {
	childDir := t.TempDir()
	s, err := cache.Open(childDir, cache.Options{MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	for i := range 3 {
		if _, err := s.KeepRule(namespace.Rule{Kind: namespace.KindTTL, Scope: fmt.Sprintf("away%d/", i), TTL: time.Hour, Time: now, Origin: "o"}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	root := ruleNode(t, t.TempDir())(nil, "")
	other := ruleNode(t, t.TempDir())(root, "b")
	waitConnected(t, other)
	putMany(t, other, "gone/", 3)
	waitFor(t, "the root to list gone/", 5*time.Second, func() bool { return listed(t, root, "gone/") == 3 })
	rm := namespace.Rule{Kind: namespace.KindRemove, Scope: "gone/", Time: time.Now().UnixNano(), Origin: root.h.ID().String()}
	if _, err := root.tree.Publish(context.Background(), rm); err != nil {
		t.Fatal(err)
	}
	child := ruleNode(t, childDir)(root, "a")
	waitConnected(t, child)
	rulesOf := func(n *testNode) int { return len(n.store.(*cache.Store).Rules("")) }
	waitFor(t, "the rules to be exchanged", 10*time.Second, func() bool {
		return rulesOf(root) == 4 && rulesOf(child) == 4 && rulesOf(other) == 4
	})
}

// TestFlatClusterRules: four nodes of a flat cluster (no parents, real
// stores, real libp2p), neighbours a-b, b-c, c-d, each with names under
// job1/. d is down when a removes job1/: a, b and c forget their names
// before Publish returns (three reached, over two hops); d forgets its own
// when it comes back and meets c. Before flat clusters passed rules on,
// the removal reached a alone.
func TestFlatClusterRules(t *testing.T) {
	var mu sync.Mutex
	nodes := map[string]*testNode{}
	links := map[string][]string{"a": {"b"}, "b": {"a", "c"}, "c": {"b", "d"}, "d": {"c"}}
	peersOf := func(name string) nodeOpt {
		return func(c *nodeCfg) {
			c.Peers = func() []peer.ID {
				mu.Lock()
				defer mu.Unlock()
				var out []peer.ID
				for _, o := range links[name] {
					if n := nodes[o]; n != nil {
						out = append(out, n.h.ID())
					}
				}
				return out
			}
		}
	}
	add := func(name string, n *testNode) {
		mu.Lock()
		defer mu.Unlock()
		for _, o := range nodes {
			o.h.Peerstore().AddAddrs(n.h.ID(), n.h.Addrs(), time.Hour)
			n.h.Peerstore().AddAddrs(o.h.ID(), o.h.Addrs(), time.Hour)
		}
		nodes[name] = n
	}
	for _, name := range []string{"a", "b", "c"} {
		n := ruleNode(t, t.TempDir())(nil, "", peersOf(name))
		add(name, n)
		putMany(t, n, "job1/"+name+"/", 50)
	}
	// d's names are put while it is down (its store only).
	ddir := t.TempDir()
	ds, err := cache.Open(ddir, cache.Options{MaxBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	for i := range 30 {
		if _, err := ds.Ingest(context.Background(), fmt.Sprintf("job1/d/%02d", i), bytes.NewReader(randBlob(500, uint64(i))), blob.MinChunkSize, "d"); err != nil {
			t.Fatal(err)
		}
	}

	rm := namespace.Rule{Kind: namespace.KindRemove, Scope: "job1/", Time: time.Now().UnixNano(), Origin: nodes["a"].h.ID().String()}
	sp, err := nodes["a"].tree.Publish(context.Background(), rm)
	if err != nil {
		t.Fatal(err)
	}
	if sp.Reached != 3 {
		t.Fatalf("spread %+v: want a, b and c reached", sp)
	}
	for _, name := range []string{"a", "b", "c"} {
		if got := listed(t, nodes[name], "job1/"); got != 0 {
			t.Errorf("%s lists %d names under job1/ after the removal", name, got)
		}
	}

	// d comes up beside c: it learns the removal.
	d := newNodeOn(t, newTestHost(t), nil, "", func(*memStore) nodeStore { return ds }, func(c *nodeCfg) {
		c.Rules = cacheRules{ds}
		c.Keepalive = 200 * time.Millisecond
	}, peersOf("d"))
	add("d", d)
	waitFor(t, "d to forget job1/", 10*time.Second, func() bool { return listed(t, d, "job1/") == 0 })
	// A put after the removal lives.
	putMany(t, d, "job1/d/again-", 1)
	if got := listed(t, d, "job1/"); got != 1 {
		t.Fatalf("d lists %d names after a new put", got)
	}
}
