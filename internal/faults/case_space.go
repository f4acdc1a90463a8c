package faults

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// FullDiskSize is the tmpfs the full-disk case mounts as a daemon home.
const FullDiskSize = 48 << 20

// caseFullDisk (root only): a daemon whose home is a 48 MiB tmpfs, with a
// cache cap above that (--cache-size 1G), so the disk is what fills. A put
// larger than the free space fails with a clear no-space error and leaves
// no name; the daemon stays up; a smaller put afterwards works; completed
// puts survive a restart. The tmpfs is unmounted on every path (the case's
// deferred cleanup, the runner's, and the SIGINT handler's).
func caseFullDisk(e *Env) error {
	home := e.Dir + "/fd"
	if err := MountTmpfs(home, FullDiskSize); err != nil {
		if errors.Is(err, ErrNeedRoot) {
			return &SkipError{Reason: "needs root for a tmpfs"}
		}
		return err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	d := e.NewDaemonAt("fd", home, ports[0], nil, append([]string{"--cache-size", "1G"}, randomSync(e)...)...)
	defer func() {
		d.Kill()
		Unmount(home)
	}()
	e.Step("start a daemon on a %d MiB tmpfs", FullDiskSize>>20)
	if err := e.Start(d); err != nil {
		return err
	}
	if err := d.SetBaseline(); err != nil {
		return err
	}
	e.Step("a small put that fits")
	if err := e.MustPut(d, "fd/small", e.Blob(e.Size(1, 4<<20))); err != nil {
		return err
	}
	for it := 1; it <= 2; it++ {
		free, err := freeBytes(home)
		if err != nil {
			return err
		}
		size := free + 8<<20 + e.Rng.Int64N(32<<20)
		name := fmt.Sprintf("fd/big%d", it)
		mode := e.RandPutMode()
		e.Step("full %d: put %q of %d MiB (%s) with %d MiB free", it, name, size>>20, mode, free>>20)
		r, err := e.Put(d, name, e.Blob(size), mode)
		if err == nil {
			return violation("put of %d bytes into a home with %d bytes free succeeded", size, free)
		}
		if _, ok := err.(*Violation); ok || r.Err != nil {
			return err
		}
		if !strings.Contains(strings.ToLower(r.Stderr), "space") {
			return violation("put larger than the free space failed without saying so (want a no-space error): %s", r.Describe())
		}
		e.Printf("full %d: %s", it, strings.TrimSpace(r.Stderr))
		e.Step("full %d: %q must not exist; the daemon answers", it, name)
		if err := e.mustBeAbsent(d, name); err != nil {
			return err
		}
		if err := e.CheckDaemons(d); err != nil {
			return err
		}
		st, raw, _ := d.Status(e.Ctx)
		free2, _ := freeBytes(home)
		e.Printf("full %d: after the failed put: %d MiB free, cache %d MiB used; %s", it, free2>>20, st.CacheUsed>>20, Counters(st, raw))
		e.Step("full %d: a smaller put afterwards works", it)
		small := fmt.Sprintf("fd/after%d", it)
		if err := e.MustPut(d, small, e.Blob(e.Size(1, 8<<20))); err != nil {
			return err
		}
		if err := e.GetExact(d, small, 0, "a put after the failed one"); err != nil {
			return err
		}
	}
	e.Step("restart the daemon: completed puts survive")
	if err := d.Stop(StopTimeout); err != nil {
		return violation("%v", err)
	}
	if err := e.Restart(d, false, "SIGTERM on a home that was full"); err != nil {
		return err
	}
	for _, name := range e.Ledger.CompletedNames() {
		if err := e.GetExact(d, name, 0, "a completed put, after a restart"); err != nil {
			return err
		}
	}
	for _, name := range []string{"fd/big1", "fd/big2"} {
		if err := e.mustBeAbsent(d, name); err != nil {
			return err
		}
	}
	return e.CheckDaemons(d)
}

// mustBeAbsent requires `omst stat name` at d to say not found (exit 3).
func (e *Env) mustBeAbsent(d *Daemon, name string) error {
	r := RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", d.Home, "stat", name)
	if r.Err != nil {
		return r.Err
	}
	if r.Code != 3 {
		return violation("%q at %s must not exist after its put failed; stat: %s %s", name, d.Name, r.Describe(), strings.TrimSpace(string(r.Stdout)))
	}
	return nil
}

func freeBytes(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// caseCacheCap: a cache cap below a blob's size (no root needed).
//
//  1. A daemon with --cache-size 16M: a put of 20..48 MiB fails with a
//     clear no-space error and leaves no name; a put that fits works.
//  2. A root without cap and a worker with --cache-size 16M below it: the
//     worker gets a 20..48 MiB blob put at the root. It either returns the
//     exact bytes (streaming through, evicting as it goes) or fails
//     clearly; never partial or wrong bytes. Which one is printed. Then a
//     small get at the worker works.
func caseCacheCap(e *Env) error {
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	d := e.NewDaemonAt("cap", e.Dir+"/cap", ports[0], nil, "--cache-size", "16M")
	e.Step("start a daemon with --cache-size 16M")
	if err := e.Start(d); err != nil {
		return err
	}
	if err := d.SetBaseline(); err != nil {
		return err
	}
	size := e.Size(20<<20, 48<<20)
	mode := e.RandPutMode()
	e.Step("put %d MiB (%s) into a 16 MiB cache", size>>20, mode)
	r, err := e.Put(d, "cc/big", e.Blob(size), mode)
	if err == nil {
		return violation("put of %d bytes into a 16 MiB cache succeeded", size)
	}
	if _, ok := err.(*Violation); ok || r.Err != nil {
		return err
	}
	if !strings.Contains(strings.ToLower(r.Stderr), "space") {
		return violation("put larger than the cache cap failed without saying so (want a no-space error): %s", r.Describe())
	}
	e.Printf("put over the cap: %s", strings.TrimSpace(r.Stderr))
	if err := e.mustBeAbsent(d, "cc/big"); err != nil {
		return err
	}
	e.Step("a put that fits, after the failed one")
	if err := e.MustPut(d, "cc/fits", e.Blob(e.Size(1, 8<<20))); err != nil {
		return err
	}
	if err := e.GetExact(d, "cc/fits", 0, "a put within the cap"); err != nil {
		return err
	}
	if err := e.CheckDaemons(d); err != nil {
		return err
	}
	d.Kill()

	e.Step("root (no cap) and worker rw1 --cache-size 16M")
	t, err := e.StartTree(TreeSpec{RootWorkers: 1, WorkerArgs: []string{"--cache-size", "16M"}})
	if err != nil {
		return err
	}
	w := t.Workers[0]
	big := e.Blob(e.Size(20<<20, 48<<20))
	if err := e.MustPut(t.Root, "cc/root-big", big); err != nil {
		return err
	}
	for _, mode := range []GetMode{GetFile, GetStdout} {
		e.Step("get %d MiB (%s) at a worker with a 16 MiB cache", len(big)>>20, mode)
		v, rd, err := e.Get(w, "cc/root-big", mode, false)
		if err != nil {
			return err
		}
		e.Printf("worker with a 16 MiB cap, get of %d MiB to %s: %s%s", len(big)>>20, mode, v, errText(rd))
	}
	e.Step("a small get at the worker still works")
	if err := e.MustPut(t.Root, "cc/root-small", e.Blob(e.Size(1, 4<<20))); err != nil {
		return err
	}
	if err := e.GetExact(w, "cc/root-small", 0, "a blob within the worker's cap"); err != nil {
		return err
	}
	return e.CheckDaemons(t.All...)
}
