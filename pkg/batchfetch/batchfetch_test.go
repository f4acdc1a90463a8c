package batchfetch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/cache"
	"github.com/omst-project/omst/pkg/peerhost"
)

func newHost(t *testing.T) host.Host {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := peerhost.New(peerhost.Options{Key: k, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func newStore(t *testing.T) *cache.Store {
	t.Helper()
	s, err := cache.Open(t.TempDir(), cache.Options{MaxBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func connect(t *testing.T, a, b host.Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

func data(i, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(i*13 + k*5 + k/251)
	}
	return b
}

func put(t *testing.T, s *cache.Store, name string, b []byte, cs int) cid.Cid {
	t.Helper()
	if cs == 0 {
		cs = blob.DefaultChunkSize
	}
	r, err := s.Ingest(context.Background(), name, bytes.NewReader(b), cs, "origin")
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// blobBytes reads a blob's bytes from s (every chunk verified by the store).
func blobBytes(t *testing.T, s *cache.Store, id cid.Cid) []byte {
	t.Helper()
	m, err := s.Manifest(id)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, h := range m.Chunks {
		c, err := s.ReadChunk(h)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c...)
	}
	return out
}

// TestFetchInline: real hosts and stores. One request of 300 IDs: the 200
// blobs of 16 KiB and one of 60 KiB in 15 chunks come inline and are
// stored whole, their bytes right; a blob over InlineMax and IDs the peer
// does not hold are "not inline" and nothing of them is stored.
func TestFetchInline(t *testing.T) {
	src, dst := newHost(t), newHost(t)
	ss, ds := newStore(t), newStore(t)
	Serve(src, ss, nil, nil)
	connect(t, dst, src)
	var ids []cid.Cid
	want := map[cid.Cid][]byte{}
	for i := range 200 {
		b := data(i, 16<<10)
		id := put(t, ss, fmt.Sprintf("r/%d", i), b, 0)
		ids, want[id] = append(ids, id), b
	}
	multi := data(999, 60<<10)
	mid := put(t, ss, "r/multi", multi, 4096)
	ids, want[mid] = append(ids, mid), multi
	big := put(t, ss, "r/big", data(7, InlineMax+1), 0)
	ids = append(ids, big)
	other := newStore(t)
	for i := range 98 {
		ids = append(ids, put(t, other, fmt.Sprintf("x/%d", i), data(5000+i, 100), 0))
	}
	res, err := Fetch(context.Background(), dst, src.ID(), ds, ids)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for i, id := range ids {
		w, inline := want[id]
		if res.Stored[i] != inline || ds.HasBlob(id) != inline {
			t.Fatalf("ID %d (%s): stored %v, held %v, want %v", i, id, res.Stored[i], ds.HasBlob(id), inline)
		}
		if inline {
			n++
			if !bytes.Equal(blobBytes(t, ds, id), w) {
				t.Fatalf("ID %d: bytes differ", i)
			}
		}
	}
	if n != 201 || res.Bytes != 200*16<<10+60<<10 {
		t.Fatalf("%d inline, %d bytes", n, res.Bytes)
	}
}

// TestFetchOldPeer: a peer without the protocol (an older daemon) is
// ErrNotSpoken, so the asker fetches the ordinary way.
func TestFetchOldPeer(t *testing.T) {
	src, dst := newHost(t), newHost(t)
	connect(t, dst, src)
	id := put(t, newStore(t), "a", []byte("x"), 0)
	_, err := Fetch(context.Background(), dst, src.ID(), newStore(t), []cid.Cid{id})
	if !errors.Is(err, ErrNotSpoken) {
		t.Fatalf("old peer: %v", err)
	}
}

// TestFetchCorruptNotStored: a peer that answers a chunk with bytes that
// do not match the manifest's hash, or a manifest that is not the ID's:
// the request fails with blob.ErrCorrupt, and nothing of those blobs is
// stored; the blob answered before them stays.
func TestFetchCorruptNotStored(t *testing.T) {
	for _, what := range []string{"chunk", "manifest"} {
		t.Run(what, func(t *testing.T) {
			src, dst := newHost(t), newHost(t)
			ss, ds := newStore(t), newStore(t)
			good := put(t, ss, "good", data(1, 1000), 0)
			bad := put(t, ss, "bad", data(2, 1000), 0)
			src.SetStreamHandler(Proto, func(st network.Stream) {
				defer st.Close()
				if _, err := ReadRequest(bufio.NewReader(st)); err != nil {
					st.Reset()
					return
				}
				out := appendAnswer(nil, ss, good)
				b := appendAnswer(nil, ss, bad)
				if what == "chunk" {
					b[len(b)-1] ^= 1
				} else {
					b[5+4] ^= 1 // a byte of the encoded manifest
				}
				st.Write(append(out, b...))
			})
			connect(t, dst, src)
			res, err := Fetch(context.Background(), dst, src.ID(), ds, []cid.Cid{good, bad})
			if !errors.Is(err, blob.ErrCorrupt) {
				t.Fatalf("corrupt %s: %v", what, err)
			}
			if !res.Stored[0] || res.Stored[1] || !ds.HasBlob(good) || ds.HasBlob(bad) {
				t.Fatalf("stored %v; good held %v, bad held %v", res.Stored, ds.HasBlob(good), ds.HasBlob(bad))
			}
			m, _ := ss.Manifest(bad)
			if ds.HasChunk(m.Chunks[0]) {
				t.Fatal("the bad blob's chunk stored")
			}
		})
	}
}

// TestReadRequestBounds: counts out of bounds and bad CIDs are malformed.
func TestReadRequestBounds(t *testing.T) {
	id := put(t, newStore(t), "a", []byte("x"), 0)
	for name, b := range map[string][]byte{
		"zero":     {0, 0, 0, 0},
		"too many": binary.BigEndian.AppendUint32(nil, MaxIDs+1),
		"bad cid":  {0, 0, 0, 1, 0, 3, 1, 2, 3},
		"empty id": {0, 0, 0, 1, 0, 0},
	} {
		if _, err := ReadRequest(bytes.NewReader(b)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	got, err := ReadRequest(bytes.NewReader(AppendRequest(nil, []cid.Cid{id, id})))
	if err != nil || len(got) != 2 || !got[1].Equals(id) {
		t.Fatalf("%v %v", got, err)
	}
}

func FuzzReadRequest(f *testing.F) {
	id := blob.ManifestCID([]byte("seed"))
	f.Add(AppendRequest(nil, []cid.Cid{id}))
	f.Add([]byte{0, 0, 0, 2, 0, 1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := ReadRequest(bytes.NewReader(b))
		if err == nil && !bytes.HasPrefix(b, AppendRequest(nil, ids)) {
			t.Fatal("request not canonical")
		}
	})
}

func FuzzReadAnswer(f *testing.F) {
	m, err := blob.Split(bytes.NewReader(data(3, 5000)), 4096, func(int, blob.Hash, []byte) error { return nil })
	if err != nil {
		f.Fatal(err)
	}
	id := m.CID()
	enc := m.Encode()
	ans := append([]byte{answerInline}, binary.BigEndian.AppendUint32(nil, uint32(len(enc)))...)
	ans = append(append(ans, enc...), data(3, 5000)...)
	f.Add(ans)
	f.Add([]byte{answerNotInline})
	f.Add([]byte{answerInline, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := ReadAnswer(bytes.NewReader(b), id)
		if err == nil && in != nil {
			var got []byte
			for _, c := range in.Chunks {
				got = append(got, c...)
			}
			if !bytes.Equal(got, data(3, 5000)) {
				t.Fatal("an answer verified with other bytes")
			}
		}
	})
}
