package node

import (
	"bytes"
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/omst-project/omst/pkg/dht"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// Every daemon joins the private DHT through its parent and announces the
// blobs it holds in full: a result put by a worker at site a is found, by
// blob ID, from the head of site b, as is a blob that site b's head fetched
// through the tree.
func TestDHTProvidersAcrossSites(t *testing.T) {
	root := startNode(t, t.TempDir(), "", "")
	headA := startNode(t, t.TempDir(), root.Addrs()[0], "a")
	headB := startNode(t, t.TempDir(), root.Addrs()[0], "b")
	worker := startNode(t, t.TempDir(), headA.Addrs()[0], "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	data := bytes.Repeat([]byte("result "), 100_000)
	info, err := worker.Put(ctx, "results/a/1", bytes.NewReader(data), rpcbridge.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	id, err := cid.Decode(info.ID)
	if err != nil {
		t.Fatal(err)
	}
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
