package member

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
)

func testCID(t *testing.T, s string) cid.Cid {
	h, err := mh.Sum([]byte(s), mh.SHA2_256, -1)
	if err != nil {
		t.Fatal(err)
	}
	return cid.NewCidV1(cid.Raw, h)
}

// memberOf returns an attached-less Admission of grid k for a fresh
// identity with role and prefixes, and that identity's key.
func memberOf(t *testing.T, k grid.Key, role grid.Role, prefixes ...string) (*Admission, crypto.PrivKey, peer.ID) {
	priv, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(priv)
	now := time.Now()
	cert, err := k.Issue(grid.Cert{Peer: id, Role: role, Prefixes: prefixes, NotBefore: now.Add(-time.Hour).Unix(), NotAfter: now.Add(time.Hour).Unix(), Serial: uint64(now.UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{}, Material{GridKey: k.Public(), Cert: cert})
	if err != nil {
		t.Fatal(err)
	}
	return a, priv, id
}

func TestRecordProofs(t *testing.T) {
	k, _ := grid.NewKey()
	worker, wkey, wid := memberOf(t, k, grid.RoleWorker, "results/a/")
	relay, rkey, rid := memberOf(t, k, grid.RoleHead, "results/")
	rec := blob.Record{Name: "results/a/out", ID: testCID(t, "x"), Size: 10, Time: time.Now().UnixNano(), Origin: wid.String()}

	good, err := worker.Prove(wkey, rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.CheckRecord(good); err != nil {
		t.Fatalf("a good record refused: %v", err)
	}
	// Round trip through the record encoding keeps it valid.
	back, err := blob.DecodeRecord(good.Encode())
	if err != nil || relay.CheckRecord(back) != nil {
		t.Fatalf("decoded record: %v", err)
	}

	// Outside its prefixes: refused at the origin, naming the prefix.
	if _, err := worker.Prove(wkey, blob.Record{Name: "shared/init", ID: rec.ID, Time: 1, Origin: wid.String()}); err == nil || !strings.Contains(err.Error(), `"results/a/"`) {
		t.Fatalf("put outside the prefix: %v", err)
	}

	bad := map[string]blob.Record{}
	redirected := good
	redirected.ID = testCID(t, "other bytes")
	bad["redirected by a relay"] = redirected
	forged := rec
	forged.Proof = sign(t, rkey, forged, good.Proof) // the relay signs for the worker
	bad["signed by a relay for its origin"] = forged
	own := rec
	own.Origin = rid.String()
	own.Name = "shared/init" // the relay's own record, outside its prefixes
	bad["outside the origin's prefixes"] = signWithCert(t, rkey, own, relay.cert)
	ahead := rec
	ahead.Time = time.Now().Add(30 * time.Minute).UnixNano() // would win over later puts
	bad["dated in the future"] = signWithCert(t, wkey, ahead, worker.cert)
	unsigned := rec
	bad["unsigned"] = unsigned
	garbage := rec
	garbage.Proof = []byte{1, 2, 3}
	bad["malformed proof"] = garbage
	for what, r := range bad {
		if err := relay.CheckRecord(r); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v", what, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	if got := relay.Stats().RecordsRejected; got != uint64(len(bad)) {
		t.Fatalf("rejected %d, want %d", got, len(bad))
	}

	// A revoked origin's records are refused too.
	c, _ := worker.Cert()
	l, _ := k.SignRevocations(grid.Revocations{Seq: 1, Serials: []uint64{c.Serial}})
	if _, err := relay.AdoptRevocations(l); err != nil {
		t.Fatal(err)
	}
	if err := relay.CheckRecord(good); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked origin: %v", err)
	}

	// An open node accepts anything, and proves nothing.
	open, _ := New(Config{}, Material{})
	if err := open.CheckRecord(unsigned); err != nil {
		t.Fatal(err)
	}
	if r, _ := open.Prove(wkey, rec); r.Proof != nil {
		t.Fatal("open node added a proof")
	}
}

// sign replaces the signature in proof by key's signature of r.
func sign(t *testing.T, key crypto.PrivKey, r blob.Record, proof []byte) []byte {
	rd := reader{b: proof}
	rd.version()
	rd.bytes16(1024, "")
	cert := rd.bytes16(blob.MaxProofLen, "")
	return signWithCert(t, key, r, cert).Proof
}

func signWithCert(t *testing.T, key crypto.PrivKey, r blob.Record, cert []byte) blob.Record {
	r = r.Unproved()
	sig, err := key.Sign(append([]byte(proofDomain), r.Encode()...))
	if err != nil {
		t.Fatal(err)
	}
	r.Proof = appendBytes16(appendBytes16([]byte{version}, sig), cert)
	return r
}
