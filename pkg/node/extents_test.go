package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// getFD gets name with GET_FD and reassembles it, closing every file.
func getFD(t *testing.T, c *rpcbridge.Client, name string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, xs, err := c.GetFD(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]byte, info.Size)
	for _, x := range xs {
		_, rerr := x.File.ReadAt(out[x.BlobOffset:x.BlobOffset+x.Length], int64(x.FileOffset))
		x.File.Close()
		if rerr != nil {
			t.Fatalf("read extent at %d: %v", x.BlobOffset, rerr)
		}
	}
	return out, nil
}

// damageChunk overwrites, in place, the first bytes of chunk i's file
// under home.
func damageChunk(t *testing.T, n *Node, home, id string, i int) {
	t.Helper()
	c, err := cid.Decode(id)
	if err != nil {
		t.Fatal(err)
	}
	m, err := n.store.Manifest(c)
	if err != nil {
		t.Fatal(err)
	}
	// Where the store keeps it: a chunk file, or a put's blob file at
	// the chunk's offset.
	f, off, _, err := n.store.OpenChunkAt(m.Chunks[i])
	if err != nil {
		t.Fatalf("no file of chunk %d (%s) under %s: %v", i, m.Chunks[i], home, err)
	}
	path := f.Name()
	f.Close()
	w := openWritable(t, path)
	w.WriteAt([]byte("damaged!"), off)
	w.Close()
}

// openWritable opens path for writing, a blob file handed out by GET_FD
// (mode 0400) too, whoever runs the test: its mode is restored at once.
func openWritable(t *testing.T, path string) *os.File {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, st.Mode().Perm()|0o200); err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	os.Chmod(path, st.Mode().Perm())
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestGetFDThroughTree(t *testing.T) {
	dir := t.TempDir()
	rootHome, wHome := filepath.Join(dir, "root"), filepath.Join(dir, "w")
	root := startNode(t, rootHome, "", "")
	child := startNode(t, wHome, root.Addrs()[0], "a")
	rc, err := rpcbridge.Dial(SocketPath(rootHome))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	wc, err := rpcbridge.Dial(SocketPath(wHome))
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()

	data := make([]byte, 5<<20+3)
	rand.Read(data)
	ctx := context.Background()
	info, err := rc.Put(ctx, "init/data", bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// Cold at the child: fetched from the root, then handed out as files.
	if got, err := getFD(t, wc, "init/data"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("cold GET_FD at the child: %v (equal %v)", err, bytes.Equal(got, data))
	}
	// A chunk damaged on the child's disk is dropped and fetched again.
	damageChunk(t, child, wHome, info.ID, 2)
	if got, err := getFD(t, wc, "init/data"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("GET_FD after damage at the child: %v (equal %v)", err, bytes.Equal(got, data))
	}
	// Empty blob: INFO then END.
	if _, err := rc.Put(ctx, "empty", bytes.NewReader(nil), rpcbridge.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := getFD(t, wc, "empty"); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %d bytes", err, len(got))
	}
	if _, err := getFD(t, wc, "no/such"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("missing: %v, want ErrNotFound", err)
	}
	// At the root, the tree has nowhere to fetch it from; the child
	// announced the blob in the DHT once it held all of it: the root heals
	// its copy from there.
	damageChunk(t, root, rootHome, info.ID, 4)
	if got, err := getFD(t, rc, "init/data"); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("GET_FD of a damaged chunk at the root, the child holding the blob: %v (equal %v)", err, bytes.Equal(got, data))
	}
	// With the child gone too there is nowhere: a clear error.
	child.Close()
	damageChunk(t, root, rootHome, info.ID, 3)
	if _, err := getFD(t, rc, "init/data"); !errors.Is(err, blob.ErrCorrupt) {
		t.Fatalf("GET_FD of a damaged chunk at the root, no other holder up: %v, want ErrCorrupt", err)
	}
}
