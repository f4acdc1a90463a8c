package transfer

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/omst-project/omst/internal/memstore"
	"github.com/omst-project/omst/pkg/cache"
	"github.com/omst-project/omst/pkg/transfer/internal/bulk"
)

// newBulkEngine is newEngine with cfg's bulk settings and upload limit,
// its sources the given nodes as parents, in order.
func newBulkEngine(t testing.TB, store Store, b BulkConfig, upRate int64, from ...*engineNode) *engineNode {
	t.Helper()
	h := newTestHost(t)
	mem, _ := store.(*memstore.Store)
	if store == nil {
		mem = memstore.New()
		store = mem
	}
	n := &engineNode{h: h, mem: mem, sources: &staticSources{}}
	for _, f := range from {
		h.Peerstore().AddAddrs(f.h.ID(), f.h.Addrs(), time.Hour)
		n.sources.list = append(n.sources.list, Source{ID: f.h.ID(), Kind: KindParent})
	}
	e, err := New(Config{Host: h, Store: store, Sources: n.sources, DialTimeout: 2 * time.Second, RequestTimeout: 5 * time.Second,
		Bulk: b, MaxUploadRate: upRate})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	n.eng = e
	return n
}

var (
	bulkServe = BulkConfig{Listen: "127.0.0.1:0"}
	bulkAsk   = BulkConfig{Conns: 4}
)

// TestBulkFetch: a blob fetched from a node with a bulk listener comes
// over bulk connections (sealed, and plain between two trusted nodes of
// one site), verified, whole.
func TestBulkFetch(t *testing.T) {
	for _, c := range []struct {
		name     string
		srv, cli BulkConfig
	}{
		{"sealed", bulkServe, bulkAsk},
		{"plain", BulkConfig{Listen: "127.0.0.1:0", TrustedLAN: true, Site: "a"}, BulkConfig{Conns: 4, TrustedLAN: true, Site: "a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := newBulkEngine(t, nil, c.srv, 0)
			if src.eng.BulkPort() == 0 {
				t.Fatal("no bulk listener")
			}
			data := randBlob(3<<20+77, 1)
			rec := putBlob(t, src.mem, "x", data, 256<<10)
			dst := newBulkEngine(t, nil, c.cli, 0, src)
			if got := readBlob(t, dst, rec); !bytes.Equal(got, data) {
				t.Fatal("wrong bytes")
			}
			cs, ss := dst.eng.Status(), src.eng.Status()
			if cs.BulkOpened == 0 || cs.BulkFallbacks != 0 || ss.BulkAccepted != cs.BulkOpened {
				t.Errorf("bulk connections: opened %d, fallbacks %d, accepted %d", cs.BulkOpened, cs.BulkFallbacks, ss.BulkAccepted)
			}
			if ss.BytesServed < uint64(len(data)) {
				t.Errorf("served %d bytes", ss.BytesServed)
			}
		})
	}
}

// TestBulkIdleClosed: the bulk connections an asker opened are closed
// once unused for BulkConfig.Idle, at both ends, and opened again (new
// tickets) for the next fetch. (Before, they stayed open for good: a
// relay's workers held 4 sockets each there, which the fault suite's
// descriptor check found.)
func TestBulkIdleClosed(t *testing.T) {
	src := newBulkEngine(t, nil, bulkServe, 0)
	data := randBlob(2<<20, 3)
	rec := putBlob(t, src.mem, "x", data, 256<<10)
	ask := bulkAsk
	ask.Idle = 300 * time.Millisecond
	dst := newBulkEngine(t, nil, ask, 0, src)
	if got := readBlob(t, dst, rec); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	if src.eng.Status().BulkServing == 0 {
		t.Fatal("no bulk connection open after the fetch")
	}
	deadline := time.Now().Add(5 * time.Second)
	for src.eng.Status().BulkServing > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bulk connections still open 5 s after the fetch (idle 300 ms)", src.eng.Status().BulkServing)
		}
		time.Sleep(20 * time.Millisecond)
	}
	opened := dst.eng.Status().BulkOpened
	data2 := randBlob(1<<20, 4)
	rec2 := putBlob(t, src.mem, "y", data2, 256<<10)
	if got := readBlob(t, dst, rec2); !bytes.Equal(got, data2) {
		t.Fatal("wrong bytes after the idle close")
	}
	if st := dst.eng.Status(); st.BulkOpened == opened || st.BulkFallbacks != 0 {
		t.Errorf("after the idle close: opened %d (before %d), fallbacks %d", st.BulkOpened, opened, st.BulkFallbacks)
	}
}

// TestBulkFallback: a node without a bulk listener (as an older one) is
// asked over libp2p streams.
func TestBulkFallback(t *testing.T) {
	src := newBulkEngine(t, nil, BulkConfig{}, 0)
	data := randBlob(1<<20, 2)
	rec := putBlob(t, src.mem, "x", data, 128<<10)
	dst := newBulkEngine(t, nil, bulkAsk, 0, src)
	if got := readBlob(t, dst, rec); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	if cs := dst.eng.Status(); cs.BulkOpened != 0 || cs.BulkFallbacks == 0 {
		t.Errorf("opened %d, fallbacks %d", cs.BulkOpened, cs.BulkFallbacks)
	}
}

// flipConn flips one byte in the middle of every large write: a server
// that sends wrong bytes on the wire, past its own store's verification.
type flipConn struct{ *bulk.Conn }

func (c flipConn) Write(p []byte) (int, error) {
	if len(p) >= 32<<10 {
		p = bytes.Clone(p)
		p[len(p)/2] ^= 0x10
	}
	return c.Conn.Write(p)
}

// TestBulkCorruptFromElsewhere: a node that sends wrong bytes over a bulk
// connection (plain, where nothing but the hashes can tell) is caught by
// verification, counted, and the blob comes whole from the other source.
func TestBulkCorruptFromElsewhere(t *testing.T) {
	trusted := BulkConfig{TrustedLAN: true, Site: "a"}
	liar := newBulkEngine(t, nil, BulkConfig{}, 0)
	l, err := bulk.Listen(bulk.ListenerConfig{Addr: "127.0.0.1:0", Table: &bulk.Table{}, Policy: bulk.Policy{TrustedLAN: true, Site: "a"},
		Serve: func(c *bulk.Conn) { liar.eng.server.Serve(flipConn{c}, c.Peer, true) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	liar.h.SetStreamHandler(bulk.ProtoTickets, l.HandleTickets)
	honest := newBulkEngine(t, nil, BulkConfig{Listen: "127.0.0.1:0", TrustedLAN: true, Site: "a"}, 0)
	data := randBlob(2<<20, 3)
	rec := putBlob(t, liar.mem, "x", data, 128<<10)
	putBlob(t, honest.mem, "x", data, 128<<10)
	trusted.Conns = 4
	dst := newBulkEngine(t, nil, trusted, 0, liar, honest)
	if got := readBlob(t, dst, rec); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	cs := dst.eng.Status()
	if cs.CorruptReceived == 0 || cs.BulkOpened == 0 || l.Stats.Accepted.Load() == 0 {
		t.Errorf("corrupt received %d, bulk opened %d, accepted by the liar %d", cs.CorruptReceived, cs.BulkOpened, l.Stats.Accepted.Load())
	}
	if cs.ErrorsByPeer[liar.h.ID()] == 0 {
		t.Errorf("no error counted against the liar: %v", cs.ErrorsByPeer)
	}
}

// TestBulkSourceDiesMidTransfer: a source whose bulk connections die
// mid-transfer (its engine and host closed, as a killed process's are)
// leaves the blob to complete from the other source.
func TestBulkSourceDiesMidTransfer(t *testing.T) {
	slow := newBulkEngine(t, nil, bulkServe, 1<<20) // 1 MiB/s: 4 s for the blob
	other := newBulkEngine(t, nil, bulkServe, 0)
	data := randBlob(4<<20, 4)
	rec := putBlob(t, slow.mem, "x", data, 256<<10)
	putBlob(t, other.mem, "x", data, 256<<10)
	dst := newBulkEngine(t, nil, bulkAsk, 0, slow, other)
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for slow.eng.Status().BytesServed < 512<<10 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		slow.eng.Close()
		slow.h.Close()
	}()
	if got := readBlob(t, dst, rec); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}
	if st := slow.eng.Status(); st.BulkAccepted == 0 || st.BytesServed >= uint64(len(data)) {
		t.Errorf("the slow source accepted %d bulk connections, served %d bytes", st.BulkAccepted, st.BytesServed)
	}
}

// TestBulkSendFile: a head on a real store (pkg/cache, keeping the
// outboards of the chunks it fetched in pieces) sends them to a worker
// over a plain bulk connection from their files with sendfile
// (Status.ServedSendfile), every byte right. A chunk file damaged on the
// head's disk (same size) goes out unhashed: the worker's verification
// catches it, counts it and REPORTs it; the head drops its copy, fetches
// a fresh one from the root, and the worker's bytes are right.
func TestBulkSendFile(t *testing.T) {
	plain := BulkConfig{Listen: "127.0.0.1:0", Conns: 4, TrustedLAN: true, Site: "a"}
	root := newBulkEngine(t, nil, plain, 0)
	dir := t.TempDir()
	cs, err := cache.Open(dir, cache.Options{MaxBytes: 1 << 30, VerifiedMemoBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	head := newBulkEngine(t, cs, plain, 0, root)
	data := randBlob(3<<20+77, 9)
	rec := putBlob(t, root.mem, "x", data, 256<<10)
	if got := readBlob(t, head, rec); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes at the head")
	}
	m, _ := root.mem.Manifest(rec.ID)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		kept := 0
		for _, h := range m.Chunks {
			if _, ok := cs.Outboard(h); ok {
				kept++
			}
		}
		if kept == len(m.Chunks) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the head keeps %d of %d outboards", kept, len(m.Chunks))
		}
	}
	w := newBulkEngine(t, nil, plain, 0, head)
	if got := readBlob(t, w, rec); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes at the worker")
	}
	hs := head.eng.Status()
	if hs.ServedSendfile != uint64(len(m.Chunks)) || w.eng.Status().BulkOpened == 0 {
		t.Fatalf("the head sent %d of %d chunks with sendfile (bulk connections opened: %d)", hs.ServedSendfile, len(m.Chunks), w.eng.Status().BulkOpened)
	}

	bad := m.Chunks[5]
	x := bad.String()
	path := filepath.Join(dir, "chunks", x[:2], x)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	w2 := newBulkEngine(t, nil, plain, 0, head)
	if got := readBlob(t, w2, rec); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes at the second worker")
	}
	if st := w2.eng.Status(); st.CorruptReceived != 1 {
		t.Fatalf("the second worker received %d corrupt chunks, want 1", st.CorruptReceived)
	}
	if hs := head.eng.Status(); hs.CorruptReports != 1 {
		t.Fatalf("the head received %d reports, want 1", hs.CorruptReports)
	}
	if u := cs.Usage(); u.DamagedChunks != 1 {
		t.Fatalf("the head's store counted %d damaged chunks, want 1", u.DamagedChunks)
	}
}

// TestBulkNoSendfile: a head whose BulkConfig.NoSendfile is set serves the
// chunks of its store on plain bulk connections read into memory, never
// with sendfile: ServedSendfile stays 0 while every chunk is served from
// the store with its kept outboard (ServedUnhashed), and the bytes are
// right.
func TestBulkNoSendfile(t *testing.T) {
	plain := BulkConfig{Listen: "127.0.0.1:0", Conns: 4, TrustedLAN: true, Site: "a"}
	root := newBulkEngine(t, nil, plain, 0)
	cs, err := cache.Open(t.TempDir(), cache.Options{MaxBytes: 1 << 30, VerifiedMemoBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	off := plain
	off.NoSendfile = true
	head := newBulkEngine(t, cs, off, 0, root)
	data := randBlob(3<<20+77, 10)
	rec := putBlob(t, root.mem, "x", data, 256<<10)
	if got := readBlob(t, head, rec); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes at the head")
	}
	m, _ := root.mem.Manifest(rec.ID)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		kept := 0
		for _, h := range m.Chunks {
			if _, ok := cs.Outboard(h); ok {
				kept++
			}
		}
		if kept == len(m.Chunks) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the head keeps %d of %d outboards", kept, len(m.Chunks))
		}
	}
	w := newBulkEngine(t, nil, plain, 0, head)
	if got := readBlob(t, w, rec); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes at the worker")
	}
	hs := head.eng.Status()
	if hs.ServedSendfile != 0 {
		t.Fatalf("the head sent %d chunks with sendfile, want 0 with NoSendfile", hs.ServedSendfile)
	}
	if hs.ServedUnhashed != uint64(len(m.Chunks)) || w.eng.Status().BulkOpened == 0 {
		t.Fatalf("the head served %d of %d chunks from its store (bulk connections opened: %d)", hs.ServedUnhashed, len(m.Chunks), w.eng.Status().BulkOpened)
	}
}
