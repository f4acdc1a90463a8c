package member

import (
	"bytes"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
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

// FuzzCheckProof: checkProof never panics on any record and proof, and
// what it accepts is signed by its origin's key over the record, with a
// certificate of this grid for that origin that allows the name, valid at
// the record's time, not dated ahead of the clock. The second input, when
// not empty, replaces the record's proof: the signature over a fixed
// record stays valid while the fuzzer changes the certificate.
func FuzzCheckProof(f *testing.F) {
	k, err := grid.KeyFromSeed(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		f.Fatal(err)
	}
	priv, _, err := crypto.GenerateEd25519Key(bytes.NewReader(bytes.Repeat([]byte{9}, 64)))
	if err != nil {
		f.Fatal(err)
	}
	origin, _ := peer.IDFromPrivateKey(priv)
	now := time.Unix(1_800_000_000, 0)
	cert, err := k.Issue(grid.Cert{Peer: origin, Role: grid.RoleWorker, Prefixes: []string{"results/a/"},
		NotBefore: now.Add(-time.Hour).Unix(), NotAfter: now.Add(time.Hour).Unix(), Serial: 42})
	if err != nil {
		f.Fatal(err)
	}
	a, err := New(Config{Now: func() time.Time { return now }}, Material{GridKey: k.Public(), Cert: cert})
	if err != nil {
		f.Fatal(err)
	}
	h, _ := mh.Sum([]byte("x"), mh.SHA2_256, -1)
	base := blob.Record{Name: "results/a/out", ID: cid.NewCidV1(cid.Raw, h), Size: 10, Time: now.Add(-time.Minute).UnixNano(), Origin: origin.String()}
	good, err := a.Prove(priv, base)
	if err != nil {
		f.Fatal(err)
	}
	if err := checkProof(good, k.Public(), nil, now); err != nil {
		f.Fatalf("the seed is refused: %v", err)
	}
	outside := base
	outside.Name = "shared/x"
	f.Add(good.Encode(), []byte(nil))
	f.Add(base.Encode(), []byte(nil))
	f.Add([]byte(nil), good.Proof)
	f.Add(outside.Encode(), good.Proof)
	f.Add([]byte(nil), []byte{1, 0, 0, 0, 0})
	f.Add([]byte{3}, []byte{2})
	revs := &grid.Revocations{Seq: 1, Serials: []uint64{7}}
	f.Fuzz(func(t *testing.T, rb, proof []byte) {
		r := good
		if len(rb) > 0 {
			var err error
			if r, err = blob.DecodeRecord(rb); err != nil {
				return
			}
		}
		if len(proof) > 0 {
			r.Proof = proof
		}
		err := checkProof(r, k.Public(), revs, now)
		if again := checkProof(r, k.Public(), revs, now); (err == nil) != (again == nil) {
			t.Fatalf("two answers: %v, then %v", err, again)
		}
		if err != nil {
			return
		}
		rd := reader{b: r.Proof}
		rd.version()
		sig := rd.bytes16(1024, "signature")
		cb := rd.bytes16(blob.MaxProofLen, "certificate")
		if rd.done("proof") != nil {
			t.Fatal("accepted a malformed proof")
		}
		o, err := peer.Decode(r.Origin)
		if err != nil {
			t.Fatalf("accepted an origin that is no peer ID: %v", err)
		}
		pub, err := o.ExtractPublicKey()
		if err != nil {
			t.Fatal(err)
		}
		if ok, err := pub.Verify(append([]byte(proofDomain), r.Unproved().Encode()...), sig); !ok || err != nil {
			t.Fatal("accepted a record its origin did not sign")
		}
		c, err := grid.DecodeCert(cb, k.Public())
		if err != nil || c.Peer != o || c.MayWrite(r.Name) != nil || revs.Has(c.Serial) {
			t.Fatalf("accepted with certificate %+v (%v) for %s, name %q", c, err, o, r.Name)
		}
		if r.When().After(now.Add(grid.ClockSkew)) || r.When().Before(time.Unix(c.NotBefore, 0).Add(-grid.ClockSkew)) ||
			r.When().After(time.Unix(c.NotAfter, 0).Add(grid.ClockSkew)) {
			t.Fatalf("accepted a record dated %v outside its certificate or ahead of the clock", r.When())
		}
	})
}
