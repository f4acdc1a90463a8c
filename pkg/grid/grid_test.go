package grid

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func mustKey(t testing.TB) Key {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newPeer(t testing.TB) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPublicKey(pub)
	return id
}

func workerCert(p peer.ID) Cert {
	return Cert{Peer: p, Role: RoleWorker, Prefixes: []string{"results/siteA/"}, NotBefore: t0.Unix(), NotAfter: t0.Add(time.Hour).Unix(), Serial: 7}
}

func TestCertRoundTripAndChecks(t *testing.T) {
	k, other := mustKey(t), mustKey(t)
	p := newPeer(t)
	b, err := k.Issue(workerCert(p))
	if err != nil {
		t.Fatal(err)
	}
	c, err := DecodeCert(b, k.Public())
	if err != nil {
		t.Fatal(err)
	}
	want := workerCert(p)
	want.Grid = k.ID()
	if c.Peer != want.Peer || c.Role != want.Role || c.Serial != 7 || c.Grid != want.Grid || len(c.Prefixes) != 1 || c.Prefixes[0] != "results/siteA/" {
		t.Fatalf("decoded %+v, want %+v", c, want)
	}
	if err := c.Check(p, t0.Add(30*time.Minute), nil); err != nil {
		t.Fatalf("a valid certificate: %v", err)
	}
	for name, tc := range map[string]struct {
		p    peer.ID
		now  time.Time
		rev  *Revocations
		want error
	}{
		"another peer shows it": {newPeer(t), t0, nil, ErrNotAllowed},
		"expired":               {p, t0.Add(time.Hour + ClockSkew + time.Second), nil, ErrExpired},
		"not yet valid":         {p, t0.Add(-ClockSkew - time.Second), nil, ErrNotYetValid},
		"revoked":               {p, t0, &Revocations{Serials: []uint64{3, 7}}, ErrRevoked},
	} {
		if err := c.Check(tc.p, tc.now, tc.rev); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	if err := c.Check(p, t0.Add(time.Hour+ClockSkew/2), nil); err != nil {
		t.Errorf("within the clock skew: %v", err)
	}
	if _, err := DecodeCert(b, other.Public()); !errors.Is(err, ErrOtherGrid) {
		t.Fatalf("another grid's certificate: %v", err)
	}
	// A certificate signed by another key but claiming this grid.
	forged, _ := other.Issue(workerCert(p))
	kid := k.ID()
	copy(forged[1:1+IDLen], kid[:])
	if _, err := DecodeCert(forged, k.Public()); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a forged certificate: %v", err)
	}
	// Any changed byte of the body breaks it.
	for i := range len(b) - 2 - sigLen {
		x := bytes.Clone(b)
		x[i] ^= 0x01
		if _, err := DecodeCert(x, k.Public()); err == nil {
			t.Fatalf("byte %d flipped: accepted", i)
		}
	}
	for name, c := range map[string]Cert{
		"bad role":       {Peer: p, Role: 9, NotBefore: 1, NotAfter: 2},
		"no peer":        {Role: RoleHead, NotBefore: 1, NotAfter: 2},
		"ends first":     {Peer: p, Role: RoleHead, NotBefore: 2, NotAfter: 1},
		"empty prefix":   {Peer: p, Role: RoleHead, Prefixes: []string{""}, NotBefore: 1, NotAfter: 2},
		"invalid prefix": {Peer: p, Role: RoleHead, Prefixes: []string{"/abs"}, NotBefore: 1, NotAfter: 2},
	} {
		if _, err := k.Issue(c); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
}

func TestMayWrite(t *testing.T) {
	p := newPeer(t)
	w := workerCert(p)
	if err := w.MayWrite("results/siteA/run1"); err != nil {
		t.Fatal(err)
	}
	err := w.MayWrite("results/siteB/run1")
	if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), `"results/siteA/"`) {
		t.Fatalf("outside its prefixes: %v (want the prefix named)", err)
	}
	if err := (Cert{Role: RoleClient}).MayWrite("anything/at/all"); err != nil {
		t.Fatal(err)
	}
	if err := (Cert{Role: RoleReader, Prefixes: []string{"x/"}}).MayWrite("x/y"); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("a reader writes: %v", err)
	}
	if err := (Cert{Role: RoleHead}).MayWrite("x"); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("a head with no prefix writes: %v", err)
	}
}

func TestTokens(t *testing.T) {
	k, other := mustKey(t), mustKey(t)
	tok, err := k.NewToken(RoleWorker, []string{"results/siteA/"}, t0, time.Hour, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := k.Sign(tok)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s, TokenPrefix) || strings.ContainsAny(s, " \n+/=") {
		t.Fatalf("token text %q: want %s + base64url", s, TokenPrefix)
	}
	got, err := ParseToken("  " + s + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if got.Role != RoleWorker || got.CertTTL != 24*time.Hour || got.Nonce != tok.Nonce || !got.GridKey.Equal(k.Public()) {
		t.Fatalf("parsed %+v", got)
	}
	if err := got.Redeemable(k.Public(), t0.Add(59*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := got.Redeemable(k.Public(), t0.Add(61*time.Minute)); !errors.Is(err, ErrExpired) {
		t.Fatalf("an expired token: %v", err)
	}
	if err := got.Redeemable(other.Public(), t0); !errors.Is(err, ErrOtherGrid) {
		t.Fatalf("another grid's token: %v", err)
	}
	c := got.CertFor(newPeer(t).String(), t0, 42)
	if c.NotAfter-c.NotBefore != int64((24*time.Hour)/time.Second) || c.Serial != 42 || c.Role != RoleWorker {
		t.Fatalf("certificate for a token: %+v", c)
	}
	if _, err := k.Issue(c); err != nil {
		t.Fatalf("issue the token's certificate: %v", err)
	}
	// Tampering: any flipped bit of the body, a token of another grid's
	// key signed by this one, a truncated text.
	b, _ := tokenBytes(s)
	for i := range len(b) - 2 - sigLen {
		x := bytes.Clone(b)
		x[i] ^= 0x80
		if _, err := DecodeToken(x); err == nil {
			t.Fatalf("byte %d flipped: accepted", i)
		}
	}
	if _, err := other.Sign(tok); err == nil {
		t.Fatal("signed another grid's token")
	}
	if _, err := ParseToken(s[:len(s)-4]); err == nil {
		t.Fatal("a truncated token parsed")
	}
	if _, err := ParseToken("join-" + s); err == nil {
		t.Fatal("a token without its prefix parsed")
	}
	for _, d := range []time.Duration{0, MaxTokenTTL + time.Second} {
		if _, err := k.NewToken(RoleWorker, nil, t0, d, time.Hour); err == nil {
			t.Errorf("a token of ttl %v", d)
		}
	}
}

func TestRevocations(t *testing.T) {
	k, other := mustKey(t), mustKey(t)
	b, err := k.SignRevocations(Revocations{Seq: 3, Issued: t0.Unix(), Serials: []uint64{9, 2, 9, 5}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := DecodeRevocations(b, k.Public())
	if err != nil {
		t.Fatal(err)
	}
	if l.Seq != 3 || len(l.Serials) != 3 || !l.Has(5) || l.Has(4) {
		t.Fatalf("decoded %+v", l)
	}
	if _, err := DecodeRevocations(b, other.Public()); !errors.Is(err, ErrOtherGrid) {
		t.Fatalf("another grid's list: %v", err)
	}
	x := bytes.Clone(b)
	x[len(x)-1] ^= 1
	if _, err := DecodeRevocations(x, k.Public()); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a bad signature: %v", err)
	}
	// A count that promises more serials than the bytes hold.
	y := bytes.Clone(b)
	y[1+IDLen+16+3] = 0xff
	if _, err := DecodeRevocations(y, k.Public()); err == nil {
		t.Fatal("a lying count accepted")
	}
}

func tokenBytes(s string) ([]byte, error) { return decodeB64(strings.TrimPrefix(s, TokenPrefix)) }

func TestRenewable(t *testing.T) {
	c := Cert{Peer: "p", NotBefore: 1000, NotAfter: 1000 + 3000, Serial: 7}
	if got := c.RenewableFrom(); got != time.Unix(2500, 0) {
		t.Fatalf("RenewableFrom %v", got)
	}
	for _, tc := range []struct {
		at    int64
		early bool
	}{{1000, true}, {2499, true}, {2500, false}, {9000, false}} {
		err := c.Renewable(time.Unix(tc.at, 0))
		if errors.Is(err, ErrTooEarly) != tc.early || (err != nil && !strings.Contains(err.Error(), "half its life")) {
			t.Errorf("Renewable at %d: %v", tc.at, err)
		}
	}
}
