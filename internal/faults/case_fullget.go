package faults

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// caseFullDiskGet (root only): issue 26's full disk while a get writes
// its destination file. A root on the ordinary disk, and a worker "fg"
// under it whose home and destination directory are on one 48 MiB tmpfs
// (--cache-size 1G, so the disk is what fills; between them the bulk
// path, sealed). The worker gets, into a new file of that directory, a
// blob put at the root larger than the tmpfs's free space (the
// destination shares its bytes with the store: every byte written once,
// so both fill the same disk).
//
// What must hold: the client fails with a clear no-space error (a
// non-zero exit, "space" in its message); the destination directory holds
// nothing (neither the file nor its temporary .F.omst-*: nothing
// half-visible); the worker's store tmp directory is empty; the worker
// stays up, and a smaller get into the same directory afterwards reads
// exactly the put bytes. Daemons alive, no panic, descriptors back. The
// tmpfs is unmounted on every path. Without root: skipped.
func caseFullDiskGet(e *Env) error {
	mnt := e.Dir + "/fg-mnt"
	if err := MountTmpfs(mnt, FullDiskSize); err != nil {
		if errors.Is(err, ErrNeedRoot) {
			return &SkipError{Reason: "needs root for a tmpfs"}
		}
		return err
	}
	ports, err := FreePorts(2)
	if err != nil {
		Unmount(mnt)
		return err
	}
	root := e.NewDaemonAt("root", e.Dir+"/root", ports[0], nil)
	w := e.NewDaemonAt("fg", mnt+"/home", ports[1], []*Daemon{root}, "--cache-size", "1G")
	defer func() {
		w.Kill()
		Unmount(mnt)
	}()
	e.Step("start root, and fg under it with its home on a %d MiB tmpfs", FullDiskSize>>20)
	for _, d := range []*Daemon{root, w} {
		if err := e.Start(d); err != nil {
			return err
		}
	}
	if err := e.SetBaselines(root, w); err != nil {
		return err
	}
	outDir := filepath.Join(mnt, "out")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		return err
	}
	free, err := freeBytes(mnt)
	if err != nil {
		return err
	}
	name := "fg/big"
	size := free + 8<<20 + e.Rng.Int64N(24<<20)
	e.Step("put %q (%d MiB) at the root; get it at fg into %s (%d MiB free)", name, size>>20, outDir, free>>20)
	if err := e.MustPut(root, name, e.Blob(size)); err != nil {
		return err
	}
	out := filepath.Join(outDir, "big")
	r := RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", w.Home, "get", name, "-o", out)
	if r.Err != nil {
		return r.Err
	}
	if r.TimedOut {
		return violation("get of %d bytes into a filesystem with %d bytes free did not end: %s", size, free, r.Describe())
	}
	if r.Code == 0 {
		return violation("get of %d bytes into a filesystem with %d bytes free succeeded", size, free)
	}
	if !strings.Contains(strings.ToLower(r.Stderr), "space") {
		return violation("get larger than the free space failed without saying so (want a no-space error): %s", r.Describe())
	}
	e.Printf("full disk: %s", strings.TrimSpace(r.Stderr))
	if left := filesIn(outDir); len(left) > 0 {
		return violation("the failed get left %s in its destination directory: a partial destination is visible", strings.Join(left, ", "))
	}
	if left := filesIn(filepath.Join(w.Home, storeDir, tmpDir)); len(left) > 0 {
		return violation("the failed get left %s in fg's store tmp directory", strings.Join(left, ", "))
	}
	st, _, err := w.Status(e.Ctx)
	if err != nil {
		return err
	}
	if st.Bulk == nil || st.Bulk.Opened == 0 {
		return violation("fg opened no bulk connection to the root for the get (status bulk: %+v): the case proves nothing of the bulk path", st.Bulk)
	}
	e.Printf("fg received over %d bulk connections", st.Bulk.Opened)
	if err := e.CheckDaemons(root, w); err != nil {
		return err
	}
	small := "fg/small"
	data := e.Blob(e.Size(1, 4<<20))
	e.Step("a smaller get into the same directory afterwards (%d bytes)", len(data))
	if err := e.MustPut(root, small, data); err != nil {
		return err
	}
	out2 := filepath.Join(outDir, "small")
	r = RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", w.Home, "get", small, "-o", out2)
	if r.Err != nil {
		return r.Err
	}
	if r.Code != 0 {
		return violation("a get of %d bytes after the full disk failed: %s", len(data), r.Describe())
	}
	got, err := os.ReadFile(out2)
	if err != nil {
		return violation("get %q exited 0 and left no file: %v", small, err)
	}
	if v, want := NewVersion(got), NewVersion(data); v.Sum != want.Sum {
		return violation("get %q after the full disk read %s, not the put's %s", small, v, want)
	}
	os.Remove(out2)
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(root, w)
}
