package gridstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/grid"
)

// The ledger's bounds. Entries are pruned as they expire (see prune), so
// these are only reached by a grid far larger than omst's, or a flood of
// admissions; issuing then fails, saying so.
const (
	// maxEntries bounds the certificates the ledger holds (as many as a
	// revocation list may name).
	maxEntries = grid.MaxRevoked
	// maxRedeemed bounds the redeemed nonces of unexpired tokens.
	maxRedeemed = 1 << 16
	// revokedRetention is how long past its end a revoked certificate
	// stays on the revocation list. A name record is checked against its
	// origin's certificate at the record's time, so a revoked member
	// could otherwise sign records dated inside its old certificate's
	// validity once the serial left the list: a year keeps that door shut
	// for any record that could still matter (an older record loses to
	// every later put of its name). 8 bytes per revoked certificate.
	revokedRetention = 365 * 24 * time.Hour
	// expiredRetention is how long past its end a peer's newest
	// certificate is kept when it is not revoked (a revoked peer's newest
	// one is kept for good: it refuses that peer's later tokens).
	expiredRetention = 90 * 24 * time.Hour
)

// How a certificate was issued (Member.How).
const (
	HowInit  = "init"  // the root's own, by omst grid init
	HowToken = "token" // a join token redeemed
	HowAdmit = "admit" // omst grid admit
	HowRenew = "renew" // a renewal of a valid one
)

// ledger is ledger.json: the root's record of what it issued.
type ledger struct {
	Version int    `json:"version"`
	Grid    string `json:"grid"`
	// NextSerial is the serial of the next certificate issued.
	NextSerial uint64 `json:"next_serial"`
	// RevocationSeq is the Seq of the last revocation list signed.
	RevocationSeq uint64 `json:"revocation_seq"`
	// Redeemed maps the hex nonce of every redeemed, not yet expired
	// token to the token's NotAfter (Unix seconds).
	Redeemed map[string]int64 `json:"redeemed"`
	// Members are the certificates issued, oldest first.
	Members []entry `json:"members"`
}

// entry is one certificate issued.
type entry struct {
	Peer      string   `json:"peer"`
	Role      string   `json:"role"`
	Prefixes  []string `json:"prefixes"`
	Serial    uint64   `json:"serial"`
	NotBefore int64    `json:"not_before"` // Unix seconds: also when it was issued
	NotAfter  int64    `json:"not_after"`
	Revoked   bool     `json:"revoked"`
	RevokedAt int64    `json:"revoked_at,omitempty"`
	How       string   `json:"how"`
	// From is, for a renewal (How HowRenew), the serial it renewed: a
	// certificate is renewed once, and a repeated request for it gets
	// this one again (see Dir.Renew).
	From uint64 `json:"from,omitempty"`
}

const ledgerVersion = 1

// loadLedger reads ledger.json of k's grid (a new ledger if there is
// none). The caller holds the lock. The next serial is kept above every
// serial seen (in the ledger, the revocations file, member.cert), and the
// revocation sequence at or above the stored list's, so that losing the
// ledger does not make the root reuse either.
func (d Dir) loadLedger(k grid.Key) (*ledger, error) {
	path := d.file(ledgerFile)
	id := k.ID().String()
	l := &ledger{Version: ledgerVersion, Grid: id, Redeemed: map[string]int64{}}
	b, ok, err := d.read(ledgerFile, maxLedgerBytes)
	if err != nil {
		return nil, err
	}
	if ok {
		if l, err = decodeLedger(b, id); err != nil {
			if errors.Is(err, errOtherGridLedger) {
				return nil, fmt.Errorf("%s: %w, but %s holds the key of %s", path, err, d.file(keyFile), id)
			}
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	// Serials and sequence numbers are never reused.
	next := max(l.NextSerial, 1)
	for _, e := range l.Members {
		next = max(next, e.Serial+1)
	}
	revs, err := d.storedRevocations(k.Public())
	if err != nil {
		return nil, err
	}
	if n := len(revs.Serials); n > 0 {
		next = max(next, revs.Serials[n-1]+1)
	}
	l.RevocationSeq = max(l.RevocationSeq, revs.Seq)
	if b, ok, _ := d.read(certFile, maxSmallFile); ok {
		if c, err := grid.DecodeCert(b, k.Public()); err == nil {
			next = max(next, c.Serial+1)
		}
	}
	l.NextSerial = next
	return l, nil
}

var errOtherGridLedger = errors.New("another grid's ledger")

// decodeLedger parses ledger.json of the grid whose ID (text form) is id:
// this version, this grid (an error wrapping errOtherGridLedger
// otherwise), within the bounds, every certificate well formed (a peer ID,
// a role, a validity that ends after it begins), no serial twice, and a
// renewal's From below its own serial. Plain code: no IO.
func decodeLedger(b []byte, id string) (*ledger, error) {
	l := &ledger{}
	if err := json.Unmarshal(b, l); err != nil {
		return nil, err
	}
	if l.Version != ledgerVersion {
		return nil, fmt.Errorf("version %d, want %d", l.Version, ledgerVersion)
	}
	if l.Grid != id {
		return nil, fmt.Errorf("the ledger of %s (%w)", l.Grid, errOtherGridLedger)
	}
	if len(l.Members) > maxEntries || len(l.Redeemed) > maxRedeemed {
		return nil, fmt.Errorf("%d certificates and %d redeemed tokens, more than %d and %d", len(l.Members), len(l.Redeemed), maxEntries, maxRedeemed)
	}
	seen := make(map[uint64]bool, len(l.Members))
	for i, e := range l.Members {
		if err := e.check(); err != nil {
			return nil, fmt.Errorf("certificate %d: %w", i, err)
		}
		if seen[e.Serial] {
			return nil, fmt.Errorf("certificate %d: serial %d recorded twice", i, e.Serial)
		}
		seen[e.Serial] = true
	}
	if l.Redeemed == nil {
		l.Redeemed = map[string]int64{}
	}
	return l, nil
}

func (e entry) check() error {
	if _, err := peer.Decode(e.Peer); err != nil {
		return fmt.Errorf("peer %q: %w", e.Peer, err)
	}
	if _, err := grid.ParseRole(e.Role); err != nil {
		return err
	}
	if err := e.cert().Validate(); err != nil {
		return fmt.Errorf("serial %d: %w", e.Serial, err)
	}
	if e.From != 0 && (e.How != HowRenew || e.From >= e.Serial) {
		return fmt.Errorf("serial %d (%s) records the renewal of serial %d", e.Serial, e.How, e.From)
	}
	return nil
}

// cert returns e as a certificate (checked by decodeLedger).
func (e entry) cert() grid.Cert {
	p, _ := peer.Decode(e.Peer)
	r, _ := grid.ParseRole(e.Role)
	return grid.Cert{Peer: p, Role: r, Prefixes: slices.Clone(e.Prefixes), NotBefore: e.NotBefore, NotAfter: e.NotAfter, Serial: e.Serial}
}

// saveLedger writes l (the caller holds the lock).
func (d Dir) saveLedger(l *ledger) error {
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", d.file(ledgerFile), err)
	}
	return d.write(ledgerFile, append(b, '\n'), 0o600)
}

// prune drops what the ledger no longer needs at now: the nonces of
// expired tokens (they cannot be redeemed anyway), and certificates past
// their end, except each peer's newest (which says what the peer is, and
// whether it was revoked: see expiredRetention) and revoked ones within
// revokedRetention.
func (l *ledger) prune(now time.Time) {
	for n, notAfter := range l.Redeemed {
		if now.After(time.Unix(notAfter, 0).Add(grid.ClockSkew)) {
			delete(l.Redeemed, n)
		}
	}
	newest := map[string]uint64{}
	for _, e := range l.Members {
		newest[e.Peer] = max(newest[e.Peer], e.Serial)
	}
	kept := l.Members[:0]
	for _, e := range l.Members {
		end := time.Unix(e.NotAfter, 0)
		var keep bool
		switch {
		case e.Serial == newest[e.Peer]:
			keep = e.Revoked || !now.After(end.Add(expiredRetention))
		case e.Revoked:
			keep = !now.After(end.Add(revokedRetention))
		default:
			keep = !now.After(end.Add(grid.ClockSkew))
		}
		if keep {
			kept = append(kept, e)
		}
	}
	clear(l.Members[len(kept):])
	l.Members = kept
}

// newest returns p's newest certificate, nil if none.
func (l *ledger) newest(p peer.ID) *entry {
	var n *entry
	for i := range l.Members {
		if e := &l.Members[i]; e.Peer == p.String() && (n == nil || e.Serial > n.Serial) {
			n = e
		}
	}
	return n
}

// renewalOf returns the renewal of serial s, nil if none is recorded.
func (l *ledger) renewalOf(s uint64) *entry {
	for i := range l.Members {
		if e := &l.Members[i]; e.How == HowRenew && e.From == s {
			return e
		}
	}
	return nil
}

// serial returns the certificate of serial s, nil if unknown.
func (l *ledger) serial(s uint64) *entry {
	for i := range l.Members {
		if l.Members[i].Serial == s {
			return &l.Members[i]
		}
	}
	return nil
}

// revokedSerials lists the serials a revocation list signed at now names:
// every revoked certificate within revokedRetention of its end.
func (l *ledger) revokedSerials(now time.Time) []uint64 {
	var s []uint64
	for _, e := range l.Members {
		if e.Revoked && !now.After(time.Unix(e.NotAfter, 0).Add(revokedRetention)) {
			s = append(s, e.Serial)
		}
	}
	return s
}

var errFull = errors.New("ledger full")

// issue signs c with k under the next serial and records it as issued
// how; it returns the certificate's binary form.
func (l *ledger) issue(k grid.Key, c grid.Cert, how string) ([]byte, error) {
	return l.issueFrom(k, c, how, 0)
}

// issueFrom is issue, recording from as the serial a renewal renews.
func (l *ledger) issueFrom(k grid.Key, c grid.Cert, how string, from uint64) ([]byte, error) {
	if len(l.Members) >= maxEntries {
		return nil, fmt.Errorf("%w: %d certificates on record (they are dropped as they expire)", errFull, len(l.Members))
	}
	c.Serial = l.NextSerial
	b, err := k.Issue(c)
	if err != nil {
		return nil, err
	}
	l.NextSerial++
	l.Members = append(l.Members, entry{Peer: c.Peer.String(), Role: c.Role.String(), Prefixes: append([]string{}, c.Prefixes...),
		Serial: c.Serial, NotBefore: c.NotBefore, NotAfter: c.NotAfter, How: how, From: from})
	return b, nil
}
