package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/tree"
)

func links(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return uint64(st.Sys().(*syscall.Stat_t).Nlink)
}

// filesUnder counts the regular files under dir.
func filesUnder(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return n
}

func dialNode(t *testing.T, home string) *rpcbridge.Client {
	t.Helper()
	c, err := rpcbridge.Dial(SocketPath(home))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestGetToFileWritesOnce: a get into a file on the cache's filesystem
// writes each fetched byte once: into the destination, which the cache
// keeps (linked: one inode) as its copy of the chunks, not into chunk
// files as well (issue 26 item 1; before, the child wrote every chunk
// file and then the destination). The cache serves the blob from there
// with the parent gone, to a file (copied, verified) and through GET_FD
// (the chunks then move to chunk files of their own, which never change).
func TestGetToFileWritesOnce(t *testing.T) {
	dir := t.TempDir()
	root := startNode(t, filepath.Join(dir, "root"), "", "")
	childHome := filepath.Join(dir, "child")
	startNode(t, childHome, root.Addrs()[0], "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Larger than what the lookup's answer may push (tree.MaxPushBytes):
	// chunks pushed with it may reach the store before the get opens its
	// sink, and are then copied into the destination (written twice);
	// every other chunk must be written once.
	const chunk = 256 << 10
	data := make([]byte, 3*tree.MaxPushBytes+17)
	rand.Read(data)
	if _, err := root.Put(ctx, "once/a", bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: chunk}); err != nil {
		t.Fatal(err)
	}
	c := dialNode(t, childHome)
	out := filepath.Join(dir, "out.bin")
	if _, err := c.GetFile(ctx, "once/a", out); err != nil {
		t.Fatalf("get to a file: %v", err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("the file differs from the blob")
	}
	cacheDir := filepath.Join(childHome, "cache")
	if n := links(t, out); n != 2 {
		t.Errorf("destination has %d links, want 2 (shared with the cache)", n)
	}
	if n := filesUnder(t, filepath.Join(cacheDir, "chunks")); n > tree.MaxPushBytes/chunk {
		t.Errorf("%d chunk files at the child (of %d chunks, at most %d pushed with the lookup): the fetched bytes were written twice",
			n, (len(data)+chunk-1)/chunk, tree.MaxPushBytes/chunk)
	}
	root.Close()
	out2 := filepath.Join(dir, "out2.bin")
	if _, err := c.GetFile(ctx, "once/a", out2); err != nil {
		t.Fatalf("cache hit to a file with the parent gone: %v", err)
	}
	if got, _ := os.ReadFile(out2); !bytes.Equal(got, data) {
		t.Fatal("the cache hit's file differs from the blob")
	}
	info, xs, err := c.GetFD(ctx, "once/a")
	if err != nil {
		t.Fatalf("GET_FD: %v", err)
	}
	got := make([]byte, info.Size)
	for _, x := range xs {
		if _, err := x.File.ReadAt(got[x.BlobOffset:x.BlobOffset+x.Length], int64(x.FileOffset)); err != nil {
			t.Fatal(err)
		}
		if links(t, fmt.Sprintf("/proc/self/fd/%d", x.File.Fd())) != 1 {
			t.Error("GET_FD handed out a file shared with a destination")
		}
		x.File.Close()
	}
	if !bytes.Equal(got, data) {
		t.Fatal("GET_FD's bytes differ from the blob")
	}
	if n := links(t, out); n != 1 {
		t.Errorf("destination has %d links after GET_FD moved its chunks, want 1", n)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("the destination changed")
	}
}

// TestGetToFileCacheElsewhere: a destination the cache cannot share
// (another filesystem: a tmpfs) gets the blob written as before, and a
// cache hit to it is copied from the cache.
func TestGetToFileCacheElsewhere(t *testing.T) {
	dir := t.TempDir()
	mnt := mountTmpfs(t, filepath.Join(dir, "mnt"), 64<<20)
	root := startNode(t, filepath.Join(dir, "root"), "", "")
	childHome := filepath.Join(dir, "child")
	startNode(t, childHome, root.Addrs()[0], "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	data := make([]byte, 2<<20+5)
	rand.Read(data)
	if _, err := root.Put(ctx, "once/b", bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: 256 << 10}); err != nil {
		t.Fatal(err)
	}
	c := dialNode(t, childHome)
	for _, name := range []string{"cold", "hit"} {
		out := filepath.Join(mnt, name)
		if _, err := c.GetFile(ctx, "once/b", out); err != nil {
			t.Fatalf("%s get: %v", name, err)
		}
		if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
			t.Fatalf("%s: the file differs from the blob", name)
		}
		if n := links(t, out); n != 1 {
			t.Fatalf("%s: %d links", name, n)
		}
	}
	// The cold get fetched into one blob file of the store's own, not a
	// chunk file each (but those the root pushed with the lookup).
	if n := filesUnder(t, filepath.Join(childHome, "cache", "chunks")); n > tree.MaxPushBytes/(256<<10) {
		t.Fatalf("%d chunk files at the child, want at most the %d pushed", n, tree.MaxPushBytes/(256<<10))
	}
	if bs, _ := filepath.Glob(filepath.Join(childHome, "cache", "blobs", "*.s0")); len(bs) != 1 {
		t.Fatalf("blob files at the child: %v, want one", bs)
	}
}

// mountTmpfs mounts a tmpfs of size bytes at dir for the test (root only).
func mountTmpfs(t *testing.T, dir string, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("omst-test", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestGetToFileFullDisk: a get into a file on a filesystem that fills up
// (the child's home and the destination on one 48 MiB tmpfs, a 64 MiB
// blob) fails with a no-space error; the destination does not exist, no
// temporary file is left beside it, the cache holds nothing of the get
// (no link, no entry), and the child goes on: a small get afterwards
// works.
func TestGetToFileFullDisk(t *testing.T) {
	dir := t.TempDir()
	mnt := mountTmpfs(t, filepath.Join(dir, "mnt"), 48<<20)
	root := startNode(t, filepath.Join(dir, "root"), "", "")
	childHome := filepath.Join(mnt, "child")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	child, err := Start(ctx, Config{Home: childHome, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Parent: root.Addrs()[0], Site: "a", CacheSize: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	big := make([]byte, 64<<20)
	rand.Read(big)
	small := big[:100000]
	if _, err := root.Put(ctx, "once/big", bytes.NewReader(big), rpcbridge.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Put(ctx, "once/small", bytes.NewReader(small), rpcbridge.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	c := dialNode(t, childHome)
	outDir := filepath.Join(mnt, "out")
	os.Mkdir(outDir, 0o755)
	out := filepath.Join(outDir, "big")
	_, err = c.GetFile(ctx, "once/big", out)
	if err == nil {
		t.Fatal("a 64 MiB get into a 48 MiB filesystem succeeded")
	}
	if !errors.Is(err, blob.ErrNoSpace) || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("error %q: want a no-space error", err)
	}
	t.Logf("full disk: %v", err)
	if ents, _ := os.ReadDir(outDir); len(ents) != 0 {
		t.Fatalf("%d files left in the destination's directory (%s...)", len(ents), ents[0].Name())
	}
	cacheDir := filepath.Join(childHome, "cache")
	if n := filesUnder(t, filepath.Join(cacheDir, "tmp")) + filesUnder(t, filepath.Join(cacheDir, "blobs")); n != 0 {
		t.Fatalf("%d files of the failed get left in the cache", n)
	}
	if u := child.store.Usage(); u.Chunks != 0 && child.store.HasBlob(mustID(t, root, "once/big")) {
		t.Fatal("the cache holds the blob of the failed get")
	}
	out2 := filepath.Join(outDir, "small")
	if _, err := c.GetFile(ctx, "once/small", out2); err != nil {
		t.Fatalf("small get after the full disk: %v", err)
	}
	if got, _ := os.ReadFile(out2); !bytes.Equal(got, small) {
		t.Fatal("small get wrote other bytes")
	}
}

func mustID(t *testing.T, n *Node, name string) cid.Cid {
	t.Helper()
	info, err := n.Stat(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	id, ok := blob.ParseID(info.ID)
	if !ok {
		t.Fatalf("bad ID %q", info.ID)
	}
	return id
}

const crashHomeEnv, crashParentEnv = "OMST_NODE_CRASH_HOME", "OMST_NODE_CRASH_PARENT"

// TestGetCrashHelper is the daemon that TestGetToFileKilledDaemon kills;
// it does nothing unless started by it.
func TestGetCrashHelper(t *testing.T) {
	home := os.Getenv(crashHomeEnv)
	if home == "" {
		t.Skip("helper process for TestGetToFileKilledDaemon")
	}
	n, err := Start(context.Background(), Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Parent: os.Getenv(crashParentEnv), Site: "a"})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	time.Sleep(time.Minute)
}

// TestGetToFileKilledDaemon: kill -9 of the daemon in the middle of a get
// into a file (its parent sends at 4 MiB/s) leaves no destination and no
// temporary file beside it; after a restart the cache holds nothing of the
// get (no link, no chunk, nothing counted damaged or orphaned), and the
// get completes.
func TestGetToFileKilledDaemon(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	root, err := Start(ctx, Config{Home: filepath.Join(dir, "root"), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, MaxUploadRate: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	data := make([]byte, 16<<20)
	rand.Read(data)
	if _, err := root.Put(ctx, "once/k", bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: 256 << 10}); err != nil {
		t.Fatal(err)
	}
	childHome := filepath.Join(dir, "child")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestGetCrashHelper$", "-test.timeout", "2m")
	cmd.Env = append(os.Environ(), crashHomeEnv+"="+childHome, crashParentEnv+"="+root.Addrs()[0])
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var c *rpcbridge.Client
	for deadline := time.Now().Add(30 * time.Second); c == nil; {
		if cc, err := rpcbridge.Dial(SocketPath(childHome)); err == nil {
			c = cc
		} else if time.Now().After(deadline) {
			t.Fatalf("helper daemon not up: %v", err)
		} else {
			time.Sleep(50 * time.Millisecond)
		}
	}
	defer c.Close()
	outDir := filepath.Join(dir, "out")
	os.Mkdir(outDir, 0o755)
	out := filepath.Join(outDir, "k")
	done := make(chan error, 1)
	go func() {
		_, err := c.GetFile(ctx, "once/k", out)
		done <- err
	}()
	// Kill once several chunks are in the destination.
	for {
		ents, _ := os.ReadDir(outDir)
		if len(ents) == 1 {
			if fi, err := ents[0].Info(); err == nil && fi.Size() > 2<<20 {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("get ended before the kill: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the get succeeded although its daemon was killed")
		}
		t.Logf("get: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the get did not end after its daemon was killed")
	}
	if ents, _ := os.ReadDir(outDir); len(ents) != 0 {
		t.Fatalf("%d files left in the destination's directory (%s)", len(ents), ents[0].Name())
	}
	child := startNode(t, childHome, root.Addrs()[0], "a")
	u := child.store.Usage()
	if u.DamagedChunks != 0 || u.OrphanedBytes != 0 {
		t.Fatalf("after the restart: %d damaged, %d orphaned bytes; want none", u.DamagedChunks, u.OrphanedBytes)
	}
	// The chunks of the cut get went with its destination; only those a
	// LOOKUP_GET's push brought before the get opened its sink (the root
	// is in another site) may be in chunk files, whole and indexed.
	cacheDir := filepath.Join(childHome, "cache")
	if n := filesUnder(t, filepath.Join(cacheDir, "tmp")) + filesUnder(t, filepath.Join(cacheDir, "blobs")); n != 0 {
		t.Fatalf("%d files of the cut get left in the cache", n)
	}
	if n := filesUnder(t, filepath.Join(cacheDir, "chunks")); n != u.Chunks {
		t.Fatalf("%d chunk files, %d chunks after the restart; want as many", n, u.Chunks)
	}
	c2 := dialNode(t, childHome)
	if _, err := c2.GetFile(ctx, "once/k", out); err != nil {
		t.Fatalf("get after the restart: %v", err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("the file differs from the blob")
	}
}

// TestGetToFileRepeatsAndEmpty: a blob whose chunks repeat (one hash at
// several offsets) and an empty blob arrive whole in files shared with
// the cache, cold and as cache hits.
func TestGetToFileRepeatsAndEmpty(t *testing.T) {
	dir := t.TempDir()
	root := startNode(t, filepath.Join(dir, "root"), "", "")
	childHome := filepath.Join(dir, "child")
	startNode(t, childHome, root.Addrs()[0], "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	blobs := map[string][]byte{"once/zeros": make([]byte, 1<<20+3), "once/empty": {}}
	for name, data := range blobs {
		if _, err := root.Put(ctx, name, bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: 256 << 10}); err != nil {
			t.Fatal(err)
		}
	}
	c := dialNode(t, childHome)
	for _, round := range []string{"cold", "hit"} {
		for name, data := range blobs {
			out := filepath.Join(dir, strings.ReplaceAll(name, "/", "_")+"."+round)
			if _, err := c.GetFile(ctx, name, out); err != nil {
				t.Fatalf("%s get of %s: %v", round, name, err)
			}
			if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s get of %s: %d bytes, want %d (%v)", round, name, len(got), len(data), err)
			}
		}
	}
}

// TestGetToFileOverCap: a blob larger than the child's cache cap arrives
// whole in a file shared with the cache (before the sink, the streamed get
// did; with the sink, the fetch found chunks the cache had evicted and
// failed the get); the cache keeps what fits.
func TestGetToFileOverCap(t *testing.T) {
	dir := t.TempDir()
	root := startNode(t, filepath.Join(dir, "root"), "", "")
	childHome := filepath.Join(dir, "child")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	child, err := Start(ctx, Config{Home: childHome, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Parent: root.Addrs()[0], Site: "a", CacheSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	data := make([]byte, 6<<20+9)
	rand.Read(data)
	if _, err := root.Put(ctx, "once/over", bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: 256 << 10}); err != nil {
		t.Fatal(err)
	}
	c := dialNode(t, childHome)
	out := filepath.Join(dir, "over")
	if _, err := c.GetFile(ctx, "once/over", out); err != nil {
		t.Fatalf("get of 6 MiB into a file through a 2 MiB cache: %v", err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatal("the file differs from the blob")
	}
	if u := child.store.Usage(); u.UsedBytes > 2<<20 {
		t.Fatalf("cache holds %d bytes over its 2 MiB cap", u.UsedBytes)
	}
}
