package member

import (
	"errors"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/namespace"
)

// TestRuleProofs: a worker may remove (or set the TTL of) a prefix within
// its own prefix, a client any; a worker that lies (a prefix wider than
// its own, signed anyway with its real certificate) is refused by every
// checker, and so are a reader's, an unsigned, a future-dated rule, and a
// single name's removal proof replayed as a rule's.
func TestRuleProofs(t *testing.T) {
	k, _ := grid.NewKey()
	worker, wkey, wid := memberOf(t, k, grid.RoleWorker, "job1/w1/")
	client, ckey, cid := memberOf(t, k, grid.RoleClient)
	reader, rkey, rid := memberOf(t, k, grid.RoleReader)
	checker, _, _ := memberOf(t, k, grid.RoleHead, "job1/")
	now := time.Now().UnixNano()
	rule := func(scope, origin string) namespace.Rule {
		return namespace.Rule{Kind: namespace.KindRemove, Scope: scope, Time: now, Origin: origin}
	}
	own, err := worker.ProveRule(wkey, rule("job1/w1/", wid.String()))
	if err != nil {
		t.Fatal(err)
	}
	if err := checker.CheckRule(own); err != nil {
		t.Fatalf("a worker's removal of its own prefix: %v", err)
	}
	sub, err := worker.ProveRule(wkey, rule("job1/w1/part/", wid.String()))
	if err != nil || checker.CheckRule(sub) != nil {
		t.Fatalf("a worker's removal under its prefix: %v", err)
	}
	byC, err := client.ProveRule(ckey, rule("job1/", cid.String()))
	if err != nil || checker.CheckRule(byC) != nil {
		t.Fatalf("a client's removal: %v", err)
	}
	if _, err := worker.ProveRule(wkey, rule("job1/", wid.String())); !errors.Is(err, grid.ErrNotAllowed) {
		t.Fatalf("a worker's daemon proved a removal of a wider prefix: %v", err)
	}
	if _, err := reader.ProveRule(rkey, rule("job1/", rid.String())); !errors.Is(err, grid.ErrNotAllowed) {
		t.Fatalf("a reader proved a removal: %v", err)
	}
	sign := func(key interface{}, r namespace.Rule, cert []byte) namespace.Rule {
		rec := r.Unproved().RuleRecord()
		sig, err := wkey.Sign(append([]byte(ruleProofDomain), rec.Encode()...))
		if key != nil {
			sig, err = rkey.Sign(append([]byte(ruleProofDomain), rec.Encode()...))
		}
		if err != nil {
			t.Fatal(err)
		}
		r.Proof = appendBytes16(appendBytes16([]byte{version}, sig), cert)
		return r
	}
	ahead := rule("job1/w1/", wid.String())
	ahead.Time = time.Now().Add(time.Hour).UnixNano()
	asRemoval := signRemovalWithCert(t, wkey, rule("job1/w1/", wid.String()).RuleRecord(), worker.cert)
	bad := map[string]namespace.Rule{
		"a worker lying (a wider prefix)":  sign(nil, rule("job1/", wid.String()), worker.cert),
		"a worker lying (another's)":       sign(nil, rule("job1/w2/", wid.String()), worker.cert),
		"by a reader":                      sign(rkey, rule("job1/", rid.String()), reader.cert),
		"unsigned":                         rule("job1/w1/", wid.String()),
		"dated in the future":              sign(nil, ahead, worker.cert),
		"a name removal's proof replayed":  {Kind: namespace.KindRemove, Scope: "job1/w1/", Time: now, Origin: wid.String(), Proof: asRemoval.Proof},
		"a TTL made with a removal's sign": {Kind: namespace.KindTTL, Scope: "job1/w1/", Time: now, TTL: time.Hour, Origin: wid.String(), Proof: own.Proof},
	}
	before := checker.Stats().RecordsRejected
	for what, r := range bad {
		if err := checker.CheckRule(r); !errors.Is(err, ErrBadRecord) {
			t.Errorf("%s: %v", what, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	if got := checker.Stats().RecordsRejected - before; got != uint64(len(bad)) {
		t.Fatalf("%d refusals counted, want %d", got, len(bad))
	}
	open, _ := New(Config{}, Material{})
	if err := open.CheckRule(rule("x/", wid.String())); err != nil {
		t.Fatalf("open node: %v", err)
	}
}
