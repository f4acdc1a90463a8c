package tree

import (
	"bytes"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

func FuzzDecodeFrame(f *testing.F) {
	f.Add(appendFrame(nil, msgLookup, []byte("a/b")))
	f.Add(appendFrame(nil, msgAck, nil))
	f.Add([]byte{msgFound, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, p, err := decodeFrame(b)
		if err != nil {
			return
		}
		if len(p) > frameLimit(typ) || !bytes.Equal(appendFrame(nil, typ, p), b) {
			t.Fatal("frame not canonical or over its limit")
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	f.Add(encodeHello(hello{Site: "s", Addrs: []string{"/ip4/127.0.0.1/tcp/1"}}))
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err != nil {
			return
		}
		if len(h.Site) > maxSite || len(h.Addrs) > maxAddrs || !bytes.Equal(encodeHello(h), b) {
			t.Fatal("hello not canonical or over its limits")
		}
	})
}

func FuzzDecodeWelcome(f *testing.F) {
	f.Add(appendString16(nil, "site"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeWelcome(b)
		if err == nil && len(s) > maxSite {
			t.Fatal("site over the limit")
		}
	})
}

func FuzzDecodeNamesRequest(f *testing.F) {
	r := sampleRecord()
	f.Add(msgLookup, []byte("a/b"))
	f.Add(msgAnnounce, r.Encode())
	f.Add(byte(0x12), r.ID.Bytes()) // 1.0.0's MANIFEST, retired
	f.Add(byte(0), []byte{})
	f.Fuzz(func(t *testing.T, typ byte, b []byte) {
		q, err := decodeNamesRequest(typ, b)
		if err != nil {
			return
		}
		switch q.Type {
		case msgLookup:
			if blob.ValidateName(q.Name) != nil {
				t.Fatalf("accepted invalid name %q", q.Name)
			}
		case msgAnnounce:
			if blob.ValidateName(q.Record.Name) != nil {
				t.Fatalf("bad record accepted: %+v", q.Record)
			}
		default:
			t.Fatalf("unknown type 0x%02x accepted", q.Type)
		}
	})
}

func FuzzDecodeNamesReply(f *testing.F) {
	f.Add(msgFound, encodeFound(sampleRecord(), nil)[frameHeaderLen:])
	m := &blob.Manifest{Size: 1, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{7}}}
	f.Add(msgFound, encodeFound(sampleRecord(), m.Encode())[frameHeaderLen:])
	f.Add(msgNotFound, []byte{})
	f.Add(msgError, []byte("\x01boom"))
	f.Fuzz(func(t *testing.T, typ byte, b []byte) {
		p, err := decodeNamesReply(typ, b)
		if err != nil {
			return
		}
		if p.Type == msgFound && (blob.ValidateName(p.Record.Name) != nil || len(p.Manifest) > maxInlineManifest) {
			t.Fatalf("bad record accepted: %+v", p.Record)
		}
	})
}
