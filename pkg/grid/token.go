package grid

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"time"
)

// Token lets whoever holds it join the grid once: redeemed with the root
// before NotAfter, it yields a Cert of Role and Prefixes valid for CertTTL.
// It carries the grid's public key, so that the joining node can check the
// certificates of the others.
type Token struct {
	GridKey  ed25519.PublicKey
	Role     Role
	Prefixes []string
	CertTTL  time.Duration // whole seconds
	NotAfter int64         // Unix seconds
	Nonce    [16]byte      // single use: the root remembers redeemed nonces
}

const (
	tokenDomain = "omst grid token v1\x00"
	// TokenPrefix starts a token's text form.
	TokenPrefix = "omst-join-"
	// MaxTokenTTL and MinTokenTTL bound a token's life (and a cert's).
	MaxTokenTTL = 30 * 24 * time.Hour
	MinTokenTTL = time.Second
)

// NewToken makes a token of k's grid for role and prefixes, valid ttl from
// now, whose certificates live certTTL.
func (k Key) NewToken(role Role, prefixes []string, now time.Time, ttl, certTTL time.Duration) (Token, error) {
	for _, d := range []time.Duration{ttl, certTTL} {
		if d < MinTokenTTL || d > MaxTokenTTL {
			return Token{}, fmt.Errorf("token: a duration of %v, outside %v .. %v", d, MinTokenTTL, MaxTokenTTL)
		}
	}
	t := Token{GridKey: k.Public(), Role: role, Prefixes: prefixes, CertTTL: certTTL.Truncate(time.Second), NotAfter: now.Add(ttl).Unix()}
	if _, err := rand.Read(t.Nonce[:]); err != nil {
		return Token{}, fmt.Errorf("token: %w", err)
	}
	if _, err := t.encodeBody(); err != nil {
		return Token{}, err
	}
	return t, nil
}

func (t Token) encodeBody() ([]byte, error) {
	switch {
	case len(t.GridKey) != ed25519.PublicKeySize:
		return nil, fmt.Errorf("token: grid key of %d bytes", len(t.GridKey))
	case !t.Role.valid():
		return nil, fmt.Errorf("token: invalid role %d", t.Role)
	case t.CertTTL < MinTokenTTL || t.CertTTL > MaxTokenTTL || t.CertTTL%time.Second != 0:
		return nil, fmt.Errorf("token: certificate lifetime %v, outside %v .. %v in whole seconds", t.CertTTL, MinTokenTTL, MaxTokenTTL)
	}
	if err := checkPrefixes(t.Prefixes); err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	var w writer
	w.u8(1)
	w.raw(t.GridKey)
	w.u8(byte(t.Role))
	w.strs(t.Prefixes)
	w.i64(int64(t.CertTTL / time.Second))
	w.i64(t.NotAfter)
	w.raw(t.Nonce[:])
	return w.b, nil
}

// Sign returns t's text form, signed by k: TokenPrefix + base64url.
func (k Key) Sign(t Token) (string, error) {
	if !t.GridKey.Equal(k.Public()) {
		return "", fmt.Errorf("token: of grid %s, the key is %s's", IDOf(t.GridKey), k.ID())
	}
	b, err := t.encodeBody()
	if err != nil {
		return "", err
	}
	b = appendSig(b, ed25519.Sign(k.Private, append([]byte(tokenDomain), b...)))
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b), nil
}

// ParseToken reads a token's text form and checks that it is signed by
// the grid key it carries (whether that is the expected grid is the
// redeemer's check: Redeemable). It does not check the time.
func ParseToken(s string) (Token, error) {
	raw, ok := strings.CutPrefix(strings.TrimSpace(s), TokenPrefix)
	if !ok {
		return Token{}, fmt.Errorf("token: does not start with %q", TokenPrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return Token{}, fmt.Errorf("token: %w", err)
	}
	return DecodeToken(b)
}

// DecodeToken is ParseToken of the binary form.
func DecodeToken(b []byte) (Token, error) {
	body, sig, err := splitSig(b, "token")
	if err != nil {
		return Token{}, err
	}
	r := reader{b: body}
	var t Token
	if v := r.u8(); r.err == nil && v != 1 {
		return Token{}, fmt.Errorf("token: version %d, want 1", v)
	}
	t.GridKey = ed25519.PublicKey(r.raw(ed25519.PublicKeySize))
	t.Role = Role(r.u8())
	t.Prefixes = r.strs(MaxPrefixes, MaxPrefixLen)
	secs := r.i64()
	t.NotAfter = r.i64()
	copy(t.Nonce[:], r.raw(len(t.Nonce)))
	if err := r.done("token"); err != nil {
		return Token{}, err
	}
	if secs < 0 || secs > int64(MaxTokenTTL/time.Second) {
		return Token{}, fmt.Errorf("token: certificate lifetime of %d s", secs)
	}
	t.CertTTL = time.Duration(secs) * time.Second
	if _, err := t.encodeBody(); err != nil {
		return Token{}, err
	}
	if !ed25519.Verify(t.GridKey, append([]byte(tokenDomain), body...), sig) {
		return Token{}, fmt.Errorf("token: %w", ErrBadSignature)
	}
	return t, nil
}

// Redeemable checks t for the root of grid pub at now: the right grid and
// not expired. (That its nonce was not redeemed before is the root's
// record to check.)
func (t Token) Redeemable(pub ed25519.PublicKey, now time.Time) error {
	if !t.GridKey.Equal(pub) {
		return fmt.Errorf("token: %w (%s, this grid is %s)", ErrOtherGrid, IDOf(t.GridKey), IDOf(pub))
	}
	if now.After(time.Unix(t.NotAfter, 0)) { // no skew: the root's own clock
		return fmt.Errorf("token: %w at %s", ErrExpired, time.Unix(t.NotAfter, 0).UTC().Format(time.RFC3339))
	}
	return nil
}

// CertFor is the certificate a redeemed t gives peer p at now, under
// serial.
func (t Token) CertFor(p string, now time.Time, serial uint64) Cert {
	return Cert{Peer: peerID(p), Role: t.Role, Prefixes: t.Prefixes, NotBefore: now.Unix(), NotAfter: now.Add(t.CertTTL).Unix(), Serial: serial}
}
