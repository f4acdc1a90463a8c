package member

import (
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
)

// A record's proof (blob.Record.Proof) in a closed grid:
//
//	version u8 (1) | signature u16-len | certificate u16-len
//
// The signature is the origin's libp2p key's, over proofDomain followed by
// r.Unproved().Encode(); the certificate is the origin's. A record is
// accepted if the signature verifies with the key in its Origin peer ID,
// the certificate is this grid's, for that origin, valid at the record's
// time and not revoked, and allows writing its name. So no relay can
// forge a name or point it at other bytes: it would need the origin's key.
const proofDomain = "omst name proof v1\x00"

// ErrBadRecord wraps every refused name record.
var ErrBadRecord = errors.New("name record refused")

// Prove returns r with its proof, signed by key (this node's, r's origin),
// with this node's certificate; r unchanged when the grid is open. It
// fails, naming the role and prefixes, when the certificate does not allow
// writing r's name.
func (a *Admission) Prove(key crypto.PrivKey, r blob.Record) (blob.Record, error) {
	cert, open, err := a.writerCert("put", r.Name)
	if open || err != nil {
		return r, err
	}
	return prove(key, r, proofDomain, cert)
}

// writerCert is the preamble of every proof this node signs: a snapshot
// of its admission for writing target (a name, or a rule's scope). open
// reports an open grid, where nothing is proved; otherwise cert is this
// node's certificate, which allows writing target, or err says why not,
// naming op ("put", "remove", a rule's kind) and target and wrapping
// grid.ErrNotAllowed.
func (a *Admission) writerCert(op, target string) (cert []byte, open bool, err error) {
	a.mu.Lock()
	open, cert, self := a.pub == nil, a.cert, a.self
	a.mu.Unlock()
	switch {
	case open:
		return nil, true, nil
	case cert == nil:
		return nil, false, fmt.Errorf("%s %q: this node has no membership certificate yet: %w", op, target, grid.ErrNotAllowed)
	}
	if err := self.MayWrite(target); err != nil {
		if op != "put" { // MayWrite's error already says put
			err = fmt.Errorf("%s %q: %w", op, target, err)
		}
		return nil, false, err
	}
	return cert, false, nil
}

// verifier is the snapshot a check of another node's proof needs: the
// grid's public key (nil: the grid is open) and its revocations.
func (a *Admission) verifier() (pub []byte, revs *grid.Revocations) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pub, a.revs
}

// prove returns r with a proof over domain: key's signature and cert.
func prove(key crypto.PrivKey, r blob.Record, domain string, cert []byte) (blob.Record, error) {
	r = r.Unproved()
	sig, err := key.Sign(append([]byte(domain), r.Encode()...))
	if err != nil {
		return r, fmt.Errorf("sign record %q: %w", r.Name, err)
	}
	b := []byte{version}
	b = appendBytes16(b, sig)
	r.Proof = appendBytes16(b, cert)
	if len(r.Proof) > blob.MaxProofLen {
		return blob.Record{}, fmt.Errorf("record %q: proof of %d bytes", r.Name, len(r.Proof))
	}
	return r, nil
}

// MayWrite reports whether this node's certificate lets it put name (nil
// when the grid is open); the error names the role and prefixes.
func (a *Admission) MayWrite(name string) error {
	a.mu.Lock()
	open, cert, self := a.pub == nil, a.cert, a.self
	a.mu.Unlock()
	switch {
	case open:
		return nil
	case cert == nil:
		return fmt.Errorf("put %q: this node has no membership certificate yet: %w", name, grid.ErrNotAllowed)
	}
	return self.MayWrite(name)
}

// CheckRecord accepts r if the grid is open or its proof holds (see the
// format above); else it returns an error wrapping ErrBadRecord and
// counts it.
func (a *Admission) CheckRecord(r blob.Record) error {
	a.mu.Lock()
	pub, revs := a.pub, a.revs
	a.mu.Unlock()
	if pub == nil {
		return nil
	}
	err := checkProof(r, pub, revs, a.cfg.Now())
	if err != nil {
		a.count(func(s *Stats) { s.RecordsRejected++ })
		return fmt.Errorf("%w: %q from %s: %w", ErrBadRecord, r.Name, r.Origin, err)
	}
	return nil
}

// checkProof is CheckRecord's decision, plain code.
func checkProof(r blob.Record, pub []byte, revs *grid.Revocations, now time.Time) error {
	c, err := provenCert(r, proofDomain, pub, revs, now)
	if err != nil {
		return err
	}
	return c.MayWrite(r.Name)
}

// provenCert checks r's proof, made over domain: the origin's signature,
// and its certificate, of this grid (pub), for that origin, valid at r's
// time and not revoked (revs); r not dated after now (beyond the skew).
// It returns the certificate; what it allows is the caller's to check.
func provenCert(r blob.Record, domain string, pub []byte, revs *grid.Revocations, now time.Time) (grid.Cert, error) {
	if len(r.Proof) == 0 {
		return grid.Cert{}, errors.New("unsigned (this grid requires its origin's signature and certificate)")
	}
	rd := reader{b: r.Proof}
	rd.version()
	sig := rd.bytes16(1024, "signature")
	cert := rd.bytes16(blob.MaxProofLen, "certificate")
	if err := rd.done("proof"); err != nil {
		return grid.Cert{}, err
	}
	origin, err := peer.Decode(r.Origin)
	if err != nil {
		return grid.Cert{}, wire.Malformed("origin %q: %v", r.Origin, err)
	}
	key, err := origin.ExtractPublicKey()
	if err != nil {
		return grid.Cert{}, fmt.Errorf("origin %s: no public key in its ID: %w", origin, err)
	}
	ok, err := key.Verify(append([]byte(domain), r.Unproved().Encode()...), sig)
	if err != nil || !ok {
		return grid.Cert{}, errors.New("not signed by its origin")
	}
	c, err := grid.DecodeCert(cert, pub)
	if err != nil {
		return grid.Cert{}, err
	}
	if r.When().After(now.Add(grid.ClockSkew)) {
		return grid.Cert{}, fmt.Errorf("dated %s, in the future", r.When().UTC().Format(time.RFC3339))
	}
	if err := c.Check(origin, r.When(), revs); err != nil {
		return grid.Cert{}, err
	}
	return c, nil
}
