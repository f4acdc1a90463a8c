package grid

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CertTextPrefix starts a certificate's text form (EncodeCertText).
const CertTextPrefix = "omst-cert-"

// maxCertText bounds the base64 part of a certificate's text form.
var maxCertText = base64.RawURLEncoding.EncodedLen(ed25519.PublicKeySize + maxSigned)

// EncodeCertText returns the text form of a certificate of grid pub, for
// offline admission (a node started with it needs no token): CertTextPrefix
// + base64url without padding of pub (32 bytes) followed by cert (the
// binary form Key.Issue returns). It carries the grid's public key, so that
// the admitted node can check the certificates of the others.
func EncodeCertText(pub ed25519.PublicKey, cert []byte) string {
	b := make([]byte, 0, len(pub)+len(cert))
	b = append(append(b, pub...), cert...)
	return CertTextPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ParseCertText reads a certificate's text form (surrounding space is
// ignored): the grid public key it carries, the certificate's binary form,
// and the certificate, decoded and checked against that key (DecodeCert:
// the grid and the signature). It does not check the time or revocation.
func ParseCertText(s string) (pub ed25519.PublicKey, cert []byte, c Cert, err error) {
	raw, ok := strings.CutPrefix(strings.TrimSpace(s), CertTextPrefix)
	if !ok {
		return nil, nil, Cert{}, fmt.Errorf("certificate text: does not start with %q", CertTextPrefix)
	}
	if len(raw) > maxCertText {
		return nil, nil, Cert{}, fmt.Errorf("certificate text: %d characters, more than %d", len(raw), maxCertText)
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil {
		return nil, nil, Cert{}, fmt.Errorf("certificate text: not base64url: %w", err)
	}
	if len(b) <= ed25519.PublicKeySize {
		return nil, nil, Cert{}, fmt.Errorf("certificate text: %d bytes, too short for a grid key and a certificate", len(b))
	}
	pub = ed25519.PublicKey(b[:ed25519.PublicKeySize:ed25519.PublicKeySize])
	cert = b[ed25519.PublicKeySize:]
	if c, err = DecodeCert(cert, pub); err != nil {
		return nil, nil, Cert{}, fmt.Errorf("certificate text: %w", err)
	}
	return pub, cert, c, nil
}

// ParseTTL reads a lifetime (of a token or a certificate): a Go duration
// ("90s", "1h", "36h30m") or a whole number of days ("30d"). It must be
// within MinTokenTTL .. MaxTokenTTL (1s .. 30d).
func ParseTTL(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseUint(days, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("duration %q: want a Go duration (90s, 1h) or a whole number of days (30d)", s)
		}
		if n > uint64(MaxTokenTTL/(24*time.Hour)) {
			return 0, ttlBoundsError(s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("duration %q: want a Go duration (90s, 1h) or a whole number of days (30d)", s)
		}
	}
	if d < MinTokenTTL || d > MaxTokenTTL {
		return 0, ttlBoundsError(s)
	}
	return d, nil
}

func ttlBoundsError(s string) error {
	return fmt.Errorf("duration %q: outside %v .. %dd (%v)", s, MinTokenTTL, MaxTokenTTL/(24*time.Hour), MaxTokenTTL)
}
