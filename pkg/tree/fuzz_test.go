package tree

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/namespace"
)

func FuzzDecodeFrame(f *testing.F) {
	f.Add(appendFrame(nil, msgLookup, []byte("a/b")))
	f.Add(appendFrame(nil, msgAck, nil))
	f.Add([]byte{msgFound, 0xff, 0xff, 0xff, 0xff})
	f.Add(refusedFrame(errors.New("refused as a child: role reader")))
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

func FuzzDecodeRefused(f *testing.F) {
	f.Add([]byte("refused as a child: a worker of site \"b\""))
	f.Add([]byte{0xff, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		if s := decodeRefused(b); !utf8.ValidString(s) {
			t.Fatalf("REFUSED message %q is not valid UTF-8", s)
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
	f.Add(msgLookupGet, encodeNamesRequest(namesRequest{Type: msgLookupGet, Name: "a/b"})[frameHeaderLen:])
	f.Add(msgLookupGet, encodeNamesRequest(namesRequest{Type: msgLookupGet, Name: "a/b", Have: r.ID})[frameHeaderLen:])
	f.Add(msgAnnounce, r.Encode())
	f.Add(byte(0x12), r.ID.Bytes()) // 1.0.0's MANIFEST, retired
	f.Add(byte(0), []byte{})
	f.Fuzz(func(t *testing.T, typ byte, b []byte) {
		q, err := decodeNamesRequest(typ, b)
		if err != nil {
			return
		}
		switch q.Type {
		case msgLookup, msgLookupGet:
			if blob.ValidateName(q.Name) != nil {
				t.Fatalf("accepted invalid name %q", q.Name)
			}
			if q.Type == msgLookupGet {
				back := encodeNamesRequest(q)[frameHeaderLen:]
				if !bytes.Equal(back, b) {
					t.Fatalf("LOOKUP_GET %x decodes to %+v, which encodes to %x", b, q, back)
				}
			}
		case msgAnnounce, msgPreheat:
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

func FuzzDecodePush(f *testing.F) {
	f.Add(encodePush(pushHeader{First: 0, Count: 4})[frameHeaderLen:])
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodePush(b)
		if err != nil {
			return
		}
		if h.Count == 0 || uint64(h.First)+uint64(h.Count) > blob.MaxChunks {
			t.Fatalf("accepted %+v", h)
		}
		if back := encodePush(h)[frameHeaderLen:]; !bytes.Equal(back, b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, h, back)
		}
	})
}

func FuzzDecodeChunkFrame(f *testing.F) {
	f.Add(appendChunkFrame(nil, 3, []byte("data"))[frameHeaderLen:])
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		i, data, err := decodeChunkFrame(b)
		if err != nil {
			return
		}
		if back := appendChunkFrame(nil, i, data)[frameHeaderLen:]; !bytes.Equal(back, b) {
			t.Fatalf("%x decodes to chunk %d, which encodes to %x", b, i, back)
		}
	})
}

func FuzzDecodeRuleMessages(f *testing.F) {
	r := namespace.Rule{Kind: namespace.KindRemove, Scope: "job1/", Time: 1, Origin: "o"}
	for _, fr := range [][]byte{
		encodeNamesRequest(namesRequest{Type: msgRule, Rule: r}),
		encodeNamesRequest(namesRequest{Type: msgSyncRules, From: 3, Rules: []namespace.Rule{r, r}}),
		encodeRules([]namespace.Rule{r}, 7),
		encodeRuleAck(Spread{Reached: 3, Unreached: 1}),
	} {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, p, err := decodeFrame(b)
		if err != nil {
			return
		}
		if q, err := decodeNamesRequest(typ, p); err == nil && (typ == msgRule || typ == msgSyncRules) {
			if !bytes.Equal(encodeNamesRequest(q), b) {
				t.Fatalf("request 0x%02x not canonical", typ)
			}
		}
		if rep, err := decodeNamesReply(typ, p); err == nil && typ == msgRules {
			if !bytes.Equal(encodeRules(rep.Rules, rep.Next), b) {
				t.Fatal("RULES not canonical")
			}
		}
	})
}

func FuzzDecodeAnnounceBatch(f *testing.F) {
	m := &blob.Manifest{Size: 3, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{1}}}
	r := blob.Record{Name: "job/a", ID: m.CID(), Size: 3, Time: 1, Origin: "o"}
	for _, b := range [][]byte{
		encodeAnnounceBatch([]batchEntry{{Record: r}}),
		encodeAnnounceBatch([]batchEntry{{Record: r, Manifest: m.Encode()}, {Record: r}}),
		{0, 0},
		{0xff, 0xff, 0, 1, 'x'},
	} {
		if _, p, err := decodeFrame(b); err == nil {
			b = p
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := decodeAnnounceBatch(b)
		if err != nil {
			return
		}
		if len(entries) == 0 || len(entries) > MaxBatchRecords {
			t.Fatalf("%d entries accepted", len(entries))
		}
		for _, e := range entries {
			if len(e.Manifest) > maxBatchManifest || blob.ValidateName(e.Record.Name) != nil {
				t.Fatal("an entry over its limits")
			}
		}
		again, err := decodeAnnounceBatch(encodeAnnounceBatch(entries)[frameHeaderLen:])
		if err != nil || len(again) != len(entries) {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
	})
}

func FuzzDecodeBatchAck(f *testing.F) {
	f.Add(encodeBatchAck([]entryResult{{}, refusedEntry(errors.New("forged")), {}})[frameHeaderLen:])
	f.Add([]byte{0, 1, 2})
	f.Add([]byte{0, 2, 1, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := decodeBatchAck(b)
		if err != nil {
			return
		}
		if len(res) == 0 || len(res) > MaxBatchRecords {
			t.Fatalf("%d entries accepted", len(res))
		}
		for _, e := range res {
			if len(e.Message) > maxEntryMsg || (!e.Refused && (e.Code != 0 || e.Message != "")) {
				t.Fatalf("entry %+v over its limits", e)
			}
		}
		if !bytes.Equal(encodeBatchAck(res)[frameHeaderLen:], b) {
			t.Fatal("BATCH_ACK not canonical")
		}
	})
}

func FuzzDecodeList(f *testing.F) {
	f.Add(encodeList(listQuery{Prefix: "p/", After: "p/x", Limit: 7})[frameHeaderLen:])
	f.Add(encodeList(listQuery{Limit: MaxListRecords})[frameHeaderLen:])
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := decodeList(b)
		if err != nil {
			return
		}
		if q.Limit < 1 || q.Limit > MaxListRecords || blob.ValidatePrefix(q.Prefix) != nil ||
			(q.After != "" && (blob.ValidateName(q.After) != nil || !strings.HasPrefix(q.After, q.Prefix))) {
			t.Fatalf("accepted %+v", q)
		}
		if back := encodeList(q)[frameHeaderLen:]; !bytes.Equal(back, b) {
			t.Fatalf("LIST %x decodes to %+v, which encodes to %x", b, q, back)
		}
	})
}

func FuzzDecodeListed(f *testing.F) {
	f.Add(encodeListed([]blob.Record{sampleRecord()}, true)[frameHeaderLen:])
	f.Add(encodeListed(nil, false)[frameHeaderLen:])
	f.Add([]byte{1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, more, err := decodeListed(b)
		if err != nil {
			return
		}
		if len(recs) > MaxListRecords {
			t.Fatalf("%d records accepted", len(recs))
		}
		for _, r := range recs {
			if blob.ValidateName(r.Name) != nil {
				t.Fatalf("bad record accepted: %+v", r)
			}
		}
		if back := encodeListed(recs, more)[frameHeaderLen:]; !bytes.Equal(back, b) {
			t.Fatalf("LISTED %x decodes to %d records, which encode to %x", b, len(recs), back)
		}
	})
}
