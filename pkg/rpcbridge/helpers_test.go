package rpcbridge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
)

// memBackend is an in-memory Backend for protocol tests.
type memBackend struct {
	mu    sync.Mutex
	blobs map[string]memBlob

	putErrs chan error // every error a Put saw from its reader
	calls   int        // backend calls

	// hooks (nil = default behaviour)
	openFailAfter int                                  // >0: Open's reader fails after this many bytes
	openLie       int64                                // !=0: Open's reader yields Size+openLie bytes
	block         func(ctx context.Context, op string) // called at the start of each call
	panicOn       string
	putMax        int64 // >0: Put fails with ErrNoSpace after reading this many bytes
}

type memBlob struct {
	info Info
	data []byte
}

func newMem() *memBackend {
	return &memBackend{blobs: map[string]memBlob{}, putErrs: make(chan error, 16)}
}

func (m *memBackend) enter(ctx context.Context, op string) {
	m.mu.Lock()
	m.calls++
	block, p := m.block, m.panicOn
	m.mu.Unlock()
	if p == op {
		panic("test panic in " + op)
	}
	if block != nil {
		block(ctx, op)
	}
}

func fakeID(data []byte) string {
	h := sha256.Sum256(data)
	return "bafkr" + hex.EncodeToString(h[:20])
}

func (m *memBackend) store(name string, data []byte, opts PutOptions) Info {
	cs := uint32(opts.ChunkSize)
	if cs == 0 {
		cs = blob.DefaultChunkSize
	}
	in := Info{Name: name, ID: fakeID(data), Size: uint64(len(data)), ChunkSize: cs,
		Chunks: uint32(blob.NumChunks(uint64(len(data)), cs)), Time: time.Now().UnixNano(),
		Origin: "12D3KooWTestOrigin", Local: true, Pinned: true}
	m.mu.Lock()
	m.blobs[name] = memBlob{in, data}
	m.mu.Unlock()
	return in
}

func (m *memBackend) Put(ctx context.Context, name string, r io.Reader, opts PutOptions) (Info, error) {
	m.enter(ctx, "put")
	m.mu.Lock()
	limit := m.putMax
	m.mu.Unlock()
	if limit > 0 {
		data, err := io.ReadAll(io.LimitReader(r, limit+1))
		if err == nil && int64(len(data)) > limit {
			return Info{}, fmt.Errorf("put %q: %w", name, blob.ErrNoSpace)
		}
		if err == nil {
			return m.store(name, data, opts), nil
		}
	}
	// Read the way the node's store does (blob.Split: only io.EOF ends
	// the upload), so that these tests see what the daemon would commit.
	cs := opts.ChunkSize
	if cs == 0 {
		cs = blob.DefaultChunkSize
	}
	var data []byte
	_, err := blob.Split(r, cs, func(_ int, _ blob.Hash, c []byte) error {
		data = append(data, c...)
		return nil
	})
	if err != nil {
		m.putErrs <- err
		return Info{}, fmt.Errorf("put %q: %w", name, err)
	}
	return m.store(name, data, opts), nil
}

// syncBuffer is a bytes.Buffer safe for concurrent use (a log sink).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (m *memBackend) lookup(name string) (memBlob, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.blobs[name]
	if !ok {
		return memBlob{}, fmt.Errorf("%q: %w", name, blob.ErrNotFound)
	}
	return b, nil
}

type failReader struct {
	r    io.Reader
	left int
}

func (f *failReader) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, fmt.Errorf("fetch chunk: %w", blob.ErrUnreachable)
	}
	if len(p) > f.left {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	f.left -= n
	return n, err
}

func (m *memBackend) Open(ctx context.Context, name string) (Info, io.ReadCloser, error) {
	m.enter(ctx, "open")
	b, err := m.lookup(name)
	if err != nil {
		return Info{}, nil, err
	}
	var r io.Reader = bytes.NewReader(b.data)
	m.mu.Lock()
	failAfter, lie := m.openFailAfter, m.openLie
	m.mu.Unlock()
	switch {
	case failAfter > 0:
		r = &failReader{r: r, left: failAfter}
	case lie > 0:
		r = io.MultiReader(r, bytes.NewReader(make([]byte, lie)))
	case lie < 0:
		r = io.LimitReader(r, int64(len(b.data))+lie)
	}
	return b.info, io.NopCloser(r), nil
}

func (m *memBackend) Stat(ctx context.Context, name string) (Info, error) {
	m.enter(ctx, "stat")
	if err := ctx.Err(); err != nil {
		return Info{}, fmt.Errorf("stat %q: %w", name, err)
	}
	b, err := m.lookup(name)
	return b.info, err
}

func (m *memBackend) List(ctx context.Context, prefix string) ([]Info, error) {
	m.enter(ctx, "list")
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Info
	for n, b := range m.blobs {
		if strings.HasPrefix(n, prefix) {
			out = append(out, b.info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (m *memBackend) Remove(ctx context.Context, name string) error {
	m.enter(ctx, "remove")
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.blobs[name]; !ok {
		return fmt.Errorf("remove %q: %w", name, blob.ErrNotFound)
	}
	delete(m.blobs, name)
	return nil
}

var testStatus = Status{
	PeerID: "12D3KooWSelf", Site: "site-a", Addrs: []string{"/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWSelf"},
	Parent: "12D3KooWParent", ParentConnected: true,
	Children:  []Child{{ID: "12D3KooWKid", Site: "site-b", Addrs: []string{"/ip4/10.0.0.2/tcp/4001"}, Connected: true}},
	CacheUsed: 1 << 30, CacheCap: 4 << 30, CachePinned: 1 << 20, Chunks: 1024,
	BytesServed: 5, BytesFetched: 6, PeerErrors: 7, Names: 3, Version: "0.1.0-test",
}

func (m *memBackend) Status(ctx context.Context) (Status, error) {
	m.enter(ctx, "status")
	return testStatus, nil
}

// Preheat answers with one result per site asked (none: one child), or
// NOT_FOUND for a name it does not hold.
func (m *memBackend) Preheat(ctx context.Context, name string, sites []string) ([]PreheatResult, error) {
	m.enter(ctx, "preheat")
	m.mu.Lock()
	_, ok := m.blobs[name]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("preheat %q: %w", name, blob.ErrNotFound)
	}
	if len(sites) == 0 {
		sites = []string{"site-a"}
	}
	var out []PreheatResult
	for i, s := range sites {
		out = append(out, PreheatResult{Child: fmt.Sprintf("12D3KooWKid%d", i), Site: s, OK: true, Seconds: 0.5})
	}
	return out, nil
}

// Providers answers that this node holds the blob, or NOT_FOUND.
func (m *memBackend) Providers(ctx context.Context, name string) (Providers, error) {
	m.enter(ctx, "providers")
	m.mu.Lock()
	b, ok := m.blobs[name]
	m.mu.Unlock()
	if !ok {
		return Providers{}, fmt.Errorf("providers of %q: %w", name, blob.ErrNotFound)
	}
	return Providers{ID: b.info.ID, Providers: []Provider{{Peer: "12D3KooWSelf", Site: "site-a", Known: true, Self: true}}}, nil
}

func (m *memBackend) with(f func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f()
}

func (m *memBackend) callCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

// testServer runs a server for m on a socket in a temporary directory.
type testServer struct {
	srv  *Server
	path string
	done chan error
}

func startServer(t testing.TB, m Backend, opts ServerOptions) *testServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "rb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ts := &testServer{srv: NewServer(m, opts), path: filepath.Join(dir, "omst.sock"), done: make(chan error, 1)}
	l, err := ts.srv.Listen(ts.path)
	if err != nil {
		t.Fatal(err)
	}
	go func() { ts.done <- ts.srv.Serve(l) }()
	t.Cleanup(func() {
		if err := ts.srv.Close(); err != nil {
			t.Errorf("server close: %v", err)
		}
		select {
		case err := <-ts.done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return ts
}

func dial(t testing.TB, path string) *Client {
	t.Helper()
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// raw is a hand-driven protocol connection.
type raw struct {
	t testing.TB
	c net.Conn
}

func rawDial(t testing.TB, path string, hello bool) *raw {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := &raw{t, c}
	if hello {
		r.send(FrameHello, appendHello(nil, ProtocolVersion))
		if typ, body := r.recv(); typ != FrameHello || !bytes.Equal(body, appendHello(nil, ProtocolVersion)) {
			t.Fatalf("hello reply %v %x", typ, body)
		}
	}
	return r
}

func (r *raw) write(b []byte) {
	r.t.Helper()
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatalf("raw write: %v", err)
	}
}

func (r *raw) send(t FrameType, body []byte) {
	r.t.Helper()
	r.write(append(appendHeader(nil, t, len(body)), body...))
}

func (r *raw) recvErr() (FrameType, []byte, error) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(r.c, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[:])
	if n > MaxFrameBody || h[5]|h[6]|h[7] != 0 {
		return 0, nil, fmt.Errorf("bad header %x", h)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r.c, body); err != nil {
		return 0, nil, err
	}
	return FrameType(h[4]), body, nil
}

func (r *raw) recv() (FrameType, []byte) {
	r.t.Helper()
	typ, body, err := r.recvErr()
	if err != nil {
		r.t.Fatalf("raw recv: %v", err)
	}
	return typ, body
}

// expectError reads an ERROR frame with the given code.
func (r *raw) expectError(code Code) *Error {
	r.t.Helper()
	typ, body := r.recv()
	if typ != FrameError {
		r.t.Fatalf("got %v, want ERROR %v", typ, code)
	}
	e, err := decodeError(body)
	if err != nil {
		r.t.Fatal(err)
	}
	if e.Code != code {
		r.t.Fatalf("got error %v %q, want %v", e.Code, e.Message, code)
	}
	return e
}

// expectClosed checks that the server closed the connection.
func (r *raw) expectClosed() {
	r.t.Helper()
	if typ, body, err := r.recvErr(); err == nil {
		r.t.Fatalf("connection still open: got %v %q", typ, body)
	} else if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !isReset(err) {
		r.t.Fatalf("want EOF, got %v", err)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// OpenExtents serves the blob from unlinked temporary files, one per
// chunk; openFailAfter > 0 makes the iterator fail after that many extents.
func (m *memBackend) OpenExtents(ctx context.Context, name string) (Info, ExtentIter, error) {
	m.enter(ctx, "openextents")
	b, err := m.lookup(name)
	if err != nil {
		return Info{}, nil, err
	}
	m.mu.Lock()
	failAfter := m.openFailAfter
	m.mu.Unlock()
	return b.info, &memExtents{data: b.data, cs: int(b.info.ChunkSize), failAfter: failAfter}, nil
}

type memExtents struct {
	data      []byte
	cs        int
	off       int
	n         int
	failAfter int
}

func (it *memExtents) Next() (Extent, error) {
	if it.off >= len(it.data) {
		return Extent{}, io.EOF
	}
	if it.failAfter > 0 && it.n >= it.failAfter {
		return Extent{}, fmt.Errorf("fetch chunk: %w", blob.ErrUnreachable)
	}
	end := min(it.off+it.cs, len(it.data))
	f, err := os.CreateTemp("", "omst-extent-*")
	if err != nil {
		return Extent{}, err
	}
	os.Remove(f.Name())
	if _, err := f.Write(it.data[it.off:end]); err != nil {
		f.Close()
		return Extent{}, err
	}
	x := Extent{ExtentRange: ExtentRange{BlobOffset: uint64(it.off), Length: uint64(end - it.off)}, File: f}
	it.off = end
	it.n++
	return x, nil
}

func (it *memExtents) Close() error { return nil }
