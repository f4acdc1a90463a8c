package member

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

func FuzzDecodeHello(f *testing.F) {
	f.Add(encodeHello(hello{Cert: []byte("cert"), Revocations: []byte("revs")}))
	f.Add(encodeHello(hello{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err != nil {
			return
		}
		if string(encodeHello(h)) != string(b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzDecodeJoin(f *testing.F) {
	id, _ := peer.Decode("12D3KooWDL5jeekuKGkzRiCZzr8UaKmhxzqBUJ8GghFnDZbDDCfW")
	f.Add(encodeJoin(joinRequest{Kind: kindRedeem, Subject: id, Payload: []byte("omst-join-x")}))
	f.Add(encodeJoin(joinRequest{Kind: kindRenew, Subject: id}))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := decodeJoin(b)
		if err != nil {
			return
		}
		if string(encodeJoin(q)) != string(b) {
			t.Fatalf("re-encoding differs")
		}
	})
}

func FuzzDecodeReplies(f *testing.F) {
	f.Add(encodeJoinReply(joinReply{GridKey: make([]byte, 32), Cert: []byte("c")}))
	f.Add(encodeReply(nil))
	f.Add(encodeReply(errString("no")))
	f.Fuzz(func(t *testing.T, b []byte) {
		if j, err := decodeJoinReply(b); err == nil && string(encodeJoinReply(j)) != string(b) {
			t.Fatalf("join reply re-encoding differs")
		}
		_ = decodeReply(b)
	})
}

type errString string

func (e errString) Error() string { return string(e) }
