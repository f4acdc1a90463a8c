package fetchclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	mh "github.com/multiformats/go-multihash"

	"github.com/omst-project/omst/internal/p2ptest"
	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
	"github.com/omst-project/omst/pkg/transfer/internal/schedule"
	"github.com/omst-project/omst/pkg/transfer/internal/stats"
)

// pair starts a server host answering each request on proto with the
// bytes reply returns, and a Client that knows its address.
func pair(t *testing.T, proto protocol.ID, reply func(q fetchwire.Request) []byte) (*Client, peer.ID, *stats.Counters) {
	srv := p2ptest.NewHost(t)
	srv.SetStreamHandler(proto, func(s network.Stream) {
		defer s.Close()
		br := bufio.NewReader(s)
		for {
			q, err := fetchwire.ReadRequest(br)
			if err != nil {
				return
			}
			if _, err := s.Write(reply(q)); err != nil {
				return
			}
		}
	})
	h := p2ptest.NewHost(t)
	h.Peerstore().AddAddrs(srv.ID(), srv.Addrs(), peerstore.PermanentAddrTTL)
	st := &stats.Counters{}
	c := New(Config{Host: h, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second, StreamsPerPeer: 1,
		Describe: func(p peer.ID) string { return p.String() }, NotePeerError: func(peer.ID, string, error) {}, Stats: st})
	t.Cleanup(c.Close)
	return c, srv.ID(), st
}

func chunkOf(n int) ([]byte, blob.Hash, []byte) {
	r := rand.New(rand.NewPCG(uint64(n), 2))
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	h := blob.HashChunk(data)
	ob, _ := piece.Outboard(data, h)
	return data, h, ob
}

func testCID(t *testing.T) cid.Cid {
	d, err := mh.Sum([]byte("x"), mh.SHA2_256, -1)
	if err != nil {
		t.Fatal(err)
	}
	return cid.NewCidV1(cid.Raw, d)
}

func outboard(tag uint32, ob []byte) []byte {
	return append(fetchwire.AppendReplyHeader(nil, tag, fetchwire.StatusOutboard, len(ob)), ob...)
}

func pieceAt(tag uint32, off int, b []byte) []byte {
	return append(fetchwire.AppendPieceHeader(nil, tag, off, len(b)), b...)
}

// Replies in pieces: verified and published as they come; each way a
// sender can get them wrong is refused, naming what was wrong.
func TestRequestChunkPieces(t *testing.T) {
	data, h, ob := chunkOf(5*piece.GroupSize + 300)
	flipped := bytes.Clone(data)
	flipped[4*piece.GroupSize+1] ^= 1 // in the second unit read (scratchGroups)
	badOb := bytes.Clone(ob)
	badOb[40] ^= 1
	g := piece.GroupSize
	cases := []struct {
		name    string
		proto   protocol.ID
		frames  func(tag uint32) []byte
		ok      bool              // the chunk arrives
		kind    schedule.FailKind // of a failure
		wantErr error             // what a failure wraps
		have    int               // bytes published before a failure
	}{
		{"three pieces", fetchwire.ProtoFetch, func(tag uint32) []byte {
			return bytes.Join([][]byte{outboard(tag, ob), pieceAt(tag, 0, data[:2*g]), pieceAt(tag, 2*g, data[2*g:4*g]), pieceAt(tag, 4*g, data[4*g:])}, nil)
		}, true, 0, nil, len(data)},
		{"whole reply on 1.2.0", fetchwire.ProtoFetch120, func(tag uint32) []byte {
			return append(fetchwire.AppendReplyHeader(nil, tag, fetchwire.StatusOK, len(data)), data...)
		}, true, 0, nil, 0},
		{"corrupt piece", fetchwire.ProtoFetch, func(tag uint32) []byte {
			return bytes.Join([][]byte{outboard(tag, ob), pieceAt(tag, 0, flipped)}, nil)
		}, false, schedule.FailCorrupt, blob.ErrCorrupt, scratchGroups * g},
		{"corrupt outboard", fetchwire.ProtoFetch, func(tag uint32) []byte {
			return bytes.Join([][]byte{outboard(tag, badOb), pieceAt(tag, 0, data)}, nil)
		}, false, schedule.FailCorrupt, blob.ErrCorrupt, 0},
		{"piece before outboard", fetchwire.ProtoFetch, func(tag uint32) []byte {
			return pieceAt(tag, 0, data)
		}, false, schedule.FailUnreachable, wire.ErrMalformed, 0},
		{"gap", fetchwire.ProtoFetch, func(tag uint32) []byte {
			return bytes.Join([][]byte{outboard(tag, ob), pieceAt(tag, 0, data[:g]), pieceAt(tag, 2*g, data[2*g:])}, nil)
		}, false, schedule.FailUnreachable, wire.ErrMalformed, g},
		{"piece past the end", fetchwire.ProtoFetch, func(tag uint32) []byte {
			return bytes.Join([][]byte{outboard(tag, ob), pieceAt(tag, 0, append(bytes.Clone(data), 0))}, nil)
		}, false, schedule.FailUnreachable, wire.ErrMalformed, 0},
		{"OK after outboard", fetchwire.ProtoFetch, func(tag uint32) []byte {
			return bytes.Join([][]byte{outboard(tag, ob), fetchwire.AppendReplyHeader(nil, tag, fetchwire.StatusOK, 0)}, nil)
		}, false, schedule.FailUnreachable, wire.ErrMalformed, 0},
		{"pieces on 1.2.0", fetchwire.ProtoFetch120, func(tag uint32) []byte {
			return bytes.Join([][]byte{outboard(tag, ob), pieceAt(tag, 0, data)}, nil)
		}, false, schedule.FailUnreachable, wire.ErrMalformed, 0},
		{"error after some pieces", fetchwire.ProtoFetch, func(tag uint32) []byte {
			msg := []byte("upstream gone")
			return bytes.Join([][]byte{outboard(tag, ob), pieceAt(tag, 0, data[:2*g]),
				append(fetchwire.AppendReplyHeader(nil, tag, fetchwire.StatusError, len(msg)), msg...)}, nil)
		}, false, schedule.FailNotFound, nil, 2 * g},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, srv, st := pair(t, tc.proto, func(q fetchwire.Request) []byte { return tc.frames(q.Tag) })
			sink := piece.NewPartial(h)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, verified, err := c.RequestChunk(ctx, srv, fetchwire.Request{Type: fetchwire.MsgGet, ID: testCID(t), Index: 0, Hash: h}, sink)
			pub := len(sink.State().Data)
			if tc.ok {
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("err %v, %d bytes", err, len(got))
				}
				if verified != (tc.have > 0) || pub != tc.have {
					t.Fatalf("verified %v, published %d, want %v, %d", verified, pub, tc.have > 0, tc.have)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if FailKind(err) != tc.kind || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("error %v (kind %v), want kind %v wrapping %v", err, FailKind(err), tc.kind, tc.wantErr)
			}
			if pub != tc.have {
				t.Fatalf("published %d bytes before the failure, want %d", pub, tc.have)
			}
			if want := uint64(0); tc.kind == schedule.FailCorrupt {
				if st.CorruptReceived.Load() != 1 {
					t.Fatalf("corrupt counted %d times, want 1", st.CorruptReceived.Load())
				}
			} else if st.CorruptReceived.Load() != want {
				t.Fatalf("corrupt counted %d times", st.CorruptReceived.Load())
			}
		})
	}
}

// A reply in pieces to a request that allows none (a MANIFEST) is
// malformed.
func TestOutboardToManifestRefused(t *testing.T) {
	_, _, ob := chunkOf(100)
	c, srv, _ := pair(t, fetchwire.ProtoFetch, func(q fetchwire.Request) []byte { return outboard(q.Tag, ob) })
	_, err := c.Request(context.Background(), srv, fetchwire.Request{Type: fetchwire.MsgManifest, ID: testCID(t)})
	if !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("err = %v, want malformed", err)
	}
}

// A sender whose outboard lies about the chunk's length (an outboard
// passes VerifyOutboard on any length whose tree has no inner node to
// check: only the bytes bind it) is refused at its first piece, and the
// length it gave the shared Partial does not make a true sender's reply
// return anything but the true chunk: the request keeps the bytes it
// verified when the Partial was begun for another length.
func TestLengthLieDoesNotCorruptReply(t *testing.T) {
	data, h, ob := chunkOf(5*piece.GroupSize + 300)
	lie := binary.LittleEndian.AppendUint64(nil, 1000)
	if _, err := piece.VerifyOutboard(lie, h, blob.MaxChunkSize); err != nil {
		t.Fatalf("the lie does not pass VerifyOutboard (%v): this test no longer tests anything", err)
	}
	var n atomic.Int32
	c, srv, _ := pair(t, fetchwire.ProtoFetch, func(q fetchwire.Request) []byte {
		if n.Add(1) == 1 {
			return bytes.Join([][]byte{outboard(q.Tag, lie), pieceAt(q.Tag, 0, make([]byte, 1000))}, nil)
		}
		return bytes.Join([][]byte{outboard(q.Tag, ob), pieceAt(q.Tag, 0, data)}, nil)
	})
	sink := piece.NewPartial(h)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q := fetchwire.Request{Type: fetchwire.MsgGet, ID: testCID(t), Index: 0, Hash: h}
	if _, _, err := c.RequestChunk(ctx, srv, q, sink); FailKind(err) != schedule.FailCorrupt {
		t.Fatalf("the liar's reply: %v, want a corrupt piece", err)
	}
	got, verified, err := c.RequestChunk(ctx, srv, q, sink)
	if err != nil || !verified || !bytes.Equal(got, data) {
		t.Fatalf("the true reply after the lie: err %v, verified %v, %d bytes (want %d, the chunk's)", err, verified, len(got), len(data))
	}
}

// TestBulkRetryAfter: a minute after the first failed bulk connection,
// doubled with each further one, at most an hour.
func TestBulkRetryAfter(t *testing.T) {
	for fails, want := range map[int]time.Duration{1: time.Minute, 2: 2 * time.Minute, 3: 4 * time.Minute, 6: 32 * time.Minute, 7: time.Hour, 100: time.Hour} {
		if got := BulkRetryAfter(fails); got != want {
			t.Errorf("BulkRetryAfter(%d) = %v, want %v", fails, got, want)
		}
	}
}

// Fetch 1.4.0's replies to a GET_DIRECT: the deflect flag goes only to a
// 1.4.0 peer; a BUSY or REDIRECT is taken only in reply to a GET_DIRECT
// that carried it, never a REDIRECT to the sibling it named failed; a BUSY
// is a *BusyError with its retry-after.
func TestDeflectedReplies(t *testing.T) {
	failed := p2ptest.NewHost(t).ID()
	other := p2ptest.NewHost(t).ID()
	busy := func(tag uint32) []byte {
		return append(fetchwire.AppendReplyHeader(nil, tag, fetchwire.StatusBusy, fetchwire.BusyBodyLen), fetchwire.AppendBusy(nil, 750*time.Millisecond)...)
	}
	redirect := func(tag uint32, to peer.ID) []byte {
		body := fetchwire.AppendRedirect(nil, fetchwire.Redirect{Peer: to})
		return append(fetchwire.AppendReplyHeader(nil, tag, fetchwire.StatusRedirect, len(body)), body...)
	}
	for _, tc := range []struct {
		name    string
		proto   protocol.ID
		deflect bool
		reply   func(q fetchwire.Request) []byte
		check   func(t *testing.T, err error)
	}{
		{"busy", fetchwire.ProtoFetch, true, func(q fetchwire.Request) []byte {
			if !q.Deflect {
				return fetchwire.AppendReplyHeader(nil, q.Tag, fetchwire.StatusError, 0)
			}
			return busy(q.Tag)
		}, func(t *testing.T, err error) {
			if be, ok := errors.AsType[*BusyError](err); !ok || be.RetryAfter != 750*time.Millisecond {
				t.Fatalf("want a BusyError of 750ms: %v", err)
			}
		}},
		{"redirect", fetchwire.ProtoFetch, true, func(q fetchwire.Request) []byte { return redirect(q.Tag, other) }, func(t *testing.T, err error) {
			if re, ok := errors.AsType[*RedirectError](err); !ok || re.To.Peer != other {
				t.Fatalf("want a RedirectError to the other holder: %v", err)
			}
		}},
		{"redirect to the failed sibling", fetchwire.ProtoFetch, true, func(q fetchwire.Request) []byte { return redirect(q.Tag, failed) }, func(t *testing.T, err error) {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("want malformed: %v", err)
			}
		}},
		{"busy without the flag", fetchwire.ProtoFetch, false, func(q fetchwire.Request) []byte { return busy(q.Tag) }, func(t *testing.T, err error) {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("want malformed: %v", err)
			}
		}},
		{"redirect without the flag", fetchwire.ProtoFetch, false, func(q fetchwire.Request) []byte { return redirect(q.Tag, other) }, func(t *testing.T, err error) {
			if !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("want malformed: %v", err)
			}
		}},
		{"1.3.0 peer: no flag sent", fetchwire.ProtoFetch130, true, func(q fetchwire.Request) []byte {
			if q.Deflect {
				return busy(q.Tag)
			}
			return fetchwire.AppendReplyHeader(nil, q.Tag, fetchwire.StatusNotFound, 0)
		}, func(t *testing.T, err error) {
			if FailKind(err) != schedule.FailNotFound || errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("want NOT_FOUND (no flag sent): %v", err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, srv, _ := pair(t, tc.proto, tc.reply)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.Request(ctx, srv, fetchwire.Request{Type: fetchwire.MsgGetDirect, ID: testCID(t), Index: 1, Hash: blob.Hash{1}, Failed: failed, Deflect: tc.deflect})
			tc.check(t, err)
		})
	}
}

// TestCorruptReplyEndsOnlyItsRequest: a sender's stream carrying, among
// good replies, one with a corrupt piece in its middle and one with a
// corrupt outboard (their frames interleaved with the others'): those two
// requests fail as corrupt, counted and blamed, and the others, on the
// same stream, get their chunks; so does a request after them, on that
// stream still (the server sees one stream).
func TestCorruptReplyEndsOnlyItsRequest(t *testing.T) {
	data, h, ob := chunkOf(5*piece.GroupSize + 300)
	g := piece.GroupSize
	flipped := bytes.Clone(data)
	flipped[2*g+1] ^= 1
	badOb := bytes.Clone(ob)
	badOb[40] ^= 1
	good := func(tag uint32) [][]byte {
		return [][]byte{outboard(tag, ob), pieceAt(tag, 0, data[:2*g]), pieceAt(tag, 2*g, data[2*g:4*g]), pieceAt(tag, 4*g, data[4*g:])}
	}
	replies := map[int]func(tag uint32) [][]byte{
		0: good,
		1: func(tag uint32) [][]byte { // the second piece corrupt, a third after it
			return [][]byte{outboard(tag, ob), pieceAt(tag, 0, data[:2*g]), pieceAt(tag, 2*g, flipped[2*g:4*g]), pieceAt(tag, 4*g, data[4*g:])}
		},
		2: func(tag uint32) [][]byte { // a corrupt outboard, its pieces after it
			return [][]byte{outboard(tag, badOb), pieceAt(tag, 0, data[:2*g]), pieceAt(tag, 2*g, data[2*g:])}
		},
		3: good,
		4: good,
	}
	var streams atomic.Int32
	srv := p2ptest.NewHost(t)
	srv.SetStreamHandler(fetchwire.ProtoFetch, func(s network.Stream) {
		streams.Add(1)
		defer s.Close()
		br := bufio.NewReader(s)
		for round := 0; ; round++ {
			// The first four requests are answered together, their
			// frames interleaved; later ones one by one.
			want := 1
			if round == 0 {
				want = 4
			}
			var frames [][][]byte
			for range want {
				q, err := fetchwire.ReadRequest(br)
				if err != nil {
					return
				}
				frames = append(frames, replies[int(q.Index)](q.Tag))
			}
			var out []byte
			for i := 0; ; i++ {
				more := false
				for _, f := range frames {
					if i < len(f) {
						out, more = append(out, f[i]...), true
					}
				}
				if !more {
					break
				}
			}
			if _, err := s.Write(out); err != nil {
				return
			}
		}
	})
	hst := p2ptest.NewHost(t)
	hst.Peerstore().AddAddrs(srv.ID(), srv.Addrs(), peerstore.PermanentAddrTTL)
	st := &stats.Counters{}
	var blamed atomic.Int32
	c := New(Config{Host: hst, DialTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second, StreamsPerPeer: 1,
		Describe: func(p peer.ID) string { return p.String() }, Stats: st,
		NotePeerError: func(_ peer.ID, _ string, err error) {
			if errors.Is(err, blob.ErrCorrupt) {
				blamed.Add(1)
			}
		}})
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := testCID(t)
	ask := func(i int) error {
		got, verified, err := c.RequestChunk(ctx, srv.ID(), fetchwire.Request{Type: fetchwire.MsgGet, ID: id, Index: uint32(i), Hash: h}, piece.NewPartial(h))
		if err == nil && (!verified || !bytes.Equal(got, data)) {
			return errors.New("other bytes")
		}
		return err
	}
	errs := make([]error, 4)
	done := make(chan int)
	for i := range 4 {
		go func() { errs[i] = ask(i); done <- i }()
	}
	for range 4 {
		<-done
	}
	for i, err := range errs {
		if corrupt := i == 1 || i == 2; corrupt {
			if FailKind(err) != schedule.FailCorrupt || !errors.Is(err, blob.ErrCorrupt) {
				t.Errorf("request %d (corrupt): %v (kind %v), want a corrupt piece", i, err, FailKind(err))
			}
		} else if err != nil {
			t.Errorf("request %d (good), on the liar's stream: %v", i, err)
		}
	}
	if err := ask(4); err != nil {
		t.Errorf("a request after the corrupt replies: %v", err)
	}
	if n := st.CorruptReceived.Load(); n != 2 {
		t.Errorf("corrupt counted %d times, want 2", n)
	}
	if n := blamed.Load(); n != 2 {
		t.Errorf("the peer blamed %d times, want 2", n)
	}
	if n := streams.Load(); n != 1 {
		t.Errorf("%d streams opened, want 1 (the liar's kept)", n)
	}
}
