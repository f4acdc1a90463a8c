package member

import (
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
)

// A removal of a name from the DHT (pkg/dht, "OSD1") carries, in a closed
// grid, a proof in its record's Proof, in the same format as a name
// record's (version | signature | certificate) but signed over
// removalProofDomain: a removal's proof never passes for a name record's,
// so that nobody can replay a removal, read from the DHT, as a put of the
// name it removes (and the reverse). The record is the removal's: the
// name, the blob ID and size of the record removed, the removal's time,
// and the remover as Origin, whose certificate the proof carries.
const removalProofDomain = "omst name removal proof v1\x00"

// ProveRemoval returns r, the removal of r.Name by this node (r.Origin is
// this node, key its key, r.Time when it was removed), with its proof; r
// unchanged when the grid is open. It fails, naming the role and
// prefixes, when this node's certificate does not allow writing the name
// (removing a name is writing it).
func (a *Admission) ProveRemoval(key crypto.PrivKey, r blob.Record) (blob.Record, error) {
	cert, open, err := a.writerCert("remove", r.Name)
	if open || err != nil {
		return r, err
	}
	return prove(key, r, removalProofDomain, cert)
}

// CheckRemoval accepts r, a removal, if the grid is open (byClient false:
// an open grid has no roles) or its proof holds (checkRemovalProof); else
// it returns an error wrapping ErrBadRecord and counts it. byClient
// reports whether the remover's certificate has the client role, which
// lets its removal withdraw a record of another origin (pkg/dht).
func (a *Admission) CheckRemoval(r blob.Record) (byClient bool, err error) {
	pub, revs := a.verifier()
	if pub == nil {
		return false, nil
	}
	byClient, err = checkRemovalProof(r, pub, revs, a.cfg.Now())
	if err != nil {
		a.count(func(s *Stats) { s.RecordsRejected++ })
		return false, fmt.Errorf("%w: removal of %q by %s: %w", ErrBadRecord, r.Name, r.Origin, err)
	}
	return byClient, nil
}

// checkRemovalProof is CheckRemoval's decision, plain code: the proof
// (over removalProofDomain) verifies with the remover's key, its
// certificate is this grid's, for the remover, valid at the removal's
// time and not revoked, the removal is not dated after now (beyond the
// skew), and the certificate allows writing the name (a client anywhere,
// a head or worker under its prefixes, a reader nowhere). It reports
// whether the remover is a client.
func checkRemovalProof(r blob.Record, pub []byte, revs *grid.Revocations, now time.Time) (bool, error) {
	c, err := provenCert(r, removalProofDomain, pub, revs, now)
	if err != nil {
		return false, err
	}
	if err := c.MayWrite(r.Name); err != nil {
		return false, err
	}
	return c.Role == grid.RoleClient, nil
}
