package grid

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/omst-project/omst/pkg/blob"
)

// Role is what a member may do.
type Role uint8

// Roles. A client (the master) writes any name; a head and a worker write
// only under their prefixes; a reader writes nothing. Every member reads.
const (
	RoleClient Role = 1
	RoleHead   Role = 2
	RoleWorker Role = 3
	RoleReader Role = 4
)

func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RoleHead:
		return "head"
	case RoleWorker:
		return "worker"
	case RoleReader:
		return "reader"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// ParseRole reads a role's name.
func ParseRole(s string) (Role, error) {
	for r := RoleClient; r <= RoleReader; r++ {
		if s == r.String() {
			return r, nil
		}
	}
	return 0, fmt.Errorf("unknown role %q (client, head, worker or reader)", s)
}

func (r Role) valid() bool { return r >= RoleClient && r <= RoleReader }

// Limits of the binary forms.
const (
	MaxPrefixes  = 32
	MaxPrefixLen = blob.MaxNameLen
	MaxPeerIDLen = 128
	// MaxRevoked bounds a revocation list.
	MaxRevoked = 1 << 16
	// ClockSkew is allowed on either side of a validity window.
	ClockSkew = 5 * time.Minute
)

// IDLen is the length of a grid ID in bytes.
const IDLen = 20

// ID names a grid: the first IDLen bytes of the SHA-256 of its public key.
type ID [IDLen]byte

// IDOf returns the ID of the grid whose public key is pub.
func IDOf(pub ed25519.PublicKey) ID {
	sum := sha256.Sum256(pub)
	var id ID
	copy(id[:], sum[:IDLen])
	return id
}

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

func (id ID) String() string { return "grid-" + strings.ToLower(idEncoding.EncodeToString(id[:])) }

// Key is a grid key: the private half stays with the root.
type Key struct {
	Private ed25519.PrivateKey
}

// NewKey makes a grid key.
func NewKey() (Key, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return Key{}, fmt.Errorf("grid key: %w", err)
	}
	return Key{Private: priv}, nil
}

// KeyFromSeed returns the key of a 32-byte ed25519 seed (as stored).
func KeyFromSeed(seed []byte) (Key, error) {
	if len(seed) != ed25519.SeedSize {
		return Key{}, fmt.Errorf("grid key: seed of %d bytes, want %d", len(seed), ed25519.SeedSize)
	}
	return Key{Private: ed25519.NewKeyFromSeed(seed)}, nil
}

// Public returns the grid's public key.
func (k Key) Public() ed25519.PublicKey { return k.Private.Public().(ed25519.PublicKey) }

// ID returns the grid's ID.
func (k Key) ID() ID { return IDOf(k.Public()) }

// Errors a check reports (wrapped, with the detail).
var (
	ErrBadSignature = errors.New("not signed by the grid key")
	ErrOtherGrid    = errors.New("issued by another grid")
	ErrExpired      = errors.New("expired")
	ErrNotYetValid  = errors.New("not valid yet")
	ErrRevoked      = errors.New("revoked")
	ErrNotAllowed   = fmt.Errorf("not allowed (%w)", blob.ErrForbidden)
)

// checkPrefixes validates a prefix list: at most MaxPrefixes, each a valid
// non-empty prefix.
func checkPrefixes(ps []string) error {
	if len(ps) > MaxPrefixes {
		return fmt.Errorf("%d prefixes, more than %d", len(ps), MaxPrefixes)
	}
	for _, p := range ps {
		if p == "" {
			return errors.New("an empty prefix (a client writes anywhere; other roles name their prefixes)")
		}
		if len(p) > MaxPrefixLen {
			return fmt.Errorf("prefix of %d bytes, more than %d", len(p), MaxPrefixLen)
		}
		if err := blob.ValidatePrefix(p); err != nil {
			return err
		}
	}
	return nil
}

// within checks now against [notBefore-ClockSkew, notAfter+ClockSkew].
func within(now time.Time, notBefore, notAfter int64, what string) error {
	switch {
	case now.Before(time.Unix(notBefore, 0).Add(-ClockSkew)):
		return fmt.Errorf("%s %w (from %s)", what, ErrNotYetValid, time.Unix(notBefore, 0).UTC().Format(time.RFC3339))
	case now.After(time.Unix(notAfter, 0).Add(ClockSkew)):
		return fmt.Errorf("%s %w at %s", what, ErrExpired, time.Unix(notAfter, 0).UTC().Format(time.RFC3339))
	}
	return nil
}
