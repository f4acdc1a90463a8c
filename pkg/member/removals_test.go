package member

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
)

// TestRemovalProofs: a removal's proof is accepted from a member that may
// write the name (byClient only for a client), refused from a reader, from
// a worker outside its prefixes, dated in the future or revoked; and a
// removal's proof never passes for a name record's, nor the reverse.
func TestRemovalProofs(t *testing.T) {
	k, _ := grid.NewKey()
	worker, wkey, wid := memberOf(t, k, grid.RoleWorker, "results/a/")
	client, ckey, cid := memberOf(t, k, grid.RoleClient)
	reader, rkey, rid := memberOf(t, k, grid.RoleReader)
	checker, _, _ := memberOf(t, k, grid.RoleHead, "results/")
	now := time.Now().UnixNano()
	removal := func(origin string) blob.Record {
		return blob.Record{Name: "results/a/out", ID: testCID(t, "x"), Size: 10, Time: now, Origin: origin}
	}

	own, err := worker.ProveRemoval(wkey, removal(wid.String()))
	if err != nil {
		t.Fatal(err)
	}
	if byClient, err := checker.CheckRemoval(own); err != nil || byClient {
		t.Fatalf("a worker's removal within its prefix: client %v, %v", byClient, err)
	}
	byC, err := client.ProveRemoval(ckey, removal(cid.String()))
	if err != nil {
		t.Fatal(err)
	}
	if byClient, err := checker.CheckRemoval(byC); err != nil || !byClient {
		t.Fatalf("a client's removal: client %v, %v", byClient, err)
	}

	// A reader may remove nothing: its daemon refuses to prove it, and a
	// removal it signs anyway is refused.
	if _, err := reader.ProveRemoval(rkey, removal(rid.String())); !errors.Is(err, grid.ErrNotAllowed) {
		t.Fatalf("a reader proved a removal: %v", err)
	}
	bad := map[string]blob.Record{
		"by a reader": signRemovalWithCert(t, rkey, removal(rid.String()), reader.cert),
		"outside the remover's prefixes": signRemovalWithCert(t, wkey,
			blob.Record{Name: "results/b/out", ID: testCID(t, "y"), Time: now, Origin: wid.String()}, worker.cert),
		"unsigned": removal(wid.String()),
	}
	ahead := removal(wid.String())
	ahead.Time = time.Now().Add(time.Hour).UnixNano()
	bad["dated in the future"] = signRemovalWithCert(t, wkey, ahead, worker.cert)
	// A name record's proof is no removal's, and a removal's no record's.
	asRecord, err := worker.Prove(wkey, removal(wid.String()))
	if err != nil {
		t.Fatal(err)
	}
	bad["with a name record's proof"] = asRecord
	for what, r := range bad {
		if _, err := checker.CheckRemoval(r); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v", what, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	if err := checker.CheckRecord(own); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("a removal replayed as a name record: %v", err)
	}

	c, _ := worker.Cert()
	l, _ := k.SignRevocations(grid.Revocations{Seq: 1, Serials: []uint64{c.Serial}})
	if _, err := checker.AdoptRevocations(l); err != nil {
		t.Fatal(err)
	}
	if _, err := checker.CheckRemoval(own); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("a revoked remover: %v", err)
	}

	// An open node accepts any removal (no roles: never a client's) and
	// proves nothing.
	open, _ := New(Config{}, Material{})
	if byClient, err := open.CheckRemoval(removal(wid.String())); err != nil || byClient {
		t.Fatalf("open node: client %v, %v", byClient, err)
	}
	if r, _ := open.ProveRemoval(wkey, removal(wid.String())); r.Proof != nil {
		t.Fatal("open node added a proof to a removal")
	}
}

func signRemovalWithCert(t *testing.T, key crypto.PrivKey, r blob.Record, cert []byte) blob.Record {
	t.Helper()
	r = r.Unproved()
	sig, err := key.Sign(append([]byte(removalProofDomain), r.Encode()...))
	if err != nil {
		t.Fatal(err)
	}
	r.Proof = appendBytes16(appendBytes16([]byte{version}, sig), cert)
	return r
}
