package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/tree"
)

// TestStreamGetIntoOneBlobFile: a worker's stream get (GET) of a blob it
// fetches from its parent stores the blob in one blob file of its store's
// own, HOME/cache/blobs/<cid>.s0, and no chunk file but those the parent
// pushed with the lookup, if any (it wrote a chunk file each before); GET_FD then hands out that file itself at each chunk's
// offset (every descriptor's inode is the blob file's; no chunk file is
// made: it copied each chunk into one before), marked handed out (0400),
// and after a restart a GET_FD hands it out again (the cache's
// TestOpenChunkSharedHandsOutBlobFile: eviction does not punch it).
// The parent, which relayed nothing, is unchanged. A second worker's
// GET_FD of a cold blob fetches it into one blob file too.
func TestStreamGetIntoOneBlobFile(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rootHome, wHome := filepath.Join(dir, "root"), filepath.Join(dir, "w")
	root := startNode(t, rootHome, "", "")
	w := startNode(t, wHome, root.Addrs()[0], "a")
	const cs = 1 << 20
	// The parent may push a blob's first chunks with the lookup (into
	// chunk files, before any fetch): at most this many.
	const pushed = tree.MaxPushBytes / cs
	data := make([]byte, 24*cs+17)
	rand.Read(data)
	info, err := dialNode(t, rootHome).Put(ctx, "own/a", bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: cs})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := cid.Decode(info.ID)
	c := dialNode(t, wHome)
	var got bytes.Buffer
	if _, err := c.Get(ctx, "own/a", &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("stream get at the worker: %v (equal %v)", err, bytes.Equal(got.Bytes(), data))
	}
	chunkDir := filepath.Join(wHome, "cache", "chunks")
	blobPath := filepath.Join(wHome, "cache", "blobs", id.String()+".s0")
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal(what)
			}
		}
	}
	// The sink closes once the fetch's last chunks are stored.
	waitFor("the worker does not hold the whole blob", func() bool { return w.holds(mustManifest(t, w, id)) })
	if n := filesUnder(t, chunkDir); n > pushed {
		t.Fatalf("%d chunk files at the worker after a stream get, want at most the %d pushed", n, pushed)
	}
	bs, _ := filepath.Glob(filepath.Join(wHome, "cache", "blobs", "*"))
	if len(bs) != 1 || bs[0] != blobPath {
		t.Fatalf("blob files at the worker: %v, want %s", bs, blobPath)
	}

	getFDFrom := func(c *rpcbridge.Client, path string) {
		t.Helper()
		var pst syscall.Stat_t
		if err := syscall.Stat(path, &pst); err != nil {
			t.Fatal(err)
		}
		before := filesUnder(t, chunkDir)
		info, xs, err := c.GetFD(ctx, "own/a")
		if err != nil {
			t.Fatalf("GET_FD: %v", err)
		}
		out := make([]byte, info.Size)
		inBlob := 0
		for _, x := range xs {
			var st syscall.Stat_t
			syscall.Fstat(int(x.File.Fd()), &st)
			switch {
			case st.Ino == pst.Ino && x.FileOffset == x.BlobOffset:
				inBlob++
			case x.FileOffset != 0:
				t.Errorf("extent at %d: inode %d at %d, want the blob file's %d at %d or a chunk file", x.BlobOffset, st.Ino, x.FileOffset, pst.Ino, x.BlobOffset)
			}
			if _, err := x.File.ReadAt(out[x.BlobOffset:x.BlobOffset+x.Length], int64(x.FileOffset)); err != nil && err != io.EOF {
				t.Fatal(err)
			}
			x.File.Close()
		}
		if !bytes.Equal(out, data) {
			t.Fatal("GET_FD's bytes differ from the blob")
		}
		if inBlob < len(xs)-pushed {
			t.Fatalf("%d of %d extents in the blob file, want all but the %d pushed at most", inBlob, len(xs), pushed)
		}
		if n := filesUnder(t, chunkDir); n != before {
			t.Fatalf("%d chunk files after GET_FD, %d before: a copy", n, before)
		}
		if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o400 {
			t.Fatalf("the handed-out blob file: %v, mode %v, want 0400", err, st.Mode().Perm())
		}
	}
	getFDFrom(c, blobPath)

	// After a restart: the file is still handed out, and handed out again.
	w.Close()
	w = startNode(t, wHome, root.Addrs()[0], "a")
	c = dialNode(t, wHome)
	getFDFrom(c, blobPath)

	// A cold GET_FD at another worker fetches into one blob file too.
	w2Home := filepath.Join(dir, "w2")
	startNode(t, w2Home, root.Addrs()[0], "a")
	getFDFrom2 := dialNode(t, w2Home)
	b2, err := getFD(t, getFDFrom2, "own/a")
	if err != nil || !bytes.Equal(b2, data) {
		t.Fatalf("cold GET_FD at w2: %v", err)
	}
	if n := filesUnder(t, filepath.Join(w2Home, "cache", "chunks")); n > pushed {
		t.Fatalf("%d chunk files at w2 after a cold GET_FD, want at most the %d pushed", n, pushed)
	}
	if bs, _ := filepath.Glob(filepath.Join(w2Home, "cache", "blobs", "*.s0")); len(bs) != 1 {
		t.Fatalf("blob files at w2: %v, want one", bs)
	}
}

func mustManifest(t *testing.T, n *Node, id cid.Cid) *blob.Manifest {
	t.Helper()
	m, err := n.store.Manifest(id)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRelayIntoOneBlobFile: a head that relays a blob to its worker chunk
// by chunk (cut-through: no fetch of the whole blob runs at the head)
// stores the chunks it pulls through in one blob file of its store's own,
// not a chunk file each (it wrote a chunk file each before: 25 here), and
// serves them from there.
func TestRelayIntoOneBlobFile(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rootHome, headHome, wHome := filepath.Join(dir, "root"), filepath.Join(dir, "head"), filepath.Join(dir, "w")
	root := startNode(t, rootHome, "", "")
	head := startNode(t, headHome, root.Addrs()[0], "a")
	startNode(t, wHome, head.Addrs()[0], "a")
	const cs = 1 << 20
	const pushed = tree.MaxPushBytes / cs
	data := make([]byte, 24*cs+17)
	rand.Read(data)
	info, err := dialNode(t, rootHome).Put(ctx, "relay/a", bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: cs})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := cid.Decode(info.ID)
	var got bytes.Buffer
	if _, err := dialNode(t, wHome).Get(ctx, "relay/a", &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("get at the worker: %v (equal %v)", err, bytes.Equal(got.Bytes(), data))
	}
	m := mustManifest(t, head, id)
	held := 0
	for _, h := range m.Chunks {
		if head.store.HasChunk(h) {
			held++
		}
	}
	if held != len(m.Chunks) {
		t.Fatalf("the head holds %d of %d chunks after relaying the blob", held, len(m.Chunks))
	}
	if n := filesUnder(t, filepath.Join(headHome, "cache", "chunks")); n > pushed {
		t.Fatalf("%d chunk files at the head after relaying, want at most the %d pushed", n, pushed)
	}
	if bs, _ := filepath.Glob(filepath.Join(headHome, "cache", "blobs", id.String()+".s*")); len(bs) != 1 {
		t.Fatalf("blob files at the head: %v, want one", bs)
	}
	checkChunkFiles(t, headHome, id, m)
}
