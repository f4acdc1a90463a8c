package grid

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCertText(t *testing.T) {
	k, other := mustKey(t), mustKey(t)
	p := newPeer(t)
	b, err := k.Issue(workerCert(p))
	if err != nil {
		t.Fatal(err)
	}
	s := EncodeCertText(k.Public(), b)
	if !strings.HasPrefix(s, CertTextPrefix) || strings.ContainsAny(s, " \n+/=") {
		t.Fatalf("certificate text %q: want %s + base64url", s, CertTextPrefix)
	}
	pub, cert, c, err := ParseCertText(" \t" + s + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(k.Public()) || !bytes.Equal(cert, b) || c.Peer != p || c.Serial != 7 || c.Role != RoleWorker || c.Grid != k.ID() {
		t.Fatalf("parsed %x, %+v", pub, c)
	}

	// Another grid's key in front of this grid's certificate.
	if _, _, _, err := ParseCertText(EncodeCertText(other.Public(), b)); !errors.Is(err, ErrOtherGrid) {
		t.Fatalf("a certificate with another grid's key: %v", err)
	}
	// A certificate another key signed, claiming this grid.
	forged, _ := other.Issue(workerCert(p))
	kid := k.ID()
	copy(forged[1:1+IDLen], kid[:])
	if _, _, _, err := ParseCertText(EncodeCertText(k.Public(), forged)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a forged certificate: %v", err)
	}
	for name, tc := range map[string]struct{ text, want string }{
		"no prefix":    {strings.TrimPrefix(s, CertTextPrefix), "does not start with"},
		"a token":      {TokenPrefix + s[len(CertTextPrefix):], "does not start with"},
		"not base64":   {s + "!", "base64"},
		"key only":     {EncodeCertText(k.Public(), nil), "too short"},
		"truncated":    {s[:len(s)-6], "certificate"},
		"too long":     {CertTextPrefix + strings.Repeat("A", maxCertText+4), "more than"},
		"empty":        {"", "does not start with"},
		"prefix alone": {CertTextPrefix, "too short"},
	} {
		_, _, _, err := ParseCertText(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, tc.want)
		}
	}
}

func TestParseTTL(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"1s":     time.Second,
		"90s":    90 * time.Second,
		"1h":     time.Hour,
		"36h30m": 36*time.Hour + 30*time.Minute,
		"1d":     24 * time.Hour,
		" 7d ":   7 * 24 * time.Hour,
		"30d":    MaxTokenTTL,
		"720h":   MaxTokenTTL,
	} {
		got, err := ParseTTL(s)
		if err != nil || got != want {
			t.Errorf("ParseTTL(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for s, want := range map[string]string{
		"":                  "want a Go duration",
		"0s":                "outside 1s .. 30d",
		"0d":                "outside 1s .. 30d",
		"999ms":             "outside 1s .. 30d",
		"-1h":               "outside 1s .. 30d",
		"31d":               "outside 1s .. 30d",
		"721h":              "outside 1s .. 30d",
		"99999999999999d":   "want a Go duration",
		"1d12h":             "want a Go duration",
		"1.5d":              "want a Go duration",
		"-1d":               "want a Go duration",
		"d":                 "want a Go duration",
		"soon":              "want a Go duration",
		"10":                "want a Go duration",
		"9999999999999999h": "want a Go duration",
	} {
		_, err := ParseTTL(s)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTTL(%q): %v, want an error saying %q", s, err, want)
		}
	}
}
