package member

import (
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/omst-project/omst/pkg/namespace"
)

// A namespace rule (pkg/namespace: a prefix removed everywhere, a TTL)
// carries, in a closed grid, a proof of the same format as a name
// record's, signed over ruleProofDomain and the rule's RuleRecord: it
// never passes for a record's or a single name's removal, nor they for
// it. Making a rule is writing every name of its scope: a client may make
// any, a head or worker only for a scope within one of its prefixes (a
// prefix scope "job1/" needs a prefix that "job1/" starts with), a reader
// none.
const ruleProofDomain = "omst namespace rule proof v1\x00"

// ProveRule returns r, made by this node (r.Origin is this node, key its
// key), with its proof; r unchanged when the grid is open. It fails,
// wrapping grid.ErrNotAllowed and naming the role and prefixes, when this
// node's certificate does not allow writing every name of r's scope.
func (a *Admission) ProveRule(key crypto.PrivKey, r namespace.Rule) (namespace.Rule, error) {
	cert, open, err := a.writerCert(r.Kind.String(), r.Scope)
	if open || err != nil {
		return r, err
	}
	rec, err := prove(key, r.Unproved().RuleRecord(), ruleProofDomain, cert)
	if err != nil {
		return r, err
	}
	r.Proof = rec.Proof
	return r, nil
}

// CheckRule accepts r if the grid is open or its proof holds: the
// origin's signature over the rule, its certificate of this grid, valid at
// the rule's time and not revoked, the rule not dated after now (beyond
// the skew), and the certificate allowing every name of the scope; else
// it returns an error wrapping ErrBadRecord and counts it.
func (a *Admission) CheckRule(r namespace.Rule) error {
	pub, revs := a.verifier()
	if pub == nil {
		return nil
	}
	c, err := provenCert(r.RuleRecord(), ruleProofDomain, pub, revs, a.cfg.Now())
	if err == nil {
		err = c.MayWrite(r.Scope)
	}
	if err != nil {
		a.count(func(s *Stats) { s.RecordsRejected++ })
		return fmt.Errorf("%w: %s of %q by %s: %w", ErrBadRecord, r.Kind, r.Scope, r.Origin, err)
	}
	return nil
}
