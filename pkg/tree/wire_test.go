package tree

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

func sampleRecord() blob.Record {
	m := &blob.Manifest{Size: 1, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{7}}}
	return blob.Record{Name: "a/b", ID: m.CID(), Size: 1, Time: 9, Origin: "o"}
}

func TestWireRoundTrip(t *testing.T) {
	h := hello{Site: "siteA", Addrs: []string{"/ip4/1.2.3.4/tcp/1", "/ip6/::1/tcp/2"}}
	typ, p, err := decodeFrame(appendFrame(nil, msgHello, encodeHello(h)))
	if err != nil || typ != msgHello {
		t.Fatal(typ, err)
	}
	if back, err := decodeHello(p); err != nil || back.Site != h.Site || len(back.Addrs) != 2 || back.Addrs[1] != h.Addrs[1] {
		t.Fatalf("hello: %+v %v", back, err)
	}
	r := sampleRecord()
	for _, q := range []namesRequest{{Type: msgLookup, Name: "x/y"}, {Type: msgAnnounce, Record: r}} {
		typ, p, err := decodeFrame(encodeNamesRequest(q))
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeNamesRequest(typ, p)
		if err != nil || back.Name != q.Name || back.Record.Name != q.Record.Name {
			t.Fatalf("names request %+v: %+v %v", q, back, err)
		}
	}
}

// FOUND carries the record, and may carry its blob's manifest.
func TestFoundRoundTrip(t *testing.T) {
	r := sampleRecord()
	m := &blob.Manifest{Size: 1, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{7}}}
	for _, mb := range [][]byte{nil, m.Encode()} {
		typ, p, err := decodeFrame(encodeFound(r, mb))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := decodeNamesReply(typ, p)
		if err != nil || !rep.Record.Equal(r) || !bytes.Equal(rep.Manifest, mb) {
			t.Fatalf("FOUND with a %d-byte manifest: %+v %v", len(mb), rep, err)
		}
	}
	for name, p := range map[string][]byte{
		"empty":          {},
		"record too big": {0xff, 0xff},
		"record cut":     encodeFound(r, nil)[frameHeaderLen : frameHeaderLen+10],
	} {
		if _, err := decodeNamesReply(msgFound, p); err == nil {
			t.Errorf("FOUND %s accepted", name)
		}
	}
}

// A node that looks a name up gets its manifest with it: no round trip
// for the manifest before the first chunk.
func TestLookupBringsManifest(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", nil)
	w := newNode(t, head, "siteA", nil)
	waitConnected(t, head, w)
	rec := put(t, root, "m/x", randBlob(300<<10, 3), 16<<10)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := w.tree.Lookup(ctx, "m/x"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*testNode{head, w} {
		if _, err := n.store.Manifest(rec.ID); err != nil {
			t.Fatalf("no manifest after the lookup: %v", err)
		}
	}
	if st := root.eng.Status(); st.BytesServed != 0 {
		t.Fatalf("the root served %d bytes for a lookup (a manifest request?)", st.BytesServed)
	}
}

func TestWireRejects(t *testing.T) {
	for name, b := range map[string][]byte{
		"unknown type":   appendFrame(nil, 0x7f, nil),
		"oversize":       {msgLookup, 0xff, 0xff, 0xff, 0xff},
		"truncated":      {msgLookup, 0, 0, 0, 5, 'a'},
		"short header":   {msgLookup, 0},
		"trailing bytes": append(appendFrame(nil, msgAck, nil), 0),
	} {
		if _, _, err := decodeFrame(b); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, n := range []string{"", "/abs", "a/../b", "nul\x00", strings.Repeat("x", blob.MaxNameLen+1)} {
		if _, err := decodeNamesRequest(msgLookup, []byte(n)); err == nil {
			t.Errorf("LOOKUP %q accepted", n)
		}
	}
	bad := sampleRecord()
	bad.Name = "../etc"
	if _, err := decodeNamesRequest(msgAnnounce, bad.Encode()); !errors.Is(err, blob.ErrInvalidName) {
		t.Errorf("ANNOUNCE with invalid name: %v", err)
	}
	if _, err := decodeNamesRequest(0x12, []byte{1, 2, 3}); err == nil {
		t.Error("retired MANIFEST request accepted")
	}
	if _, err := decodeHello([]byte{0, 0, maxAddrs + 1}); !errors.Is(err, wire.ErrMalformed) {
		t.Errorf("too many addrs: %v", err)
	}
}

// A live node answers an invalid name on the wire with an error reply, and
// keeps serving.
func TestInvalidInputOnTheWire(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	c := newTestHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Connect(ctx, *root.info()); err != nil {
		t.Fatal(err)
	}
	for _, payload := range [][]byte{[]byte("../x"), []byte("a\x00b"), {}} {
		s, err := c.NewStream(ctx, root.h.ID(), ProtoNames)
		if err != nil {
			t.Fatal(err)
		}
		s.Write(appendFrame(nil, msgLookup, payload))
		s.CloseWrite()
		typ, msg, err := readFrame(bufio.NewReader(s))
		if err != nil || typ != msgError || len(msg) == 0 || msg[0] != errInvalidName || !strings.Contains(string(msg), "invalid name") {
			t.Fatalf("LOOKUP %q: type 0x%02x %q %v", payload, typ, msg, err)
		}
		s.Close()
	}
	// A names request with an unknown type.
	s, _ := c.NewStream(ctx, root.h.ID(), ProtoNames)
	s.Write([]byte{0x55, 0, 0, 0, 0})
	if typ, _, err := readFrame(bufio.NewReader(s)); err != nil || typ != msgError {
		t.Fatalf("unknown request: 0x%02x %v", typ, err)
	}
	s.Close()
	// Still serving.
	data := randBlob(9000, 1)
	put(t, root, "ok", data, blob.MinChunkSize)
	w := newNode(t, root, "s", nil)
	if got := readAll(t, w, "ok"); !bytes.Equal(got, data) {
		t.Fatal("node stopped serving")
	}
}

// A long error message fits a names ERROR frame: code byte plus 1024
// bytes of message, cut at a rune boundary.
func TestLongNamesError(t *testing.T) {
	long := errors.New(strings.Repeat("é", 2000))
	typ, payload, err := readFrame(bufio.NewReader(bytes.NewReader(errorFrame(long))))
	if err != nil {
		t.Fatalf("long ERROR frame rejected: %v", err)
	}
	rep, err := decodeNamesReply(typ, payload)
	if err != nil || rep.Type != msgError || len(rep.Message) > maxErrorMsg || !utf8.ValidString(rep.Message) {
		t.Fatalf("decoded %d-byte message, valid UTF-8 %v, err %v", len(rep.Message), utf8.ValidString(rep.Message), err)
	}
}

// TestBatchWire: ANNOUNCE_BATCH and BATCH_ACK round-trip; their bounds
// (no entry, more than MaxBatchRecords, a manifest over maxBatchManifest,
// a bad record, trailing bytes, an unknown status) are named errors.
func TestBatchWire(t *testing.T) {
	r := sampleRecord()
	m := (&blob.Manifest{Size: 1, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{7}}}).Encode()
	in := []batchEntry{{Record: r, Manifest: m}, {Record: r}}
	typ, p, err := decodeFrame(encodeAnnounceBatch(in))
	if err != nil || typ != msgAnnounceBatch {
		t.Fatal(typ, err)
	}
	q, err := decodeNamesRequest(typ, p)
	if err != nil || len(q.Batch) != 2 || !bytes.Equal(q.Batch[0].Manifest, m) || q.Batch[1].Manifest != nil || q.Batch[1].Record.Name != r.Name {
		t.Fatalf("batch %+v, %v", q.Batch, err)
	}
	res := []entryResult{{}, refusedEntry(fmt.Errorf("x: %w", blob.ErrInvalidName))}
	typ, p, err = decodeFrame(encodeBatchAck(res))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := decodeNamesReply(typ, p)
	if err != nil || len(rep.Entries) != 2 || rep.Entries[0].Refused || !rep.Entries[1].Refused || rep.Entries[1].Code != errInvalidName {
		t.Fatalf("ack %+v, %v", rep, err)
	}
	big := make([]byte, maxBatchManifest+1)
	tooMany := binary.BigEndian.AppendUint16(nil, MaxBatchRecords+1)
	for name, b := range map[string][]byte{
		"empty":         {0, 0},
		"too many":      tooMany,
		"manifest":      encodeAnnounceBatch([]batchEntry{{Record: r, Manifest: big}})[frameHeaderLen:],
		"trailing":      append(encodeAnnounceBatch(in)[frameHeaderLen:], 0),
		"bad record":    {0, 1, 0, 2, 'x', 'y', 0, 0},
		"short entries": {0, 2, 0, 0},
	} {
		if _, err := decodeAnnounceBatch(b); !errors.Is(err, wire.ErrMalformed) && !errors.Is(err, blob.ErrInvalidName) {
			if err == nil {
				t.Errorf("%s: accepted", name)
			} else if !strings.Contains(err.Error(), "ANNOUNCE_BATCH") {
				t.Errorf("%s: %v does not name the message", name, err)
			}
		}
	}
	for name, b := range map[string][]byte{"empty": {0, 0}, "status": {0, 1, 7}, "trailing": {0, 1, 0, 0}, "truncated": {0, 1, 1}} {
		if _, err := decodeBatchAck(b); err == nil {
			t.Errorf("BATCH_ACK %s: accepted", name)
		}
	}
	if n := batchLen([]int{MaxBatchBytes, 10}); n != 1 {
		t.Errorf("batchLen of an entry filling the batch: %d", n)
	}
	sizes := make([]int, MaxBatchRecords+5)
	for i := range sizes {
		sizes[i] = 10
	}
	if n := batchLen(sizes); n != SendBatchRecords {
		t.Errorf("batchLen of %d small entries: %d", len(sizes), n)
	}
}
