package dht

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	kad "github.com/libp2p/go-libp2p-kad-dht"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/p2ptest"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/member"
)

// TestSelectName: selectName's rule over records and removals, by pairs
// and sets: the newest record, unless a newer removal by its origin or a
// client withdraws it.
func TestSelectName(t *testing.T) {
	r := func(origin string, at int64) *nameValue {
		return &nameValue{rec: blob.Record{Name: "n", Time: at, Origin: origin}}
	}
	d := func(origin string, at int64) *nameValue {
		return &nameValue{rec: blob.Record{Name: "n", Time: at, Origin: origin}, removal: true}
	}
	client := func(v *nameValue) *nameValue { v.byClient = true; return v }
	for _, tc := range []struct {
		what string
		vals []*nameValue
		want int
	}{
		{"the newest record", []*nameValue{r("a", 1), r("b", 2)}, 1},
		{"a tie in time: the greater origin", []*nameValue{r("b", 2), r("a", 2)}, 0},
		{"the origin's newer removal", []*nameValue{r("a", 1), d("a", 2)}, 1},
		{"the origin's older removal loses", []*nameValue{d("a", 1), r("a", 2)}, 1},
		{"another origin's newer removal loses", []*nameValue{r("a", 1), d("b", 9)}, 0},
		{"... in either order", []*nameValue{d("b", 9), r("a", 1)}, 1},
		{"a client's newer removal", []*nameValue{r("a", 1), client(d("c", 2))}, 1},
		{"a client's older removal loses", []*nameValue{client(d("c", 1)), r("a", 2)}, 1},
		{"the origin's removal loses to a client's later rebind", []*nameValue{r("a", 1), r("c", 2), d("a", 3)}, 1},
		{"the origin's removal of the newest record", []*nameValue{r("b", 1), r("a", 2), d("a", 3)}, 2},
		{"removals only: the newest", []*nameValue{d("a", 1), d("b", 3), d("c", 2)}, 1},
		{"the newest of the withdrawing removals", []*nameValue{r("a", 1), d("a", 2), client(d("c", 3)), d("b", 4)}, 2},
		{"invalid values are never chosen", []*nameValue{nil, r("a", 1), nil}, 1},
		{"none valid", []*nameValue{nil, nil}, -1},
		{"none", nil, -1},
	} {
		if got := selectName(tc.vals); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.what, got, tc.want)
		}
	}
}

// gridMember is a closed grid's identity for the validator's tests.
type gridMember struct {
	key crypto.PrivKey
	id  string
	adm *member.Admission
}

func newGridMember(t *testing.T, k grid.Key, key crypto.PrivKey, role grid.Role, prefixes ...string) gridMember {
	t.Helper()
	if key == nil {
		key, _ = newKey(t)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cert, err := k.Issue(grid.Cert{Peer: id, Role: role, Prefixes: prefixes, NotBefore: now.Add(-time.Hour).Unix(),
		NotAfter: now.Add(time.Hour).Unix(), Serial: uint64(now.UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := member.New(member.Config{}, member.Material{GridKey: k.Public(), Cert: cert})
	if err != nil {
		t.Fatal(err)
	}
	return gridMember{key: key, id: id.String(), adm: adm}
}

// put returns m's signed, proved record of name at time at.
func (m gridMember) put(t *testing.T, name string, at time.Time) []byte {
	t.Helper()
	r, err := m.adm.Prove(m.key, blob.Record{Name: name, ID: blobID(t, name+m.id), Size: 1, Time: at.UnixNano(), Origin: m.id})
	if err != nil {
		t.Fatal(err)
	}
	b, err := SignRecord(m.key, r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// remove returns m's signed, proved removal of name at time at.
func (m gridMember) remove(t *testing.T, name string, at time.Time) []byte {
	t.Helper()
	r, err := m.adm.ProveRemoval(m.key, blob.Record{Name: name, ID: blobID(t, name), Size: 1, Time: at.UnixNano(), Origin: m.id})
	if err != nil {
		t.Fatal(err)
	}
	b, err := SignRemoval(m.key, r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRemovalsInAClosedGrid: the validator of a closed grid's node (its
// checks pkg/member's) accepts a removal only with a proof from a member
// that may write the name, never dated in the future, and lets it win
// only over records of its remover's, unless the remover is a client.
func TestRemovalsInAClosedGrid(t *testing.T) {
	k, _ := grid.NewKey()
	now := time.Now()
	owner := newGridMember(t, k, nil, grid.RoleWorker, "results/a/")
	peerW := newGridMember(t, k, nil, grid.RoleWorker, "results/a/") // a worker sharing owner's prefix
	otherW := newGridMember(t, k, nil, grid.RoleWorker, "results/b/")
	reader := newGridMember(t, k, nil, grid.RoleReader)
	client := newGridMember(t, k, nil, grid.RoleClient)
	node := newGridMember(t, k, nil, grid.RoleHead, "results/")
	v := nameValidator{rejected: new(atomic.Uint64), check: node.adm.CheckRecord, checkRemoval: node.adm.CheckRemoval,
		now: func() time.Time { return now }}
	const name = "results/a/out"
	key := NameKey(name)
	put := owner.put(t, name, now.Add(-time.Minute))

	// A reader proves no removal (its daemon refuses); one made by hand,
	// with the reader's certificate and a removal proof in due form, and
	// dated at the end of time, is refused, and loses to the record.
	if _, err := reader.adm.ProveRemoval(reader.key, blob.Record{Name: name, Time: now.UnixNano(), Origin: reader.id}); !errors.Is(err, grid.ErrNotAllowed) {
		t.Fatalf("a reader's daemon proved a removal: %v", err)
	}
	byReader := handProvedRemoval(t, reader, name, now)
	if err := v.Validate(key, byReader); !errors.Is(err, member.ErrBadRecord) {
		t.Fatalf("a reader's removal: %v, want ErrBadRecord", err)
	}
	endOfTime := handProvedRemoval(t, reader, name, time.Unix(0, 1<<62))
	if err := v.Validate(key, endOfTime); err == nil {
		t.Fatal("a reader's removal dated at the end of time validated")
	}
	// A worker outside the name's prefix: refused.
	if err := v.Validate(key, handProvedRemoval(t, otherW, name, now)); !errors.Is(err, member.ErrBadRecord) {
		t.Fatalf("a removal outside the remover's prefixes: %v, want ErrBadRecord", err)
	}
	// A removal carrying a name record's proof (as daemons before this
	// check signed them): refused.
	old, _ := owner.adm.Prove(owner.key, blob.Record{Name: name, ID: blobID(t, name), Time: now.UnixNano(), Origin: owner.id})
	oldStyle, _ := SignRemoval(owner.key, old)
	if err := v.Validate(key, oldStyle); !errors.Is(err, member.ErrBadRecord) {
		t.Fatalf("a removal with a name record's proof: %v, want ErrBadRecord", err)
	}
	for what, val := range map[string][]byte{"a reader's removal": byReader, "a removal at the end of time": endOfTime} {
		if i, err := v.Select(key, [][]byte{val, put}); err != nil || i != 1 {
			t.Errorf("Select(%s, the record) = %d, %v; want the record", what, i, err)
		}
	}

	// A worker that may write the name but did not put it: its removal is
	// valid, and loses to the owner's record, in either order.
	byPeer := peerW.remove(t, name, now)
	if err := v.Validate(key, byPeer); err != nil {
		t.Fatalf("a removal by a worker allowed the name: %v", err)
	}
	for _, pair := range [][][]byte{{byPeer, put}, {put, byPeer}} {
		if i, err := v.Select(key, pair); err != nil || !bytes.Equal(pair[i], put) {
			t.Fatalf("a removal by another worker won over the owner's record (%d, %v)", i, err)
		}
	}
	// Dated in the future beyond the skew: refused, even its origin's.
	ahead := owner.remove(t, name, now.Add(ClockSkew+time.Minute))
	if err := v.Validate(key, ahead); err == nil {
		t.Fatal("a removal dated in the future validated")
	}
	if err := (nameValidator{rejected: new(atomic.Uint64), now: func() time.Time { return now }}).Validate(key, ahead); !errors.Is(err, ErrFutureRemoval) {
		t.Fatalf("a removal dated in the future, open grid: %v, want ErrFutureRemoval", err)
	}
	if err := v.Validate(key, owner.remove(t, name, now.Add(ClockSkew-time.Minute))); err != nil {
		t.Fatalf("a removal within the skew: %v", err)
	}

	// The owner's own removal wins; a client's too.
	own := owner.remove(t, name, now)
	if i, err := v.Select(key, [][]byte{put, own}); err != nil || i != 1 {
		t.Fatalf("the owner's removal: %d, %v; want it to win", i, err)
	}
	byClient := client.remove(t, name, now)
	if i, err := v.Select(key, [][]byte{put, byClient}); err != nil || i != 1 {
		t.Fatalf("a client's removal: %d, %v; want it to win", i, err)
	}
	// A client's rebind after the owner's record beats the owner's later
	// removal.
	rebind := client.put(t, name, now.Add(-30*time.Second))
	if i, err := v.Select(key, [][]byte{own, rebind}); err != nil || i != 1 {
		t.Fatalf("the owner's removal against a client's rebind: %d, %v; want the rebind", i, err)
	}
	if i, err := v.Select(key, [][]byte{put, rebind, own}); err != nil || i != 1 {
		t.Fatalf("the owner's record, a rebind, the owner's removal: %d, %v; want the rebind", i, err)
	}
}

// handProvedRemoval is a removal of name by m, its proof made by hand in
// pkg/member's format (version 1 | u16 signature | u16 certificate, signed
// over "omst name removal proof v1\x00" + the record) with m's
// certificate: what a modified daemon would send when its own refuses.
func handProvedRemoval(t *testing.T, m gridMember, name string, at time.Time) []byte {
	t.Helper()
	r := blob.Record{Name: name, ID: blobID(t, name), Size: 1, Time: at.UnixNano(), Origin: m.id}
	sig, err := m.key.Sign(append([]byte("omst name removal proof v1\x00"), r.Encode()...))
	if err != nil {
		t.Fatal(err)
	}
	cert := m.adm.CertBytes()
	p := []byte{1}
	p = append(p, byte(len(sig)>>8), byte(len(sig)))
	p = append(p, sig...)
	p = append(p, byte(len(cert)>>8), byte(len(cert)))
	r.Proof = append(p, cert...)
	b, err := SignRemoval(m.key, r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// End to end in a closed grid: a worker's name survives another worker's
// removal (valid, but not its origin's) and one dated in the future, sent
// by a node that stores anything; its origin's own removal withdraws it
// from every node.
func TestRemovalsAcrossAClosedGrid(t *testing.T) {
	k, _ := grid.NewKey()
	members := map[int]gridMember{}
	hosts, dhts := chain(t, 3, func(i int, c *Config) {
		m := newGridMember(t, k, c.Host.Peerstore().PrivKey(c.Host.ID()), grid.RoleWorker, "results/a/")
		if i == 1 {
			m = newGridMember(t, k, c.Host.Peerstore().PrivKey(c.Host.ID()), grid.RoleHead, "results/")
		}
		members[i] = m
		c.CheckRecord, c.CheckRemoval = m.adm.CheckRecord, m.adm.CheckRemoval
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const name = "results/a/x"
	owner := members[0]
	r, err := owner.adm.Prove(owner.key, blob.Record{Name: name, ID: blobID(t, "x"), Size: 1, Time: time.Now().UnixNano(), Origin: owner.id})
	if err != nil {
		t.Fatal(err)
	}
	if err := dhts[0].PutName(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got, err := dhts[2].Name(ctx, name); err != nil || !got.Equal(r) {
		t.Fatalf("Name = %+v, %v; want %+v", got, err, r)
	}

	// Another worker of the prefix, its node accepting anything.
	evil := p2ptest.NewHost(t)
	ek, err := kad.New(evil, kad.Mode(kad.ModeServer), kad.ProtocolPrefix(Prefix),
		kad.BootstrapPeers(info(hosts[2])),
		kad.Validator(record.NamespacedValidator{NameNamespace: acceptAll{}}))
	if err != nil {
		t.Fatal(err)
	}
	defer ek.Close()
	for ek.RoutingTable().Size() == 0 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	bad := newGridMember(t, k, evil.Peerstore().PrivKey(evil.ID()), grid.RoleWorker, "results/a/")
	rejected := func() (n uint64) {
		for _, d := range dhts {
			n += d.RecordsRejected()
		}
		return n
	}
	before := rejected()
	_ = ek.PutValue(ctx, NameKey(name), bad.remove(t, name, time.Now()))
	_ = ek.PutValue(ctx, NameKey(name), bad.remove(t, name, time.Now().Add(24*time.Hour)))
	if rejected() <= before {
		t.Fatalf("no node refused the removal dated in the future (rejected %d -> %d)", before, rejected())
	}
	for i, d := range dhts {
		if got, err := d.Name(ctx, name); err != nil || !got.Equal(r) {
			t.Fatalf("node %d after another worker's removals: %+v, %v; want %+v", i, got, err, r)
		}
	}

	// The owner's removal, proved as its daemon proves one.
	gone := r.Unproved()
	gone.Time = time.Now().UnixNano()
	if gone, err = owner.adm.ProveRemoval(owner.key, gone); err != nil {
		t.Fatal(err)
	}
	if err := dhts[0].RemoveName(ctx, gone); err != nil {
		t.Fatal(err)
	}
	for i, d := range dhts {
		if _, err := d.Name(ctx, name); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("node %d after its origin's removal: %v, want ErrNotFound", i, err)
		}
	}
}
