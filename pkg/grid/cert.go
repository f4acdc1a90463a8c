package grid

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Cert says that a peer is a member of a grid.
type Cert struct {
	Grid     ID
	Peer     peer.ID
	Role     Role
	Prefixes []string // the name prefixes it may write (a client: none needed)
	// NotBefore and NotAfter bound its validity, Unix seconds.
	NotBefore, NotAfter int64
	Serial              uint64
}

const certDomain = "omst grid cert v1\x00"

// Issue signs c with k (c.Grid is set to k's grid).
func (k Key) Issue(c Cert) ([]byte, error) {
	c.Grid = k.ID()
	b, err := c.encodeBody()
	if err != nil {
		return nil, err
	}
	return appendSig(b, ed25519.Sign(k.Private, append([]byte(certDomain), b...))), nil
}

// Validate checks c's fields as Issue does (a valid role, a peer ID of 1
// to MaxPeerIDLen bytes, an end after the start, valid prefixes), without
// signing.
func (c Cert) Validate() error {
	_, err := c.encodeBody()
	return err
}

func (c Cert) encodeBody() ([]byte, error) {
	switch {
	case !c.Role.valid():
		return nil, fmt.Errorf("certificate: invalid role %d", c.Role)
	case len(c.Peer) == 0 || len(c.Peer) > MaxPeerIDLen:
		return nil, fmt.Errorf("certificate: peer ID of %d bytes", len(c.Peer))
	case c.NotAfter <= c.NotBefore:
		return nil, fmt.Errorf("certificate: ends (%d) before it begins (%d)", c.NotAfter, c.NotBefore)
	}
	if err := checkPrefixes(c.Prefixes); err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	var w writer
	w.u8(1)
	w.raw(c.Grid[:])
	w.str([]byte(c.Peer))
	w.u8(byte(c.Role))
	w.strs(c.Prefixes)
	w.i64(c.NotBefore)
	w.i64(c.NotAfter)
	w.u64(c.Serial)
	return w.b, nil
}

// DecodeCert parses a certificate and checks its signature with the grid
// public key pub: ErrOtherGrid if it names another grid, ErrBadSignature if
// the signature does not verify; anything malformed is an error too. It
// does not check the time or revocation (Check does).
func DecodeCert(b []byte, pub ed25519.PublicKey) (Cert, error) {
	body, sig, err := splitSig(b, "certificate")
	if err != nil {
		return Cert{}, err
	}
	r := reader{b: body}
	var c Cert
	if v := r.u8(); r.err == nil && v != 1 {
		return Cert{}, fmt.Errorf("certificate: version %d, want 1", v)
	}
	copy(c.Grid[:], r.raw(IDLen))
	c.Peer = peer.ID(r.str(MaxPeerIDLen))
	c.Role = Role(r.u8())
	c.Prefixes = r.strs(MaxPrefixes, MaxPrefixLen)
	c.NotBefore = r.i64()
	c.NotAfter = r.i64()
	c.Serial = r.u64()
	if err := r.done("certificate"); err != nil {
		return Cert{}, err
	}
	if _, err := c.encodeBody(); err != nil { // the same checks as at issue
		return Cert{}, err
	}
	if c.Grid != IDOf(pub) {
		return Cert{}, fmt.Errorf("certificate of %s: %w (%s, this grid is %s)", c.Peer, ErrOtherGrid, c.Grid, IDOf(pub))
	}
	if !ed25519.Verify(pub, append([]byte(certDomain), body...), sig) {
		return Cert{}, fmt.Errorf("certificate of %s: %w", c.Peer, ErrBadSignature)
	}
	return c, nil
}

// Check reports whether c admits peer p at now, given the revoked serials
// (nil: none): the right peer, within its validity, not revoked.
func (c Cert) Check(p peer.ID, now time.Time, revoked *Revocations) error {
	if c.Peer != p {
		return fmt.Errorf("certificate of %s shown by %s: %w", c.Peer, p, ErrNotAllowed)
	}
	if err := within(now, c.NotBefore, c.NotAfter, "certificate of "+c.Peer.String()); err != nil {
		return err
	}
	if revoked != nil && revoked.Has(c.Serial) {
		return fmt.Errorf("certificate %d of %s: %w", c.Serial, c.Peer, ErrRevoked)
	}
	return nil
}

// ErrTooEarly is returned (wrapped) for the renewal of a certificate not
// yet half through its life.
var ErrTooEarly = errors.New("too early to renew")

// RenewableFrom returns when c may be renewed: half through its life. A
// member renews at two thirds (pkg/member.RenewDue); a request before half
// is refused, so that a certificate yields at most one renewal per half
// life.
func (c Cert) RenewableFrom() time.Time {
	return time.Unix(c.NotBefore+(c.NotAfter-c.NotBefore)/2, 0)
}

// Renewable reports whether c may be renewed at now: an error wrapping
// ErrTooEarly before RenewableFrom. It does not check the validity or the
// revocation (Check does).
func (c Cert) Renewable(now time.Time) error {
	if from := c.RenewableFrom(); now.Before(from) {
		return fmt.Errorf("certificate %d of %s: %w, renewable from half its life on (%s)", c.Serial, c.Peer, ErrTooEarly,
			from.UTC().Format(time.RFC3339))
	}
	return nil
}

// MayWrite reports whether c's holder may put name: a client anywhere; a
// head or a worker under one of its prefixes (plain string prefixes); a
// reader nowhere. The error names the role and the prefixes.
func (c Cert) MayWrite(name string) error {
	switch c.Role {
	case RoleClient:
		return nil
	case RoleReader:
		return fmt.Errorf("put %q: role reader: %w to write", name, ErrNotAllowed)
	}
	if slices.ContainsFunc(c.Prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
		return nil
	}
	if len(c.Prefixes) == 0 {
		return fmt.Errorf("put %q: role %s with no prefix: %w to write", name, c.Role, ErrNotAllowed)
	}
	return fmt.Errorf("put %q: role %s may write only under %s: %w", name, c.Role, quoteAll(c.Prefixes), ErrNotAllowed)
}

func quoteAll(ps []string) string {
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = fmt.Sprintf("%q", p)
	}
	return strings.Join(q, ", ")
}
