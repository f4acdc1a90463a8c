package tree

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/omst-project/omst/pkg/blob"
)

// wrappedPusher lets a test change what a node pushes: subscribed with
// the node's engine inside it (nodeCfg.Wrap).
type wrappedPusher struct {
	Engine
	mangle func(chunks [][]byte) [][]byte
}

func (w *wrappedPusher) PushChunks(r blob.Record, max int) [][]byte {
	return w.mangle(w.Engine.PushChunks(r, max))
}

// getToGet reads name at n as a get does: LOOKUP_GET, then the engine.
func getToGet(t testing.TB, n *testNode, name string) []byte {
	t.Helper()
	return readWith(t, n, name, func(ctx context.Context, name string) (blob.Record, error) {
		r, _, err := n.tree.LookupToGet(ctx, name)
		return r, err
	})
}

// TestPushAcrossSites: a worker's get through its head sends LOOKUP_GET up;
// the root answers the head (another site) with the blob's first
// MaxPushBytes, which the head takes as chunks in flight: the worker's
// requests wait for them, nothing crosses the root's link twice, and the
// head pushes nothing to its own site's worker. A second worker's get
// pushes nothing more (the head holds the blob: Have); a stat pushes
// nothing, and a get after it is pushed to (the head holds the record
// alone).
func TestPushAcrossSites(t *testing.T) {
	root := newNode(t, nil, "root", nil)
	head := newNode(t, root, "a", nil)
	w1 := newNode(t, head, "a", nil)
	w2 := newNode(t, head, "a", nil)
	waitConnected(t, head, w1, w2)
	const chunk = 1 << 20
	data := randBlob(6*chunk+12345, 1)
	put(t, root, "push/six", data, chunk)

	if got := getToGet(t, w1, "push/six"); !bytes.Equal(got, data) {
		t.Fatalf("w1 got %d bytes, not the blob's %d", len(got), len(data))
	}
	rs, hs, ws := root.eng.Status(), head.eng.Status(), w1.eng.Status()
	if rs.PushSent != MaxPushBytes || hs.PushReceived != MaxPushBytes {
		t.Fatalf("root pushed %d, head received %d; want %d both", rs.PushSent, hs.PushReceived, MaxPushBytes)
	}
	if rs.BytesServed != uint64(len(data)) {
		t.Fatalf("root served %d bytes for a blob of %d: the pushed chunks were fetched again", rs.BytesServed, len(data))
	}
	if hs.PushSent != 0 || ws.PushReceived != 0 {
		t.Fatalf("inside the site: head pushed %d, w1 received %d; want 0", hs.PushSent, ws.PushReceived)
	}
	if got := getToGet(t, w2, "push/six"); !bytes.Equal(got, data) {
		t.Fatal("w2 got other bytes")
	}
	if rs2 := root.eng.Status(); rs2.PushSent != rs.PushSent || rs2.BytesServed != rs.BytesServed {
		t.Fatalf("second get: root pushed %d more and served %d more bytes; want 0", rs2.PushSent-rs.PushSent, rs2.BytesServed-rs.BytesServed)
	}

	// A LOOKUP (stat) pushes nothing.
	data2 := randBlob(chunk, 2)
	put(t, root, "push/stat", data2, chunk)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w1.tree.Lookup(ctx, "push/stat"); err != nil {
		t.Fatal(err)
	}
	rs3 := root.eng.Status()
	if rs3.PushSent != rs.PushSent {
		t.Fatalf("a plain lookup pushed %d bytes", rs3.PushSent-rs.PushSent)
	}
	// The head now holds the name's record but none of its chunks: a get
	// is still pushed to (Have counts chunks, not records).
	if got := getToGet(t, w1, "push/stat"); !bytes.Equal(got, data2) {
		t.Fatal("w1 got other bytes after a stat")
	}
	if rs4 := root.eng.Status(); rs4.PushSent-rs3.PushSent != uint64(len(data2)) {
		t.Fatalf("a get after a stat pushed %d bytes; want the blob's %d", rs4.PushSent-rs3.PushSent, len(data2))
	}
}

// TestPushCorrupt: a parent that pushes a corrupt chunk is counted and
// blamed; the chunk is fetched again and the get returns the exact bytes.
func TestPushCorrupt(t *testing.T) {
	wp := &wrappedPusher{mangle: func(chunks [][]byte) [][]byte {
		if len(chunks) > 1 {
			bad := bytes.Clone(chunks[1])
			bad[17] ^= 0xff
			chunks = append([][]byte{chunks[0], bad}, chunks[2:]...)
		}
		return chunks
	}}
	root := newNode(t, nil, "root", nil, func(c *nodeCfg) { c.Wrap = func(e Engine) Engine { wp.Engine = e; return wp } })
	head := newNode(t, root, "a", nil)
	w := newNode(t, head, "a", nil)
	waitConnected(t, head, w)
	const chunk = 1 << 20
	data := randBlob(3*chunk, 3)
	put(t, root, "push/bad", data, chunk)
	if got := getToGet(t, w, "push/bad"); !bytes.Equal(got, data) {
		t.Fatal("got other bytes after a corrupt push")
	}
	hs := head.eng.Status()
	if hs.CorruptReceived != 1 || hs.PushReceived != 2*chunk {
		t.Fatalf("head: %d corrupt chunks received, %d pushed bytes taken; want 1 and %d", hs.CorruptReceived, hs.PushReceived, 2*chunk)
	}
	if hs.ErrorsByPeer[root.h.ID()] == 0 {
		t.Fatalf("the corrupt push is not blamed on the root: %v", hs.ErrorsByPeer)
	}
	waitFor(t, "the root to get the corruption report", 5*time.Second, func() bool { return root.eng.Status().CorruptReports == 1 })
}

// TestPushToOldParent: a parent that speaks names 1.1.0 only gets a LOOKUP
// and pushes nothing; the get works.
func TestPushToOldParent(t *testing.T) {
	root := newNode(t, nil, "root", nil, speaks(ProtoNames11)) // a node of before LOOKUP_GET
	head := newNode(t, root, "a", nil)
	w := newNode(t, head, "a", nil)
	waitConnected(t, head, w)
	data := randBlob(2<<20, 4)
	put(t, root, "push/old", data, 1<<20)
	if got := getToGet(t, w, "push/old"); !bytes.Equal(got, data) {
		t.Fatal("got other bytes")
	}
	if rs := root.eng.Status(); rs.PushSent != 0 {
		t.Fatalf("a 1.1.0 parent pushed %d bytes", rs.PushSent)
	}
}

// TestPushLyingParent: a parent whose push breaks the protocol (a PUSH
// beyond the manifest; CHUNK frames out of order) is named, nothing it
// sent is taken, the lookup still answers, and no chunk is left waiting
// on the broken push.
func TestPushLyingParent(t *testing.T) {
	const chunk = 1 << 20
	// Two chunks, both in the out-of-order push: every request for them
	// would wait on the push if it were left hanging.
	data := randBlob(2*chunk, 9)
	m, err := blob.Split(bytes.NewReader(data), chunk, func(int, blob.Hash, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	r := blob.Record{Name: "push/lie", ID: m.CID(), Size: m.Size, Time: time.Now().UnixNano()}
	for _, tc := range []struct {
		name string
		push []byte
	}{
		{"push beyond the manifest", encodePush(pushHeader{First: 0, Count: 9})},
		{"chunks out of order", append(append(encodePush(pushHeader{First: 0, Count: 2}),
			appendChunkFrame(nil, 1, data[chunk:2*chunk])...), appendChunkFrame(nil, 0, data[:chunk])...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			liar := newTestHost(t)
			liar.SetStreamHandler(ProtoNames, func(s network.Stream) {
				defer s.Close()
				if _, _, err := readFrame(bufio.NewReader(s)); err != nil {
					return
				}
				_, _ = s.Write(append(encodeFound(r, m.Encode()), tc.push...))
			})
			child := newNode(t, &testNode{h: liar}, "a", nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, _, err := child.tree.LookupToGet(ctx, r.Name)
			if err != nil || got.ID != r.ID {
				t.Fatalf("lookup: %v, %v", got, err)
			}
			waitFor(t, "the parent named for its push", 5*time.Second, func() bool { return child.tree.Status().PeerErrors > 0 })
			st := child.eng.Status()
			if st.PushReceived != 0 {
				t.Fatalf("took %d pushed bytes from a parent that broke the protocol", st.PushReceived)
			}
			// Nothing waits on the broken push: a read fails (the liar
			// serves no chunks) instead of hanging until the request timeout.
			rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer rcancel()
			rc, err := child.eng.Open(rctx, got)
			if err == nil {
				_, err = io.ReadAll(rc)
				rc.Close()
			}
			if err == nil {
				t.Fatal("read the blob from a parent that has none")
			}
			if rctx.Err() != nil {
				t.Fatalf("the read waited for the broken push: %v", err)
			}
		})
	}
}

// TestPushObeysUploadRate: a push is an upload like a fetch reply. Under
// the root's MaxUploadRate it carries at most a second of the rate, and
// its chunks wait for the limit too: 3 MiB at 1 MiB/s (less the limiter's
// 256 KiB burst) take at least 2.75 s whichever way they go. Unlimited,
// the whole blob would be pushed at once; capped but not paced, the get
// would take about 1.75 s.
func TestPushObeysUploadRate(t *testing.T) {
	const rate = 1 << 20
	root := newNode(t, nil, "root", nil, func(c *nodeCfg) { c.Engine.MaxUploadRate = rate })
	head := newNode(t, root, "a", nil)
	const chunk = 256 << 10
	data := randBlob(12*chunk, 7)
	put(t, root, "push/slow", data, chunk)

	start := time.Now()
	if got := getToGet(t, head, "push/slow"); !bytes.Equal(got, data) {
		t.Fatalf("head got %d bytes, not the blob's %d", len(got), len(data))
	}
	el := time.Since(start)
	rs := root.eng.Status()
	if rs.PushSent == 0 || rs.PushSent > rate {
		t.Fatalf("root pushed %d bytes under a %d B/s limit; want 1..%d", rs.PushSent, rate, rate)
	}
	if el < 2600*time.Millisecond {
		t.Fatalf("3 MiB came out of a 1 MiB/s root in %v", el)
	}
}

// TestPushConcurrentGets: the workers of a site all get a name at once.
// One LOOKUP_GET goes up and brings the push; the other lookups wait for
// it (they used to go up as plain LOOKUPs, whose FOUND often came first:
// the workers asked the head for the first chunks, the head fetched them
// from the root, and the pushed copies then crossed the WAN for nothing).
// The root sends the blob once.
func TestPushConcurrentGets(t *testing.T) {
	root := newNode(t, nil, "root", nil)
	head := newNode(t, root, "a", nil)
	var ws []*testNode
	for range 8 {
		ws = append(ws, newNode(t, head, "a", nil))
	}
	waitConnected(t, append([]*testNode{head}, ws...)...)
	const chunk = 1 << 20
	data := randBlob(8*chunk, 3)
	put(t, root, "push/all", data, chunk)
	got := make([][]byte, len(ws))
	done := make(chan int)
	for i, w := range ws {
		go func() { got[i] = getToGet(t, w, "push/all"); done <- i }()
	}
	for range ws {
		<-done
	}
	for i := range ws {
		if !bytes.Equal(got[i], data) {
			t.Fatalf("worker %d got other bytes", i)
		}
	}
	rs, hs := root.eng.Status(), head.eng.Status()
	if rs.PushSent != MaxPushBytes || hs.PushReceived != MaxPushBytes {
		t.Fatalf("root pushed %d, head received %d; want %d both", rs.PushSent, hs.PushReceived, MaxPushBytes)
	}
	if rs.BytesServed != uint64(len(data)) {
		t.Fatalf("root served %d bytes for a blob of %d: pushed chunks were fetched again", rs.BytesServed, len(data))
	}
}
