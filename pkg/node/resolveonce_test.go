package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// recordLog keeps the debug records of one node (a test edge: the get
// path logs each lookup of a name and where its manifest came from).
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r.Clone())
	l.mu.Unlock()
	return nil
}
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordLog) WithGroup(string) slog.Handler      { return l }

// drain returns the records so far, as their message and attributes, and
// forgets them.
func (l *recordLog) drain() []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.recs {
		m := map[string]string{"msg": r.Message}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		out = append(out, m)
	}
	l.recs = nil
	return out
}

// TestGetResolvesOnce: a worker's get resolves the name once (one lookup,
// through the tree) and reads the blob's manifest once: the one its
// parent's answer brought, carried to the fetch (engine.FetchManifest,
// OpenManifest: they read none, TestFetchManifest) instead of being read
// again from the store. Into a file (GET_TO_FD), as a stream (GET) and
// zero-copy (GET_FD), at a worker that lacks the blob and then holds it.
// Before, the manifest the lookup had stored was read again from the
// store (node.resolve), and Fetch read it once more.
func TestGetResolvesOnce(t *testing.T) {
	dir := t.TempDir()
	root := startNode(t, filepath.Join(dir, "root"), "", "")
	log := &recordLog{}
	home := filepath.Join(dir, "w")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := Start(ctx, Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Parent: root.Addrs()[0], Site: "a",
		Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	data := make([]byte, 3<<20+11)
	rand.Read(data)
	if _, err := root.Put(ctx, "once/data", bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: 256 << 10}); err != nil {
		t.Fatal(err)
	}
	c := dialNode(t, home)
	for _, how := range []string{"file, fetched", "stream, held", "GET_FD, held", "file, held"} {
		log.drain() // what came before this get
		var got []byte
		switch how {
		case "file, fetched", "file, held":
			out := filepath.Join(dir, "out")
			if _, err := c.GetFile(ctx, "once/data", out); err != nil {
				t.Fatalf("%s: %v", how, err)
			}
			got, _ = os.ReadFile(out)
		case "stream, held":
			var b bytes.Buffer
			if _, err := c.Get(ctx, "once/data", &b); err != nil {
				t.Fatalf("%s: %v", how, err)
			}
			got = b.Bytes()
		case "GET_FD, held":
			_, xs, err := c.GetFD(ctx, "once/data")
			if err != nil {
				t.Fatalf("%s: %v", how, err)
			}
			for _, x := range xs {
				b := make([]byte, x.Length)
				if _, err := x.File.ReadAt(b, int64(x.FileOffset)); err != nil {
					t.Fatal(err)
				}
				x.File.Close()
				got = append(got, b...)
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: wrong bytes", how)
		}
		lookups, manifests := 0, 0
		for _, r := range log.drain() {
			switch r["msg"] {
			case "name lookup":
				lookups++
			case "get: manifest":
				manifests++
				if r["from"] != "the lookup's answer" {
					t.Errorf("%s: manifest from %s, want the lookup's answer", how, r["from"])
				}
			}
		}
		t.Logf("%s: %d lookups, %d manifest reads", how, lookups, manifests)
		if lookups != 1 || manifests != 1 {
			t.Fatalf("%s: %d lookups and %d manifest reads, want 1 and 1", how, lookups, manifests)
		}
	}
}
