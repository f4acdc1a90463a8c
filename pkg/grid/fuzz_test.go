package grid

import (
	"encoding/base64"
	"testing"
	"time"
)

func decodeB64(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }

var fuzzKey, _ = KeyFromSeed(make([]byte, 32))

// The decoders never panic; what they accept encodes back to the same body.
func FuzzDecodeCert(f *testing.F) {
	b, _ := fuzzKey.Issue(Cert{Peer: "12D3KooWtest", Role: RoleWorker, Prefixes: []string{"a/"}, NotBefore: 1, NotAfter: 2, Serial: 3})
	f.Add(b)
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCert(b, fuzzKey.Public())
		if err != nil {
			return
		}
		body, err := c.encodeBody()
		if err != nil || string(body) != string(b[:len(b)-2-sigLen]) {
			t.Fatalf("accepted a certificate that does not encode back: %v", err)
		}
	})
}

func FuzzDecodeToken(f *testing.F) {
	tok, _ := fuzzKey.NewToken(RoleHead, []string{"x/"}, time.Unix(0, 0), time.Hour, time.Hour)
	s, _ := fuzzKey.Sign(tok)
	b, _ := decodeB64(s[len(TokenPrefix):])
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		tk, err := DecodeToken(b)
		if err != nil {
			return
		}
		body, err := tk.encodeBody()
		if err != nil || string(body) != string(b[:len(b)-2-sigLen]) {
			t.Fatalf("accepted a token that does not encode back: %v", err)
		}
	})
}

func FuzzDecodeRevocations(f *testing.F) {
	b, _ := fuzzKey.SignRevocations(Revocations{Seq: 1, Serials: []uint64{1, 5}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeRevocations(b, fuzzKey.Public())
		if err != nil {
			return
		}
		body, err := l.encodeBody()
		if err != nil || string(body) != string(b[:len(b)-2-sigLen]) {
			t.Fatalf("accepted a list that does not encode back: %v", err)
		}
	})
}
