package dht

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/multiformats/go-multihash"

	"github.com/omst-project/omst/internal/p2ptest"
)

func blobID(t *testing.T, s string) cid.Cid {
	t.Helper()
	h, err := multihash.Sum([]byte(s), multihash.SHA2_256, -1)
	if err != nil {
		t.Fatal(err)
	}
	return cid.NewCidV1(cid.Raw, h)
}

func info(h host.Host) peer.AddrInfo { return peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()} }

// chain starts n DHT nodes, each bootstrapped from the one before it only
// (as a tree's nodes are from their parents); cfg adjusts each Config.
func chain(t *testing.T, n int, cfg func(i int, c *Config)) ([]host.Host, []*DHT) {
	t.Helper()
	var hosts []host.Host
	var dhts []*DHT
	for i := range n {
		h := p2ptest.NewHost(t)
		c := Config{Host: h}
		if i > 0 {
			c.Bootstrap = []peer.AddrInfo{info(hosts[i-1])}
		}
		if cfg != nil {
			cfg(i, &c)
		}
		d, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		hosts, dhts = append(hosts, h), append(dhts, d)
	}
	// Joining is asynchronous: wait until every node knows a peer.
	deadline := time.Now().Add(10 * time.Second)
	for _, d := range dhts {
		for n > 1 && d.RoutingTableSize() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("a node did not join the DHT within 10 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return hosts, dhts
}

// providersOf polls d for id's providers until want is among them.
func providersOf(t *testing.T, d *DHT, id cid.Cid, want peer.ID) []peer.AddrInfo {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		got := d.Providers(ctx, id, 0)
		cancel()
		if slices.ContainsFunc(got, func(ai peer.AddrInfo) bool { return ai.ID == want }) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider %s of %s not found within 10 s (found %v)", want, id, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A blob provided at one end of a chain of four nodes is found at the
// other end, whose only bootstrap peer is its neighbour.
func TestProvideAndFindAcrossAChain(t *testing.T) {
	hosts, dhts := chain(t, 4, nil)
	id := blobID(t, "result/siteA/run1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := dhts[0].Provide(ctx, id); err != nil {
		t.Fatal(err)
	}
	got := providersOf(t, dhts[3], id, hosts[0].ID())
	if len(got) != 1 {
		t.Fatalf("providers %v, want only %s", got, hosts[0].ID())
	}
	// The provider itself is never among its own answers.
	if self := dhts[0].Providers(ctx, id, 0); slices.ContainsFunc(self, func(ai peer.AddrInfo) bool { return ai.ID == hosts[0].ID() }) {
		t.Fatalf("a node lists itself as a provider: %v", self)
	}
	// A blob nobody provided has no providers, and the search ends.
	start := time.Now()
	if none := dhts[3].Providers(ctx, blobID(t, "nobody"), 0); len(none) != 0 {
		t.Fatalf("providers of an unprovided blob: %v", none)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("a search for an unprovided blob took %v", d)
	}
}

// The DHT speaks only omst's private protocol, never the public IPFS one.
func TestPrivateProtocol(t *testing.T) {
	hosts, _ := chain(t, 1, nil)
	protos := hosts[0].Mux().Protocols()
	if !slices.Contains(protos, protocol.ID(Prefix+"/kad/1.0.0")) {
		t.Fatalf("protocols %v lack %s/kad/1.0.0", protos, Prefix)
	}
	for _, p := range protos {
		if p == "/ipfs/kad/1.0.0" {
			t.Fatalf("the public DHT protocol is served: %v", protos)
		}
	}
}

// Held blobs are announced again every ReprovideEvery, without a Provide.
func TestReprovideHeld(t *testing.T) {
	id := blobID(t, "init/data")
	hosts, dhts := chain(t, 3, func(i int, c *Config) {
		if i == 0 {
			c.Held = func() []cid.Cid { return []cid.Cid{id} }
			c.ReprovideEvery = 200 * time.Millisecond
		}
	})
	providersOf(t, dhts[2], id, hosts[0].ID())
}

func TestNoHost(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a host succeeded")
	}
}

// A node started as a client (a node with a parent, before it knows it is
// a head) does not serve the DHT and never enters a server's routing
// table, so that nobody's query dials it; it still queries the server.
// SetServer(true) then makes it a server that the other node adds.
func TestClientFromTheStart(t *testing.T) {
	hosts, dhts := chain(t, 1, nil)
	s := dhts[0]
	h := p2ptest.NewHost(t)
	c, err := New(Config{Host: h, Bootstrap: []peer.AddrInfo{info(hosts[0])}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c.Server() {
		t.Fatal("a node started as a client serves the DHT")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !c.InRoutingTable(hosts[0].ID()) {
		if time.Now().After(deadline) {
			t.Fatal("the client did not add the server to its routing table within 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Give the server time to have added it, had it served.
	time.Sleep(500 * time.Millisecond)
	if s.InRoutingTable(h.ID()) {
		t.Fatal("the server added a node that started as a client to its routing table")
	}
	c.SetServer(true)
	deadline = time.Now().Add(10 * time.Second)
	for !c.Server() || !s.InRoutingTable(h.ID()) {
		if time.Now().After(deadline) {
			t.Fatalf("after SetServer(true): serving %v, in the server's routing table %v", c.Server(), s.InRoutingTable(h.ID()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
