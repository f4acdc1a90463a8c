package dht

import (
	"context"
	"encoding/base32"
	"errors"
	"fmt"
	"testing"
	"time"

	ds "github.com/ipfs/go-datastore"
	dsq "github.com/ipfs/go-datastore/query"
	kad "github.com/libp2p/go-libp2p-kad-dht"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/omst-project/omst/internal/p2ptest"
	"github.com/omst-project/omst/pkg/blob"
)

// storedValue is a name record of origin (key) as kad stores it, and its
// datastore key.
func storedValue(t *testing.T, k crypto.PrivKey, name string) (ds.Key, []byte) {
	t.Helper()
	id, _ := peer.IDFromPrivateKey(k)
	b, err := SignRecord(k, blob.Record{Name: name, ID: blobID(t, name), Size: 1, Time: 1, Origin: id.String()})
	if err != nil {
		t.Fatal(err)
	}
	rec := record.MakePutRecord(NameKey(name), b)
	v, err := proto.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return ds.NewKey("/omst-name/" + base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString([]byte(NameKey(name)))), v
}

func provKey(key, p string) ds.Key {
	enc := base32.StdEncoding.WithPadding(base32.NoPadding)
	return ds.NewKey(providersPrefix + enc.EncodeToString([]byte(key)) + "/" + enc.EncodeToString([]byte(p)))
}

func countStored(t *testing.T, s *boundedStore, prefix string) int {
	t.Helper()
	res, err := s.Query(context.Background(), dsq.Query{Prefix: prefix, KeysOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	all, err := res.Rest()
	if err != nil {
		t.Fatal(err)
	}
	return len(all)
}

// TestBoundedStore: the store refuses name records past the per-origin,
// total and byte bounds and provider records past the per-peer, per-key
// and total bounds (in a batch: skipped, the others committed); a
// replacement and this node's own records pass; deletes free room.
func TestBoundedStore(t *testing.T) {
	ctx := context.Background()
	self, _ := newKey(t)
	selfID, _ := peer.IDFromPrivateKey(self)
	s := newBoundedStore(selfID, StoreLimits{Names: 6, NamesPerOrigin: 4, NameBytes: 1 << 30,
		Providers: 6, ProvidersPerPeer: 4, ProvidersPerKey: 3})
	kA, _ := newKey(t)
	kB, _ := newKey(t)
	var keysA []ds.Key
	for i := range 6 {
		key, v := storedValue(t, kA, fmt.Sprintf("a/%d", i))
		err := s.Put(ctx, key, v)
		if i < 4 && err != nil {
			t.Fatalf("name %d of origin a: %v", i, err)
		}
		if i >= 4 && !errors.Is(err, ErrStoreFull) {
			t.Fatalf("name %d of origin a, past its 4: %v, want ErrStoreFull", i, err)
		}
		keysA = append(keysA, key)
	}
	// A newer value under a key already kept replaces it.
	if err := s.Put(ctx, keysA[0], func() []byte { _, v := storedValue(t, kA, "a/0"); return v }()); err != nil {
		t.Fatalf("a replacement at the bound: %v", err)
	}
	for i := range 3 {
		key, v := storedValue(t, kB, fmt.Sprintf("b/%d", i))
		if err := s.Put(ctx, key, v); (i < 2) != (err == nil) {
			t.Fatalf("name %d of origin b (6 in all): %v", i, err)
		}
	}
	// This node's own names pass any bound.
	for i := range 10 {
		key, v := storedValue(t, self, fmt.Sprintf("own/%d", i))
		if err := s.Put(ctx, key, v); err != nil {
			t.Fatalf("own name %d: %v", i, err)
		}
	}
	if st := s.stats(); st.Names != 6 || st.Refused != 3 {
		t.Fatalf("stats %+v, want 6 names, 3 refused", st)
	}
	if n := countStored(t, s, "/omst-name"); n != 16 {
		t.Fatalf("%d values stored, want 16", n)
	}
	// A delete frees room for the origin.
	if err := s.Delete(ctx, keysA[1]); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, keysA[4], func() []byte { _, v := storedValue(t, kA, "a/4"); return v }()); err != nil {
		t.Fatalf("after a delete: %v", err)
	}

	// Provider records, as kad writes them: in batches.
	b, _ := s.Batch(ctx)
	for i := range 5 {
		b.Put(ctx, provKey(fmt.Sprintf("blob%d", i), "peerA"), []byte{1}) // 4 of peerA's
	}
	for _, p := range []string{"peerB", "peerC", "peerD"} {
		b.Put(ctx, provKey("popular", p), []byte{1}) // 3 of one blob... then the total
	}
	b.Put(ctx, provKey("blob9", string(selfID)), []byte{1}) // own: always
	if err := b.Commit(ctx); err != nil {
		t.Fatalf("a batch with refused writes: %v", err)
	}
	if n := countStored(t, s, providersPrefix); n != 7 {
		t.Fatalf("%d provider records stored, want 4 of peer A, 2 of the popular blob (the total), 1 own", n)
	}
	b, _ = s.Batch(ctx)
	b.Delete(ctx, provKey("blob0", "peerA"))
	b.Delete(ctx, provKey("never", "stored"))
	b.Put(ctx, provKey("popular", "peerE"), []byte{1})
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.stats(); st.Providers != 6 {
		t.Fatalf("providers %d after a delete and a put, want 6", st.Providers)
	}
	b, _ = s.Batch(ctx)
	b.Put(ctx, provKey("popular", "peerF"), []byte{1}) // the popular blob has 3
	b.Commit(ctx)
	if has, _ := s.Has(ctx, provKey("popular", "peerF")); has {
		t.Fatal("a fourth provider of one blob was kept")
	}

	// The byte bound.
	small := newBoundedStore(selfID, StoreLimits{NameBytes: 3000})
	var n int
	for i := range 20 {
		key, v := storedValue(t, kA, fmt.Sprintf("big/%d", i))
		if err := small.Put(ctx, key, v); err != nil {
			if !errors.Is(err, ErrStoreFull) {
				t.Fatal(err)
			}
			break
		}
		n++
	}
	if st := small.stats(); n == 0 || n == 20 || st.NameBytes > 3000 {
		t.Fatalf("%d names kept in 3000 bytes (%+v)", n, st)
	}
}

// A member floods a node with name records and provider records through
// the DHT protocol: the node keeps its bound of each and refuses the rest,
// and an honest node's name and provider record still get in.
func TestStoreFlood(t *testing.T) {
	lim := StoreLimits{Names: 150, NamesPerOrigin: 100, Providers: 150, ProvidersPerPeer: 100}
	hosts, dhts := chain(t, 2, func(i int, c *Config) { c.Limits = lim })
	target := dhts[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	flooder := p2ptest.NewHost(t)
	fk, err := kad.New(flooder, kad.Mode(kad.ModeClient), kad.ProtocolPrefix(Prefix),
		kad.BootstrapPeers(info(hosts[0])), kad.Validator(record.NamespacedValidator{NameNamespace: acceptAll{}}))
	if err != nil {
		t.Fatal(err)
	}
	defer fk.Close()
	for fk.RoutingTable().Size() == 0 && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	key := flooder.Peerstore().PrivKey(flooder.ID())
	const flood = 400
	for i := range flood {
		r := blob.Record{Name: fmt.Sprintf("flood/%d", i), ID: blobID(t, fmt.Sprint(i)), Size: 1, Time: time.Now().UnixNano(), Origin: flooder.ID().String()}
		v, err := SignRecord(key, r)
		if err != nil {
			t.Fatal(err)
		}
		_ = fk.PutValue(ctx, NameKey(r.Name), v)
		_ = fk.Provide(ctx, blobID(t, fmt.Sprint("p", i)), true)
	}
	names := countStored(t, target.store, "/omst-name")
	if names != lim.NamesPerOrigin {
		t.Fatalf("the node keeps %d of the flood's %d names, want its bound %d", names, flood, lim.NamesPerOrigin)
	}
	// Provider records reach the datastore in batches of 256 (kad's): the
	// first batch, all the flooder's, fills its share.
	if provs := countStored(t, target.store, providersPrefix); provs != lim.ProvidersPerPeer {
		t.Fatalf("the node keeps %d of the flood's %d provider records, want its bound %d", provs, flood, lim.ProvidersPerPeer)
	}
	if st, want := target.StoreStats(), uint64(flood-lim.NamesPerOrigin+256-lim.ProvidersPerPeer); st.Refused < want {
		t.Fatalf("stats %+v: want at least %d refused", st, want)
	}

	// Normal use goes on: the other node's name and blob get in.
	r := blob.Record{Name: "results/honest", ID: blobID(t, "honest"), Size: 1, Time: time.Now().UnixNano(), Origin: hosts[1].ID().String()}
	if err := dhts[1].PutName(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got, err := target.Name(ctx, r.Name); err != nil || !got.Equal(r) {
		t.Fatalf("an honest name after the flood: %+v, %v", got, err)
	}
	if err := dhts[1].Provide(ctx, blobID(t, "honest blob")); err != nil {
		t.Fatal(err)
	}
	providersOf(t, target, blobID(t, "honest blob"), hosts[1].ID())
}
