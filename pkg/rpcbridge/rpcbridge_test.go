package rpcbridge

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestRoundTrips(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()

	data := randBytes(300_000, 1)
	in, err := c.Put(ctx, "a/b", bytes.NewReader(data), PutOptions{ChunkSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := m.lookup("a/b")
	if in != want.info || in.ChunkSize != 64<<10 || in.Chunks != 5 || in.Size != uint64(len(data)) || !in.Local || !in.Pinned {
		t.Fatalf("put info %+v, backend %+v", in, want.info)
	}
	if !bytes.Equal(want.data, data) {
		t.Fatal("backend stored different bytes")
	}
	// empty blob
	if in, err := c.Put(ctx, "empty", bytes.NewReader(nil), PutOptions{}); err != nil || in.Size != 0 || in.ChunkSize != blob.DefaultChunkSize {
		t.Fatalf("empty put: %+v %v", in, err)
	}

	st, err := c.Stat(ctx, "a/b")
	if err != nil || st != want.info {
		t.Fatalf("stat %+v %v", st, err)
	}

	var buf bytes.Buffer
	gi, err := c.Get(ctx, "a/b", &buf)
	if err != nil || gi != want.info || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("get: %v, %d bytes", err, buf.Len())
	}
	buf.Reset()
	if gi, err := c.Get(ctx, "empty", &buf); err != nil || gi.Size != 0 || buf.Len() != 0 {
		t.Fatalf("get empty: %v", err)
	}

	gi, rc, err := c.GetStream(ctx, "a/b")
	if err != nil || gi != want.info {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("stream: %v", err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if gi, err := c.GetFile(ctx, "a/b", out); err != nil || gi != want.info {
		t.Fatalf("getfile %v", err)
	}
	if b, _ := os.ReadFile(out); !bytes.Equal(b, data) {
		t.Fatal("getfile wrote other bytes")
	}
	// relative paths are made absolute by the client
	wd, _ := os.Getwd()
	t.Chdir(dir)
	if pi, err := c.PutFile(ctx, "from/file", "out", PutOptions{}); err != nil || pi.Size != uint64(len(data)) {
		t.Fatalf("putfile %+v %v", pi, err)
	}
	t.Chdir(wd)
	if b, _ := m.lookup("from/file"); !bytes.Equal(b.data, data) {
		t.Fatal("putfile stored other bytes")
	}

	infos, err := c.List(ctx, "")
	if err != nil || len(infos) != 3 || infos[0].Name != "a/b" || infos[1].Name != "empty" || infos[2].Name != "from/file" {
		t.Fatalf("list: %+v %v", infos, err)
	}
	if infos[0] != want.info {
		t.Fatalf("list info %+v", infos[0])
	}
	if infos, err := c.List(ctx, "from/"); err != nil || len(infos) != 1 {
		t.Fatalf("list prefix: %+v %v", infos, err)
	}
	if infos, err := c.List(ctx, "zzz"); err != nil || len(infos) != 0 {
		t.Fatalf("list none: %+v %v", infos, err)
	}

	if err := c.Remove(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Stat(ctx, "a/b"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("after remove: %v", err)
	}

	s, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.PeerID != testStatus.PeerID || !reflect.DeepEqual(s, testStatus) || s.CacheCap != testStatus.CacheCap ||
		s.Version != testStatus.Version || s.PeerErrors != 7 || !s.ParentConnected {
		t.Fatalf("status %+v", s)
	}
}

func TestStatusJSONFieldNames(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	r := rawDial(t, ts.path, true)
	r.send(FrameStatus, nil)
	typ, body := r.recv()
	if typ != FrameStatusJ {
		t.Fatalf("got %v", typ)
	}
	for _, k := range []string{"peer_id", "site", "addrs", "parent", "parent_connected", "children", "cache_used", "cache_cap",
		"cache_pinned", "chunks", "bytes_served", "bytes_fetched", "peer_errors", "names", "version", `"id"`, `"connected"`} {
		if !bytes.Contains(body, []byte(k)) {
			t.Errorf("status JSON lacks %s: %s", k, body)
		}
	}
}

func TestBigStream(t *testing.T) {
	size := 64 << 20
	if testing.Short() {
		size = 8 << 20
	}
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	data := randBytes(size, 3)

	t0 := time.Now()
	in, err := c.Put(ctx, "big", bytes.NewReader(data), PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dp := time.Since(t0)
	if in.Size != uint64(size) {
		t.Fatalf("size %d", in.Size)
	}
	if b, _ := m.lookup("big"); !bytes.Equal(b.data, data) {
		t.Fatal("put changed the bytes")
	}
	out := bytes.NewBuffer(make([]byte, 0, size))
	t0 = time.Now()
	if _, err := c.Get(ctx, "big", out); err != nil {
		t.Fatal(err)
	}
	dg := time.Since(t0)
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatal("get changed the bytes")
	}
	t.Logf("%d MiB: put %.2f GB/s, get %.2f GB/s", size>>20, float64(size)/dp.Seconds()/1e9, float64(size)/dg.Seconds()/1e9)
}

func TestSmallGetLatency(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	m.store("small", []byte("hello"), PutOptions{})
	var buf bytes.Buffer
	const n = 200
	t0 := time.Now()
	for i := 0; i < n; i++ {
		buf.Reset()
		if _, err := c.Get(ctx, "small", &buf); err != nil || buf.String() != "hello" {
			t.Fatal(err)
		}
	}
	avg := time.Since(t0) / n
	t.Logf("small GET round trip: %v", avg)
	if avg > 5*time.Millisecond { // ~tens of µs normally; generous for loaded/race runs
		t.Errorf("small GET takes %v", avg)
	}
}

func TestErrorCodes(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()

	_, err := c.Stat(ctx, "nope")
	var e *Error
	if !errors.Is(err, blob.ErrNotFound) || !errors.As(err, &e) || e.Code != CodeNotFound || !strings.Contains(e.Message, "nope") {
		t.Fatalf("stat missing: %v", err)
	}
	if _, err := c.Get(ctx, "nope", io.Discard); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if _, err := c.GetFile(ctx, "nope", filepath.Join(t.TempDir(), "x")); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("getfile missing: %v", err)
	}
	if err := c.Remove(ctx, "nope"); !errors.Is(err, &Error{Code: CodeNotFound}) {
		t.Fatalf("remove missing: %v", err)
	}
	if _, err := c.PutFile(ctx, "x", "/does/not/exist", PutOptions{}); CodeOf(err) != CodeIO {
		t.Fatalf("putfile of a missing file: %v (%v)", err, CodeOf(err))
	}

	// Invalid names are rejected client-side: the backend sees nothing.
	before := m.callCount()
	for _, n := range []string{"", "/abs", "a/../b", "a//b", strings.Repeat("x", blob.MaxNameLen+1)} {
		if _, err := c.Stat(ctx, n); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("stat %q: %v", n, err)
		}
		if _, err := c.Put(ctx, n, strings.NewReader("x"), PutOptions{}); !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("put %q: %v", n, err)
		}
	}
	if _, err := c.List(ctx, "/x"); !errors.Is(err, blob.ErrInvalidName) {
		t.Errorf("list /x: %v", err)
	}
	if _, err := c.Put(ctx, "x", strings.NewReader("x"), PutOptions{ChunkSize: 3}); err == nil {
		t.Error("bad chunk size accepted")
	}
	if m.callCount() != before {
		t.Fatal("an invalid request reached the backend")
	}

	// ... and server-side, sent raw.
	r := rawDial(t, ts.path, true)
	for _, req := range []struct {
		t    FrameType
		body []byte
	}{
		{FrameStat, appendNameReq(nil, "../etc")},
		{FrameGet, appendNameReq(nil, "a//b")},
		{FrameGetFile, appendGetFileReq(nil, "/x", "/tmp/x")},
		{FrameRemove, appendNameReq(nil, "")},
		{FrameList, appendNameReq(nil, "/")},
		{FramePutFile, appendPutFileReq(nil, "x\x00y", 0, "/tmp/x")},
	} {
		r.send(req.t, req.body)
		if e := r.expectError(CodeInvalidName); !errors.Is(e, blob.ErrInvalidName) {
			t.Fatalf("%v", e)
		}
	}
	// a PUT with an invalid name: the upload is skipped, then the error
	r.send(FramePut, appendPutReq(nil, "bad/../name", 0))
	r.send(FrameData, []byte("some bytes"))
	r.send(FrameData, nil)
	r.expectError(CodeInvalidName)
	// bad fields in well-formed frames keep the connection
	r.send(FrameGetFile, appendGetFileReq(nil, "x", "relative/path"))
	r.expectError(CodeBadRequest)
	r.send(FramePutFile, appendPutFileReq(nil, "x", 5, "/tmp/x"))
	r.expectError(CodeBadRequest)
	r.send(FramePut, appendPutReq(nil, "x", 1<<30))
	r.send(FrameData, nil)
	r.expectError(CodeBadRequest)
	r.send(FrameStat, appendNameReq(nil, "nope"))
	r.expectError(CodeNotFound)
	if m.callCount() != before+1 {
		t.Fatalf("backend calls %d, want %d", m.callCount(), before+1)
	}
}

func TestPutBackendFailsEarly(t *testing.T) {
	m := newMem()
	m.with(func() { m.putMax = 1 << 20 })
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	_, err := c.Put(ctx, "full", bytes.NewReader(make([]byte, 10<<20)), PutOptions{})
	if !errors.Is(err, blob.ErrNoSpace) || CodeOf(err) != CodeNoSpace {
		t.Fatalf("put into a full store: %v", err)
	}
	if _, err := c.Put(ctx, "fits", bytes.NewReader(make([]byte, 1000)), PutOptions{}); err != nil {
		t.Fatalf("next put on the same connection: %v", err)
	}
}

// An endless upload that the backend refused early is not read to its end:
// past the drain limit the daemon says why and closes the connection.
func TestPutEndlessUploadRefused(t *testing.T) {
	m := newMem()
	m.with(func() { m.putMax = 1 << 20 })
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Put(ctx, "endless", endlessZeros{}, PutOptions{})
	if !errors.Is(err, blob.ErrNoSpace) {
		t.Fatalf("endless put into a full store: %v, want the backend's no-space error", err)
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Fatalf("the refused endless put took %v", el)
	}
	// A new connection works.
	if _, err := dial(t, ts.path).Put(ctx, "fits", bytes.NewReader(make([]byte, 1000)), PutOptions{}); err != nil {
		t.Fatalf("put after the refused one: %v", err)
	}
}

// endlessZeros is an input that never ends.
type endlessZeros struct{}

func (endlessZeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code Code
	}{
		{blob.ErrNotFound, CodeNotFound},
		{blob.ErrInvalidName, CodeInvalidName},
		{blob.ErrNoSpace, CodeNoSpace},
		{blob.ErrUnreachable, CodeUnreachable},
		{blob.ErrCorrupt, CodeCorrupt},
		{blob.ErrBadManifest, CodeCorrupt},
		{blob.ErrTooBig, CodeBadRequest},
		{blob.ErrSizeMismatch, CodeSizeMismatch},
		{blob.ErrUnavailable, CodeUnavailable},
		{fmt.Errorf("%w: %w", blob.ErrUnavailable, blob.ErrNotFound), CodeUnavailable},
		{context.DeadlineExceeded, CodeTimeout},
		{context.Canceled, CodeAborted},
		{ErrAborted, CodeAborted},
		{&os.PathError{Op: "open", Path: "/x", Err: os.ErrNotExist}, CodeIO},
		{&os.PathError{Op: "write", Path: "/x", Err: syscall.ENOSPC}, CodeNoSpace},
		{errors.New("boom"), CodeInternal},
		{&Error{Code: CodeUnsupportedVersion}, CodeUnsupportedVersion},
		{nil, 0},
	} {
		wrapped := tc.err
		if tc.err != nil {
			wrapped = errors.Join(errors.New("ctx"), tc.err)
		}
		if got := CodeOf(wrapped); got != tc.code {
			t.Errorf("CodeOf(%v) = %v, want %v", tc.err, got, tc.code)
		}
		if s := tc.code.sentinel(); s != nil {
			if !errors.Is(&Error{Code: tc.code, Message: "m"}, s) {
				t.Errorf("%v does not match %v", tc.code, s)
			}
		}
	}
	if errors.Is(&Error{Code: CodeNotFound}, blob.ErrCorrupt) || errors.Is(&Error{Code: CodeInternal}, blob.ErrNotFound) {
		t.Error("Is matches the wrong sentinel")
	}
	if CodeTimeout.String() != "TIMEOUT" || Code(99).String() != "CODE_99" {
		t.Error("Code.String")
	}
}

func TestGetMidStreamError(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	data := randBytes(5<<20, 4)
	m.store("x", data, PutOptions{})
	m.with(func() { m.openFailAfter = 3 << 20 })

	var buf bytes.Buffer
	_, err := c.Get(ctx, "x", &buf)
	if err == nil || !errors.Is(err, blob.ErrUnreachable) {
		t.Fatalf("Get of a failing blob: %v (got %d bytes)", err, buf.Len())
	}
	_, rc, err := c.GetStream(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(rc); err == nil || !errors.Is(err, blob.ErrUnreachable) {
		t.Fatalf("stream of a failing blob: %v", err)
	}
	rc.Close()

	// The backend yields the wrong number of bytes: SIZE_MISMATCH, never success.
	m.with(func() { m.openFailAfter = 0 })
	for _, lie := range []int64{-1, 1, 2 << 20} {
		m.with(func() { m.openLie = lie })
		if _, err := c.Get(ctx, "x", io.Discard); !errors.Is(err, blob.ErrSizeMismatch) {
			t.Fatalf("lie %d: %v", lie, err)
		}
	}
	m.with(func() { m.openLie = 0 })
	// the connection is still good
	buf.Reset()
	if _, err := c.Get(ctx, "x", &buf); err != nil || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("after errors: %v", err)
	}
}

func TestGetStreamCut(t *testing.T) {
	// A server that sends INFO and part of the DATA, then hangs up.
	dir := t.TempDir()
	path := filepath.Join(dir, "fake.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		fc := newFrameConn(conn, time.Second)
		fc.readHeader()
		fc.readBody(8)
		fc.frame(FrameHello, appendHello(nil, 1))
		fc.flush()
		h, _ := fc.readHeader()
		fc.readBody(h.Len)
		in := Info{Name: "x", Size: 1000}
		fc.frame(FrameInfo, appendInfo(nil, &in))
		fc.data(make([]byte, 500))
		fc.flush()
	}()
	c := dial(t, path)
	_, rc, err := c.GetStream(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	if err == nil || len(b) != 500 {
		t.Fatalf("cut stream: %d bytes, %v", len(b), err)
	}
}

func TestGetStreamEarlyClose(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	small, big := randBytes(1<<20, 6), randBytes(40<<20, 7)
	m.store("small", small, PutOptions{})
	m.store("big", big, PutOptions{})
	for _, name := range []string{"small", "big"} {
		_, rc, err := c.GetStream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 1000)
		if _, err := io.ReadFull(rc, p); err != nil {
			t.Fatal(err)
		}
		if err := rc.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := rc.Read(p); err == nil {
			t.Fatal("read after close")
		}
		if st, err := c.Stat(ctx, name); err != nil || st.Name != name {
			t.Fatalf("after early close of %s: %v", name, err)
		}
	}
}

// hookReader yields n bytes, then calls hook once and keeps yielding.
type hookReader struct {
	n    int
	hook func()
	done bool
}

func (h *hookReader) Read(p []byte) (int, error) {
	if h.n <= 0 && !h.done {
		h.done = true
		h.hook()
	}
	if len(p) > 64<<10 {
		p = p[:64<<10]
	}
	h.n -= len(p)
	return len(p), nil
}

func TestPutAbortByContext(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := c.Put(ctx, "aborted", &hookReader{n: 1 << 20, hook: cancel}, PutOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled put: %v", err)
	}
	select {
	case perr := <-m.putErrs:
		if !errors.Is(perr, ErrAborted) {
			t.Fatalf("backend reader error %v, want ErrAborted", perr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backend saw no reader error")
	}
	if _, err := c.Stat(context.Background(), "aborted"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("aborted name visible: %v", err)
	}
	// reader error on the client side also aborts
	_, err = c.Put(context.Background(), "aborted2", io.MultiReader(strings.NewReader("abc"), iotestErr{}), PutOptions{})
	if err == nil || !strings.Contains(err.Error(), "read input") {
		t.Fatalf("put with failing input: %v", err)
	}
	select {
	case perr := <-m.putErrs:
		if !errors.Is(perr, ErrAborted) {
			t.Fatalf("backend reader error %v", perr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("backend saw no reader error")
	}
	// An input that reports itself cut (io.ErrUnexpectedEOF, bare or
	// wrapped, or a wrapped io.EOF) is not its end: ABORT, no name.
	for i, cut := range []error{io.ErrUnexpectedEOF, fmt.Errorf("pipe: %w", io.ErrUnexpectedEOF), fmt.Errorf("pipe: %w", io.EOF)} {
		name := fmt.Sprintf("cut/%d", i)
		_, err = c.Put(context.Background(), name, io.MultiReader(bytes.NewReader(make([]byte, 3<<20)), &errReader{cut}), PutOptions{})
		if !errors.Is(err, cut) || !strings.Contains(err.Error(), "aborted") {
			t.Fatalf("put of an input cut by %q: %v", cut, err)
		}
		select {
		case perr := <-m.putErrs:
			if !errors.Is(perr, ErrAborted) {
				t.Fatalf("backend reader error %v, want ErrAborted", perr)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("backend saw no reader error")
		}
		if _, err := c.Stat(context.Background(), name); !errors.Is(err, blob.ErrNotFound) {
			t.Fatalf("name of a cut input visible: %v", err)
		}
	}
	if _, err := c.Put(context.Background(), "ok", strings.NewReader("fine"), PutOptions{}); err != nil {
		t.Fatalf("put after abort: %v", err)
	}
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestPutConnectionDropped(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	r := rawDial(t, ts.path, true)
	r.send(FramePut, appendPutReq(nil, "dropped", 0))
	r.send(FrameData, make([]byte, 100_000))
	// a frame cut in the middle, then the client vanishes
	r.write(append(appendHeader(nil, FrameData, 1000), make([]byte, 10)...))
	r.c.Close()
	select {
	case perr := <-m.putErrs:
		if !errors.Is(perr, ErrUploadIncomplete) {
			t.Fatalf("backend reader error %v", perr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backend saw no reader error")
	}
	if _, err := m.lookup("dropped"); err == nil {
		t.Fatal("name visible after a dropped upload")
	}

	// Client ctx cancelled while the daemon is not reading: the
	// connection is cut, the backend reader fails.
	m.with(func() {
		m.block = func(ctx context.Context, op string) {
			if op == "put" {
				time.Sleep(500 * time.Millisecond)
			}
		}
	})
	c := dial(t, ts.path)
	data := make([]byte, 64<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Put(ctx, "slow", bytes.NewReader(data), PutOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("put: %v", err)
	}
	select {
	case perr := <-m.putErrs:
		if perr == nil {
			t.Fatal("no reader error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("backend saw no reader error")
	}
	m.with(func() { m.block = nil })
	if _, err := c.Stat(context.Background(), "slow"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("stat after cut put: %v", err)
	}
}

// TestPutCutUploadLeavesNoName: a PUT whose connection closes before the
// empty DATA frame, (a) between frames, (b) in the middle of a DATA frame's
// body, (c) in the middle of a frame header, stores nothing: the backend's
// reader fails with ErrUploadIncomplete (not io.EOF nor
// io.ErrUnexpectedEOF, which a store could take for the end), naming the
// bytes that arrived; the name stays invisible; the server logs the cut
// once, and no panic; the next connection works. The backend reads like
// the node's store (blob.Split).
func TestPutCutUploadLeavesNoName(t *testing.T) {
	m := newMem()
	var logs syncBuffer
	ts := startServer(t, m, ServerOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	payload := randBytes(300_000, 5)
	for _, tc := range []struct {
		name  string
		tail  []byte // written after PUT and two DATA frames, before the close
		bytes int    // data bytes the server received
		where string
	}{
		{"cut/between-frames", nil, 400_000, "between frames"},
		{"cut/mid-body", append(appendHeader(nil, FrameData, 1000), payload[:10]...), 400_010,
			"in the middle of a DATA frame (990 of its 1000 bytes missing)"},
		{"cut/mid-header", appendHeader(nil, FrameData, 1000)[:3], 400_000, "in the middle of a frame header"},
	} {
		r := rawDial(t, ts.path, true)
		r.send(FramePut, appendPutReq(nil, tc.name, 0))
		r.send(FrameData, payload[:100_000])
		r.send(FrameData, payload)
		if tc.tail != nil {
			r.write(tc.tail)
		}
		r.c.Close()
		select {
		case perr := <-m.putErrs:
			if !errors.Is(perr, ErrUploadIncomplete) || errors.Is(perr, io.EOF) || errors.Is(perr, io.ErrUnexpectedEOF) {
				t.Errorf("%s: backend reader error %v, want ErrUploadIncomplete (and not io.EOF or io.ErrUnexpectedEOF)", tc.name, perr)
			}
			if msg := perr.Error(); !strings.Contains(msg, fmt.Sprintf("after %d bytes", tc.bytes)) || !strings.Contains(msg, tc.where) {
				t.Errorf("%s: reader error %q does not say %q and %d bytes", tc.name, msg, tc.where, tc.bytes)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s: backend saw no reader error", tc.name)
		}
		c := dial(t, ts.path)
		if in, err := c.Stat(context.Background(), tc.name); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("%s: Stat after the cut upload = %+v, %v; want not found", tc.name, in, err)
		}
		// The cut is logged once, with the name.
		deadline := time.Now().Add(5 * time.Second)
		for strings.Count(logs.String(), "name="+tc.name) == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := strings.Count(logs.String(), "name="+tc.name); n != 1 {
			t.Errorf("%s: logged %d times, want once:\n%s", tc.name, n, logs.String())
		}
		// The next connection works: the same name, complete.
		in, err := c.Put(context.Background(), tc.name, bytes.NewReader(payload), PutOptions{})
		if err != nil || in.Size != uint64(len(payload)) {
			t.Fatalf("%s: complete put after the cut: %+v %v", tc.name, in, err)
		}
		var got bytes.Buffer
		if _, err := c.Get(context.Background(), tc.name, &got); err != nil || !bytes.Equal(got.Bytes(), payload) {
			t.Fatalf("%s: get after the complete put: %v (%d bytes)", tc.name, err, got.Len())
		}
	}
	if strings.Contains(strings.ToLower(logs.String()), "panic") {
		t.Fatalf("server log mentions a panic:\n%s", logs.String())
	}
}

// TestPutStalledUploadTimesOut: an upload that stops sending (the
// connection open) fails after the IO timeout with ERROR TIMEOUT, and
// nothing is stored.
func TestPutStalledUploadTimesOut(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{IOTimeout: 300 * time.Millisecond})
	r := rawDial(t, ts.path, true)
	r.send(FramePut, appendPutReq(nil, "stalled", 0))
	r.send(FrameData, make([]byte, 5000))
	r.write(appendHeader(nil, FrameData, 1000)) // and no body
	e := r.expectError(CodeTimeout)
	if !strings.Contains(e.Message, "stalled") || !strings.Contains(e.Message, "after 5000 bytes") {
		t.Errorf("timeout message %q does not name the put and the bytes received", e.Message)
	}
	r.expectClosed()
	select {
	case perr := <-m.putErrs:
		if !errors.Is(perr, ErrUploadIncomplete) || !errors.Is(perr, os.ErrDeadlineExceeded) {
			t.Errorf("backend reader error %v, want ErrUploadIncomplete and a deadline", perr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backend saw no reader error")
	}
	if _, err := m.lookup("stalled"); err == nil {
		t.Fatal("name visible after a stalled upload")
	}
}

// TestPutServerCloseAborts: a server that closes during an upload answers
// ERROR ABORTED, and stores nothing.
func TestPutServerCloseAborts(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	r := rawDial(t, ts.path, true)
	r.send(FramePut, appendPutReq(nil, "closing", 0))
	r.send(FrameData, make([]byte, 1000))
	time.Sleep(50 * time.Millisecond) // the server waits for the next frame
	if err := ts.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if e := r.expectError(CodeAborted); !strings.Contains(e.Message, "closing") {
		t.Errorf("message %q does not name the put", e.Message)
	}
	r.expectClosed()
	select {
	case perr := <-m.putErrs:
		if !errors.Is(perr, context.Canceled) {
			t.Errorf("backend reader error %v, want context.Canceled", perr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backend saw no reader error")
	}
	if _, err := m.lookup("closing"); err == nil {
		t.Fatal("name visible after an upload cut by the server's close")
	}
}

func TestMalformedFrames(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{IOTimeout: 2 * time.Second})
	good := dial(t, ts.path)
	m.store("x", []byte("x"), PutOptions{})
	check := func() {
		t.Helper()
		if _, err := good.Stat(context.Background(), "x"); err != nil {
			t.Fatalf("server stopped serving others: %v", err)
		}
	}

	t.Run("truncated header", func(t *testing.T) {
		r := rawDial(t, ts.path, true)
		r.write([]byte{0, 0, 0})
		r.c.(*net.UnixConn).CloseWrite()
		r.expectClosed()
		check()
	})
	t.Run("oversize", func(t *testing.T) {
		r := rawDial(t, ts.path, true)
		r.write(appendHeader(nil, FrameStat, MaxFrameBody+1))
		r.expectError(CodeBadRequest)
		r.expectClosed()
		check()
	})
	t.Run("oversize request", func(t *testing.T) {
		r := rawDial(t, ts.path, true)
		r.write(appendHeader(nil, FrameStat, MaxRequestBody+1))
		r.expectError(CodeBadRequest)
		r.expectClosed()
	})
	t.Run("oversize hello", func(t *testing.T) {
		r := rawDial(t, ts.path, false)
		r.write([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0})
		r.expectError(CodeBadRequest)
		r.expectClosed()
	})
	t.Run("flags", func(t *testing.T) {
		r := rawDial(t, ts.path, true)
		r.write([]byte{0, 0, 0, 0, byte(FrameStatus), 1, 0, 0})
		r.expectError(CodeBadRequest)
		r.expectClosed()
	})
	t.Run("unknown type", func(t *testing.T) {
		r := rawDial(t, ts.path, true)
		r.send(0x77, []byte("?"))
		r.expectError(CodeBadRequest)
		r.expectClosed()
		check()
	})
	t.Run("get_fd on version 1", func(t *testing.T) {
		r := rawDial(t, ts.path, false)
		r.send(FrameHello, appendHello(nil, 1))
		if typ, body := r.recv(); typ != FrameHello || !bytes.Equal(body, appendHello(nil, 1)) {
			t.Fatalf("hello reply %v %x, want HELLO version 1", typ, body)
		}
		r.send(FrameGetFD, appendNameReq(nil, "x"))
		if e := r.expectError(CodeBadRequest); !strings.Contains(e.Message, "version 2") {
			t.Fatalf("message %q", e.Message)
		}
		r.expectClosed()
	})
	t.Run("data outside put", func(t *testing.T) {
		r := rawDial(t, ts.path, true)
		r.send(FrameData, []byte("x"))
		r.expectError(CodeBadRequest)
		r.expectClosed()
	})
	t.Run("bad body", func(t *testing.T) {
		for _, req := range []struct {
			t    FrameType
			body []byte
		}{
			{FrameStat, []byte{0, 0, 0, 9, 'a'}},
			{FrameStat, append(appendNameReq(nil, "x"), 0)},
			{FramePut, appendNameReq(nil, "x")},
			{FrameStatus, []byte{1}},
			{FrameGetFile, appendNameReq(nil, "x")},
		} {
			r := rawDial(t, ts.path, true)
			r.send(req.t, req.body)
			r.expectError(CodeBadRequest)
			r.expectClosed()
		}
		check()
	})
	t.Run("bad frame in upload", func(t *testing.T) {
		r := rawDial(t, ts.path, true)
		r.send(FramePut, appendPutReq(nil, "up", 0))
		r.send(FrameData, []byte("abc"))
		r.send(FrameStat, appendNameReq(nil, "x"))
		r.expectError(CodeBadRequest)
		r.expectClosed()
		select {
		case perr := <-m.putErrs:
			if !errors.Is(perr, errMalformed) {
				t.Fatalf("backend saw %v", perr)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("backend saw no reader error")
		}
	})
	t.Run("bad version", func(t *testing.T) {
		r := rawDial(t, ts.path, false)
		r.send(FrameHello, appendHello(nil, 0))
		if e := r.expectError(CodeUnsupportedVersion); !strings.Contains(e.Message, fmt.Sprintf("versions 1 to %d", ProtocolVersion)) {
			t.Fatalf("message %q", e.Message)
		}
		r.expectClosed()
		check()
	})
	t.Run("newer version negotiated down", func(t *testing.T) {
		r := rawDial(t, ts.path, false)
		r.send(FrameHello, appendHello(nil, ProtocolVersion+1))
		if typ, body := r.recv(); typ != FrameHello || !bytes.Equal(body, appendHello(nil, ProtocolVersion)) {
			t.Fatalf("hello reply %v %x, want HELLO version %d", typ, body, ProtocolVersion)
		}
	})
	t.Run("bad magic", func(t *testing.T) {
		r := rawDial(t, ts.path, false)
		r.send(FrameHello, []byte("XMST\x00\x00\x00\x01"))
		r.expectError(CodeBadRequest)
		r.expectClosed()
	})
	t.Run("no hello", func(t *testing.T) {
		r := rawDial(t, ts.path, false)
		r.send(FrameStat, appendNameReq(nil, "x"))
		r.expectError(CodeBadRequest)
		r.expectClosed()
		check()
	})
	t.Run("silent client", func(t *testing.T) {
		r := rawDial(t, ts.path, false)
		// IOTimeout bounds the wait for HELLO.
		r.expectClosed()
	})
}

func TestPanicRecovered(t *testing.T) {
	m := newMem()
	m.with(func() { m.panicOn = "remove" })
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	// The server closes the connection after the panic; the client must
	// not reuse it (the close may not have reached it yet), every time.
	for i := range 20 {
		err := c.Remove(context.Background(), "x")
		if CodeOf(err) != CodeInternal {
			t.Fatalf("panic %d: %v", i, err)
		}
		if _, err := c.List(context.Background(), ""); err != nil {
			t.Fatalf("after panic %d: %v", i, err)
		}
	}
}

func TestListManyFrames(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	const n = 2500
	long := strings.Repeat("n", 900)
	for i := 0; i < n; i++ {
		m.store(long+"/"+string(rune('a'+i%26))+"/"+time.Duration(i).String(), nil, PutOptions{})
	}
	r := rawDial(t, ts.path, true)
	r.send(FrameList, appendNameReq(nil, ""))
	frames, total := 0, 0
	for {
		typ, body := r.recv()
		if typ == FrameEnd {
			break
		}
		infos, err := decodeListing(nil, body)
		if typ != FrameListing || err != nil {
			t.Fatal(typ, err)
		}
		frames++
		total += len(infos)
	}
	if frames < 2 || total != n {
		t.Fatalf("%d frames, %d entries", frames, total)
	}
	infos, err := c.List(context.Background(), "")
	if err != nil || len(infos) != n {
		t.Fatalf("list: %d %v", len(infos), err)
	}
}

func TestSocketModeAndStale(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	fi, err := os.Stat(ts.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v", fi.Mode())
	}
	// nothing left behind in the directory
	ents, _ := os.ReadDir(filepath.Dir(ts.path))
	if len(ents) != 1 {
		t.Fatalf("directory holds %v", ents)
	}
	// a second daemon on a live socket
	s2 := NewServer(m, ServerOptions{})
	if _, err := s2.Listen(ts.path); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Listen: %v", err)
	}
	if _, err := Dial(ts.path); err != nil {
		t.Fatalf("first daemon disturbed: %v", err)
	}

	// a stale socket (its daemon died without removing it)
	dir := t.TempDir()
	path := filepath.Join(dir, "omst.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	l, err := s2.Listen(path)
	if err != nil {
		t.Fatalf("Listen on a stale socket: %v", err)
	}
	go s2.Serve(l)
	c := dial(t, path)
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", fi.Mode())
	}
	s2.Close()
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Fatalf("socket file left after Close: %v", err)
	}

	// a regular file is never replaced
	reg := filepath.Join(dir, "file")
	os.WriteFile(reg, []byte("keep"), 0o644)
	if _, err := NewServer(m, ServerOptions{}).Listen(reg); err == nil {
		t.Fatal("Listen replaced a regular file")
	}

	// the umask fallback for long paths
	long := filepath.Join(dir, strings.Repeat("d", 106-len(dir)-1-len("/omst.sock")))
	os.Mkdir(long, 0o755)
	lp := filepath.Join(long, "omst.sock")
	if len(lp) > 107 {
		t.Skip("temporary directory too deep for the fallback test")
	}
	s3 := NewServer(m, ServerOptions{})
	l3, err := s3.Listen(lp)
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	go s3.Serve(l3)
	if fi, err := os.Stat(lp); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("fallback socket: %v %v", fi.Mode(), err)
	}
	dial(t, lp)
}

func TestDialNoDaemon(t *testing.T) {
	path := filepath.Join(t.TempDir(), "omst.sock")
	_, err := Dial(path)
	if !errors.Is(err, ErrNoDaemon) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Dial: %v", err)
	}
	ul, _ := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	ul.SetUnlinkOnClose(false)
	ul.Close()
	if _, err := Dial(path); !errors.Is(err, ErrNoDaemon) {
		t.Fatalf("Dial stale: %v", err)
	}
}

func TestDefaultSocket(t *testing.T) {
	t.Setenv("OMST_SOCKET", "/x/s")
	t.Setenv("OMST_HOME", "/h")
	if s := DefaultSocket(); s != "/x/s" {
		t.Fatal(s)
	}
	t.Setenv("OMST_SOCKET", "")
	if s := DefaultSocket(); s != "/h/omst.sock" {
		t.Fatal(s)
	}
	t.Setenv("OMST_HOME", "")
	t.Setenv("HOME", "/home/u")
	if s := DefaultSocket(); s != "/home/u/.omst/omst.sock" {
		t.Fatal(s)
	}
}

func TestServerCloseCancelsRequests(t *testing.T) {
	m := newMem()
	started := make(chan struct{}, 1)
	m.with(func() {
		m.block = func(ctx context.Context, op string) {
			if op == "stat" {
				started <- struct{}{}
				<-ctx.Done()
			}
		}
	})
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	dial(t, ts.path) // an idle connection must not hold Close up
	errc := make(chan error, 1)
	go func() { _, err := c.Stat(context.Background(), "x"); errc <- err }()
	<-started
	t0 := time.Now()
	if err := ts.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("Close took %v", d)
	}
	if err := <-errc; CodeOf(err) != CodeAborted {
		t.Fatalf("in-flight stat: %v", err)
	}
	if err := <-ts.done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	ts.done <- nil
}

func TestClientHangupCancelsRequest(t *testing.T) {
	m := newMem()
	cancelled := make(chan struct{})
	m.with(func() {
		m.block = func(ctx context.Context, op string) {
			if op == "open" {
				<-ctx.Done()
				close(cancelled)
			}
		}
	})
	ts := startServer(t, m, ServerOptions{})
	r := rawDial(t, ts.path, true)
	r.send(FrameGetFile, appendGetFileReq(nil, "x", filepath.Join(t.TempDir(), "x")))
	time.Sleep(50 * time.Millisecond)
	r.c.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("request not cancelled when the client hung up")
	}
}

func TestClientCtxCancelWhileWaiting(t *testing.T) {
	m := newMem()
	m.with(func() {
		m.block = func(ctx context.Context, op string) {
			if op == "stat" {
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second):
				}
			}
		}
	})
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Stat(ctx, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stat: %v", err)
	}
	m.with(func() { m.block = nil })
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatalf("after cancel: %v", err)
	}
}

func TestIdleReconnect(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{IdleTimeout: 50 * time.Millisecond})
	c := dial(t, ts.path)
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the daemon closes the idle connection
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatalf("after idle close: %v", err)
	}
	c.Close()
	if _, err := c.Status(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed client: %v", err)
	}
}

func TestConcurrentClientUse(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "n/" + string(rune('a'+i))
			data := randBytes(100_000+i, uint64(i))
			for k := 0; k < 10; k++ {
				if _, err := c.Put(context.Background(), name, bytes.NewReader(data), PutOptions{}); err != nil {
					t.Error(err)
					return
				}
				var b bytes.Buffer
				if _, err := c.Get(context.Background(), name, &b); err != nil || !bytes.Equal(b.Bytes(), data) {
					t.Error("get", err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestDocExample(t *testing.T) {
	req := append(appendHeader(nil, FrameStat, 0), appendNameReq(nil, "data/1")...)
	putHeader(req, FrameStat, len(req)-HeaderSize)
	in := Info{Name: "data/1", ID: "bafyex", Size: 5000000, ChunkSize: 1 << 20, Chunks: 5,
		Time: 1700000000000000000, Origin: "12D3KooWEx", Local: true}
	body := appendInfo(nil, &in)
	reply := append(appendHeader(nil, FrameInfo, len(body)), body...)
	t.Logf("STAT request: %x", req)
	t.Logf("INFO reply:   %x", reply)
	b, err := os.ReadFile("../../docs/rpcbridge.md")
	if err != nil {
		t.Skip("docs/rpcbridge.md not found")
	}
	doc := strings.Join(strings.Fields(string(b)), "")
	eb := appendError(nil, CodeNotFound, `"data/1": not found`)
	errFrame := append(appendHeader(nil, FrameError, len(eb)), eb...)
	hello := append(appendHeader(nil, FrameHello, 8), appendHello(nil, 1)...)
	for _, frame := range [][]byte{req, reply, errFrame, hello} {
		if !strings.Contains(doc, hex.EncodeToString(frame)) {
			t.Errorf("docs/rpcbridge.md does not contain the frame %x", frame)
		}
	}
}

// PREHEAT (version 3): the children's answers come back as JSON; an
// unknown name is NOT_FOUND; a version 2 connection may not send it.
func TestProviders(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	info, err := c.Put(ctx, "p/x", bytes.NewReader([]byte("hello")), PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Providers(ctx, "p/x")
	if err != nil || res.ID != info.ID || len(res.Providers) != 1 || !res.Providers[0].Self || res.Providers[0].Site != "site-a" {
		t.Fatalf("providers: %+v %v", res, err)
	}
	if _, err := c.Providers(ctx, "p/none"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("providers of an unknown name: %v", err)
	}
	if _, err := c.Providers(ctx, "../bad"); !errors.Is(err, blob.ErrInvalidName) {
		t.Fatalf("providers of an invalid name: %v", err)
	}
	// Before version 4 PROVIDERS is a bad request.
	r := rawDial(t, ts.path, false)
	r.send(FrameHello, appendHello(nil, 3))
	if typ, body := r.recv(); typ != FrameHello || !bytes.Equal(body, appendHello(nil, 3)) {
		t.Fatalf("hello v3 reply %v %x", typ, body)
	}
	r.send(FrameProviders, appendNameReq(nil, "p/x"))
	r.expectError(CodeBadRequest)
	r2 := rawDial(t, ts.path, true)
	r2.send(FrameProviders, []byte{0, 0, 0, 9, 'x'}) // a name shorter than its length
	r2.expectError(CodeBadRequest)
}

func TestPreheat(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	if _, err := c.Put(ctx, "p/x", bytes.NewReader([]byte("hello")), PutOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Preheat(ctx, "p/x", []string{"site-a", "site-b"})
	if err != nil || len(res) != 2 || res[1].Site != "site-b" || !res[1].OK || res[1].Seconds != 0.5 {
		t.Fatalf("preheat: %+v %v", res, err)
	}
	if _, err := c.Preheat(ctx, "p/none", nil); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("preheat of an unknown name: %v", err)
	}
	if _, err := c.Preheat(ctx, "../bad", nil); !errors.Is(err, blob.ErrInvalidName) {
		t.Fatalf("preheat of an invalid name: %v", err)
	}
	r := rawDial(t, ts.path, false)
	r.send(FrameHello, appendHello(nil, 2))
	if typ, body := r.recv(); typ != FrameHello || !bytes.Equal(body, appendHello(nil, 2)) {
		t.Fatalf("hello v2 reply %v %x", typ, body)
	}
	r.send(FramePreheat, appendPreheatReq(nil, "p/x", nil))
	r.expectError(CodeBadRequest)
	// Malformed bodies.
	r2 := rawDial(t, ts.path, true)
	r2.send(FramePreheat, appendU32(appendStr(nil, "p/x"), maxPreheatSites+1))
	r2.expectError(CodeBadRequest)
}
