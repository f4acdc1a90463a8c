package gridstore

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/grid"
)

// Key reads the grid key (grid.key). ErrNoKey (wrapped) if there is none:
// this node is not the grid's root.
func (d Dir) Key() (grid.Key, error) {
	b, ok, err := d.read(keyFile, maxSmallFile)
	if err != nil {
		return grid.Key{}, err
	}
	if !ok {
		return grid.Key{}, fmt.Errorf("%s: %w", d.file(keyFile), ErrNoKey)
	}
	k, err := grid.KeyFromSeed(b)
	if err != nil {
		return grid.Key{}, fmt.Errorf("%s: %w", d.file(keyFile), err)
	}
	return k, nil
}

// checkCertTTL checks a certificate lifetime (the bounds of a token's).
func checkCertTTL(d time.Duration) error {
	if d < grid.MinTokenTTL || d > grid.MaxTokenTTL {
		return fmt.Errorf("a certificate lifetime of %v, outside %v .. %v", d, grid.MinTokenTTL, grid.MaxTokenTTL)
	}
	return nil
}

func checkPeer(p peer.ID) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("peer ID: %w", err)
	}
	if len(p) > grid.MaxPeerIDLen {
		return fmt.Errorf("peer ID of %d bytes, more than %d", len(p), grid.MaxPeerIDLen)
	}
	return nil
}

// Init makes this node the root of a grid. It makes the grid key
// (grid.key, 0600) if there is none (an existing key is kept: Init is
// idempotent and returns the same ID), writes grid.pub, and gives self,
// the root's peer, its own certificate in member.cert: role client, no
// prefixes, valid certTTL from now, recorded in the ledger. A valid
// certificate of self already there is kept; an expired, revoked or
// missing one is issued anew (so running Init again brings back a root
// whose certificate lapsed). It refuses on a node that is a member of a
// grid without its key. created says whether the key was made now.
func (d Dir) Init(self peer.ID, now time.Time, certTTL time.Duration) (id grid.ID, created bool, err error) {
	if err := checkPeer(self); err != nil {
		return grid.ID{}, false, fmt.Errorf("grid init: %w", err)
	}
	if err := checkCertTTL(certTTL); err != nil {
		return grid.ID{}, false, fmt.Errorf("grid init: %w", err)
	}
	unlock, err := d.lock()
	if err != nil {
		return grid.ID{}, false, err
	}
	defer unlock()
	pub, hasPub, err := d.readPub()
	if err != nil {
		return grid.ID{}, false, err
	}
	k, err := d.Key()
	switch {
	case errors.Is(err, ErrNoKey):
		if hasPub {
			return grid.ID{}, false, fmt.Errorf("grid init: this node is a member of %s (%s) without its key: it cannot be a grid's root too (remove %s to leave that grid first)",
				grid.IDOf(pub), d.file(pubFile), d.path)
		}
		if k, err = grid.NewKey(); err != nil {
			return grid.ID{}, false, err
		}
		if err := d.write(keyFile, k.Private.Seed(), 0o600); err != nil {
			return grid.ID{}, false, err
		}
		created = true
	case err != nil:
		return grid.ID{}, false, err
	}
	switch {
	case !hasPub:
		if err := d.write(pubFile, k.Public(), 0o600); err != nil {
			return grid.ID{}, false, err
		}
	case !pub.Equal(k.Public()):
		return grid.ID{}, false, fmt.Errorf("grid init: %s holds the key of %s, but %s the key of %s", d.file(pubFile), grid.IDOf(pub), d.file(keyFile), k.ID())
	}
	err = d.updateLocked(k, now, func(l *ledger) error {
		if b, ok, err := d.read(certFile, maxSmallFile); err != nil {
			return err
		} else if ok {
			c, err := grid.DecodeCert(b, k.Public())
			if err == nil && c.Check(self, now, nil) == nil {
				if e := l.serial(c.Serial); e == nil || (!e.Revoked && e.Peer == self.String()) {
					return nil // still good
				}
			}
		}
		b, err := l.issue(k, grid.Cert{Peer: self, Role: grid.RoleClient, NotBefore: now.Unix(), NotAfter: now.Add(certTTL).Unix()}, HowInit)
		if err != nil {
			return fmt.Errorf("grid init: %w", err)
		}
		return d.write(certFile, b, 0o600)
	})
	if err != nil {
		return grid.ID{}, false, err
	}
	return k.ID(), created, nil
}

// update runs fn on the ledger of k's grid under the lock, pruned at now,
// and saves it if fn succeeds (nothing is saved if it fails, or returns
// errUnchanged: then update returns nil).
func (d Dir) update(k grid.Key, now time.Time, fn func(l *ledger) error) error {
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	return d.updateLocked(k, now, fn)
}

func (d Dir) updateLocked(k grid.Key, now time.Time, fn func(l *ledger) error) error {
	l, err := d.loadLedger(k)
	if err != nil {
		return err
	}
	l.prune(now)
	if err := fn(l); errors.Is(err, errUnchanged) {
		return nil
	} else if err != nil {
		return err
	}
	return d.saveLedger(l)
}

// errUnchanged, from an update's fn, says that it changed nothing worth
// writing.
var errUnchanged = errors.New("ledger unchanged")

// NewToken makes a join token of this grid (it needs the key: ErrNoKey
// otherwise) for role and prefixes, redeemable within ttl from now, whose
// certificates live certTTL; it returns the token's text form. Both
// durations are within grid.MinTokenTTL .. grid.MaxTokenTTL. Nothing is
// recorded: the token's nonce is, once redeemed.
func (d Dir) NewToken(role grid.Role, prefixes []string, ttl, certTTL time.Duration, now time.Time) (string, error) {
	k, err := d.Key()
	if err != nil {
		return "", err
	}
	t, err := k.NewToken(role, prefixes, now, ttl, certTTL)
	if err != nil {
		return "", err
	}
	return k.Sign(t)
}

// Admit issues a certificate for p offline (omst grid admit): role and
// prefixes, valid certTTL from now, recorded in the ledger. It returns the
// certificate's text form (grid.EncodeCertText), which p's node starts
// with instead of a token. It needs the key (ErrNoKey otherwise). A
// revoked peer admitted again is a member again.
func (d Dir) Admit(p peer.ID, role grid.Role, prefixes []string, certTTL time.Duration, now time.Time) (string, error) {
	if err := checkPeer(p); err != nil {
		return "", fmt.Errorf("admit: %w", err)
	}
	if err := checkCertTTL(certTTL); err != nil {
		return "", fmt.Errorf("admit: %w", err)
	}
	k, err := d.Key()
	if err != nil {
		return "", err
	}
	var cert []byte
	err = d.update(k, now, func(l *ledger) error {
		var err error
		cert, err = l.issue(k, grid.Cert{Peer: p, Role: role, Prefixes: prefixes, NotBefore: now.Unix(), NotAfter: now.Add(certTTL).Unix()}, HowAdmit)
		if err != nil {
			return fmt.Errorf("admit %s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return grid.EncodeCertText(k.Public(), cert), nil
}

// Redeem is the root's side of a join: it checks token (its text form)
// for peer p at now — signed by this grid's key, not expired
// (grid.Token.Redeemable: errors wrap grid.ErrOtherGrid, grid.ErrExpired),
// its nonce never redeemed before (ErrRedeemed), p not a revoked member
// (grid.ErrRevoked) — and issues the token's certificate for p
// (grid.Token.CertFor) under the next serial. The nonce and the
// certificate are recorded durably before the certificate is returned, so
// that a token is redeemed at most once, across processes too. It needs
// the key (ErrNoKey otherwise).
func (d Dir) Redeem(token string, p peer.ID, now time.Time) (cert []byte, err error) {
	if err := checkPeer(p); err != nil {
		return nil, fmt.Errorf("redeem: %w", err)
	}
	t, err := grid.ParseToken(token)
	if err != nil {
		return nil, err
	}
	k, err := d.Key()
	if err != nil {
		return nil, err
	}
	if err := t.Redeemable(k.Public(), now); err != nil {
		return nil, err
	}
	nonce := hex.EncodeToString(t.Nonce[:])
	err = d.update(k, now, func(l *ledger) error {
		if _, ok := l.Redeemed[nonce]; ok {
			return fmt.Errorf("%w (nonce %s…): a token admits one node once; make another with omst grid token", ErrRedeemed, nonce[:8])
		}
		if e := l.newest(p); e != nil && e.Revoked {
			return fmt.Errorf("redeem: peer %s was %w from %s", p, grid.ErrRevoked, k.ID())
		}
		if len(l.Redeemed) >= maxRedeemed {
			return fmt.Errorf("redeem: %w: %d unexpired tokens redeemed", errFull, len(l.Redeemed))
		}
		var err error
		if cert, err = l.issue(k, t.CertFor(p.String(), now, 0), HowToken); err != nil {
			return fmt.Errorf("redeem for %s: %w", p, err)
		}
		l.Redeemed[nonce] = t.NotAfter
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cert, nil
}

// Renew renews cert, p's still valid certificate of this grid, at now.
// Only a peer's newest certificate is renewed, once, and not before half
// its life (grid.Cert.Renewable): the renewal is issued from the ledger's
// record of that certificate (its role, prefixes and lifetime, from now),
// under a new serial, and recorded. So a flood of renewal requests adds
// at most one certificate per member and half life, and a member whose
// role was changed by a later Admit cannot renew its old role.
//
// A request for a certificate that was renewed already, whose renewal is
// still the peer's newest, gets that renewal again (the same bytes,
// nothing written): the first answer may have been lost on its way, and
// any member may forward a renewal for another's (public) certificate, so
// refusing it would let a member make another's renewal fail.
//
// It refuses, each with an error wrapping the sentinel: a certificate of
// another peer than p (grid.ErrNotAllowed), one past NotAfter +
// grid.ClockSkew (grid.ErrExpired), before half its life
// (grid.ErrTooEarly), a revoked one or one of a revoked peer
// (grid.ErrRevoked), and one that is not p's newest (ErrNotNewest). A
// certificate the ledger does not know, newer than every one it records
// for p (a ledger lost or restored from an old copy), is renewed from the
// certificate itself. Nothing is written when it refuses. It needs the
// key (ErrNoKey otherwise).
func (d Dir) Renew(cert []byte, p peer.ID, now time.Time) ([]byte, error) {
	k, err := d.Key()
	if err != nil {
		return nil, err
	}
	c, err := grid.DecodeCert(cert, k.Public())
	if err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	if err := c.Check(p, now, nil); err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	var nb []byte
	err = d.update(k, now, func(l *ledger) error {
		newest := l.newest(p)
		if newest != nil && newest.Revoked {
			return fmt.Errorf("renew: peer %s was %w from %s", p, grid.ErrRevoked, k.ID())
		}
		if e := l.serial(c.Serial); e != nil {
			if e.Peer != p.String() {
				return fmt.Errorf("renew: %s records serial %d as issued to %s, not %s", d.file(ledgerFile), c.Serial, e.Peer, p)
			}
			if e.Revoked {
				return fmt.Errorf("renew: certificate %d of %s: %w", c.Serial, p, grid.ErrRevoked)
			}
		}
		revs, err := d.storedRevocations(k.Public())
		if err != nil {
			return err
		}
		if revs.Has(c.Serial) {
			return fmt.Errorf("renew: certificate %d of %s: %w", c.Serial, p, grid.ErrRevoked)
		}
		base := c // the ledger does not know c, nor anything newer of p
		switch {
		case newest == nil || c.Serial > newest.Serial:
		case newest.Serial == c.Serial:
			base = newest.cert()
		case newest.How == HowRenew && newest.From == c.Serial:
			// Renewed already: the same certificate again.
			if nb, err = k.Issue(newest.cert()); err != nil {
				return err
			}
			return errUnchanged
		default:
			if e := l.renewalOf(c.Serial); e != nil {
				return fmt.Errorf("renew: certificate %d of %s was renewed already, as serial %d, and that one since (the peer's newest is %d): %w",
					c.Serial, p, e.Serial, newest.Serial, ErrNotNewest)
			}
			return fmt.Errorf("renew: certificate %d of %s: %w: serial %d (%s, %s) replaced it; start the node with that one (omst grid admit prints it)",
				c.Serial, p, ErrNotNewest, newest.Serial, newest.How, time.Unix(newest.NotBefore, 0).UTC().Format(time.RFC3339))
		}
		if err := base.Renewable(now); err != nil {
			return fmt.Errorf("renew: %w", err)
		}
		nc := grid.Cert{Peer: p, Role: base.Role, Prefixes: base.Prefixes, NotBefore: now.Unix(), NotAfter: now.Unix() + (base.NotAfter - base.NotBefore)}
		if nb, err = l.issueFrom(k, nc, HowRenew, c.Serial); err != nil {
			return fmt.Errorf("renew for %s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return nb, nil
}

// Revoke revokes every certificate the ledger holds for p and marks p
// revoked (Redeem and Renew then refuse it; Admit admits it again). It
// signs a new revocation list (the next sequence number, every revoked
// serial of every member still within revokedRetention of its end),
// writes it to the revocations file and returns it, with how many serials
// this call revoked (0 if p was revoked already: the list is signed
// anew). A peer the ledger does not know is an error wrapping
// ErrNotMember. It needs the key (ErrNoKey otherwise).
func (d Dir) Revoke(p peer.ID, now time.Time) ([]byte, int, error) {
	k, err := d.Key()
	if err != nil {
		return nil, 0, err
	}
	var (
		list  []byte
		added int
	)
	err = d.update(k, now, func(l *ledger) error {
		found := false
		for i := range l.Members {
			if e := &l.Members[i]; e.Peer == p.String() {
				found = true
				if !e.Revoked {
					e.Revoked, e.RevokedAt = true, now.Unix()
					added++
				}
			}
		}
		if !found {
			return fmt.Errorf("peer %s is %w of %s", p, ErrNotMember, k.ID())
		}
		seq := l.RevocationSeq + 1
		var err error
		list, err = k.SignRevocations(grid.Revocations{Seq: seq, Issued: now.Unix(), Serials: l.revokedSerials(now)})
		if err != nil {
			return err
		}
		// The list first: a failure after it leaves the ledger unchanged,
		// and revoking again completes the record.
		if err := d.write(revFile, list, 0o600); err != nil {
			return err
		}
		l.RevocationSeq = seq
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return list, added, nil
}

// Member is a peer's newest certificate as the ledger records it.
type Member struct {
	Peer                peer.ID
	Role                grid.Role
	Prefixes            []string
	Serial              uint64
	NotBefore, NotAfter time.Time
	Revoked             bool
	How                 string // HowInit, HowToken, HowAdmit or HowRenew
}

// Members lists every peer the ledger knows, with its newest certificate,
// sorted by peer ID (expired and revoked ones too; see prune for how long
// they are kept). It needs the key (ErrNoKey otherwise): the ledger is
// the root's.
func (d Dir) Members() ([]Member, error) {
	k, err := d.Key()
	if err != nil {
		return nil, err
	}
	l, err := d.loadLedger(k)
	if err != nil {
		return nil, err
	}
	newest := map[string]entry{}
	for _, e := range l.Members {
		if n, ok := newest[e.Peer]; !ok || e.Serial > n.Serial {
			newest[e.Peer] = e
		}
	}
	out := make([]Member, 0, len(newest))
	for _, e := range newest {
		p, _ := peer.Decode(e.Peer) // checked by loadLedger
		r, _ := grid.ParseRole(e.Role)
		out = append(out, Member{Peer: p, Role: r, Prefixes: slices.Clone(e.Prefixes), Serial: e.Serial,
			NotBefore: time.Unix(e.NotBefore, 0).UTC(), NotAfter: time.Unix(e.NotAfter, 0).UTC(), Revoked: e.Revoked, How: e.How})
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Peer.String(), b.Peer.String()) })
	return out, nil
}
