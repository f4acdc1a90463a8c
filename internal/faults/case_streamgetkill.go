package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// caseStreamGetKill: kill -9 of a worker mid stream-get, whose fetch
// writes the blob into one blob file of the store's own (pkg/cache
// OwnSink: DIR/blobs/<cid>.s<n>, holes where no chunk was written). A root
// paced to 16 MiB/s and a worker w1 under it.
//
// w1 gets a fresh 24..40 MiB blob to stdout and is SIGKILLed once the
// file is in its store and a drawn number of bytes (a quarter to three
// quarters of the blob) came out. The harness then reads the file: the
// chunks whose range holds no hole were written whole; a range with both
// data and a hole was cut by the kill (when the kill cut none, as is
// likely, the harness makes one: it punches out the second half of a
// chunk written whole, what a kill inside the chunk's write leaves). What
// must hold after the restart:
// the store's tmp directory is empty; it holds exactly the chunks written
// whole (and the chunk files a push left), none damaged: a cut range is
// not located; a second stream get reads the put's bytes exactly and
// fetches only the rest (the node's bytes_fetched grows by at most the
// bytes of the chunks not held). Daemons alive, no panic.
func caseStreamGetKill(e *Env) error {
	root, w, err := e.StartRootAndWorker(pacedRoot, nil)
	if err != nil {
		return err
	}
	store := filepath.Join(w.Home, storeDir)
	name := "stk/blob"
	data := e.Blob(e.Size(24<<20, 40<<20))
	e.Step("put %q (%d bytes) at the root", name, len(data))
	if err := e.MustPut(root, name, data); err != nil {
		return err
	}
	info, err := statAt(e, root, name)
	if err != nil {
		return err
	}
	if info.ChunkSize == 0 {
		return fmt.Errorf("stat %q at the root: no chunk size", name)
	}
	prefix := info.ID + ".s"
	ownFile := func() string {
		for _, n := range filesIn(filepath.Join(store, blobDir)) {
			if strings.HasPrefix(n, prefix) {
				return filepath.Join(store, blobDir, n)
			}
		}
		return ""
	}
	at := int64(len(data))/4 + e.Rng.Int64N(int64(len(data))/2)
	e.Step("stream-get %q at w1, SIGKILL w1 once its blob file is in the store and %d bytes came out", name, at)
	seen := false
	fire := func(out int64) (bool, error) {
		if !seen {
			seen = ownFile() != ""
		}
		return seen && out >= at, nil
	}
	gk, err := e.getKillingIf(w, func() *Daemon { return w }, name, GetStdout, fire)
	if err != nil {
		return fmt.Errorf("%w (w1 killed mid stream-get)", err)
	}
	e.Logf("killed w1: %s, before the end %v", gk.Verdict, gk.Before)
	path := ownFile()
	if path == "" {
		return violation("stream get %q at w1 (%s) left no blob file %s* in its store: the fetch was not into one file, the case proves nothing", name, gk.Verdict, prefix)
	}
	whole, cut, err := wholeChunks(path, int64(info.Size), int64(info.ChunkSize))
	if err != nil {
		return err
	}
	emulated := -1
	if len(cut) == 0 && len(whole) > 0 {
		// A kill rarely lands inside a chunk's write: make the cut such a
		// crash leaves (the chunk's first bytes written, the rest a hole)
		// by punching out the second half of a chunk written whole.
		var is []int
		for i := range whole {
			is = append(is, i)
		}
		slices.Sort(is)
		emulated = is[e.Rng.IntN(len(is))]
		off, n := int64(emulated)*int64(info.ChunkSize), whole[emulated]
		if err := punchRange(path, off+n/2, n-n/2); err != nil {
			return err
		}
		delete(whole, emulated)
		cut = append(cut, emulated)
	}
	var wholeBytes int64
	for _, n := range whole {
		wholeBytes += n
	}
	chunkFiles, _ := Files(filepath.Join(store, chunkDir))
	var fileBytes int64
	for _, f := range chunkFiles {
		if fi, err := os.Stat(f); err == nil {
			fileBytes += fi.Size()
		}
	}
	e.Printf("w1 killed after %d of %d bytes out: %d chunks of %d written whole in %s, cut %v (emulated: %d), %d chunk files",
		at, len(data), len(whole), info.Chunks, filepath.Base(path), cut, emulated, len(chunkFiles))

	e.Step("restart w1: its store locates the chunks written whole, not a cut one")
	if err := e.Restart(w, true, "SIGKILL mid stream-get into a blob file of the store's own"); err != nil {
		return err
	}
	if left := filesIn(filepath.Join(store, tmpDir)); len(left) > 0 {
		return violation("after the restart w1's %s still holds %s", filepath.Join(store, tmpDir), strings.Join(left, ", "))
	}
	st, _, err := w.Status(e.Ctx)
	if err != nil {
		return err
	}
	if want := len(whole) + len(chunkFiles); st.Chunks != want || st.ChunksDamaged != 0 {
		return violation("after the restart w1 holds %d chunks (%d damaged), want the %d written whole in its blob file and %d chunk files (cut by the kill: %v, not located)",
			st.Chunks, st.ChunksDamaged, len(whole), len(chunkFiles), cut)
	}
	e.Step("stream-get %q at w1 again: exact, fetching only the chunks it lacks", name)
	before := st.BytesFetched
	if err := e.streamGetExact(w, name, reconnectWithin); err != nil {
		return err
	}
	if st, _, err = w.Status(e.Ctx); err != nil {
		return err
	}
	fetched, missing := st.BytesFetched-before, uint64(int64(info.Size)-wholeBytes-fileBytes)
	e.Printf("the second get fetched %d bytes; w1 lacked %d", fetched, missing)
	if fetched > missing {
		return violation("the second get of %q at w1 fetched %d bytes, more than the %d it lacked: the chunks the killed get wrote whole were not served from its blob file", name, fetched, missing)
	}
	if st.ChunksDamaged != 0 {
		return violation("w1 counts %d damaged chunks after the second get: a located chunk did not hold its bytes", st.ChunksDamaged)
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(root, w)
}

// statAt stats name at d over its socket.
func statAt(e *Env, d *Daemon, name string) (rpcbridge.Info, error) {
	c, err := rpcbridge.Dial(filepath.Join(d.Home, "omst.sock"))
	if err != nil {
		return rpcbridge.Info{}, err
	}
	defer c.Close()
	return c.Stat(e.Ctx, name)
}

// punchRange punches a hole of n bytes at off in the file at path.
func punchRange(path string, off, n int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); err != nil {
		return fmt.Errorf("punch %d bytes at %d in %s: %w", n, off, path, err)
	}
	return nil
}

// wholeChunks reads the holes of a blob file of size bytes in chunks of
// cs: whole maps each chunk whose range holds no hole to its length; cut
// lists those whose range holds both data and a hole.
func wholeChunks(path string, size, cs int64) (whole map[int]int64, cut []int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	whole = map[int]int64{}
	fd := int(f.Fd())
	for i := 0; int64(i)*cs < size; i++ {
		off := int64(i) * cs
		n := min(cs, size-off)
		h, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil {
			return nil, nil, fmt.Errorf("SEEK_HOLE in %s: %w", path, err)
		}
		if h >= off+n {
			whole[i] = n
			continue
		}
		if d, err := unix.Seek(fd, off, unix.SEEK_DATA); err == nil && d < off+n {
			cut = append(cut, i)
		}
	}
	return whole, cut, nil
}
