package tree

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

func listRec(name string, time int64) blob.Record {
	r := sampleRecord()
	r.Name, r.Time = name, time
	return r
}

func names(recs []blob.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s@%d ", r.Name, r.Time)
	}
	return b.String()
}

// TestListUpTheTree: a worker's List of a prefix, paged 7 records a LIST,
// gathers the records of the root (60), the head (12, two sharing names
// with the root's: the newer wins) and its own (4, one older than the
// root's of its name), sorted, one per name, nothing outside the prefix;
// the record the worker's CheckRecord refuses is dropped and counted; the
// parent's winners are kept in the worker's store. Under a head of names
// 1.2.0 the worker lists its own records, no error.
func TestListUpTheTree(t *testing.T) {
	defer func(n int) { listPageRecords = n }(listPageRecords)
	listPageRecords = 7
	root := newNode(t, nil, "", nil)
	head := newNode(t, root, "a", nil)
	w := newNode(t, head, "a", nil, func(c *nodeCfg) {
		c.CheckRecord = func(r blob.Record) error {
			if r.Name == "L/r13" {
				return fmt.Errorf("record %q: %w", r.Name, blob.ErrForbidden)
			}
			return nil
		}
	})
	waitConnected(t, head, w)
	want := map[string]int64{}
	add := func(n *testNode, name string, time int64) {
		if _, err := n.mem.PutRecordFrom(listRec(name, time), ""); err != nil {
			t.Fatal(err)
		}
		if time > want[name] {
			want[name] = time
		}
	}
	for i := range 60 {
		add(root, fmt.Sprintf("L/r%02d", i), 100)
	}
	add(root, "L", 100)   // not under "L/"
	add(root, "M/x", 100) // nor this
	for i := range 10 {
		add(head, fmt.Sprintf("L/h%02d", i), 100)
	}
	add(head, "L/r05", 200) // newer than the root's
	add(head, "L/r06", 50)  // older
	for i := range 3 {
		add(w, fmt.Sprintf("L/w%d", i), 100)
	}
	add(w, "L/r07", 10) // older than the root's
	delete(want, "L")
	delete(want, "M/x")
	delete(want, "L/r13")
	before := w.tree.Status().PeerErrors
	got, err := w.tree.List(context.Background(), "L/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d: %s", len(got), len(want), names(got))
	}
	for i, r := range got {
		if i > 0 && got[i-1].Name >= r.Name {
			t.Fatalf("not sorted at %d: %s", i, names(got))
		}
		if want[r.Name] != r.Time {
			t.Fatalf("%s@%d, want time %d", r.Name, r.Time, want[r.Name])
		}
	}
	if e := w.tree.Status().PeerErrors - before; e != 1 {
		t.Fatalf("%d peer errors, want 1 (the refused record)", e)
	}
	if r, err := w.mem.Record("L/r07"); err != nil || r.Time != 100 {
		t.Fatalf("the root's newer L/r07 not kept at the worker: %+v %v", r, err)
	}
	if _, err := w.mem.Record("L/r13"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("the refused record was kept: %v", err)
	}

	oldHead := newNode(t, root, "b", nil, speaks(ProtoNames12, ProtoNames11))
	w2 := newNode(t, oldHead, "b", nil)
	waitConnected(t, oldHead, w2)
	add(w2, "L/mine", 100)
	got, err = w2.tree.List(context.Background(), "L/")
	if err != nil || len(got) != 1 || got[0].Name != "L/mine" {
		t.Fatalf("under a 1.2.0 head: %s %v", names(got), err)
	}
	if _, err := w2.tree.List(context.Background(), "/bad"); !errors.Is(err, blob.ErrInvalidName) {
		t.Fatalf("a bad prefix: %v", err)
	}
}

// TestListPage: a relay's page (pageOf) and a page's checks.
func TestListPage(t *testing.T) {
	r := func(name string, time int64) blob.Record { return listRec(name, time) }
	for _, c := range []struct {
		name          string
		local, remote []blob.Record
		remoteMore    bool
		limit         int
		want          string
		more          bool
	}{
		{"merge", []blob.Record{r("a", 1), r("c", 1)}, []blob.Record{r("b", 1), r("c", 2)}, false, 10, "a@1 b@1 c@2 ", false},
		{"the local newer", []blob.Record{r("c", 3)}, []blob.Record{r("c", 2)}, false, 10, "c@3 ", false},
		{"cut at the limit", []blob.Record{r("a", 1), r("b", 1), r("c", 1)}, nil, false, 2, "a@1 b@1 ", true},
		// The parent has more after b: the local d waits for the next page.
		{"local past the parent's page", []blob.Record{r("a", 1), r("b", 1), r("d", 1)}, []blob.Record{r("b", 2)}, true, 10, "a@1 b@2 ", true},
		{"empty", nil, nil, false, 5, "", false},
	} {
		last := ""
		if len(c.remote) > 0 {
			last = c.remote[len(c.remote)-1].Name
		}
		page, more := pageOf(c.local, c.remote, last, c.remoteMore, c.limit)
		if names(page) != c.want || more != c.more {
			t.Errorf("%s: %q more %v, want %q more %v", c.name, names(page), more, c.want, c.more)
		}
	}
	// The bytes bound: 1,024 records of long names are more than 1 MiB.
	long := strings.Repeat("x", 1000)
	var many []blob.Record
	for i := range MaxListRecords {
		many = append(many, r(fmt.Sprintf("p/%04d%s", i, long), 1))
	}
	page, more := pageOf(many, nil, "", false, MaxListRecords)
	size := listedSize
	for _, x := range page {
		size += listedEntry(x)
	}
	if !more || len(page) == MaxListRecords || size > MaxListBytes || len(encodeListed(page, more)) > frameHeaderLen+MaxListBytes {
		t.Fatalf("%d records of %d bytes, more %v", len(page), size, more)
	}

	q := listQuery{Prefix: "p/", After: "p/b", Limit: 3}
	for _, c := range []struct {
		recs []blob.Record
		more bool
		ok   bool
	}{
		{[]blob.Record{r("p/c", 1), r("p/d", 1)}, true, true},
		{nil, false, true},
		{nil, true, false}, // more, and no records to continue after
		{[]blob.Record{r("p/c", 1), r("p/d", 1), r("p/e", 1), r("p/f", 1)}, false, false}, // over the limit
		{[]blob.Record{r("q/c", 1)}, false, false},                                        // outside the prefix
		{[]blob.Record{r("p/b", 1)}, false, false},                                        // not after After
		{[]blob.Record{r("p/d", 1), r("p/c", 1)}, false, false},                           // out of order
		{[]blob.Record{r("p/c", 1), r("p/c", 2)}, false, false},                           // twice
	} {
		err := checkListPage(q, c.recs, c.more)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, wire.ErrMalformed)) {
			t.Errorf("%s more %v: %v", names(c.recs), c.more, err)
		}
	}
}

// TestListWire: LIST and LISTED round trips, and the requests a decoder
// refuses.
func TestListWire(t *testing.T) {
	q := listQuery{Prefix: "p/", After: "p/x", Limit: 17}
	typ, payload, err := decodeFrame(encodeNamesRequest(namesRequest{Type: msgList, List: q}))
	if err != nil || typ != msgList {
		t.Fatal(typ, err)
	}
	back, err := decodeNamesRequest(typ, payload)
	if err != nil || back.List != q {
		t.Fatalf("%+v %v", back.List, err)
	}
	recs := []blob.Record{listRec("p/a", 1), listRec("p/b", 2)}
	typ, payload, err = decodeFrame(encodeListed(recs, true))
	if err != nil || typ != msgListed {
		t.Fatal(typ, err)
	}
	rep, err := decodeNamesReply(typ, payload)
	if err != nil || !rep.More || names(rep.Listed) != names(recs) {
		t.Fatalf("%+v %v", rep, err)
	}
	for _, bad := range []listQuery{
		{Prefix: "p/", Limit: 0},
		{Prefix: "p/", Limit: MaxListRecords + 1},
		{Prefix: "/p", Limit: 1},
		{Prefix: "p/", After: "q/a", Limit: 1},
		{Prefix: "p/", After: "p//a", Limit: 1},
	} {
		b := encodeList(bad)[frameHeaderLen:]
		if _, err := decodeNamesRequest(msgList, b); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if !namesVersionHas(ProtoNames, msgList) || namesVersionHas(ProtoNames12, msgList) {
		t.Fatal("LIST is names 1.3.0's only")
	}
	for _, b := range [][]byte{{}, {2, 0, 0}, {0, 0, 1}, {0, 0, 0, 9}, {0, 0x04, 0x01}} {
		if _, err := decodeNamesReply(msgListed, b); err == nil {
			t.Errorf("LISTED %x accepted", b)
		}
	}
	if !bytes.Equal(encodeListed(nil, false)[frameHeaderLen:], []byte{0, 0, 0}) {
		t.Fatal("empty LISTED")
	}
}

// TestListRelayRefusesAPage: a relay whose CheckRecord refuses a whole page
// of its parent's records asks the parent for the next instead of
// answering an empty page with more to come (malformed at the asker); an
// asker that refuses a whole page goes on after it.
func TestListRelayRefusesAPage(t *testing.T) {
	defer func(n int) { listPageRecords = n }(listPageRecords)
	listPageRecords = 3
	root := newNode(t, nil, "", nil)
	head := newNode(t, root, "a", nil, func(c *nodeCfg) {
		c.CheckRecord = func(r blob.Record) error {
			if r.Name < "R/a10" {
				return fmt.Errorf("record %q: %w", r.Name, blob.ErrForbidden)
			}
			return nil
		}
	})
	w := newNode(t, head, "a", nil)
	waitConnected(t, head, w)
	for i := range 20 {
		if _, err := root.mem.PutRecordFrom(listRec(fmt.Sprintf("R/a%02d", i), 1), ""); err != nil {
			t.Fatal(err)
		}
	}
	before := w.tree.Status().PeerErrors
	got, err := w.tree.List(context.Background(), "R/")
	if err != nil || len(got) != 10 || got[0].Name != "R/a10" || got[9].Name != "R/a19" {
		t.Fatalf("%s %v", names(got), err)
	}
	if e := w.tree.Status().PeerErrors - before; e != 0 {
		t.Fatalf("%d peer errors at the worker", e)
	}
	w2 := newNode(t, root, "b", nil, func(c *nodeCfg) {
		c.CheckRecord = func(r blob.Record) error {
			if r.Name < "R/a10" {
				return fmt.Errorf("record %q: %w", r.Name, blob.ErrForbidden)
			}
			return nil
		}
	})
	waitConnected(t, w2)
	got, err = w2.tree.List(context.Background(), "R/")
	if err != nil || len(got) != 10 || got[0].Name != "R/a10" {
		t.Fatalf("the asker refusing pages: %s %v", names(got), err)
	}
}
