package transfer

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/memstore"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
)

// countingStore counts the chunk bytes read from a memstore.
type countingStore struct {
	*memstore.Store
	read atomic.Int64
}

func (c *countingStore) ReadChunk(h blob.Hash) ([]byte, error) {
	b, err := c.Store.ReadChunk(h)
	c.read.Add(int64(len(b)))
	return b, err
}

// A peer that asks for chunks on many streams and never reads them holds
// at most PeerReplyBytes of the server's memory, and its streams end once
// nothing moved for WriteStall (issue 24: 64 read chunks per stream, for
// the 30 s request timeout, on as many streams as the peer opened); a
// peer that reads, meanwhile, is served as usual.
func TestPeerThatNeverReads(t *testing.T) {
	const chunk = 1 << 20
	cs := &countingStore{Store: memstore.New()}
	src := newEngineWith(t, func(c *Config) {
		c.Store = cs
		c.RequestTimeout = 30 * time.Second
		c.WriteStall = 2 * time.Second
	})
	data := randBlob(8*chunk, 31)
	rec := putBlob(t, cs.Store, "big", data, chunk)
	m, _ := cs.Manifest(rec.ID)

	c := newTestHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Connect(ctx, peer.AddrInfo{ID: src.h.ID(), Addrs: src.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	const streams, perStream = 4, 64
	var ss []network.Stream
	for range streams {
		s, err := c.NewStream(ctx, src.h.ID(), ProtoFetch)
		if err != nil {
			t.Fatal(err)
		}
		var req []byte
		for i := range perStream {
			req = fetchwire.AppendRequest(req, fetchwire.Request{Type: fetchwire.MsgGet, Tag: uint32(i + 1), ID: rec.ID, Index: uint32(i % 8), Hash: m.Chunks[i%8]})
		}
		if _, err := s.Write(req); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s) // never read
	}
	time.Sleep(time.Second)
	read, held := cs.read.Load(), src.eng.Status().ReplyBytesHeld
	t.Logf("a peer that never reads: %d MiB read for it, %d MiB held (of %d MiB asked)", read>>20, held>>20, streams*perStream)
	if read > DefaultPeerReplyBytes+2*chunk || held > DefaultPeerReplyBytes || held == 0 {
		t.Fatalf("a peer that never reads made the server read %d bytes and hold %d (budget %d)", read, held, DefaultPeerReplyBytes)
	}

	// Another peer is served meanwhile.
	w := newEngine(t, nil, src)
	if got := readBlob(t, w, rec); !bytes.Equal(got, data) {
		t.Fatal("wrong bytes")
	}

	// The stalled streams end, and what they held is free.
	waitUntil(t, "the stalled streams end", func() bool { return src.eng.Status().ReplyBytesHeld == 0 })
	for _, s := range ss {
		s.Reset()
	}
}
