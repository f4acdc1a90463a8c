package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/omst-project/omst/pkg/blob"
)

func testID(seed byte) blobID {
	return (&blob.Manifest{Size: 1, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{seed}}}).CID()
}

func TestRecordsNewerWins(t *testing.T) {
	s := openStore(t, t.TempDir(), 1<<30)
	r1 := blob.Record{Name: "x/y", ID: testID(1), Size: 1, Time: 100, Origin: "peerA"}
	r0 := blob.Record{Name: "x/y", ID: testID(2), Size: 1, Time: 50, Origin: "peerB"}
	r2 := blob.Record{Name: "x/y", ID: testID(3), Size: 1, Time: 100, Origin: "peerC"} // same time, higher origin

	if ch, err := s.PutRecord(r1); err != nil || !ch {
		t.Fatalf("first record: changed=%v err=%v", ch, err)
	}
	if ch, err := s.PutRecord(r0); err != nil || ch {
		t.Fatalf("older record: changed=%v err=%v, want unchanged", ch, err)
	}
	if got, err := s.Record("x/y"); err != nil || !got.Equal(r1) {
		t.Fatalf("current %+v, %v; want %+v", got, err, r1)
	}
	// The same record again, learnt from another neighbour: no new history
	// entry, and no route (it is not current).
	if ch, _ := s.PutRecordFrom(r0, "peerZ"); ch {
		t.Fatal("duplicate older record changed current")
	}
	if routes, err := s.Routes(); err != nil || len(routes) != 0 {
		t.Fatalf("routes after an older record: %v %v", routes, err)
	}
	if ch, err := s.PutRecord(r1); err != nil || ch {
		t.Fatalf("re-put of current: changed=%v err=%v", ch, err)
	}
	if ch, err := s.PutRecord(r2); err != nil || !ch {
		t.Fatalf("tie broken by origin: changed=%v err=%v", ch, err)
	}
	h, err := s.History("x/y")
	if err != nil {
		t.Fatal(err)
	}
	want := []blobID{r2.ID, r1.ID, r0.ID}
	var got []blobID
	for _, r := range h {
		got = append(got, r.ID)
	}
	if len(h) != 3 || !slices.EqualFunc(got, want, func(a, b blobID) bool { return a.Equals(b) }) {
		t.Fatalf("history %v, want %v newest first", h, want)
	}
	if _, err := s.History("nope"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("History of unknown name: %v", err)
	}
	if _, err := s.Record("nope"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Record of unknown name: %v", err)
	}
}

func TestListByPrefix(t *testing.T) {
	s := openStore(t, t.TempDir(), 1<<30)
	for i, n := range []string{"b/c", "a/x", "ab", "a/b", "a/b/c"} {
		if _, err := s.PutRecord(blob.Record{Name: n, ID: testID(byte(i)), Time: int64(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a/b", "a/b/c", "a/x", "ab", "b/c"}},
		{"a/", []string{"a/b", "a/b/c", "a/x"}},
		{"a", []string{"a/b", "a/b/c", "a/x", "ab"}},
		{"a/b", []string{"a/b", "a/b/c"}},
		{"c", nil},
	} {
		recs, err := s.List(tc.prefix)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range recs {
			names = append(names, r.Name)
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, names, tc.want)
		}
	}
}

func TestInvalidNamesRejected(t *testing.T) {
	s := openStore(t, t.TempDir(), 1<<30)
	for _, n := range []string{"", "/abs", "a/../b", "a//b", "x\x00y", "trail/"} {
		if _, err := s.PutRecord(blob.Record{Name: n, ID: testID(1)}); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("PutRecord(%q): %v, want ErrInvalidName", n, err)
		}
		if _, err := s.Record(n); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("Record(%q): %v, want ErrInvalidName", n, err)
		}
		if err := s.RemoveName(n); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("RemoveName(%q): %v, want ErrInvalidName", n, err)
		}
		if _, err := s.Ingest(context.Background(), n, bytes.NewReader([]byte("x")), blob.MinChunkSize, "me"); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("Ingest(%q): %v, want ErrInvalidName", n, err)
		}
	}
	if _, err := s.List("/"); !errors.Is(err, blob.ErrInvalidName) {
		t.Errorf("List(\"/\"): %v, want ErrInvalidName", err)
	}
	if recs, _ := s.List(""); len(recs) != 0 {
		t.Fatalf("invalid names stored: %v", recs)
	}
}

func TestRemoveNameUnpins(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), 1<<30)
	rec, err := s.Ingest(ctx, "res/out", bytes.NewReader(randBytes(50_000, 5)), blob.MinChunkSize, "me")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Pinned(rec.ID) || s.Usage().PinnedBytes != 50_000 {
		t.Fatalf("ingested blob not pinned: %+v", s.Usage())
	}
	if err := s.RemoveName("res/out"); err != nil {
		t.Fatal(err)
	}
	if s.Pinned(rec.ID) || s.Usage().PinnedBytes != 0 {
		t.Fatal("RemoveName left the blob pinned")
	}
	if _, err := s.Record("res/out"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Record after RemoveName: %v", err)
	}
	if _, err := s.History("res/out"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("History after RemoveName: %v", err)
	}
	if err := s.RemoveName("res/out"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("second RemoveName: %v, want ErrNotFound", err)
	}
	// A blob also pinned by Pin stays pinned when the name goes.
	rec, err = s.Ingest(ctx, "res/two", bytes.NewReader(randBytes(50_000, 6)), blob.MinChunkSize, "me")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pin(rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveName("res/two"); err != nil {
		t.Fatal(err)
	}
	if !s.Pinned(rec.ID) {
		t.Fatal("RemoveName dropped an explicit Pin")
	}
	// A name learnt by PutRecord pins nothing, so removing it unpins nothing.
	if _, err := s.PutRecord(blob.Record{Name: "other", ID: rec.ID, Time: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.RemoveName("other"); err != nil || !s.Pinned(rec.ID) {
		t.Fatalf("RemoveName of an unpinning name: err %v, pinned %v", err, s.Pinned(rec.ID))
	}
}

func TestHistoryBounded(t *testing.T) {
	s := openStore(t, t.TempDir(), 1<<30)
	for i := range MaxHistory + 5 {
		// Out of order: odd times first, then even.
		tm := int64(2*i + 1)
		if i >= (MaxHistory+5)/2 {
			tm = int64(2 * (i - (MaxHistory+5)/2))
		}
		if _, err := s.PutRecord(blob.Record{Name: "h", ID: testID(byte(i)), Time: tm + 10}); err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.History("h")
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := s.Record("h")
	if len(h) != MaxHistory || !h[0].Equal(cur) {
		t.Fatalf("history of %d records (want %d), first %+v, current %+v", len(h), MaxHistory, h[0], cur)
	}
	for i := 1; i < len(h); i++ {
		if !h[i-1].Newer(h[i]) {
			t.Fatalf("history not newest first at %d", i)
		}
	}
	if h[len(h)-1].Time != 10+5 { // the five oldest (times 10..14) were dropped
		t.Fatalf("oldest kept record has time %d, want 15", h[len(h)-1].Time)
	}
}

func TestDefaultCap(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	if c := s.Usage().CapBytes; c < MinDefaultMaxBytes {
		t.Fatalf("default cap %d below the floor %d", c, MinDefaultMaxBytes)
	}
	if _, err := Open(t.TempDir(), Options{MaxBytes: -1}); err == nil {
		t.Fatal("negative MaxBytes accepted")
	}
}

// TestLargeManifest: a manifest of 500k chunks (~500 GiB at 1 MiB chunks)
// is stored, read back whole, pinned, and still pinned after a reopen. Its
// chunks need not be present: they are pinned on arrival.
func TestLargeManifest(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 1<<40)
	const n = 500_000
	m := &blob.Manifest{Size: uint64(n) << 20, ChunkSize: 1 << 20, Chunks: make([]blob.Hash, n)}
	for i := range m.Chunks {
		binary.BigEndian.PutUint64(m.Chunks[i][:], uint64(i)+1)
	}
	id, err := s.PutManifest(m)
	if err != nil {
		t.Fatalf("put manifest of %d chunks: %v", n, err)
	}
	if err := s.Pin(id); err != nil {
		t.Fatalf("pin: %v", err)
	}
	s.Close()
	s = openStore(t, dir, 1<<40)
	got, err := s.Manifest(id)
	if err != nil {
		t.Fatalf("manifest after reopen: %v", err)
	}
	if got.Size != m.Size || len(got.Chunks) != n || got.Chunks[n-1] != m.Chunks[n-1] {
		t.Fatalf("manifest read back: size %d, %d chunks", got.Size, len(got.Chunks))
	}
	if !s.Pinned(id) {
		t.Fatal("not pinned after reopen")
	}
}

// TestRoutes: a record from a neighbour that becomes current carries its
// route; a newer record (a local put, one from elsewhere) replaces it; the
// route survives a reopen and goes with RemoveName.
func TestRoutes(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	a := blob.Record{Name: "r/a", ID: testID(1), Size: 1, Time: 10, Origin: "w1"}
	b := blob.Record{Name: "r/b", ID: testID(2), Size: 1, Time: 10, Origin: "w2"}
	if ch, err := s.PutRecordFrom(a, "child1"); err != nil || !ch {
		t.Fatal(ch, err)
	}
	if _, err := s.PutRecordFrom(b, "child2"); err != nil {
		t.Fatal(err)
	}
	newer := b
	newer.Time, newer.ID = 20, testID(3)
	if _, err := s.PutRecord(newer); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, dir, 1<<30)
	routes, err := s.Routes()
	if err != nil || len(routes) != 1 || routes["r/a"] != "child1" {
		t.Fatalf("routes %v %v, want only r/a via child1", routes, err)
	}
	if err := s.RemoveName("r/a"); err != nil {
		t.Fatal(err)
	}
	if routes, _ := s.Routes(); len(routes) != 0 {
		t.Fatalf("route kept after RemoveName: %v", routes)
	}
}

// TestMigrateIndexV1: an index written by version 1 (records with a via
// field, index version 1) opens as version 2: records read the same, the
// current record's via becomes the name's route, history keeps one entry
// per record.
func TestMigrateIndexV1(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, 1<<30)
	old := blob.Record{Name: "m/x", ID: testID(1), Size: 1, Time: 10, Origin: "w1"}
	cur := blob.Record{Name: "m/x", ID: testID(2), Size: 1, Time: 20, Origin: "w1"}
	v1 := func(r blob.Record, via string) []byte {
		enc := r.Encode()
		b := append([]byte{1}, enc[1:]...)
		return append(binary.BigEndian.AppendUint16(b, uint16(len(via))), via...)
	}
	// Write the version 1 layout by hand.
	err := s.db.Update(func(txn *badger.Txn) error {
		for _, e := range []struct {
			k, v []byte
		}{
			{recordKey("m/x"), v1(cur, "child7")},
			{append(historyPrefix("m/x"), 1), v1(old, "")},
			{append(historyPrefix("m/x"), 2), v1(cur, "child7")},
			{[]byte(keyVersion), binary.BigEndian.AppendUint32(nil, 1)},
		} {
			if err := txn.Set(e.k, e.v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a second open finds version 2 and changes nothing
		s = openStore(t, dir, 1<<30)
		if got, err := s.Record("m/x"); err != nil || !got.Equal(cur) {
			t.Fatalf("record after migration: %+v %v", got, err)
		}
		if routes, err := s.Routes(); err != nil || routes["m/x"] != "child7" {
			t.Fatalf("routes after migration: %v %v", routes, err)
		}
		h, err := s.History("m/x")
		if err != nil || len(h) != 2 || !h[0].Equal(cur) || !h[1].Equal(old) {
			t.Fatalf("history after migration: %+v %v", h, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
