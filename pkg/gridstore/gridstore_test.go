package gridstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/grid"
)

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

const week = 7 * 24 * time.Hour

func newPeer(t testing.TB) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// newRoot makes a grid in a fresh home; it returns its Dir and the
// root's peer.
func newRoot(t testing.TB) (Dir, peer.ID) {
	t.Helper()
	d := Open(filepath.Join(t.TempDir(), "home"))
	self := newPeer(t)
	if _, _, err := d.Init(self, t0, week); err != nil {
		t.Fatal(err)
	}
	return d, self
}

func mustToken(t testing.TB, d Dir, role grid.Role, prefixes []string, ttl time.Duration) string {
	t.Helper()
	return mustTokenAt(t, d, role, prefixes, ttl, t0)
}

func mustTokenAt(t testing.TB, d Dir, role grid.Role, prefixes []string, ttl time.Duration, now time.Time) string {
	t.Helper()
	s, err := d.NewToken(role, prefixes, ttl, 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustDecode(t testing.TB, d Dir, b []byte) grid.Cert {
	t.Helper()
	k, err := d.Key()
	if err != nil {
		t.Fatal(err)
	}
	c, err := grid.DecodeCert(b, k.Public())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mode(t testing.TB, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func TestInit(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	d := Open(home)
	if d.Path() != filepath.Join(home, "grid") {
		t.Fatalf("Path %s", d.Path())
	}
	if _, err := os.Stat(d.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open created something: %v", err)
	}
	if _, err := d.Material(); !errors.Is(err, ErrNoGrid) {
		t.Fatalf("Material of an open node: %v", err)
	}
	if _, err := d.Key(); !errors.Is(err, ErrNoKey) {
		t.Fatalf("Key of an open node: %v", err)
	}
	self := newPeer(t)
	id, created, err := d.Init(self, t0, week)
	if err != nil || !created {
		t.Fatalf("Init: %v, created %v", err, created)
	}
	if got := mode(t, d.Path()); got != 0o700 {
		t.Errorf("directory mode %o, want 700", got)
	}
	for _, f := range []string{keyFile, pubFile, certFile, ledgerFile} {
		if got := mode(t, filepath.Join(d.Path(), f)); got != 0o600 {
			t.Errorf("%s: mode %o, want 600", f, got)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(d.Path(), keyFile)); len(b) != 32 {
		t.Errorf("grid.key of %d bytes, want a 32-byte seed", len(b))
	}
	m, err := d.Material()
	if err != nil {
		t.Fatal(err)
	}
	if grid.IDOf(m.Pub) != id || m.Revocations != nil {
		t.Fatalf("material %+v of grid %s, want %s", m, grid.IDOf(m.Pub), id)
	}
	c := mustDecode(t, d, m.Cert)
	if c.Peer != self || c.Role != grid.RoleClient || len(c.Prefixes) != 0 || c.NotBefore != t0.Unix() || c.NotAfter != t0.Add(week).Unix() {
		t.Fatalf("the root's certificate: %+v", c)
	}

	// Again: the same grid, the same certificate.
	id2, created, err := d.Init(self, t0.Add(time.Hour), week)
	if err != nil || created || id2 != id {
		t.Fatalf("Init again: %s, created %v, %v; want %s", id2, created, err, id)
	}
	m2, _ := d.Material()
	if !bytes.Equal(m2.Cert, m.Cert) {
		t.Fatal("Init again re-issued a valid certificate")
	}
	ms, err := d.Members()
	if err != nil || len(ms) != 1 || ms[0].Peer != self || ms[0].How != HowInit || ms[0].Serial != c.Serial || ms[0].Revoked {
		t.Fatalf("members %+v, %v", ms, err)
	}

	// After the root's certificate lapsed, Init issues a new one.
	later := t0.Add(week + time.Hour)
	if _, created, err := d.Init(self, later, week); err != nil || created {
		t.Fatalf("Init after expiry: created %v, %v", created, err)
	}
	m3, _ := d.Material()
	c3 := mustDecode(t, d, m3.Cert)
	if c3.Serial == c.Serial || c3.NotBefore != later.Unix() {
		t.Fatalf("after expiry: %+v", c3)
	}

	// A bad lifetime, a bad peer.
	if _, _, err := d.Init(self, t0, 0); err == nil {
		t.Error("Init with a zero certificate lifetime")
	}
	if _, _, err := d.Init("", t0, week); err == nil {
		t.Error("Init with no peer")
	}
}

func TestInitLoosePermissions(t *testing.T) {
	home := t.TempDir()
	d := Open(home)
	if err := os.MkdirAll(d.Path(), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(d.Path(), 0o755)
	if _, _, err := d.Init(newPeer(t), t0, week); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, d.Path()); got != 0o700 {
		t.Errorf("directory mode %o, want 700", got)
	}
}

func TestInitOnAMember(t *testing.T) {
	root, _ := newRoot(t)
	p := newPeer(t)
	text, err := root.Admit(p, grid.RoleWorker, nil, week, t0)
	if err != nil {
		t.Fatal(err)
	}
	pub, cert, _, err := grid.ParseCertText(text)
	if err != nil {
		t.Fatal(err)
	}
	m := Open(t.TempDir())
	if err := m.SaveMember(pub, cert); err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Init(p, t0, week)
	if err == nil || !strings.Contains(err.Error(), "member of "+grid.IDOf(pub).String()) {
		t.Fatalf("Init on a member: %v", err)
	}
	if _, err := m.Key(); !errors.Is(err, ErrNoKey) {
		t.Fatalf("a key appeared: %v", err)
	}
}

func TestRedeem(t *testing.T) {
	d, _ := newRoot(t)
	p := newPeer(t)
	tok := mustToken(t, d, grid.RoleWorker, []string{"results/siteA/"}, time.Hour)
	b, err := d.Redeem(tok, p, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	c := mustDecode(t, d, b)
	if c.Peer != p || c.Role != grid.RoleWorker || !slices.Equal(c.Prefixes, []string{"results/siteA/"}) ||
		c.NotAfter-c.NotBefore != int64(24*time.Hour/time.Second) {
		t.Fatalf("certificate %+v", c)
	}
	// Replayed, by the same peer or another: refused.
	for _, q := range []peer.ID{p, newPeer(t)} {
		_, err := d.Redeem(tok, q, t0.Add(2*time.Minute))
		if !errors.Is(err, ErrRedeemed) || !strings.Contains(err.Error(), "token already redeemed") {
			t.Fatalf("a replayed token: %v", err)
		}
	}
	// Expired.
	tok2 := mustToken(t, d, grid.RoleReader, nil, time.Hour)
	if _, err := d.Redeem(tok2, newPeer(t), t0.Add(61*time.Minute)); !errors.Is(err, grid.ErrExpired) {
		t.Fatalf("an expired token: %v", err)
	}
	// Another grid's.
	other, _ := newRoot(t)
	tok3 := mustToken(t, other, grid.RoleWorker, nil, time.Hour)
	if _, err := d.Redeem(tok3, newPeer(t), t0); !errors.Is(err, grid.ErrOtherGrid) {
		t.Fatalf("another grid's token: %v", err)
	}
	// Not a token, a damaged token.
	if _, err := d.Redeem("hello", newPeer(t), t0); err == nil {
		t.Fatal("redeemed a non-token")
	}
	if _, err := d.Redeem(tok2[:len(tok2)-3], newPeer(t), t0); err == nil {
		t.Fatal("redeemed a truncated token")
	}
	// Not the root.
	member := Open(t.TempDir())
	if _, err := member.Redeem(tok2, newPeer(t), t0); !errors.Is(err, ErrNoKey) {
		t.Fatalf("redeemed without the key: %v", err)
	}
	// The ledger: both certificates, the nonce.
	ms, err := d.Members()
	if err != nil || len(ms) != 2 {
		t.Fatalf("members %+v, %v", ms, err)
	}
	var l ledger
	b, _ = os.ReadFile(filepath.Join(d.Path(), ledgerFile))
	if err := json.Unmarshal(b, &l); err != nil || len(l.Redeemed) != 1 {
		t.Fatalf("ledger %s: %v", b, err)
	}
}

func TestRedeemConcurrent(t *testing.T) {
	d, _ := newRoot(t)
	tok := mustToken(t, d, grid.RoleWorker, []string{"x/"}, time.Hour)
	const n = 8
	var (
		wg             sync.WaitGroup
		mu             sync.Mutex
		won, redeemed  int
		otherFailures  []error
		distinctSerial = map[uint64]bool{}
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := Open(filepath.Dir(d.Path())).Redeem(tok, newPeer(t), t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
				distinctSerial[mustDecode(t, d, b).Serial] = true
			case errors.Is(err, ErrRedeemed):
				redeemed++
			default:
				otherFailures = append(otherFailures, err)
			}
		}()
	}
	wg.Wait()
	if won != 1 || redeemed != n-1 || len(otherFailures) > 0 {
		t.Fatalf("%d won, %d refused as redeemed, other failures %v", won, redeemed, otherFailures)
	}
	ms, _ := d.Members()
	if len(ms) != 2 { // the root and the winner
		t.Fatalf("members %+v", ms)
	}
}

// Concurrent issues of different tokens never share a serial.
func TestSerialsUnique(t *testing.T) {
	d, _ := newRoot(t)
	const n = 8
	toks := make([]string, n)
	for i := range toks {
		toks[i] = mustToken(t, d, grid.RoleWorker, nil, time.Hour)
	}
	var wg sync.WaitGroup
	serials := make([]uint64, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				b, err := d.Redeem(toks[i], newPeer(t), t0)
				if err != nil {
					t.Error(err)
					return
				}
				serials[i] = mustDecode(t, d, b).Serial
				return
			}
			text, err := d.Admit(newPeer(t), grid.RoleHead, []string{"h/"}, week, t0)
			if err != nil {
				t.Error(err)
				return
			}
			_, _, c, err := grid.ParseCertText(text)
			if err != nil {
				t.Error(err)
				return
			}
			serials[i] = c.Serial
		}()
	}
	wg.Wait()
	slices.Sort(serials)
	if len(slices.Compact(serials)) != n {
		t.Fatalf("serials %v: repeats", serials)
	}
}

func TestAdmitRenewRevoke(t *testing.T) {
	d, self := newRoot(t)
	p := newPeer(t)
	text, err := d.Admit(p, grid.RoleHead, []string{"results/siteA/", "logs/"}, 2*24*time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	pub, admitted, c, err := grid.ParseCertText(text)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := d.Key()
	if !pub.Equal(k.Public()) || c.Peer != p || c.Role != grid.RoleHead || len(c.Prefixes) != 2 {
		t.Fatalf("admitted %+v", c)
	}

	// Renew: the same role, prefixes and lifetime, from now, a new serial.
	now := t0.Add(24 * time.Hour)
	rb, err := d.Renew(admitted, p, now)
	if err != nil {
		t.Fatal(err)
	}
	rc := mustDecode(t, d, rb)
	if rc.Peer != p || rc.Role != grid.RoleHead || !slices.Equal(rc.Prefixes, c.Prefixes) || rc.Serial == c.Serial ||
		rc.NotBefore != now.Unix() || rc.NotAfter-rc.NotBefore != c.NotAfter-c.NotBefore {
		t.Fatalf("renewed %+v from %+v", rc, c)
	}
	ms, _ := d.Members()
	if i := slices.IndexFunc(ms, func(m Member) bool { return m.Peer == p }); i < 0 || ms[i].How != HowRenew || ms[i].Serial != rc.Serial {
		t.Fatalf("members after the renewal: %+v", ms)
	}
	// Shown by another peer, expired, another grid's: refused.
	if _, err := d.Renew(admitted, newPeer(t), now); !errors.Is(err, grid.ErrNotAllowed) {
		t.Fatalf("renew another's certificate: %v", err)
	}
	if _, err := d.Renew(admitted, p, t0.Add(2*24*time.Hour+grid.ClockSkew+time.Second)); !errors.Is(err, grid.ErrExpired) {
		t.Fatalf("renew an expired certificate: %v", err)
	}
	other, _ := newRoot(t)
	otext, _ := other.Admit(p, grid.RoleHead, nil, week, t0)
	_, ocert, _, _ := grid.ParseCertText(otext)
	if _, err := d.Renew(ocert, p, now); !errors.Is(err, grid.ErrOtherGrid) {
		t.Fatalf("renew another grid's certificate: %v", err)
	}

	// Also a token's certificate, then revoke p: all three serials.
	b, err := d.Redeem(mustToken(t, d, grid.RoleWorker, []string{"w/"}, time.Hour), p, t0)
	if err != nil {
		t.Fatal(err)
	}
	tc := mustDecode(t, d, b)
	list, added, err := d.Revoke(p, now)
	if err != nil || added != 3 {
		t.Fatalf("revoke: %d added, %v", added, err)
	}
	l, err := grid.DecodeRevocations(list, k.Public())
	if err != nil {
		t.Fatal(err)
	}
	if l.Seq != 1 || !slices.Equal(l.Serials, slices.Sorted(slices.Values([]uint64{c.Serial, rc.Serial, tc.Serial}))) {
		t.Fatalf("list %+v", l)
	}
	m, err := d.Material()
	if err != nil || !bytes.Equal(m.Revocations, list) {
		t.Fatalf("the revocations file is not the list: %v", err)
	}
	// p can no longer join nor renew.
	if _, err := d.Redeem(mustTokenAt(t, d, grid.RoleWorker, nil, time.Hour, now), p, now); !errors.Is(err, grid.ErrRevoked) {
		t.Fatalf("a revoked peer redeemed: %v", err)
	}
	for _, cert := range [][]byte{admitted, rb, b} {
		if _, err := d.Renew(cert, p, now); !errors.Is(err, grid.ErrRevoked) {
			t.Fatalf("a revoked peer renewed: %v", err)
		}
	}
	ms, _ = d.Members()
	if i := slices.IndexFunc(ms, func(m Member) bool { return m.Peer == p }); i < 0 || !ms[i].Revoked {
		t.Fatalf("members after the revocation: %+v", ms)
	}

	// Revoke again: nothing added, the sequence grows. Another peer:
	// both peers' serials.
	q := newPeer(t)
	qtext, _ := d.Admit(q, grid.RoleReader, nil, week, now)
	_, _, qc, _ := grid.ParseCertText(qtext)
	list2, added, err := d.Revoke(p, now)
	if err != nil || added != 0 {
		t.Fatalf("revoke again: %d added, %v", added, err)
	}
	list3, added, err := d.Revoke(q, now)
	if err != nil || added != 1 {
		t.Fatalf("revoke q: %d added, %v", added, err)
	}
	l2, _ := grid.DecodeRevocations(list2, k.Public())
	l3, _ := grid.DecodeRevocations(list3, k.Public())
	if l2.Seq != 2 || l3.Seq != 3 || len(l3.Serials) != 4 || !l3.Has(qc.Serial) || !l3.Has(tc.Serial) {
		t.Fatalf("lists %+v, %+v", l2, l3)
	}

	// An unknown peer.
	u := newPeer(t)
	_, _, err = d.Revoke(u, now)
	if !errors.Is(err, ErrNotMember) || !strings.Contains(err.Error(), "peer "+u.String()+" is not a member of grid-") {
		t.Fatalf("revoke an unknown peer: %v", err)
	}

	// Admitted again, p is a member again.
	if _, err := d.Admit(p, grid.RoleWorker, nil, week, now); err != nil {
		t.Fatal(err)
	}
	ms, _ = d.Members()
	if i := slices.IndexFunc(ms, func(m Member) bool { return m.Peer == p }); i < 0 || ms[i].Revoked || ms[i].How != HowAdmit {
		t.Fatalf("members after admitting p again: %+v", ms)
	}
	if !slices.IsSortedFunc(ms, func(a, b Member) int { return strings.Compare(a.Peer.String(), b.Peer.String()) }) || len(ms) != 3 {
		t.Fatalf("members not sorted, or not root, p and q: %+v", ms)
	}
	_ = self
}

// The ledger survives being lost: serials and sequence numbers go on
// above those of the files still there.
func TestLedgerLost(t *testing.T) {
	d, _ := newRoot(t)
	p := newPeer(t)
	text, _ := d.Admit(p, grid.RoleWorker, nil, week, t0)
	_, _, c, _ := grid.ParseCertText(text)
	list, _, err := d.Revoke(p, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(d.Path(), ledgerFile)); err != nil {
		t.Fatal(err)
	}
	text2, err := d.Admit(newPeer(t), grid.RoleWorker, nil, week, t0)
	if err != nil {
		t.Fatal(err)
	}
	_, _, c2, _ := grid.ParseCertText(text2)
	if c2.Serial <= c.Serial {
		t.Fatalf("serial %d after losing the ledger, %d issued before", c2.Serial, c.Serial)
	}
	list2, _, err := d.Revoke(c2.Peer, t0)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := d.Key()
	l1, _ := grid.DecodeRevocations(list, k.Public())
	l2, _ := grid.DecodeRevocations(list2, k.Public())
	if l2.Seq <= l1.Seq {
		t.Fatalf("seq %d after losing the ledger, %d before", l2.Seq, l1.Seq)
	}
}

func TestPrune(t *testing.T) {
	d, self := newRoot(t)
	p, q := newPeer(t), newPeer(t)
	// The token is still unexpired at the renewal, its certificate
	// valid 24h.
	tok := mustToken(t, d, grid.RoleWorker, nil, 24*time.Hour)
	b, err := d.Redeem(tok, p, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Renew(b, p, t0.Add(12*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Admit(q, grid.RoleWorker, nil, time.Hour, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Revoke(q, t0); err != nil {
		t.Fatal(err)
	}
	read := func() ledger {
		var l ledger
		b, _ := os.ReadFile(filepath.Join(d.Path(), ledgerFile))
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	if l := read(); len(l.Redeemed) != 1 || len(l.Members) != 4 {
		t.Fatalf("before: %+v", l)
	}
	// Two days on: the token expired (its nonce goes), p's first
	// certificate expired (its renewal stays), q's revoked one stays as
	// q's newest.
	later := t0.Add(50 * time.Hour)
	if _, err := d.Admit(newPeer(t), grid.RoleReader, nil, week, later); err != nil {
		t.Fatal(err)
	}
	l := read()
	if len(l.Redeemed) != 0 {
		t.Fatalf("an expired token's nonce kept: %+v", l.Redeemed)
	}
	var peers []string
	for _, e := range l.Members {
		peers = append(peers, e.Peer)
	}
	if len(l.Members) != 4 || count(peers, p.String()) != 1 || !slices.Contains(peers, q.String()) || !slices.Contains(peers, self.String()) {
		t.Fatalf("after pruning: %+v", l.Members)
	}
	// A revocation list signed now still names q's certificate (a year
	// after it ended: records dated inside its validity stay refused),
	// and no longer after that; q stays revoked.
	list, _, err := d.Revoke(q, later)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := d.Key()
	if rl, _ := grid.DecodeRevocations(list, k.Public()); len(rl.Serials) != 1 {
		t.Fatalf("list %+v does not name a certificate revoked 2 days ago", rl)
	}
	muchLater := t0.Add(400 * 24 * time.Hour)
	if list, _, err = d.Revoke(q, muchLater); err != nil {
		t.Fatal(err)
	}
	if rl, _ := grid.DecodeRevocations(list, k.Public()); len(rl.Serials) != 0 {
		t.Fatalf("list %+v names a certificate that ended over a year ago", rl)
	}
	later = muchLater
	if _, err := d.Redeem(mustTokenAt(t, d, grid.RoleWorker, nil, time.Hour, later), q, later); !errors.Is(err, grid.ErrRevoked) {
		t.Fatalf("a revoked peer redeemed after pruning: %v", err)
	}
}

func count(s []string, x string) int {
	n := 0
	for _, y := range s {
		if y == x {
			n++
		}
	}
	return n
}

func TestSaveRevocations(t *testing.T) {
	root, _ := newRoot(t)
	p := newPeer(t)
	text, _ := root.Admit(p, grid.RoleWorker, nil, week, t0)
	pub, cert, _, _ := grid.ParseCertText(text)
	m := Open(t.TempDir())
	l1, _, _ := root.Revoke(p, t0)
	if err := m.SaveRevocations(l1); !errors.Is(err, ErrNoGrid) {
		t.Fatalf("revocations saved on an open node: %v", err)
	}
	if _, err := os.Stat(m.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("SaveRevocations on an open node made its grid directory: %v", err)
	}
	if err := m.SaveMember(pub, cert); err != nil {
		t.Fatal(err)
	}
	l2, _, _ := root.Revoke(p, t0)
	l3, _, _ := root.Revoke(p, t0)
	for _, step := range []struct {
		save, want []byte
	}{{l2, l2}, {l1, l2}, {l2, l2}, {l3, l3}, {l1, l3}} {
		if err := m.SaveRevocations(step.save); err != nil {
			t.Fatal(err)
		}
		got, err := m.Material()
		if err != nil || !bytes.Equal(got.Revocations, step.want) {
			t.Fatalf("after saving a list: %v, not the newest", err)
		}
	}
	// Another grid's list, a damaged one.
	other, _ := newRoot(t)
	if _, err := other.Admit(p, grid.RoleWorker, nil, week, t0); err != nil {
		t.Fatal(err)
	}
	ol, _, _ := other.Revoke(p, t0)
	if err := m.SaveRevocations(ol); !errors.Is(err, grid.ErrOtherGrid) {
		t.Fatalf("another grid's list: %v", err)
	}
	bad := bytes.Clone(l3)
	bad[len(bad)-1] ^= 1
	if err := m.SaveRevocations(bad); !errors.Is(err, grid.ErrBadSignature) {
		t.Fatalf("a damaged list: %v", err)
	}
}

func TestSaveMember(t *testing.T) {
	root, _ := newRoot(t)
	p := newPeer(t)
	text, _ := root.Admit(p, grid.RoleWorker, []string{"w/"}, week, t0)
	pub, cert, _, _ := grid.ParseCertText(text)
	m := Open(filepath.Join(t.TempDir(), "newhome"))
	if err := m.SaveMember(pub, cert); err != nil {
		t.Fatal(err)
	}
	if got := mode(t, m.Path()); got != 0o700 {
		t.Errorf("directory mode %o, want 700", got)
	}
	mat, err := m.Material()
	if err != nil || !mat.Pub.Equal(pub) || !bytes.Equal(mat.Cert, cert) || mat.Revocations != nil {
		t.Fatalf("material %+v, %v", mat, err)
	}
	// A renewed certificate replaces it.
	rb, err := root.Renew(cert, p, t0.Add(4*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SaveMember(pub, rb); err != nil {
		t.Fatal(err)
	}
	if mat, _ := m.Material(); !bytes.Equal(mat.Cert, rb) {
		t.Fatal("the renewed certificate was not kept")
	}
	// Another grid's: refused, naming both grids.
	other, _ := newRoot(t)
	otext, _ := other.Admit(p, grid.RoleWorker, nil, week, t0)
	opub, ocert, _, _ := grid.ParseCertText(otext)
	err = m.SaveMember(opub, ocert)
	if err == nil || !strings.Contains(err.Error(), grid.IDOf(pub).String()) || !strings.Contains(err.Error(), grid.IDOf(opub).String()) {
		t.Fatalf("another grid's certificate: %v", err)
	}
	if mat, _ := m.Material(); !mat.Pub.Equal(pub) || !bytes.Equal(mat.Cert, rb) {
		t.Fatal("another grid's material was written")
	}
	// A certificate that does not match the key it comes with.
	if err := Open(t.TempDir()).SaveMember(pub, ocert); !errors.Is(err, grid.ErrOtherGrid) {
		t.Fatalf("a mismatched certificate: %v", err)
	}
	// A member has no key.
	if _, err := m.NewToken(grid.RoleWorker, nil, time.Hour, time.Hour, t0); !errors.Is(err, ErrNoKey) {
		t.Fatalf("a token made without the key: %v", err)
	}
	if _, err := m.Members(); !errors.Is(err, ErrNoKey) {
		t.Fatalf("members without the key: %v", err)
	}
	if _, _, err := m.Revoke(p, t0); !errors.Is(err, ErrNoKey) {
		t.Fatalf("revoke without the key: %v", err)
	}
	if _, err := m.Admit(p, grid.RoleWorker, nil, week, t0); !errors.Is(err, ErrNoKey) {
		t.Fatalf("admit without the key: %v", err)
	}
}

// Damaged files are errors naming the file.
func TestDamagedFiles(t *testing.T) {
	d, _ := newRoot(t)
	for name, content := range map[string]string{
		certFile:   "garbage",
		pubFile:    "short",
		ledgerFile: "{not json",
	} {
		path := filepath.Join(d.Path(), name)
		old, _ := os.ReadFile(path)
		os.WriteFile(path, []byte(content), 0o600)
		var err error
		if name == ledgerFile {
			_, err = d.Members()
		} else {
			_, err = d.Material()
		}
		if err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("damaged %s: %v", name, err)
		}
		os.WriteFile(path, old, 0o600)
	}
	// The ledger of another grid.
	other, _ := newRoot(t)
	b, _ := os.ReadFile(filepath.Join(other.Path(), ledgerFile))
	os.WriteFile(filepath.Join(d.Path(), ledgerFile), b, 0o600)
	if _, err := d.Admit(newPeer(t), grid.RoleWorker, nil, week, t0); err == nil || !strings.Contains(err.Error(), "the ledger of grid-") {
		t.Fatalf("another grid's ledger: %v", err)
	}
}

func TestTokens(t *testing.T) {
	d, _ := newRoot(t)
	s, err := d.NewToken(grid.RoleHead, []string{"a/", "b/"}, time.Hour, week, t0)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := grid.ParseToken(s)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := d.Key()
	if tok.Role != grid.RoleHead || !slices.Equal(tok.Prefixes, []string{"a/", "b/"}) || tok.CertTTL != week || !tok.GridKey.Equal(k.Public()) ||
		tok.NotAfter != t0.Add(time.Hour).Unix() {
		t.Fatalf("token %+v", tok)
	}
	if _, err := d.NewToken(grid.RoleHead, nil, 31*24*time.Hour, week, t0); err == nil {
		t.Fatal("a token of 31 days")
	}
}

// The lock holds across processes: copies of this test binary redeem one
// token at once, and one of them wins.
func TestRedeemAcrossProcesses(t *testing.T) {
	if os.Getenv("GRIDSTORE_REDEEM_HOME") != "" {
		return // a child: see TestHelperRedeem
	}
	d, _ := newRoot(t)
	tok := mustToken(t, d, grid.RoleWorker, nil, time.Hour)
	const n = 4
	var wg sync.WaitGroup
	codes := make([]int, n)
	outs := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRedeem$", "-test.count=1")
			cmd.Env = append(os.Environ(), "GRIDSTORE_REDEEM_HOME="+filepath.Dir(d.Path()), "GRIDSTORE_REDEEM_TOKEN="+tok)
			out, err := cmd.CombinedOutput()
			outs[i] = string(out)
			if ee, ok := err.(*exec.ExitError); ok {
				codes[i] = ee.ExitCode()
			} else if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	won := 0
	for i, out := range outs {
		switch {
		case strings.Contains(out, "REDEEMED"):
			won++
		case !strings.Contains(out, "ALREADY"):
			t.Errorf("child %d (exit %d): %s", i, codes[i], out)
		}
	}
	if won != 1 {
		t.Fatalf("%d processes redeemed the token: %q", won, outs)
	}
}

func TestHelperRedeem(t *testing.T) {
	home := os.Getenv("GRIDSTORE_REDEEM_HOME")
	if home == "" {
		t.Skip("run by TestRedeemAcrossProcesses")
	}
	_, err := Open(home).Redeem(os.Getenv("GRIDSTORE_REDEEM_TOKEN"), newPeer(t), t0)
	switch {
	case err == nil:
		fmt.Println("REDEEMED")
	case errors.Is(err, ErrRedeemed):
		fmt.Println("ALREADY")
	default:
		t.Fatal(err)
	}
}

// A renewal flood does not fill the ledger: the same certificate renewed
// again and again gets its one renewal back (the same bytes, the ledger
// not even rewritten), a renewal is not renewed before half its life,
// and a certificate that is no longer the peer's newest is not renewed.
func TestRenewOnce(t *testing.T) {
	d, _ := newRoot(t)
	p := newPeer(t)
	text, err := d.Admit(p, grid.RoleWorker, []string{"w/"}, 2*24*time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	_, cert, c, _ := grid.ParseCertText(text)
	if _, err := d.Renew(cert, p, t0.Add(23*time.Hour)); !errors.Is(err, grid.ErrTooEarly) || !strings.Contains(err.Error(), "half its life") {
		t.Fatalf("a renewal before half its life: %v", err)
	}
	now := t0.Add(24 * time.Hour)
	first, err := d.Renew(cert, p, now)
	if err != nil {
		t.Fatal(err)
	}
	ledgerPath := filepath.Join(d.Path(), ledgerFile)
	before, _ := os.ReadFile(ledgerPath)
	st0, _ := os.Stat(ledgerPath)
	for i := range 1000 {
		again, err := d.Renew(cert, p, now.Add(time.Duration(i)*time.Minute))
		if err != nil || !bytes.Equal(again, first) {
			t.Fatalf("renewal %d of the same certificate: %v (same bytes: %v)", i+2, err, bytes.Equal(again, first))
		}
	}
	after, _ := os.ReadFile(ledgerPath)
	st1, _ := os.Stat(ledgerPath)
	if !bytes.Equal(before, after) || !st1.ModTime().Equal(st0.ModTime()) {
		t.Fatal("repeated renewals rewrote the ledger")
	}
	ms, _ := d.Members()
	rc := mustDecode(t, d, first)
	if i := slices.IndexFunc(ms, func(m Member) bool { return m.Peer == p }); i < 0 || ms[i].Serial != rc.Serial {
		t.Fatalf("members %+v", ms)
	}
	var l ledger
	if err := json.Unmarshal(after, &l); err != nil {
		t.Fatal(err)
	}
	if n := len(l.Members); n != 3 { // the root's, p's admission and its one renewal
		t.Fatalf("%d certificates on record after 1001 renewals of one, want 3", n)
	}
	// The renewal is not renewed at once either.
	if _, err := d.Renew(first, p, now.Add(time.Minute)); !errors.Is(err, grid.ErrTooEarly) {
		t.Fatalf("the renewal renewed at once: %v", err)
	}
	// Half through its life, it is; then the first certificate is
	// neither renewed nor answered with the old renewal any more.
	later := now.Add(24 * time.Hour) // the first certificate's end
	second, err := d.Renew(first, p, later)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Renew(cert, p, later); !errors.Is(err, ErrNotNewest) || !strings.Contains(err.Error(), "renewed already") {
		t.Fatalf("renewing serial %d after its renewal was renewed: %v", c.Serial, err)
	}
	if sc := mustDecode(t, d, second); sc.Role != grid.RoleWorker || !slices.Equal(sc.Prefixes, []string{"w/"}) ||
		sc.NotAfter-sc.NotBefore != c.NotAfter-c.NotBefore {
		t.Fatalf("second renewal %+v", sc)
	}
}

// A member given a new certificate by omst grid admit (a lesser role)
// cannot renew its old one: renewal takes the ledger's newest, and only
// that.
func TestRenewAfterAdmitAgain(t *testing.T) {
	d, _ := newRoot(t)
	p := newPeer(t)
	text, _ := d.Admit(p, grid.RoleClient, nil, 2*24*time.Hour, t0)
	_, client, cc, _ := grid.ParseCertText(text)
	text2, err := d.Admit(p, grid.RoleReader, nil, 2*24*time.Hour, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, reader, _, _ := grid.ParseCertText(text2)
	now := t0.Add(30 * time.Hour)
	_, err = d.Renew(client, p, now)
	if !errors.Is(err, ErrNotNewest) || !strings.Contains(err.Error(), fmt.Sprintf("certificate %d of", cc.Serial)) || !strings.Contains(err.Error(), "admit") {
		t.Fatalf("renewal of the client certificate after a reader one was issued: %v", err)
	}
	b, err := d.Renew(reader, p, now)
	if err != nil {
		t.Fatal(err)
	}
	if c := mustDecode(t, d, b); c.Role != grid.RoleReader {
		t.Fatalf("renewed as %s, want reader", c.Role)
	}
}

// A renewal takes its role and prefixes from the ledger's record, not
// from the certificate shown (the same serial, so the same, unless the
// ledger says otherwise).
func TestRenewFromTheLedger(t *testing.T) {
	d, _ := newRoot(t)
	p := newPeer(t)
	text, _ := d.Admit(p, grid.RoleHead, []string{"a/", "b/"}, 2*24*time.Hour, t0)
	_, cert, c, _ := grid.ParseCertText(text)
	k, _ := d.Key()
	unlock, err := d.lock()
	if err != nil {
		t.Fatal(err)
	}
	l, err := d.loadLedger(k)
	if err != nil {
		t.Fatal(err)
	}
	e := l.serial(c.Serial)
	e.Role, e.Prefixes = grid.RoleWorker.String(), []string{"a/"}
	if err := d.saveLedger(l); err != nil {
		t.Fatal(err)
	}
	unlock()
	b, err := d.Renew(cert, p, t0.Add(30*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rc := mustDecode(t, d, b); rc.Role != grid.RoleWorker || !slices.Equal(rc.Prefixes, []string{"a/"}) {
		t.Fatalf("renewed %s %v, want the ledger's worker [a/]", rc.Role, rc.Prefixes)
	}
}
