package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// tmpDir is the store's directory of files being written (pkg/cache:
// HOME/cache/tmp; chunk temp files and the blob-* links of gets in
// progress).
const tmpDir = "tmp"

// caseSharedGetKill: a root paced to 16 MiB/s and a worker under it. The
// worker gets a fresh 16..40 MiB blob with `omst get NAME -o F`, F in the
// case directory: a regular file of the daemon's user on its store's
// filesystem, so the store shares it (pkg/cache LinkSink: the client's
// temporary file is hardlinked into HOME/cache/tmp as blob-*, and the
// fetched chunks are written into it at their offsets instead of into
// chunk files). Once the destination holds a drawn number of bytes and the
// link is seen in the store (else the case proves nothing), the worker's
// daemon is SIGKILLed; it is restarted on the same home and port. Twice.
//
// What must hold: the client ends with a clear error (or succeeded before
// the kill, with the whole bytes); the get's directory holds no file at
// all (neither F nor the temporary .F.omst-*: no partial destination is
// visible); after the restart the store's tmp directory is empty and its
// blobs directory holds no file the killed get left but one holding the
// whole blob (its commit done, the reply not sent: the store's copy); the
// get run again into a new file of that directory
// reads exactly the put bytes, and its file is the one the store keeps
// (the same inode in HOME/cache/blobs); daemons alive, no panic,
// descriptors back.
func caseSharedGetKill(e *Env) error {
	root, w, err := e.StartRootAndWorker(pacedRoot, nil)
	if err != nil {
		return err
	}
	store := filepath.Join(w.Home, storeDir)
	kept := map[uint64]bool{} // inodes in w1's blobs directory from completed gets
	for it := 1; it <= 2; it++ {
		name := fmt.Sprintf("sgk/b%d", it)
		data := e.Blob(e.Size(16<<20, 40<<20))
		e.Step("iteration %d: put %q (%d bytes) at the root", it, name, len(data))
		if err := e.MustPut(root, name, data); err != nil {
			return err
		}
		at := 1 + e.Rng.Int64N(int64(len(data))-1)
		e.Step("iteration %d: get %q -o F at w1 (F shared with its store), SIGKILL w1 once F holds %d bytes", it, name, at)
		linked := false
		fire := func(out int64) (bool, error) {
			if !linked {
				linked = sharedLinks(store) > 0
			}
			return linked && out >= at, nil
		}
		gk, err := e.getKillingIf(w, func() *Daemon { return w }, name, GetFile, fire)
		if err != nil {
			return fmt.Errorf("%w (w1 killed mid-get into a shared file)", err)
		}
		e.Logf("killed w1: %s, before the end %v", gk.Verdict, gk.Before)
		if !linked {
			return violation("get %q at w1 ended (%s) and the store never linked its destination (no blob-* in %s with a second link): the case proves nothing",
				name, gk.Verdict, filepath.Join(store, tmpDir))
		}
		if gk.Verdict == Exact {
			e.Printf("iteration %d: the get completed as w1 was killed", it)
		}
		// getKillingIf made the get's directory last (get-N, N the case's
		// latest path number).
		getDir := filepath.Join(e.Dir, fmt.Sprintf("get-%d", e.seq))
		for _, f := range filesIn(getDir) {
			if f != "out" || gk.Verdict != Exact {
				return violation("get %q cut by w1's SIGKILL (%s) left %s in its directory: a partial destination is visible",
					name, gk.Verdict, filepath.Join(getDir, f))
			}
		}
		e.Step("iteration %d: restart w1; its store holds no file of the killed get", it)
		if err := e.Restart(w, true, "SIGKILL mid-get into a shared file"); err != nil {
			return err
		}
		if left := filesIn(filepath.Join(store, tmpDir)); len(left) > 0 {
			return violation("after the restart w1's %s still holds %s", filepath.Join(store, tmpDir), strings.Join(left, ", "))
		}
		if gk.Verdict == Exact {
			// The get completed: its file may be in blobs (committed).
			for ino := range blobInodes(store) {
				kept[ino] = true
			}
		}
		for ino, path := range blobInodes(store) {
			if kept[ino] {
				continue
			}
			// The store's Open keeps a blob file only if it holds a
			// stored blob whole: one the kill left after the commit's
			// rename (the reply not yet sent) is the store's copy; any
			// other is an orphan.
			b, err := os.ReadFile(path)
			if err != nil || NewVersion(b).Sum != NewVersion(data).Sum {
				return violation("after the restart w1's blobs directory holds %s (%d bytes, not the blob's %d), left by the killed get", path, len(b), len(data))
			}
			e.Printf("iteration %d: the killed get had committed its file to the store (%s) before the kill", it, filepath.Base(path))
			kept[ino] = true
		}
		e.Step("iteration %d: get %q at w1 again into a new file shared with the store", it, name)
		out := e.Path("again-")
		r := RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", w.Home, "get", name, "-o", out)
		if r.Err != nil {
			return r.Err
		}
		if r.Code != 0 {
			return violation("get %q at the restarted w1 failed: %s", name, r.Describe())
		}
		got, err := os.ReadFile(out)
		if err != nil {
			return violation("get %q at the restarted w1 exited 0 and left no file: %v", name, err)
		}
		if v, want := NewVersion(got), NewVersion(data); v.Sum != want.Sum {
			return violation("get %q at the restarted w1 read %s, not the put's %s", name, v, want)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(out, &st); err != nil {
			return err
		}
		inos := blobInodes(store)
		if _, ok := inos[st.Ino]; !ok {
			return violation("the get's file %s (inode %d, %d links) is not the store's copy (blobs: %v): the destination was not shared", out, st.Ino, st.Nlink, inos)
		}
		kept[st.Ino] = true
		os.Remove(out)
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(root, w)
}

// sharedLinks counts the blob-* files in the store's tmp directory that
// have a second link (a get's destination shared with the store).
func sharedLinks(store string) int {
	ents, _ := os.ReadDir(filepath.Join(store, tmpDir))
	n := 0
	for _, de := range ents {
		if !strings.HasPrefix(de.Name(), "blob-") {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(store, tmpDir, de.Name()), &st) == nil && st.Nlink > 1 {
			n++
		}
	}
	return n
}

// blobInodes maps the inode of each file in the store's blobs directory
// to its path.
func blobInodes(store string) map[uint64]string {
	files, _ := Files(filepath.Join(store, blobDir))
	out := map[uint64]string{}
	for _, f := range files {
		var st syscall.Stat_t
		if syscall.Stat(f, &st) == nil {
			out[st.Ino] = f
		}
	}
	return out
}

// filesIn lists the names in dir (none if it does not exist).
func filesIn(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, de := range ents {
		out = append(out, de.Name())
	}
	return out
}
