package cache

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/stablefile"
)

const (
	crashEnv       = "OMST_CACHE_CRASH_DIR"
	crashModeEnv   = "OMST_CACHE_CRASH_MODE" // "file": the interrupted put reads a regular file
	crashDoneSize  = 3<<20 + 11
	crashDoneSeed  = 21
	crashMidMarker = 8 << 20 // bytes the big ingest reads before the child says MID
)

// slowReader yields endless pseudo-random bytes; after mark bytes it calls
// onMark once and from then on sleeps between reads, so the ingest is
// certainly in progress when the parent kills the process.
type slowReader struct {
	src    []byte
	pos    int
	mark   int
	onMark func()
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.pos >= r.mark {
		if r.onMark != nil {
			r.onMark()
			r.onMark = nil
		}
		time.Sleep(time.Millisecond)
	}
	k := min(len(p), 64<<10)
	off := r.pos % (len(r.src) - k)
	copy(p[:k], r.src[off:off+k])
	p[0] = byte(r.pos >> 16) // keep chunks distinct
	p[1] = byte(r.pos >> 24)
	r.pos += k
	return k, nil
}

// TestCrashChild is the child side of TestCrashMidIngest; it does nothing
// unless started by it.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashMidIngest")
	}
	s, err := Open(dir, Options{MaxBytes: 1 << 30})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	ctx := context.Background()
	if _, err := s.Ingest(ctx, "done", bytes.NewReader(randBytes(crashDoneSize, crashDoneSeed)), 256<<10, "child"); err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	fmt.Println("DONE")
	var r io.Reader = &slowReader{src: randBytes(4<<20, 22), mark: crashMidMarker, onMark: func() { fmt.Println("MID") }}
	if os.Getenv(crashModeEnv) == "file" {
		// A regular file, copied into the put's blob file a group at a
		// time: the kill comes after the first group.
		path := filepath.Join(dir, "input.bin")
		if err := os.WriteFile(path, randBytes(4*copyGroupBytes, 22), 0o600); err != nil {
			fmt.Println("ERR", err)
			os.Exit(2)
		}
		copiedHook = func(copied int64) {
			if copied >= copyGroupBytes {
				time.Sleep(200 * time.Millisecond) // the hashers store the group's chunks
				fmt.Println("MID")
				select {}
			}
		}
		f, err := stablefile.Open(ctx, path)
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(2)
		}
		r = f
	}
	_, err = s.Ingest(ctx, "interrupted", r, 256<<10, "child")
	fmt.Println("ERR ingest returned", err) // not reached: the parent kills us first
	os.Exit(2)
}

// TestCrashMidIngest: a put killed (SIGKILL) mid-way, its input a stream
// or a regular file (copied into the blob file), leaves nothing once the
// store is reopened: no name, no pin, no chunk, no file in DIR/tmp; the
// put completed before it is whole.
func TestCrashMidIngest(t *testing.T) {
	if testing.Short() {
		t.Skip("re-execs the test binary")
	}
	for _, mode := range []string{"stream", "file"} {
		t.Run(mode, func(t *testing.T) { crashMidIngest(t, mode) })
	}
}

func crashMidIngest(t *testing.T, mode string) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir, crashModeEnv+"="+mode)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(60 * time.Second)
	var seen []string
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("child exited early; said %q", seen)
			}
			seen = append(seen, l)
			if strings.HasPrefix(l, "ERR") {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("child failed: %s", l)
			}
			if l == "MID" {
				break wait
			}
		case <-timeout:
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child did not reach the middle of its ingest; said %q", seen)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range lines {
		}
	}()
	werr := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed by SIGKILL: %v", werr)
	}
	if !strings.Contains(strings.Join(seen, "\n"), "DONE") {
		t.Fatalf("child never finished the first blob: %q", seen)
	}
	// The interrupted put's blob file, in DIR/tmp, holds bytes: the kill
	// came mid-put.
	if n := fileBytes(t, filepath.Join(dir, "tmp")); n == 0 {
		t.Fatal("the interrupted ingest wrote no chunk before the kill; the test proves nothing")
	}

	s := openStore(t, dir, 1<<30)
	rec, err := s.Record("done")
	if err != nil {
		t.Fatalf("completed blob's name lost in the crash: %v", err)
	}
	m, err := s.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readBlob(t, s, m), randBytes(crashDoneSize, crashDoneSeed)) {
		t.Fatal("completed blob's bytes differ after the crash")
	}
	if _, err := s.Record("interrupted"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("interrupted ingest's name visible: %v", err)
	}
	if recs, _ := s.List(""); len(recs) != 1 {
		t.Fatalf("names after crash: %v", recs)
	}
	if !s.Pinned(rec.ID) {
		t.Fatal("completed blob lost its pin")
	}
	u := s.Usage()
	if u.PinnedBytes != crashDoneSize {
		t.Fatalf("pinned %d bytes after crash, want %d (interrupted ingest must pin nothing)", u.PinnedBytes, crashDoneSize)
	}
	// Nothing of the interrupted put is left: its blob file was in
	// DIR/tmp (cleared at Open), its entries never reached the index.
	if u.UsedBytes != crashDoneSize || u.OrphanedBytes != 0 || u.DamagedChunks != 0 {
		t.Fatalf("usage %+v after the crash: want only the completed blob's %d bytes, no orphan, nothing damaged", u, crashDoneSize)
	}
	if c, b := countFiles(t, filepath.Join(dir, "chunks")), countFiles(t, filepath.Join(dir, "blobs")); c != 0 || b != 1 {
		t.Fatalf("%d chunk files and %d blob files after the crash, want 0 and the completed put's 1", c, b)
	}
	if n := countFiles(t, filepath.Join(dir, "tmp")); n != 0 {
		t.Fatalf("%d temp files left after reopen", n)
	}
	t.Logf("after the crash: %+v", u)
}

// TestIngestDiskFull fills a tiny tmpfs: the disk, not the cap, runs out.
func TestIngestDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v: %s); skipping the disk-full test", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	s, err := Open(dir, Options{MaxBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	early := randBytes(1<<20, 23)
	rec, err := s.Ingest(ctx, "early", bytes.NewReader(early), 256<<10, "me")
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Ingest(ctx, "big", bytes.NewReader(randBytes(32<<20, 24)), 256<<10, "me")
	if !errors.Is(err, blob.ErrNoSpace) {
		t.Fatalf("ingest of 32 MiB into an 8 MiB tmpfs: %v, want ErrNoSpace", err)
	}
	t.Logf("full disk: %v", err)
	if _, err := s.Record("big"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("name visible after a full disk: %v", err)
	}
	m, err := s.Manifest(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readBlob(t, s, m), early) {
		t.Fatal("earlier blob damaged by the full disk")
	}
	if n := countFiles(t, filepath.Join(dir, "tmp")); n != 0 {
		t.Fatalf("%d partial files left", n)
	}
	// The failed ingest removed its chunks, so small puts work again.
	if _, err := s.Ingest(ctx, "after", bytes.NewReader(randBytes(512<<10, 25)), 256<<10, "me"); err != nil {
		t.Fatalf("ingest after the disk-full failure: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// fileBytes sums the sizes of the regular files under dir.
func fileBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
