package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"golang.org/x/sys/unix"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// chunkFile is where a node keeps chunk h (the cache's layout).
func chunkFile(home string, h blob.Hash) string {
	x := h.String()
	return filepath.Join(home, "cache", "chunks", x[:2], x)
}

// flip4 flips four bytes in the middle of the file at path.
func flip4(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		b[len(b)/2+i] ^= 0xa5
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func dial(t *testing.T, home string) *rpcbridge.Client {
	t.Helper()
	c, err := rpcbridge.Dial(SocketPath(home))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func getBytes(t *testing.T, ctx context.Context, c *rpcbridge.Client, name string) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := c.Get(ctx, name, &b); err != nil {
		t.Fatalf("get %q: %v", name, err)
	}
	return b.Bytes()
}

// storedChunk finds where a node keeps chunk i of m (blob id) on disk,
// the node up or down: its chunk file, or a blob file of the blob
// (DIR/blobs/<id>.*) holding data at the chunk's offset.
func storedChunk(t *testing.T, home string, id cid.Cid, m *blob.Manifest, i int) (path string, off int64) {
	t.Helper()
	if p := chunkFile(home, m.Chunks[i]); fileExists(p) {
		return p, 0
	}
	off = int64(m.ChunkOffset(i))
	paths, _ := filepath.Glob(filepath.Join(home, "cache", "blobs", id.String()+".*"))
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		d, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		f.Close()
		if err == nil && d == off {
			return p, off
		}
	}
	t.Fatalf("chunk %d of %s not stored at %s", i, id, home)
	return "", 0
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// flipStored flips four bytes in the middle of chunk i where the node at
// home keeps it.
func flipStored(t *testing.T, home string, id cid.Cid, m *blob.Manifest, i int) {
	t.Helper()
	path, off := storedChunk(t, home, id, m, i)
	f := openWritable(t, path)
	defer f.Close()
	b := make([]byte, 4)
	at := off + int64(m.ChunkLen(i)/2)
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	for k := range b {
		b[k] ^= 0xa5
	}
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

// checkChunkFiles fails unless every chunk of m (blob id) is stored at
// home, intact (in a chunk file or a blob file).
func checkChunkFiles(t *testing.T, home string, id cid.Cid, m *blob.Manifest) {
	t.Helper()
	for i, h := range m.Chunks {
		path, off := storedChunk(t, home, id, m, i)
		f, err := os.Open(path)
		if err != nil {
			t.Fatalf("chunk %d at %s: %v", i, home, err)
		}
		b := make([]byte, m.ChunkLen(i))
		_, err = f.ReadAt(b, off)
		f.Close()
		if err != nil {
			t.Fatalf("chunk %d at %s: %v", i, home, err)
		}
		if err := h.Verify(b); err != nil {
			t.Fatalf("chunk %d at %s still damaged on disk: %v", i, home, err)
		}
	}
}

// TestDamagedHeadServesFreshCopy: chunk files of a head node damaged on
// disk (bit flips, truncation, deletion) are dropped, fetched again from
// the root, and the worker asking gets the fresh copy; the head's files
// are repaired and its status counts the damage. A file cut short or
// deleted is found by the head's check of its size; a bit flip in a chunk
// whose outboard the head keeps (it fetched the blob in pieces) is sent
// unhashed and caught by the worker's verification of the piece, which
// counts it as corrupt and REPORTs it: the head re-reads and verifies its
// copy, drops it, and serves the worker's next request from a fresh copy
// (before the outboards were kept, the head hashed every chunk it read and
// the worker saw no error). A get at the head itself verifies what it
// reads and repairs its files too.
func TestDamagedHeadServesFreshCopy(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rootHome, headHome := filepath.Join(dir, "root"), filepath.Join(dir, "head")
	root := startNode(t, rootHome, "", "")
	head := startNode(t, headHome, root.Addrs()[0], "a")
	startNode(t, filepath.Join(dir, "w1"), head.Addrs()[0], "a")

	data := make([]byte, 8<<20+5)
	rand.Read(data)
	info, err := dial(t, rootHome).Put(ctx, "shared/init", bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(getBytes(t, ctx, dial(t, filepath.Join(dir, "w1")), "shared/init"), data) {
		t.Fatal("w1 got wrong bytes")
	}
	id, err := cid.Decode(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	m, err := root.store.Manifest(id)
	if err != nil {
		t.Fatal(err)
	}
	checkChunkFiles(t, headHome, id, m) // the head holds the whole blob

	// Damage six chunk files while the head is down (so that no verified
	// copy is left in its memory), then start it again. (The head fetched
	// the blob into one blob file: its chunks are moved into chunk files
	// of their own first, so that a chunk's file can be cut or removed.)
	for _, h := range m.Chunks {
		if err := head.store.PromoteChunk(h); err != nil {
			t.Fatal(err)
		}
	}
	head.Close()
	flip4(t, chunkFile(headHome, m.Chunks[1]))
	flip4(t, chunkFile(headHome, m.Chunks[6]))
	if err := os.Truncate(chunkFile(headHome, m.Chunks[11]), 1000); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(chunkFile(headHome, m.Chunks[16]), 0); err != nil {
		t.Fatal(err)
	}
	os.Remove(chunkFile(headHome, m.Chunks[21]))
	os.Remove(chunkFile(headHome, m.Chunks[32]))
	head = startNode(t, headHome, root.Addrs()[0], "a")
	w2Home := filepath.Join(dir, "w2")
	w2 := startNode(t, w2Home, head.Addrs()[0], "a")

	if !bytes.Equal(getBytes(t, ctx, dial(t, w2Home), "shared/init"), data) {
		t.Fatal("w2 got wrong bytes")
	}
	hs, err := dial(t, headHome).Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if hs.ChunksDamaged != 6 {
		t.Fatalf("head counted %d damaged chunks, want 6", hs.ChunksDamaged)
	}
	ws, _ := dial(t, w2Home).Status(ctx)
	if ws.CorruptReceived != 2 {
		t.Fatalf("w2 received %d corrupt chunks from its head, want the 2 flipped ones (sent with the kept outboard, unhashed)", ws.CorruptReceived)
	}
	if hs.CorruptReports != 2 {
		t.Fatalf("the head received %d reports, want 2", hs.CorruptReports)
	}
	checkChunkFiles(t, headHome, id, m)
	checkChunkFiles(t, w2Home, id, m)

	// A get at the head itself (GET, GET_FD, GET_FILE) repairs its files too.
	for _, get := range []string{"get", "getfd", "getfile"} {
		head.Close()
		flipStored(t, headHome, id, m, 2)
		flipStored(t, headHome, id, m, 30)
		head = startNode(t, headHome, root.Addrs()[0], "a")
		hc := dial(t, headHome)
		var got []byte
		switch get {
		case "get":
			got = getBytes(t, ctx, hc, "shared/init")
		case "getfd":
			_, xs, err := hc.GetFD(ctx, "shared/init")
			if err != nil {
				t.Fatalf("GET_FD at the head: %v", err)
			}
			for _, x := range xs {
				b := make([]byte, x.Length)
				if _, err := x.File.ReadAt(b, int64(x.FileOffset)); err != nil {
					t.Fatal(err)
				}
				x.File.Close()
				got = append(got, b...)
			}
		case "getfile":
			out := filepath.Join(dir, "copy.bin")
			if _, err := hc.GetFile(ctx, "shared/init", out); err != nil {
				t.Fatalf("GET_FILE at the head: %v", err)
			}
			got, _ = os.ReadFile(out)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s at the head: wrong bytes", get)
		}
		if st, _ := hc.Status(ctx); st.ChunksDamaged != 2 {
			t.Fatalf("%s at the head: %d damaged chunks counted, want 2", get, st.ChunksDamaged)
		}
		checkChunkFiles(t, headHome, id, m)
	}
	_ = w2
}

// TestLostChunkUnavailable: at the root, whose blob has no other source, a
// chunk file deleted on disk makes a get fail with UNAVAILABLE (the name
// exists; its bytes are gone), not NOT_FOUND.
func TestLostChunkUnavailable(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	home := filepath.Join(dir, "root")
	root := startNode(t, home, "", "")
	data := make([]byte, 1<<20+3)
	rand.Read(data)
	info, err := dial(t, home).Put(ctx, "lost/x", bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := cid.Decode(info.ID)
	m, err := root.store.Manifest(id)
	if err != nil {
		t.Fatal(err)
	}
	// Lost: its chunk file deleted, or its range punched out of the put's
	// blob file.
	f, off, size, err := root.store.OpenChunkAt(m.Chunks[2])
	if err != nil {
		t.Fatal(err)
	}
	path := f.Name()
	f.Close()
	root.Close()
	if off == 0 && path == chunkFile(home, m.Chunks[2]) {
		os.Remove(path)
	} else if w, err := os.OpenFile(path, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	} else {
		err := unix.Fallocate(int(w.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, size)
		w.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	startNode(t, home, "", "")
	_, err = dial(t, home).Get(ctx, "lost/x", io.Discard)
	if !errors.Is(err, blob.ErrUnavailable) || errors.Is(err, blob.ErrNotFound) || rpcbridge.CodeOf(err) != rpcbridge.CodeUnavailable {
		t.Fatalf("get of a blob with a lost chunk: %v (code %v), want UNAVAILABLE", err, rpcbridge.CodeOf(err))
	}
}
