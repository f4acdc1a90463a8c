package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// startBulkNode starts a daemon on loopback with a bulk listener and
// bulk connections to the peers it fetches from; trusted says its LAN is.
func startBulkNode(t *testing.T, home, parent, site string, trusted bool) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := Start(ctx, Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Parent: parent, Site: site,
		BulkListen: "127.0.0.1:0", BulkConns: 2, TrustedLAN: trusted, NoDHT: true})
	if err != nil {
		t.Fatalf("start %s: %v", home, err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

func bulkOf(t *testing.T, ctx context.Context, home string) rpcbridge.BulkStatus {
	t.Helper()
	st, err := dial(t, home).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Bulk == nil {
		t.Fatalf("status of %s has no bulk counters", home)
	}
	return *st.Bulk
}

// TestBulkCounters: a get over the bulk path between two in-process
// daemons of one site moves status's bulk counters at both ends (plain on
// a trusted LAN, sealed to a node whose LAN is not), and a connection with
// a ticket the listener never issued is refused and counted.
func TestBulkCounters(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rootHome, plainHome, sealedHome := filepath.Join(dir, "root"), filepath.Join(dir, "plain"), filepath.Join(dir, "sealed")
	root := startBulkNode(t, rootHome, "", "a", true)
	plain := startBulkNode(t, plainHome, root.Addrs()[0], "a", true)
	sealed := startBulkNode(t, sealedHome, root.Addrs()[0], "a", false)

	rb := bulkOf(t, ctx, rootHome)
	if rb.Port == 0 || rb.ConnsPerPeer != 2 || rb.TicketsIssued != 0 || rb.SentPlain != 0 {
		t.Fatalf("root before any get: %+v", rb)
	}
	const size = 2<<20 + 7
	for _, name := range []string{"bulk/plain", "bulk/sealed"} {
		data := make([]byte, size)
		rand.Read(data)
		if _, err := dial(t, rootHome).Put(ctx, name, bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: 256 << 10}); err != nil {
			t.Fatal(err)
		}
		home := plainHome
		if name == "bulk/sealed" {
			home = sealedHome
		}
		if !bytes.Equal(getBytes(t, ctx, dial(t, home), name), data) {
			t.Fatalf("%s: wrong bytes", name)
		}
	}

	pb, sb := bulkOf(t, ctx, plainHome), bulkOf(t, ctx, sealedHome)
	if pb.Opened == 0 || pb.Fallbacks != 0 || pb.ReceivedPlain < size || pb.ReceivedSealed != 0 || pb.SentPlain == 0 {
		t.Fatalf("the trusted child's bulk counters after its get: %+v", pb)
	}
	if sb.Opened == 0 || sb.Fallbacks != 0 || sb.ReceivedSealed < size || sb.ReceivedPlain != 0 || sb.SentSealed == 0 {
		t.Fatalf("the untrusted child's bulk counters after its get: %+v", sb)
	}
	rb = bulkOf(t, ctx, rootHome)
	opened := pb.Opened + sb.Opened
	if rb.Accepted != opened || rb.TicketsRedeemed != opened || rb.TicketsIssued < opened ||
		rb.SentPlain < size || rb.SentSealed < size || rb.ReceivedPlain == 0 || rb.ReceivedSealed == 0 ||
		rb.Refused != 0 || rb.TicketsRefused != 0 {
		t.Fatalf("the root's bulk counters after %d connections: %+v", opened, rb)
	}

	// A hello with a ticket the root never issued: refused, nothing served.
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(rb.Port)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	hello := make([]byte, 8+32)
	copy(hello, "OMSTBLK1")
	rand.Read(hello[8:])
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	ans, err := io.ReadAll(c)
	if err != nil || len(ans) != 1 || ans[0] == 0 {
		t.Fatalf("answer to a forged ticket: %v, %v (want one refusal byte, then the end)", ans, err)
	}
	after := bulkOf(t, ctx, rootHome)
	if after.TicketsRefused != 1 || after.Refused != 1 || after.TicketsRedeemed != rb.TicketsRedeemed || after.Accepted != rb.Accepted {
		t.Fatalf("the root's bulk counters after a forged ticket: %+v (before %+v)", after, rb)
	}

	plain.Close()
	sealed.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		b := bulkOf(t, ctx, rootHome)
		if b.Open == 0 && b.Serving == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the root still counts bulk connections open after its children closed: %+v", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
