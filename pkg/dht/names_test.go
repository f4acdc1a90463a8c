package dht

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	kad "github.com/libp2p/go-libp2p-kad-dht"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/p2ptest"
	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

func newKey(t testing.TB) (crypto.PrivKey, string) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(k)
	return k, id.String()
}

func rec(t testing.TB, name, origin string, at int64) blob.Record {
	return blob.Record{Name: name, ID: blobID(t.(*testing.T), name+origin), Size: 10, Time: at, Origin: origin}
}

func TestSignOpenRecord(t *testing.T) {
	k, origin := newKey(t)
	other, _ := newKey(t)
	r := rec(t, "results/a/1", origin, 42)
	b, err := SignRecord(k, r)
	if err != nil {
		t.Fatal(err)
	}
	got, removed, err := OpenRecord(b)
	if err != nil || !got.Equal(r) || removed {
		t.Fatalf("OpenRecord = %+v, %v; want %+v", got, err, r)
	}
	rm, err := SignRemoval(k, r)
	if err != nil {
		t.Fatal(err)
	}
	if got, removed, err := OpenRecord(rm); err != nil || !got.Equal(r) || !removed {
		t.Fatalf("OpenRecord of a removal = %+v, %v, %v", got, removed, err)
	}
	// A removal's signature does not pass for a name's, nor the reverse.
	asName := append([]byte(nameMagic), rm[len(removeMagic):]...)
	if _, _, err := OpenRecord(asName); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a removal relabelled as a name: %v, want ErrBadSignature", err)
	}
	if _, err := SignRecord(other, r); err == nil {
		t.Fatal("signed a record with a key that is not its origin's")
	}
	// A record signed by another key, origin rewritten: the signature does not match.
	forged := r
	forged.Origin = origin
	_, otherOrigin := newKey(t)
	forged2 := forged
	forged2.Origin = otherOrigin
	fb, err := SignRecord(k, forged)
	if err != nil {
		t.Fatal(err)
	}
	// Swap in a record claiming another origin, keep the signature.
	tampered := bytes.Replace(fb, r.Encode(), forged2.Encode(), 1)
	if _, _, err := OpenRecord(tampered); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a record with another origin than its signer: %v, want ErrBadSignature", err)
	}
	flip := bytes.Clone(b)
	flip[len(flip)-1] ^= 1
	if _, _, err := OpenRecord(flip); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a flipped signature bit: %v, want ErrBadSignature", err)
	}
	for name, v := range map[string][]byte{
		"empty":          nil,
		"no magic":       b[4:],
		"trailing bytes": append(bytes.Clone(b), 0),
		"truncated":      b[:len(b)-3],
	} {
		if _, _, err := OpenRecord(v); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: OpenRecord = %v, want malformed", name, err)
		}
	}
}

func TestNameValidatorSelectsNewestValid(t *testing.T) {
	var v nameValidator
	v.rejected = new(atomic.Uint64)
	kA, a := newKey(t)
	kB, b := newKey(t)
	old, _ := SignRecord(kA, rec(t, "n", a, 1))
	newer, _ := SignRecord(kB, rec(t, "n", b, 2))
	forgedRec := rec(t, "n", a, 3) // claims origin a, signed by b's key below
	fb, _ := SignRecord(kB, blob.Record{Name: "n", ID: forgedRec.ID, Size: 1, Time: 3, Origin: b})
	forged := bytes.Replace(fb, blob.Record{Name: "n", ID: forgedRec.ID, Size: 1, Time: 3, Origin: b}.Encode(),
		blob.Record{Name: "n", ID: forgedRec.ID, Size: 1, Time: 3, Origin: a}.Encode(), 1)
	otherName, _ := SignRecord(kA, rec(t, "m", a, 9))
	i, err := v.Select(NameKey("n"), [][]byte{old, forged, otherName, newer})
	if err != nil || i != 3 {
		t.Fatalf("Select = %d, %v; want 3 (the newest valid record)", i, err)
	}
	if err := v.Validate(NameKey("n"), otherName); err == nil {
		t.Fatal("a record of another name validated under n's key")
	}
	if err := v.Validate("/pk/x", old); err == nil {
		t.Fatal("a value under another namespace validated")
	}
	if _, err := v.Select(NameKey("n"), [][]byte{forged}); err == nil {
		t.Fatal("Select chose among invalid records only")
	}
	if v.rejected.Load() < 4 {
		t.Fatalf("rejected %d, want every invalid value counted", v.rejected.Load())
	}
}

// Names put by two nodes are found from a third; the newest wins; a forged
// record pushed by a node with a permissive validator is rejected by every
// honest node, counted, and never returned.
func TestNamesAcrossTheDHT(t *testing.T) {
	hosts, dhts := chain(t, 4, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r1 := blob.Record{Name: "results/x", ID: blobID(t, "x1"), Size: 1, Time: 100, Origin: hosts[0].ID().String()}
	if err := dhts[0].PutName(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if got, err := dhts[3].Name(ctx, "results/x"); err != nil || !got.Equal(r1) {
		t.Fatalf("Name from the far end = %+v, %v; want %+v", got, err, r1)
	}
	r2 := blob.Record{Name: "results/x", ID: blobID(t, "x2"), Size: 2, Time: 200, Origin: hosts[1].ID().String()}
	if err := dhts[1].PutName(ctx, r2); err != nil {
		t.Fatal(err)
	}
	if got, err := dhts[3].Name(ctx, "results/x"); err != nil || !got.Equal(r2) {
		t.Fatalf("after a newer put: %+v, %v; want %+v", got, err, r2)
	}
	if err := dhts[0].PutName(ctx, blob.Record{Name: "y", ID: r1.ID, Origin: hosts[1].ID().String()}); err == nil {
		t.Fatal("PutName signed a record whose origin is another node")
	}
	if _, err := dhts[2].Name(ctx, "no/such/name"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("a missing name: %v, want ErrNotFound", err)
	}
	// Removed by its origin: missing; put again later: back.
	r3 := blob.Record{Name: "tmp/y", ID: blobID(t, "y"), Size: 1, Time: 100, Origin: hosts[2].ID().String()}
	if err := dhts[2].PutName(ctx, r3); err != nil {
		t.Fatal(err)
	}
	gone := r3
	gone.Time = 150
	if err := dhts[2].RemoveName(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := dhts[0].Name(ctx, "tmp/y"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("a removed name: %v, want ErrNotFound", err)
	}
	r3.Time = 200
	if err := dhts[2].PutName(ctx, r3); err != nil {
		t.Fatal(err)
	}
	if got, err := dhts[0].Name(ctx, "tmp/y"); err != nil || !got.Equal(r3) {
		t.Fatalf("put again after its removal: %+v, %v", got, err)
	}

	// The attacker claims results/x for itself in origin 0's name, newest.
	evil := p2ptest.NewHost(t)
	ek, err := kad.New(evil, kad.Mode(kad.ModeServer), kad.ProtocolPrefix(Prefix),
		kad.BootstrapPeers(info(hosts[3])),
		kad.Validator(record.NamespacedValidator{NameNamespace: acceptAll{}}))
	if err != nil {
		t.Fatal(err)
	}
	defer ek.Close()
	for ek.RoutingTable().Size() == 0 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	sk := evil.Peerstore().PrivKey(evil.ID())
	lie := blob.Record{Name: "results/x", ID: blobID(t, "evil"), Size: 3, Time: 300, Origin: evil.ID().String()}
	signed, err := SignRecord(sk, lie)
	if err != nil {
		t.Fatal(err)
	}
	claimed := lie
	claimed.Origin = hosts[0].ID().String()
	forged := bytes.Replace(signed, lie.Encode(), claimed.Encode(), 1)
	before := uint64(0)
	for _, d := range dhts {
		before += d.RecordsRejected()
	}
	_ = ek.PutValue(ctx, NameKey("results/x"), forged) // honest nodes refuse it
	after := uint64(0)
	for _, d := range dhts {
		after += d.RecordsRejected()
	}
	if after <= before {
		t.Fatalf("no honest node counted the forged record (rejected %d -> %d)", before, after)
	}
	for i, d := range dhts {
		if got, err := d.Name(ctx, "results/x"); err != nil || !got.Equal(r2) {
			t.Fatalf("node %d after the forgery: %+v, %v; want %+v", i, got, err, r2)
		}
	}
}

// acceptAll is the attacker's validator: anything goes.
type acceptAll struct{}

func (acceptAll) Validate(string, []byte) error        { return nil }
func (acceptAll) Select(string, [][]byte) (int, error) { return 0, nil }

// The validator applies Config.CheckRecord to records (a closed grid's
// proof check), Config.CheckRemoval to removals, and counts its refusals.
func TestNameValidatorCheck(t *testing.T) {
	v := nameValidator{rejected: new(atomic.Uint64), check: func(r blob.Record) error {
		if r.Proof == nil {
			return errors.New("unsigned")
		}
		return nil
	}}
	k, a := newKey(t)
	plain, _ := SignRecord(k, rec(t, "n", a, 1))
	if err := v.Validate(NameKey("n"), plain); err == nil || v.rejected.Load() != 1 {
		t.Fatalf("a record the check refuses: %v (rejected %d)", err, v.rejected.Load())
	}
	proved := rec(t, "n", a, 2)
	proved.Proof = []byte{1}
	pb, _ := SignRecord(k, proved)
	if err := v.Validate(NameKey("n"), pb); err != nil {
		t.Fatalf("a record the check accepts: %v", err)
	}
	rm, _ := SignRemoval(k, rec(t, "n", a, 3))
	if err := v.Validate(NameKey("n"), rm); err != nil {
		t.Fatalf("a removal signed by its origin, no removal check: %v", err)
	}
	v.checkRemoval = func(r blob.Record) (bool, error) { return false, errors.New("no removals here") }
	if err := v.Validate(NameKey("n"), rm); err == nil || v.rejected.Load() != 2 {
		t.Fatalf("a removal the removal check refuses: %v (rejected %d)", err, v.rejected.Load())
	}
}
