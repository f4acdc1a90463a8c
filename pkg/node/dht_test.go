package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/dht"
	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/gridstore"
	"github.com/omst-project/omst/pkg/peerhost"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// Every daemon joins the private DHT through its parent and announces the
// blobs it holds in full: a result put by a worker at site a is found, by
// blob ID, from the head of site b, as is a blob that site b's head fetched
// through the tree.
func TestDHTProvidersAcrossSites(t *testing.T) {
	_, headA, headB := startTwoSites(t)
	worker := startNode(t, t.TempDir(), headA.Addrs()[0], "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	data := bytes.Repeat([]byte("result "), 100_000)
	_, id := putBlob(t, ctx, worker, "results/a/1", data)
	waitProvider(t, headB, id, worker.ID())
	for {
		st, _ := worker.Status(ctx)
		if st.DHTProvided >= 1 && st.DHTPeers >= 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("worker status: dht_provided %d, dht_peers %d", st.DHTProvided, st.DHTPeers)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A blob read in full through the tree is announced by the reader.
	_, rc, err := headB.Open(ctx, "results/a/1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get at head b: %v (%d bytes)", err, len(got))
	}
	waitProvider(t, worker, id, headB.ID())
}

// A daemon started with --no-dht announces nothing and reports no peers.
func TestNoDHT(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := Start(ctx, Config{Home: t.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, NoDHT: true})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if _, err := n.Put(ctx, "x", bytes.NewReader([]byte("x")), rpcbridge.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, _ := n.Status(ctx); st.DHTProvided != 0 || st.DHTPeers != 0 {
		t.Fatalf("status without a DHT: %+v", st)
	}
	if slices.ContainsFunc(n.Host().Mux().Protocols(), func(p protocol.ID) bool { return p == dht.Prefix+"/kad/1.0.0" }) {
		t.Fatal("the DHT protocol is served with NoDHT")
	}
}

// waitProvider polls from's DHT until want provides id.
func waitProvider(t *testing.T, from *Node, id cid.Cid, want peer.ID) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		got := from.dht.Providers(ctx, id, 0)
		cancel()
		if slices.ContainsFunc(got, func(ai peer.AddrInfo) bool { return ai.ID == want }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not found as a provider of %s within 15 s (found %v)", want, id, got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A result put by a worker at site a and read by a worker at site b flows
// head a -> head b, found in the DHT: the root serves none of its bytes.
func TestCrossSiteHeadToHead(t *testing.T) {
	root, headA, headB := startTwoSites(t)
	workerA := startNode(t, t.TempDir(), headA.Addrs()[0], "a")
	workerB := startNode(t, t.TempDir(), headB.Addrs()[0], "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Workers are DHT clients, heads and the root servers (a head becomes
	// one once its parent has welcomed it, which may come after its start).
	for deadline := time.Now().Add(10 * time.Second); workerA.dht.Server() || workerB.dht.Server() ||
		!headA.dht.Server() || !headB.dht.Server() || !root.dht.Server(); {
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the start: DHT server at worker a %v, worker b %v (want false); head a %v, head b %v, root %v (want true)",
				workerA.dht.Server(), workerB.dht.Server(), headA.dht.Server(), headB.dht.Server(), root.dht.Server())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !statusOf(t, headA).DHTServer || statusOf(t, workerA).DHTServer {
		t.Fatal("status dht_server: want true at a head, false at a worker")
	}
	data := bytes.Repeat([]byte("cross-site result "), 300_000) // 5.4 MB: 6 chunks
	_, id := putBlob(t, ctx, workerA, "results/a/big", data)
	// Head a copies its worker's result and announces it once complete.
	waitProvider(t, headB, id, headA.ID())
	before := statusOf(t, root)

	_, rc, err := workerB.Open(ctx, "results/a/big")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get at a worker of site b: %v (%d bytes)", err, len(got))
	}
	after := statusOf(t, root)
	if d := after.BytesServed - before.BytesServed; d != 0 {
		t.Errorf("the root served %d bytes of a result that should flow head to head", d)
	}
	if hb := statusOf(t, headB); hb.BytesIn["other"] < uint64(len(data)) {
		t.Errorf("head b received %d bytes from other heads (bytes_in %v), want the whole blob (%d)", hb.BytesIn["other"], hb.BytesIn, len(data))
	}
}

// With its head down, a worker still gets a blob, by ID, from a provider
// it finds in the DHT (here the other site's head, the only other holder).
func TestParentDownFetchThroughDHT(t *testing.T) {
	root, headA, headB := startTwoSites(t)
	workerB := startNode(t, t.TempDir(), headB.Addrs()[0], "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	data := bytes.Repeat([]byte("held at site a "), 200_000)
	_, id := putBlob(t, ctx, headA, "data/a", data)
	rec, err := headA.store.Record("data/a")
	if err != nil {
		t.Fatal(err)
	}
	waitProvider(t, workerB, id, headA.ID())
	// workerB learns the DHT's other members while its head is up.
	if err := workerB.dht.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := headB.Close(); err != nil {
		t.Fatal(err)
	}
	if err := root.Close(); err != nil {
		t.Fatal(err)
	}
	rc, err := workerB.engine.Open(ctx, rec)
	if err != nil {
		t.Fatalf("open with the head and the root down: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read with the head and the root down: %v (%d bytes)", err, len(got))
	}
	if st := statusOf(t, workerB); st.BytesIn["other"] < uint64(len(data)) {
		t.Errorf("bytes_in %v: want the blob from another site's head", st.BytesIn)
	}
}

func statusOf(t *testing.T, n *Node) rpcbridge.Status {
	t.Helper()
	st, err := n.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A flat cluster, no tree at all: every node joins through --bootstrap
// peers; a name put on one is found, with its providers, from another.
func TestFlatCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := func(site string, boot ...string) *Node {
		n, err := Start(ctx, Config{Home: t.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Site: site, Bootstrap: boot})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	first := start("x")
	a := start("x", first.Addrs()[0])
	b := start("y", first.Addrs()[0])
	c := start("y", a.Addrs()[0])

	data := bytes.Repeat([]byte("flat "), 500_000)
	_, id := putBlob(t, ctx, a, "flat/data", data)
	waitProvider(t, c, id, a.ID())
	for _, n := range []*Node{b, c} {
		_, rc, err := n.Open(ctx, "flat/data")
		if err != nil {
			t.Fatalf("get by name in a flat cluster: %v", err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read in a flat cluster: %v (%d bytes)", err, len(got))
		}
	}
	if st := statusOf(t, a); st.DHTNames != 1 {
		t.Errorf("dht_names at the origin = %d, want 1", st.DHTNames)
	}
	if _, _, err := c.Open(ctx, "flat/missing"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("a missing name in a flat cluster: %v, want ErrNotFound", err)
	}
	// Removed where it was put: withdrawn from the DHT. Nodes that kept
	// the record (b, c read it) keep it, as a tree node keeps one it
	// looked up; a node that never saw it no longer finds it.
	if err := a.Remove(ctx, "flat/data"); err != nil {
		t.Fatal(err)
	}
	fresh := start("y", b.Addrs()[0])
	for {
		_, err := fresh.Stat(ctx, "flat/data")
		if errors.Is(err, blob.ErrNotFound) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a name removed by its origin is still found: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := a.Stat(ctx, "flat/data"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("stat after rm at the origin: %v, want ErrNotFound", err)
	}
}

// With the root down, a worker resolves a name it never saw through the
// DHT and fetches the blob from the other site's head.
func TestRootDownNamesThroughDHT(t *testing.T) {
	root, headA, headB := startTwoSites(t)
	workerB := startNode(t, t.TempDir(), headB.Addrs()[0], "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	data := bytes.Repeat([]byte("put at site a "), 300_000)
	_, id := putBlob(t, ctx, headA, "results/a/final", data)
	waitProvider(t, workerB, id, headA.ID())
	for statusOf(t, headA).DHTNames < 1 && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	if err := root.Close(); err != nil {
		t.Fatal(err)
	}
	_, rc, err := workerB.Open(ctx, "results/a/final")
	if err != nil {
		t.Fatalf("get with the root down: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read with the root down: %v (%d bytes)", err, len(got))
	}
}

// A blob is read by its ID as by its name, from another site; an ID no
// node holds is a clear not-found.
func TestGetByBlobID(t *testing.T) {
	_, headA, headB := startTwoSites(t)
	workerA := startNode(t, t.TempDir(), headA.Addrs()[0], "a")
	workerB := startNode(t, t.TempDir(), headB.Addrs()[0], "b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	data := bytes.Repeat([]byte("by id "), 400_000)
	info, id := putBlob(t, ctx, workerA, "results/a/id", data)
	waitProvider(t, headB, id, headA.ID())
	st, err := workerB.Stat(ctx, info.ID)
	if err != nil || st.Size != uint64(len(data)) || st.ID != info.ID {
		t.Fatalf("stat by ID at another site: %+v, %v", st, err)
	}
	_, rc, err := workerB.Open(ctx, info.ID)
	if err != nil {
		t.Fatalf("get by ID at another site: %v", err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read by ID: %v (%d bytes)", err, len(got))
	}
	unknown := (&blob.Manifest{Size: 1, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{blob.HashChunk([]byte("never put"))}}).CID()
	start := time.Now()
	if _, _, err := workerB.Open(ctx, unknown.String()); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("get of an ID nobody holds: %v, want ErrNotFound", err)
	}
	t.Logf("an unknown ID took %v to be reported missing", time.Since(start))
}

// A gateway that lost a blob (its chunks damaged and dropped, as an
// eviction would) answers another site's head from its store only:
// NOT_FOUND, not a fetch on that head's behalf. The head goes on with the
// next provider (here, with the root down, the worker that put it).
func TestLostProviderSkipped(t *testing.T) {
	homeA := t.TempDir()
	root := startNode(t, t.TempDir(), "", "")
	headA := startNode(t, homeA, root.Addrs()[0], "a")
	headB := startNode(t, t.TempDir(), root.Addrs()[0], "b")
	workerA := startNode(t, t.TempDir(), headA.Addrs()[0], "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	data := bytes.Repeat([]byte("lost at head a "), 300_000)
	info, id := putBlob(t, ctx, workerA, "results/a/lost", data)
	waitProvider(t, headB, id, headA.ID())
	waitProvider(t, headB, id, workerA.ID())
	for statusOf(t, workerA).DHTNames < 1 && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	m, err := headA.store.Manifest(id)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range m.Chunks {
		damageChunk(t, headA, homeA, info.ID, i)
		if damaged, _ := headA.store.RecheckChunk(h); !damaged { // drops it
			t.Fatalf("chunk %d not found damaged at head a", i)
		}
	}
	if err := root.Close(); err != nil {
		t.Fatal(err)
	}
	fetchedA := statusOf(t, headA).BytesFetched

	_, rc, err := headB.Open(ctx, "results/a/lost")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("get at head b, head a's copy lost, the root down: %v (%d bytes)", err, len(got))
	}
	if d := statusOf(t, headA).BytesFetched - fetchedA; d != 0 {
		t.Errorf("head a fetched %d bytes on another site's behalf; it should have answered from its store only", d)
	}
	if st := statusOf(t, headB); st.BytesIn["other"] < uint64(len(data)) {
		t.Errorf("head b bytes_in %v: want the blob from the worker that put it", st.BytesIn)
	}
}

// startTwoSites starts a root and the heads of sites a and b under it.
func startTwoSites(t *testing.T) (root, headA, headB *Node) {
	t.Helper()
	root = startNode(t, t.TempDir(), "", "")
	headA = startNode(t, t.TempDir(), root.Addrs()[0], "a")
	headB = startNode(t, t.TempDir(), root.Addrs()[0], "b")
	return root, headA, headB
}

// putBlob puts data under name at n and returns its info and blob ID.
func putBlob(t *testing.T, ctx context.Context, n *Node, name string, data []byte) (rpcbridge.Info, cid.Cid) {
	t.Helper()
	info, err := n.Put(ctx, name, bytes.NewReader(data), rpcbridge.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := cid.Decode(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	return info, id
}

// A blob is announced once: gets of a held blob do not announce it again,
// and a get cut short announces nothing.
func TestAnnounceOnce(t *testing.T) {
	root, headA, _ := startTwoSites(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	data := bytes.Repeat([]byte("announce once "), 300_000)
	putBlob(t, ctx, root, "init/once", data)
	provided := func(n *Node, want uint64) {
		t.Helper()
		for statusOf(t, n).DHTProvided < want && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // room for a wrong extra one
		if got := statusOf(t, n).DHTProvided; got != want {
			t.Fatalf("dht_provided = %d, want %d", got, want)
		}
	}
	provided(root, 1)
	for range 3 {
		_, rc, err := root.Open(ctx, "init/once")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, rc)
		rc.Close()
	}
	provided(root, 1)

	_, rc, err := headA.Open(ctx, "init/once")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	provided(headA, 0)
	_, rc, err = headA.Open(ctx, "init/once")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	provided(headA, 1)
}

// A closed flat cluster: a worker's `rm` of a name it put withdraws it
// from the DHT (its removal carries its removal proof, which every node
// requires), as in an open one.
func TestClosedClusterRemoval(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	idOf := func(home string) peer.ID {
		k, err := peerhost.LoadOrCreateKey(filepath.Join(home, "identity.key"))
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(k)
		return id
	}
	rootHome := t.TempDir()
	gd := gridstore.Open(rootHome)
	if _, _, err := gd.Init(idOf(rootHome), time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	start := func(home, join string, boot ...string) *Node {
		n, err := Start(ctx, Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Site: "x", Bootstrap: boot, Join: join})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	admitted := func(role grid.Role, prefixes ...string) (home, cert string) {
		home = t.TempDir()
		cert, err := gd.Admit(idOf(home), role, prefixes, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return home, cert
	}
	root := start(rootHome, "")
	aHome, aCert := admitted(grid.RoleWorker, "flat/")
	a := start(aHome, aCert, root.Addrs()[0])
	bHome, bCert := admitted(grid.RoleReader)
	b := start(bHome, bCert, root.Addrs()[0])

	found := func(n *Node, name string) {
		t.Helper()
		for {
			_, err := n.Stat(ctx, name)
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("%s not found: %v", name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	_, id := putBlob(t, ctx, a, "flat/closed", bytes.Repeat([]byte("closed "), 10_000))
	putBlob(t, ctx, a, "flat/kept", []byte("kept"))
	waitProvider(t, b, id, a.ID())
	found(b, "flat/closed")
	if err := a.Remove(ctx, "flat/closed"); err != nil {
		t.Fatal(err)
	}
	// A node that never saw the name, once it finds another name of a's
	// through the DHT, no longer finds the removed one.
	cHome, cCert := admitted(grid.RoleReader)
	c := start(cHome, cCert, b.Addrs()[0])
	found(c, "flat/kept")
	for {
		_, err := c.Stat(ctx, "flat/closed")
		if errors.Is(err, blob.ErrNotFound) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("a name removed by its origin is still found: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st := statusOf(t, root); st.DHTRecordsRejected != 0 {
		t.Fatalf("the root rejected %d records, want none", st.DHTRecordsRejected)
	}
}

// A flat cluster (no tree): `rm -r PREFIX --everywhere` on one node
// reaches every other node through the DHT neighbours, and a node that
// was down meanwhile forgets its names under PREFIX when it returns.
// Before flat clusters passed rules on, only the node that made the
// removal forgot anything.
func TestFlatClusterRemovePrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := func(home string, boot ...string) *Node {
		n, err := Start(ctx, Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Site: "x", Bootstrap: boot})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	listed := func(n *Node) int {
		infos, err := n.List(ctx, "job/")
		if err != nil {
			t.Fatal(err)
		}
		return len(infos)
	}
	first := start(t.TempDir())
	a := start(t.TempDir(), first.Addrs()[0])
	b := start(t.TempDir(), first.Addrs()[0])
	cHome := t.TempDir()
	c := start(cHome, b.Addrs()[0])
	for i, n := range []*Node{first, a, b, c} {
		for k := range 5 {
			putBlob(t, ctx, n, fmt.Sprintf("job/%d/%d", i, k), []byte(fmt.Sprintf("result %d %d", i, k)))
		}
	}
	for _, n := range []*Node{first, a, b} {
		waitFor(t, "the DHT neighbours", 20*time.Second, func() bool { return n.dht.RoutingTableSize() > 0 })
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	res, err := a.RemovePrefix(ctx, "job/", true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reached != 3 {
		t.Fatalf("removal reached %d nodes (%+v), want a, first and b", res.Reached, res)
	}
	for i, n := range []*Node{first, a, b} {
		if got := listed(n); got != 0 {
			t.Errorf("node %d lists %d names under job/ after the removal", i, got)
		}
	}
	c = start(cHome, b.Addrs()[0])
	waitFor(t, "the returning node to forget job/", 20*time.Second, func() bool { return listed(c) == 0 })
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDHTModeWait: dhtModeLoop looks every 200 ms only until a parent has
// welcomed the node, then every 2 s (each look woke the daemon: half of an
// idle worker's wake-ups when it looked every 200 ms for good).
func TestDHTModeWait(t *testing.T) {
	if got := dhtModeWait(false); got != 200*time.Millisecond {
		t.Errorf("not welcomed yet: wait %v, want 200ms", got)
	}
	if got := dhtModeWait(true); got != 2*time.Second {
		t.Errorf("welcomed: wait %v, want 2s", got)
	}
}
