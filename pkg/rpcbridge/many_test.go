package rpcbridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

// manyData is the deterministic content of test blob i of size n.
func manyData(i, n int) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(i*31 + k*7)
	}
	return b
}

// collect runs GetMany and returns each entry, its bytes and the summary.
func collect(t *testing.T, c *Client, req ManyRequest) (map[string]ManyEntry, map[string][]byte, ManySummary, error) {
	t.Helper()
	entries := map[string]ManyEntry{}
	data := map[string][]byte{}
	seen := map[int]bool{}
	sum, err := c.GetMany(context.Background(), req, func(e ManyEntry, r io.Reader) error {
		if seen[e.Index] {
			t.Errorf("entry %d twice", e.Index)
		}
		seen[e.Index] = true
		if e.Err == nil {
			b, rerr := io.ReadAll(r)
			if rerr != nil {
				e.Err = rerr
			} else {
				data[e.Name] = b
			}
		}
		entries[e.Name] = e
		return nil
	})
	return entries, data, sum, err
}

// TestGetManyNames: one GET_MANY of names, some missing or invalid: each
// bad one gets its own error (NOT_FOUND, INVALID_NAME), the others their
// exact bytes (small ones buffered, one bigger than manyBuffer streamed),
// the summary counts both, and the connection serves the next request.
func TestGetManyNames(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	var names []string
	for i := range 200 {
		n := 16 << 10
		if i == 7 {
			n = manyBuffer + 3<<20 // streamed, in several DATA frames
		}
		if i == 9 {
			n = 0
		}
		name := fmt.Sprintf("res/w%d/%d", i%8, i)
		m.store(name, manyData(i, n), PutOptions{})
		names = append(names, name)
	}
	req := append([]string{}, names...)
	req = append(req, "res/missing", "res//bad")
	entries, data, sum, err := collect(t, c, ManyRequest{Names: req})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Entries != 202 || sum.OK != 200 || sum.Failed != 2 {
		t.Fatalf("summary %+v", sum)
	}
	for i, n := range names {
		size := len(manyData(i, 0))
		_ = size
		b, _ := m.lookup(n)
		if !bytes.Equal(data[n], b.data) || entries[n].Index != i || entries[n].Info.Size != uint64(len(b.data)) {
			t.Fatalf("%s: %d bytes, index %d, info %+v", n, len(data[n]), entries[n].Index, entries[n].Info)
		}
	}
	if e := entries["res/missing"]; !errors.Is(e.Err, blob.ErrNotFound) || e.Index != 200 || !strings.Contains(e.Err.Error(), "res/missing") {
		t.Fatalf("missing: %+v", e)
	}
	if e := entries["res//bad"]; !errors.Is(e.Err, blob.ErrInvalidName) || e.Index != 201 {
		t.Fatalf("invalid: %+v", e)
	}
	if _, err := c.Stat(ctx, names[0]); err != nil {
		t.Fatalf("the connection after GET_MANY: %v", err)
	}
}

// TestGetManyPrefix: by prefix, every name LIST gives under it and no
// other; a bad prefix is the whole request's INVALID_NAME; an empty
// listing is an empty summary.
func TestGetManyPrefix(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	for i := range 30 {
		m.store(fmt.Sprintf("job/%02d", i), manyData(i, 100+i), PutOptions{})
	}
	m.store("job10/x", []byte("no"), PutOptions{})
	entries, data, sum, err := collect(t, c, ManyRequest{Prefix: "job/", ByPrefix: true})
	if err != nil || sum.OK != 30 || sum.Failed != 0 || len(data) != 30 || sum.Bytes != uint64(30*100+29*30/2) {
		t.Fatalf("%+v %v (%d)", sum, err, len(data))
	}
	if _, ok := entries["job10/x"]; ok {
		t.Fatal("job10/x under job/")
	}
	if _, _, _, err := collect(t, c, ManyRequest{Prefix: "a//", ByPrefix: true}); !errors.Is(err, blob.ErrInvalidName) {
		t.Fatalf("bad prefix: %v", err)
	}
	// The server checks too.
	r := rawDial(t, ts.path, true)
	r.send(FrameGetMany, appendGetManyReq(nil, GetManyByPrefix, "../", nil))
	r.expectError(CodeInvalidName)
	if _, _, sum, err := collect(t, c, ManyRequest{Prefix: "none/", ByPrefix: true}); err != nil || sum != (ManySummary{}) {
		t.Fatalf("empty prefix: %+v %v", sum, err)
	}
}

// namesBackend is memBackend with ListNames, which answers without List.
type namesBackend struct {
	*memBackend
	listed int
}

func (b *namesBackend) ListNames(ctx context.Context, prefix string) ([]string, error) {
	b.listed++
	return []string{prefix + "x", prefix + "y"}, nil
}

// TestGetManyUsesNameLister: by prefix, a Backend's ListNames gives the
// names (a node's List fetches missing manifests, which GET_MANY does
// not need), not List.
func TestGetManyUsesNameLister(t *testing.T) {
	b := &namesBackend{memBackend: newMem()}
	b.store("p/x", []byte("1"), PutOptions{})
	b.store("p/y", []byte("22"), PutOptions{})
	b.store("p/z", []byte("not listed by ListNames"), PutOptions{})
	ts := startServer(t, b, ServerOptions{})
	_, data, sum, err := collect(t, dial(t, ts.path), ManyRequest{Prefix: "p/", ByPrefix: true})
	if err != nil || sum.OK != 2 || len(data) != 2 || b.listed != 1 {
		t.Fatalf("%+v %v, ListNames called %d times", sum, err, b.listed)
	}
}

// TestGetManyCallbackStops: an error from the callback stops GetMany,
// which returns it and drops the connection; the next call reconnects.
func TestGetManyCallbackStops(t *testing.T) {
	m := newMem()
	for i := range 50 {
		m.store(fmt.Sprintf("s/%02d", i), manyData(i, 300<<10), PutOptions{})
	}
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	stop := errors.New("enough")
	n := 0
	_, err := c.GetMany(context.Background(), ManyRequest{Prefix: "s/", ByPrefix: true}, func(e ManyEntry, r io.Reader) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("%v after %d entries", err, n)
	}
	if _, data, sum, err := collect(t, c, ManyRequest{Names: []string{"s/07"}}); err != nil || sum.OK != 1 || !bytes.Equal(data["s/07"], manyData(7, 300<<10)) {
		t.Fatalf("after: %+v %v", sum, err)
	}
}

// refusingBackend refuses every name under no/: puts and opens FORBIDDEN.
type refusingBackend struct{ *memBackend }

func (b refusingBackend) Put(ctx context.Context, name string, r io.Reader, opts PutOptions) (Info, error) {
	if strings.HasPrefix(name, "no/") {
		io.Copy(io.Discard, r)
		return Info{}, fmt.Errorf("put %q: outside this node's prefixes: %w", name, blob.ErrForbidden)
	}
	return b.memBackend.Put(ctx, name, r, opts)
}

func (b refusingBackend) Open(ctx context.Context, name string) (Info, io.ReadCloser, error) {
	if strings.HasPrefix(name, "no/") {
		return Info{}, nil, fmt.Errorf("get %q: %w", name, blob.ErrForbidden)
	}
	return b.memBackend.Open(ctx, name)
}

// TestManyRefused: a refused name in a batch is that entry's FORBIDDEN
// (errors.Is blob.ErrForbidden), in a PUT_MANY and a GET_MANY; the others
// are stored and fetched.
func TestManyRefused(t *testing.T) {
	m := newMem()
	ts := startServer(t, refusingBackend{m}, ServerOptions{})
	c := dial(t, ts.path)
	one := func(name, data string) PutItem {
		return PutItem{Name: name, Size: uint64(len(data)), Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(data)), nil }}
	}
	es, sum, err := c.PutMany(context.Background(), []PutItem{one("ok/1", "a"), one("no/2", "b"), one("ok/3", "c")}, PutOptions{})
	if err != nil || sum.OK != 2 || sum.Failed != 1 || !errors.Is(es[1].Err, blob.ErrForbidden) || es[0].Err != nil || es[2].Err != nil {
		t.Fatalf("put: %+v %v %+v", sum, err, es)
	}
	m.store("no/x", []byte("secret"), PutOptions{})
	entries, data, sum, err := collect(t, c, ManyRequest{Names: []string{"ok/1", "no/x", "ok/3"}})
	if err != nil || sum.OK != 2 || sum.Failed != 1 || !errors.Is(entries["no/x"].Err, blob.ErrForbidden) || string(data["ok/3"]) != "c" {
		t.Fatalf("get: %+v %v %+v", sum, err, entries)
	}
}

// TestGetManyEntryFailsMidway: a blob whose reader fails after its first
// bytes: a streamed one gets ENTRY, some DATA, then its ENTRY_ERROR (the
// client's reader returns the error, not io.EOF); a buffered one only its
// ENTRY_ERROR; a blob within the bytes that work succeeds, and the
// connection stays in step.
func TestGetManyEntryFailsMidway(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	m.store("a/small", manyData(1, 50), PutOptions{})
	m.store("a/medium", manyData(2, 1000), PutOptions{})
	m.store("a/big", manyData(3, manyBuffer+100), PutOptions{})
	m.with(func() { m.openFailAfter = 100 })
	var partial int
	entries := map[string]ManyEntry{}
	sum, err := c.GetMany(context.Background(), ManyRequest{Names: []string{"a/small", "a/big", "a/medium"}}, func(e ManyEntry, r io.Reader) error {
		if e.Err == nil {
			b, rerr := io.ReadAll(r)
			if e.Name == "a/big" {
				partial = len(b)
			}
			e.Err = rerr
		}
		entries[e.Name] = e
		return nil
	})
	if err != nil || sum.OK != 1 || sum.Failed != 2 || sum.Bytes != 50 {
		t.Fatalf("%+v %v", sum, err)
	}
	if entries["a/small"].Err != nil || !errors.Is(entries["a/big"].Err, blob.ErrUnreachable) ||
		!errors.Is(entries["a/medium"].Err, blob.ErrUnreachable) || partial != 100 {
		t.Fatalf("entries %+v, partial %d", entries, partial)
	}
	m.with(func() { m.openFailAfter = 0 })
	if _, data, sum, err := collect(t, c, ManyRequest{Names: []string{"a/big"}}); err != nil || len(data["a/big"]) != manyBuffer+100 || sum.OK != 1 {
		t.Fatalf("after: %+v %v", sum, err)
	}
}

// TestPutMany: one PUT_MANY of items, among them an invalid name, an input
// shorter and one longer than its size (both aborted, nothing stored under
// their names), an empty one and one bigger than manyBuffer: each its
// entry, in order; the good ones are stored with their exact bytes.
func TestPutMany(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	type in struct {
		name string
		data []byte
		size uint64
	}
	var ins []in
	for i := range 100 {
		ins = append(ins, in{fmt.Sprintf("up/%d", i), manyData(i, 4<<10), 4 << 10})
	}
	ins = append(ins, in{"up/../x", []byte("x"), 1}, in{"up/short", []byte("abc"), 5}, in{"up/long", []byte("abcdef"), 5},
		in{"up/empty", nil, 0}, in{"up/big", manyData(5, manyBuffer+(1<<20)+3), manyBuffer + (1 << 20) + 3}, in{"up/last", []byte("z"), 1})
	items := make([]PutItem, len(ins))
	for i, x := range ins {
		items[i] = PutItem{Name: x.name, Size: x.size, Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(x.data)), nil }}
	}
	entries, sum, err := c.PutMany(ctx, items, PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Entries != len(ins) || sum.Failed != 3 || sum.OK != len(ins)-3 {
		t.Fatalf("summary %+v", sum)
	}
	for i, x := range ins {
		e := entries[i]
		bad := x.name == "up/../x" || x.name == "up/short" || x.name == "up/long"
		if e.Index != i || e.Name != x.name || (e.Err != nil) != bad {
			t.Fatalf("entry %d: %+v", i, e)
		}
		b, lerr := m.lookup(x.name)
		if bad {
			if lerr == nil {
				t.Fatalf("%s stored", x.name)
			}
			continue
		}
		if lerr != nil || !bytes.Equal(b.data, x.data) || e.Info.Size != x.size {
			t.Fatalf("%s: stored %d bytes (%v), info %+v", x.name, len(b.data), lerr, e.Info)
		}
	}
	if !errors.Is(entries[100].Err, blob.ErrInvalidName) || !errors.Is(entries[101].Err, ErrItemChanged) || !errors.Is(entries[102].Err, ErrItemChanged) {
		t.Fatalf("bad entries: %v / %v / %v", entries[100].Err, entries[101].Err, entries[102].Err)
	}
	// The connection is in step.
	if _, err := c.Stat(ctx, "up/last"); err != nil {
		t.Fatal(err)
	}
	// A bad chunk size: the whole batch's BAD_REQUEST.
	if _, _, err := c.PutMany(ctx, items[:1], PutOptions{ChunkSize: 100}); err == nil {
		t.Fatal("chunk size 100 accepted")
	}
}

// TestPutManySameName: a name put twice in one batch holds the later
// item's bytes, whatever the daemon's parallelism.
func TestPutManySameName(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	var items []PutItem
	for i := range 20 {
		b := manyData(i, 1000)
		items = append(items, PutItem{Name: "same", Size: uint64(len(b)), Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }})
	}
	if _, sum, err := c.PutMany(context.Background(), items, PutOptions{}); err != nil || sum.OK != 20 {
		t.Fatalf("%+v %v", sum, err)
	}
	if b, _ := m.lookup("same"); !bytes.Equal(b.data, manyData(19, 1000)) {
		t.Fatal("not the last item's bytes")
	}
}

// TestManyOldDaemon: a connection of version 6 is refused GET_MANY and
// PUT_MANY (BAD_REQUEST naming version 7), and the client falls back to a
// GET or PUT per name on it, with the same entries.
func TestManyOldDaemon(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	old := rawDial(t, ts.path, false)
	old.send(FrameHello, appendHello(nil, 6))
	old.recv()
	old.send(FrameGetMany, appendGetManyReq(nil, GetManyByPrefix, "", nil))
	if e := old.expectError(CodeBadRequest); !strings.Contains(e.Message, "version 7") {
		t.Fatalf("version 6: %q", e.Message)
	}
	c := dial(t, ts.path)
	c.version = 6 // as a daemon of version 6 would have answered
	for i := range 5 {
		m.store(fmt.Sprintf("o/%d", i), manyData(i, 10), PutOptions{})
	}
	entries, data, sum, err := collect(t, c, ManyRequest{Names: []string{"o/0", "o/4", "o/nope"}})
	if err != nil || sum.OK != 2 || sum.Failed != 1 || len(data) != 2 || !errors.Is(entries["o/nope"].Err, blob.ErrNotFound) {
		t.Fatalf("%+v %v %v", sum, err, entries)
	}
	if _, data, sum, err = collect(t, c, ManyRequest{Prefix: "o/", ByPrefix: true}); err != nil || sum.OK != 5 || !bytes.Equal(data["o/3"], manyData(3, 10)) {
		t.Fatalf("%+v %v", sum, err)
	}
	es, sum, err := c.PutMany(context.Background(), []PutItem{
		{Name: "p/1", Size: 3, Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("abc")), nil }},
		{Name: "p/2", Size: 3, Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("ab")), nil }},
	}, PutOptions{})
	if err != nil || sum.OK != 1 || es[0].Err != nil || !errors.Is(es[1].Err, ErrItemChanged) {
		t.Fatalf("%+v %v %+v", sum, err, es)
	}
	if _, err := m.lookup("p/2"); err == nil {
		t.Fatal("a short item stored on the old path")
	}
}

// TestManyMalformed: bad GET_MANY bodies, a PUT_ITEM outside a PUT_MANY,
// too many bytes for an item: BAD_REQUEST, the connection closed.
func TestManyMalformed(t *testing.T) {
	ts := startServer(t, newMem(), ServerOptions{})
	for name, body := range map[string][]byte{
		"unknown flags":     appendGetManyReq(nil, 0x2, "", []string{"a"}),
		"prefix with names": appendGetManyReq(nil, GetManyByPrefix, "a/", []string{"a"}),
		"no names":          appendGetManyReq(nil, 0, "", nil),
		"count overruns":    append(appendStr(appendU32(nil, 0), ""), 0, 0, 0, 9),
	} {
		r := rawDial(t, ts.path, true)
		r.send(FrameGetMany, body)
		if e := r.expectError(CodeBadRequest); e == nil {
			t.Fatal(name)
		}
		r.expectClosed()
	}
	r := rawDial(t, ts.path, true)
	r.send(FramePutItem, appendPutItem(nil, "a", 1))
	r.expectError(CodeBadRequest)
	r = rawDial(t, ts.path, true)
	r.send(FramePutMany, appendU32(nil, 0))
	r.send(FramePutItem, appendPutItem(nil, "a", 2))
	r.send(FrameData, []byte("abc"))
	if e := r.expectError(CodeBadRequest); !strings.Contains(e.Message, "DATA of 3 bytes") {
		t.Fatal(e.Message)
	}
	r.expectClosed()
}

func FuzzDecodeManyFrames(f *testing.F) {
	in := seedInfo()
	f.Add(appendGetManyReq(nil, 0, "", []string{"a/b", "c"}))
	f.Add(appendGetManyReq(nil, GetManyByPrefix, "job/", nil))
	f.Add(appendEntry(nil, 3, &in))
	f.Add(appendEntryError(nil, 2, "a", &Error{Code: CodeNotFound, Message: "x"}))
	f.Add(appendSummary(nil, ManySummary{Entries: 3, OK: 2, Failed: 1, Bytes: 9}))
	f.Add(appendPutItem(nil, "a", 7))
	f.Fuzz(func(t *testing.T, b []byte) {
		if fl, p, ns, err := decodeGetManyReq(b); err == nil && !bytes.Equal(appendGetManyReq(nil, fl, p, ns), b) {
			t.Fatal("GET_MANY not canonical")
		}
		if i, in, err := decodeEntry(b); err == nil {
			// Info's reserved flag bits are ignored: compare decoded.
			enc := appendEntry(nil, i, &in)
			if j, back, err := decodeEntry(enc); err != nil || j != i || back != in || len(enc) != len(b) {
				t.Fatalf("ENTRY round trip: %d %+v %v", j, back, err)
			}
		}
		if i, n, e, err := decodeEntryError(b); err == nil && len(e.Message) <= maxMessageLen && !bytes.Equal(appendEntryError(nil, i, n, e), b) {
			t.Fatal("ENTRY_ERROR not canonical")
		}
		if s, err := decodeSummary(b); err == nil && !bytes.Equal(appendSummary(nil, s), b) {
			t.Fatal("SUMMARY not canonical")
		}
		if n, size, err := decodePutItem(b); err == nil && !bytes.Equal(appendPutItem(nil, n, size), b) {
			t.Fatal("PUT_ITEM not canonical")
		}
	})
}

// --- shared test vectors of version 7 (docs/rpcbridge.md §11) -----------------

// manyVectorsPath holds the vectors of GET_MANY and PUT_MANY, apart from
// frames.txt so that a client of version 6 checks all of frames.txt.
const manyVectorsPath = "../../testdata/rpcbridge/frames-v7.txt"

// manyFieldsOf is fieldsOf for the frames of version 7; ok is false for
// other types.
func manyFieldsOf(t FrameType, b []byte) (fs []kv, err error, ok bool) {
	switch t {
	case FrameGetMany:
		fl, p, ns, err := decodeGetManyReq(b)
		fs = []kv{{"flags", u(uint64(fl))}, {"prefix", p}, {"count", u(uint64(len(ns)))}}
		for _, n := range ns {
			fs = append(fs, kv{"name", n})
		}
		return fs, err, true
	case FramePutMany:
		cs, err := decodePutManyReq(b)
		return []kv{{"chunk_size", u(uint64(cs))}}, err, true
	case FramePutItem:
		n, size, err := decodePutItem(b)
		return []kv{{"name", n}, {"size", u(size)}}, err, true
	case FrameEntry:
		i, in, err := decodeEntry(b)
		return append([]kv{{"index", u(uint64(i))}}, infoFields(in)...), err, true
	case FrameEntryError:
		i, n, e, err := decodeEntryError(b)
		if err != nil {
			return nil, err, true
		}
		return []kv{{"index", u(uint64(i))}, {"name", n}, {"code", u(uint64(e.Code))}, {"message", e.Message}}, nil, true
	case FrameSummary:
		s, err := decodeSummary(b)
		return []kv{{"entries", u(uint64(s.Entries))}, {"ok", u(uint64(s.OK))}, {"failed", u(uint64(s.Failed))}, {"bytes", u(s.Bytes)}}, err, true
	}
	return nil, nil, false
}

// manyEncodeFrom is encodeFrom's body for the frames of version 7.
func manyEncodeFrom(t FrameType, r *fieldReader) ([]byte, bool) {
	switch t {
	case FrameGetMany:
		fl, p, n := uint32(r.num("flags")), r.str("prefix"), int(r.num("count"))
		var ns []string
		for range n {
			ns = append(ns, r.str("name"))
		}
		return appendGetManyReq(nil, fl, p, ns), true
	case FramePutMany:
		return appendU32(nil, uint32(r.num("chunk_size"))), true
	case FramePutItem:
		return appendPutItem(nil, r.str("name"), r.num("size")), true
	case FrameEntry:
		i := int(r.num("index"))
		in := r.info()
		return appendEntry(nil, i, &in), true
	case FrameEntryError:
		i, n := int(r.num("index")), r.str("name")
		return appendEntryError(nil, i, n, &Error{Code: Code(r.num("code")), Message: r.str("message")}), true
	case FrameSummary:
		return appendSummary(nil, ManySummary{Entries: int(r.num("entries")), OK: int(r.num("ok")),
			Failed: int(r.num("failed")), Bytes: r.num("bytes")}), true
	}
	return nil, false
}

func manyVectorCases() []vector {
	in := Info{Name: "res/w1/7", ID: "bafyex", Size: 16384, ChunkSize: 1 << 20, Chunks: 1,
		Time: 1700000000000000000, Origin: "12D3KooWEx", Local: true}
	valid := []struct {
		name string
		t    FrameType
		fs   []kv
	}{
		{"hello_v7", FrameHello, []kv{{"magic", Magic}, {"version", "7"}}},
		{"get_many_names", FrameGetMany, []kv{{"flags", "0"}, {"prefix", ""}, {"count", "2"}, {"name", "res/w1/7"}, {"name", "res/missing"}}},
		{"get_many_prefix", FrameGetMany, []kv{{"flags", "1"}, {"prefix", "res/"}, {"count", "0"}}},
		{"get_many_all", FrameGetMany, []kv{{"flags", "1"}, {"prefix", ""}, {"count", "0"}}},
		{"entry", FrameEntry, append([]kv{{"index", "0"}}, infoFields(in)...)},
		{"entry_error", FrameEntryError, []kv{{"index", "1"}, {"name", "res/missing"}, {"code", "1"}, {"message", `get "res/missing": not found`}}},
		{"summary", FrameSummary, []kv{{"entries", "2"}, {"ok", "1"}, {"failed", "1"}, {"bytes", "16384"}}},
		{"put_many", FramePutMany, []kv{{"chunk_size", "0"}}},
		{"put_item", FramePutItem, []kv{{"name", "res/w1/7"}, {"size", "16384"}}},
		{"put_item_empty", FramePutItem, []kv{{"name", "res/empty"}, {"size", "0"}}},
	}
	var out []vector
	for _, c := range valid {
		frame, err := encodeFrom(c.t, c.fs)
		if err != nil {
			panic(fmt.Sprintf("vector %s: %v", c.name, err))
		}
		out = append(out, vector{name: c.name, typ: c.t, frame: frame, fields: c.fs})
	}
	hdr := func(n int, t FrameType) []byte { return appendHeader(nil, t, n) }
	frame := func(t FrameType, b []byte) []byte { return append(hdr(len(b), t), b...) }
	invalid := []vector{
		{name: "get_many_flags", why: "GET_MANY flag bit 1 is not defined", frame: frame(FrameGetMany, appendGetManyReq(nil, 2, "", []string{"a"}))},
		{name: "get_many_prefix_and_names", why: "GET_MANY by prefix with a name", frame: frame(FrameGetMany, appendGetManyReq(nil, 1, "a/", []string{"a"}))},
		{name: "get_many_names_and_prefix", why: "GET_MANY by names with a prefix", frame: frame(FrameGetMany, appendGetManyReq(nil, 0, "a/", []string{"a"}))},
		{name: "get_many_none", why: "GET_MANY by names with count 0", frame: frame(FrameGetMany, appendGetManyReq(nil, 0, "", nil))},
		{name: "get_many_count_short", why: "count 3 but two names", frame: func() []byte {
			b := appendGetManyReq(nil, 0, "", []string{"a", "b"})
			b[11] = 3
			return frame(FrameGetMany, b)
		}()},
		{name: "entry_error_code_zero", why: "ENTRY_ERROR code 0", frame: frame(FrameEntryError, appendEntryError(nil, 0, "a", &Error{Code: 0, Message: "x"}))},
		{name: "summary_sum", why: "SUMMARY ok + failed != entries", frame: frame(FrameSummary, appendSummary(nil, ManySummary{Entries: 3, OK: 1, Failed: 1}))},
		{name: "put_item_trailing", why: "a byte after the size", frame: frame(FramePutItem, append(appendPutItem(nil, "a", 1), 0))},
		{name: "put_many_short", why: "PUT_MANY body of 2 bytes", frame: frame(FramePutMany, []byte{0, 0})},
	}
	return append(out, invalid...)
}

// TestManyVectors checks frames-v7.txt as TestVectors
// does frames.txt (TestVectors -update writes it: vectorFiles).
func TestManyVectors(t *testing.T) {
	want := formatVectorsAs(manyVectorCases(), "protocol version 7: GET_MANY, PUT_MANY")
	data, err := os.ReadFile(manyVectorsPath)
	if err != nil {
		t.Fatalf("%v (regenerate with -update)", err)
	}
	if !bytes.Equal(data, want) {
		t.Errorf("%s differs from what the Go encoders produce: regenerate with -update", manyVectorsPath)
	}
	vs, err := parseVectors(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		typ, fs, err := checkFrame(v.frame)
		if !v.valid() {
			if err == nil {
				t.Errorf("%s (%s): accepted", v.name, v.why)
			}
			continue
		}
		if err != nil || typ != v.typ || fmt.Sprint(fs) != fmt.Sprint(v.fields) {
			t.Errorf("%s: %v %v %v", v.name, typ, fs, err)
		}
	}
}

// publishingBackend is memBackend as a ManyPutter: Store keeps the bytes
// aside, PublishMany makes them visible and counts its calls.
type publishingBackend struct {
	*memBackend
	pmu       sync.Mutex
	publishes int
	published int
}

type pubPut struct {
	name string
	data []byte
	opts PutOptions
}

func (b *publishingBackend) Put(ctx context.Context, name string, r io.Reader, opts PutOptions) (Info, error) {
	return Info{}, fmt.Errorf("put %q: Put called on a ManyPutter in a PUT_MANY", name)
}

func (b *publishingBackend) Store(ctx context.Context, name string, r io.Reader, opts PutOptions) (StoredPut, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(name, "no/") {
		return nil, fmt.Errorf("put %q: %w", name, blob.ErrForbidden)
	}
	return pubPut{name, data, opts}, nil
}

func (b *publishingBackend) PublishMany(ctx context.Context, puts []StoredPut) ([]Info, []error) {
	b.pmu.Lock()
	b.publishes++
	b.published += len(puts)
	b.pmu.Unlock()
	infos := make([]Info, len(puts))
	for i, p := range puts {
		pp := p.(pubPut)
		infos[i] = b.store(pp.name, pp.data, pp.opts)
	}
	return infos, make([]error, len(puts))
}

// TestPutManyPublishesTogether: with a ManyPutter backend (the node, which
// announces names up its tree) PUT_MANY stores its items and publishes
// them in a few PublishMany calls (256 at a time, the rest at the end, the
// earlier ones before a name put again), never Put: 600 small items, a big
// one, one refused and a name twice (the later bytes win) take at most 5
// calls, every stored item answered with its Info after it was published.
func TestPutManyPublishesTogether(t *testing.T) {
	b := &publishingBackend{memBackend: newMem()}
	ts := startServer(t, b, ServerOptions{})
	c := dial(t, ts.path)
	var items []PutItem
	add := func(name string, data []byte) {
		items = append(items, PutItem{Name: name, Size: uint64(len(data)), Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil }})
	}
	for i := range 600 {
		add(fmt.Sprintf("p/%03d", i), manyData(i, 500))
		switch i {
		case 100:
			add("p/big", manyData(1, 300<<10))
		case 200:
			add("no/x", []byte("refused"))
		case 300:
			add("p/000", manyData(9999, 700))
		}
	}
	entries, sum, err := c.PutMany(context.Background(), items, PutOptions{})
	if err != nil || sum.OK != len(items)-1 || sum.Failed != 1 {
		t.Fatalf("%+v %v", sum, err)
	}
	for _, e := range entries {
		switch {
		case e.Name == "no/x":
			if !errors.Is(e.Err, blob.ErrForbidden) {
				t.Fatalf("no/x: %v, want FORBIDDEN", e.Err)
			}
		case e.Err != nil || e.Info.Name != e.Name:
			t.Fatalf("%s: %+v %v", e.Name, e.Info, e.Err)
		}
	}
	if got, _ := b.lookup("p/000"); !bytes.Equal(got.data, manyData(9999, 700)) {
		t.Fatal("p/000 is not the later item's bytes")
	}
	if got, _ := b.lookup("p/big"); !bytes.Equal(got.data, manyData(1, 300<<10)) {
		t.Fatal("p/big wrong")
	}
	t.Logf("%d items published in %d calls", b.published, b.publishes)
	if b.published != len(items)-1 || b.publishes > 5 {
		t.Fatalf("%d items published in %d calls: want %d in at most 5", b.published, b.publishes, len(items)-1)
	}
}
