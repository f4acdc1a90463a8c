package faults

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// slow-disk-relay's figures.
const (
	// SlowDiskStall is how long slow-disk-relay keeps its head's disk
	// frozen.
	SlowDiskStall = 6 * time.Second
	// slowDiskEndWithin bounds how long after the thaw every worker's get
	// may still run.
	slowDiskEndWithin = 30 * time.Second
	// slowDiskPace is the root's --max-upload-rate.
	slowDiskPace = "16M"
	// slowDiskSize is the head's filesystem (a sparse image).
	slowDiskSize = 512 << 20
	// MaxStalledRelayHeap bounds the head's Go heap while its disk is
	// frozen, read from its GC trace (heapSpan's ceiling: its metrics
	// endpoint does not answer while the disk stalls). Measured: a
	// ceiling of 44-148 MiB (the largest live heap a GC marked 72 MiB),
	// and as much with the slots unbounded (73 MiB): at these sizes the
	// heap alone does not tell the two apart, the intake and the blocked
	// writes below do.
	MaxStalledRelayHeap = 256 << 20
	// MaxStalledIntake bounds the chunk bytes the root sends its children
	// while the head's disk is frozen: what the head takes and cannot
	// store (and what a worker falling back to the root fetches; none
	// did in the runs measured). A head stores at most 4 chunks at once
	// (coalesce.DefaultStoreSlots) and hands on at most 16 it has not
	// stored (coalesce.DefaultHeldChunks); past them its children's
	// requests wait and ask for no more: measured 33-34 MiB (chunks of
	// 1 MiB) of the 52-80 MiB left; 20-23 MiB when a chunk was handed on
	// only with a store slot (its children then got nothing while the
	// disk stalled); 50-72 MiB, all that was left, with every chunk
	// handed on at once and only its store waiting; 37-67 MiB with the
	// store slots unbounded.
	MaxStalledIntake = 44 << 20
	// maxStalledWrites bounds h1's threads blocked on its frozen disk at
	// once: its store slots (4: each a chunk's write, holding the chunk)
	// and a few more (its index). Measured: 5 in every run; a head built
	// with the slots unbounded, 28-73.
	maxStalledWrites = 8
)

// caseSlowDiskRelay: a head whose disk stalls while it relays a blob. A
// root paced to 16 MiB/s, a head h1 whose home is a filesystem of its own
// (an ext4 image on a loop device, MountLoopExt4; its Go runtime tracing
// its GCs, gctraceEnv), 3 workers under it (fallback: the root). The
// workers get a fresh 64..96 MiB blob at once; once h1's store holds a
// drawn 10..40% of its chunks and every worker is fetching, h1's
// filesystem is frozen (FreezeFS: FIFREEZE, what fsfreeze(8) does) for
// SlowDiskStall: every write of h1 there (a chunk into its store, its
// index) blocks in the kernel, so its store slots
// (pkg/transfer/internal/coalesce: at most 4 verified chunks stored at
// once, at most 16 handed on and not yet stored) stay held. Then it is
// thawed.
//
// What must hold: while frozen, some thread of h1 is blocked in the
// kernel (state D: the stall reached its writes, else the case proves
// nothing) and at most maxStalledWrites at once; the root sends its
// children at most MaxStalledIntake (what h1 takes and cannot store);
// h1's Go heap, by its GC trace, stays under MaxStalledRelayHeap; every
// worker reads exactly the put bytes, within slowDiskEndWithin of the
// thaw (from its siblings, the root, or h1 once its disk resumes); h1's
// own get reads them; h1 SIGKILLed and restarted on its home: its store's
// tmp directory is empty, it counts no orphaned byte and no damaged
// chunk, and its get reads them again; daemons alive, no panic,
// descriptors back. Root only (a loop mount); skipped where the machine
// cannot give h1 such a filesystem.
//
// Measured (6 s stalls): no worker ends while h1's disk is frozen, all
// 0.0-4 s after the thaw: a relay hands a chunk on only with a store
// slot, so its children wait for its disk (with a 40 s stall one worker
// of three went on without h1 after 33 s, two waited for the thaw).
func caseSlowDiskRelay(e *Env) error {
	disk := filepath.Join(e.Dir, "h1") // h1's home, as StartTree names it
	if err := MountLoopExt4(filepath.Join(e.Dir, "h1.img"), disk, slowDiskSize); err != nil {
		if errors.Is(err, ErrNoLoopFS) {
			return &SkipError{Reason: err.Error()}
		}
		return err
	}
	e.Step("start root (paced to %s/s), h1 (its home on a loop-mounted ext4 of its own, %s), 3 workers (fallback: root)", slowDiskPace, gctraceEnv)
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 3, Fallback: true,
		RootArgs: []string{"--max-upload-rate", slowDiskPace}, WorkerArgs: []string{"--parent-retry", "2s"},
		Env: map[string][]string{"h1": {gctraceEnv}}})
	if err != nil {
		return err
	}
	if err := e.SetBaselines(t.All...); err != nil {
		return err
	}
	h1, ws := t.Heads[0], t.Workers
	name := "sd/blob"
	data := e.Blob(e.Size(64<<20, 96<<20))
	e.Step("put %q (%d bytes) at the root", name, len(data))
	if err := e.MustPut(t.Root, name, data); err != nil {
		return err
	}
	info, err := statAt(e, t.Root, name)
	if err != nil {
		return err
	}
	if info.ChunkSize == 0 {
		return fmt.Errorf("stat %q at the root: no chunk size", name)
	}
	frac := 0.1 + 0.3*e.Rng.Float64()
	e.Step("get %q at every worker at once; freeze h1's disk for %v once h1 holds %.0f%% of the chunks", name, SlowDiskStall, 100*frac)
	gets := e.startGets(ws, name)
	done, chunks, err := e.waitStoredPoint(h1, ws, name, info.Size, uint64(info.ChunkSize), frac, OpTimeout)
	if err != nil {
		gets.wait()
		return err
	}
	rst, _, err := t.Root.Status(e.Ctx)
	if err != nil {
		gets.wait()
		return err
	}
	gcBefore, err := h1.GCTracesSince(0)
	if err != nil {
		gets.wait()
		return err
	}
	logAt := h1.logOffset()
	frozeAt := time.Now()
	maxBlocked := 0
	thawDisk, err := FreezeFS(disk, SlowDiskStall+10*time.Second)
	if err != nil {
		gets.wait()
		return err
	}
	e.Printf("h1's disk frozen %.1fs into the broadcast, h1 holding %d of %d chunks", frozeAt.Sub(gets.Started).Seconds(), done, chunks)
	for time.Since(frozeAt) < SlowDiskStall && e.Ctx.Err() == nil {
		if n := blockedThreads(h1.Pid()); n > maxBlocked {
			maxBlocked = n
		}
		e.sleep(100 * time.Millisecond)
	}
	doneFrozen := 0
	for i := range ws {
		if end, ok := gets.End(i); ok && end.Before(time.Now()) {
			doneFrozen++
		}
	}
	thawAt := time.Now()
	rst2, _, rerr := t.Root.Status(e.Ctx)
	if err := thawDisk(); err != nil {
		return err
	}
	if rerr != nil {
		return rerr
	}
	intake := rst2.BytesOut["child"] - rst.BytesOut["child"]
	e.Printf("while h1's disk was frozen the root sent %d bytes to its children (h1, and the workers falling back)", intake)
	gcs, err := h1.GCTracesSince(logAt)
	if err != nil {
		return err
	}
	heap, err := stalledHeap(gcBefore, gcs)
	if err != nil {
		return err
	}
	e.Printf("h1's disk thawed after %v: at most %d of h1's threads blocked in the kernel; h1's Go heap %s; %d of %d workers done while frozen",
		thawAt.Sub(frozeAt).Round(time.Millisecond), maxBlocked, heap, doneFrozen, len(ws))
	if maxBlocked == 0 {
		return violation("no thread of h1 blocked in the kernel while its disk was frozen for %v: its writes were not stalled (the case proves nothing)", SlowDiskStall)
	}
	if heap.ceiling >= MaxStalledRelayHeap>>20 {
		return violation("h1's Go heap may have reached %d MiB while its disk was stalled (%s; bound MaxStalledRelayHeap = %d MiB)",
			heap.ceiling, heap, MaxStalledRelayHeap>>20)
	}
	if maxBlocked > maxStalledWrites {
		return violation("%d of h1's threads were blocked writing to its stalled disk at once (bound %d): its store writes are not bounded by its store slots",
			maxBlocked, maxStalledWrites)
	}
	if intake > MaxStalledIntake {
		return violation("the root sent %d MiB to its children while h1's disk was stalled (bound MaxStalledIntake = %d MiB): h1 took chunks it could not store without bound",
			intake>>20, MaxStalledIntake>>20)
	}
	e.Step("wait for the gets (each within %v of the thaw)", slowDiskEndWithin)
	verdicts, results, err := gets.judge(e, fmt.Sprintf("h1's disk frozen for %v", SlowDiskStall))
	if err != nil {
		return err
	}
	for i, w := range ws {
		end, _ := gets.End(i)
		if verdicts[i] != Exact {
			return violation("get %q at %s must return the put bytes (h1's disk stalled for %v mid-broadcast): %s, exit %d: %s",
				name, w.Name, SlowDiskStall, verdicts[i], results[i].Code, trim(results[i].Stderr))
		}
		e.Printf("%s: done %.1fs after the thaw (%.1fs in all)", w.Name, end.Sub(thawAt).Seconds(), gets.Took(i).Seconds())
		if end.Sub(thawAt) > slowDiskEndWithin {
			return violation("get %q at %s ended %.1fs after h1's disk was thawed: more than %v", name, w.Name, end.Sub(thawAt).Seconds(), slowDiskEndWithin)
		}
	}
	if err := e.GetExact(h1, name, 0, "its disk thawed"); err != nil {
		return err
	}
	e.Step("SIGKILL h1, restart it on its home: no orphan, nothing damaged, the get again")
	if err := h1.Kill(); err != nil {
		return err
	}
	if err := e.Restart(h1, true, "its disk stalled, then SIGKILL"); err != nil {
		return err
	}
	if left := filesIn(filepath.Join(h1.Home, storeDir, tmpDir)); len(left) > 0 {
		return violation("after the restart h1's store tmp directory still holds %s", strings.Join(left, ", "))
	}
	st, _, err := h1.Status(e.Ctx)
	if err != nil {
		return err
	}
	e.Printf("h1 restarted: %d chunks, %d damaged, %d bytes orphaned", st.Chunks, st.ChunksDamaged, st.CacheOrphaned)
	if st.ChunksDamaged != 0 || st.CacheOrphaned != 0 {
		return violation("after the restart h1 counts %d damaged chunks and %d orphaned bytes: the stall left them", st.ChunksDamaged, st.CacheOrphaned)
	}
	if err := e.GetExact(h1, name, 0, "restarted after the stall"); err != nil {
		return err
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(t.All...)
}

// waitStoredPoint waits until relay's store holds at least frac of the
// chunks of a blob of size bytes (chunk bytes each: its status's chunks,
// counted from what it held before) and every daemon of ws has begun its
// fetch of name, for at most within; it returns the chunks relay holds of
// the blob and in all. The relay holding them all first is an error: the
// point was missed.
func (e *Env) waitStoredPoint(relay *Daemon, ws []*Daemon, name string, size, chunk uint64, frac float64, within time.Duration) (held, chunks int, err error) {
	chunks = int((size + chunk - 1) / chunk)
	st, _, err := relay.Status(e.Ctx)
	if err != nil {
		return 0, 0, err
	}
	base := st.Chunks
	began := map[*Daemon]bool{}
	deadline := time.Now().Add(within)
	for {
		for _, d := range ws {
			if !began[d] {
				st, _, err := d.Status(e.Ctx)
				if err != nil {
					return 0, 0, err
				}
				began[d] = transferOf(st.Transfers, name) != nil || st.Names > 0
			}
		}
		st, _, err := relay.Status(e.Ctx)
		if err != nil {
			return 0, 0, err
		}
		held = st.Chunks - base
		if held >= chunks {
			return 0, 0, fmt.Errorf("%s stored all %d chunks of %q before it held %.0f%% of them with every worker fetching (the broadcast was too quick to stall it in the middle)",
				relay.Name, chunks, name, 100*frac)
		}
		all := true
		for _, d := range ws {
			all = all && began[d]
		}
		if all && float64(held) >= frac*float64(chunks) {
			return held, chunks, nil
		}
		if time.Now().After(deadline) || e.Ctx.Err() != nil {
			return 0, 0, violation("%s did not store %.0f%% of the chunks of %q within %v (holds %d of %d)", relay.Name, 100*frac, name, within, held, chunks)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// heapSpan is what a daemon's GCs (gctraceEnv) say of its Go heap over a
// stretch of time, in MiB. The runtime starts a GC when the heap reaches
// the goal the last one set, about twice the live heap it marked (GOGC=100,
// the daemons' default), so the heap stays under ceiling: the largest heap
// a GC of the stretch started or ended at, and twice the live heap of the
// last GC of the stretch (none ran: of the last GC before it).
type heapSpan struct {
	gcs     int
	ceiling int64
	liveMax int64 // the largest live heap a GC of the stretch marked
}

func (h heapSpan) String() string {
	return fmt.Sprintf("under %d MiB (%d GCs while frozen, the largest live heap they marked %d MiB)", h.ceiling, h.gcs, h.liveMax)
}

// stalledHeap reads a heapSpan from the GCs before a stretch and during
// it.
func stalledHeap(before, during []GCTrace) (heapSpan, error) {
	if len(before) == 0 {
		return heapSpan{}, errors.New("h1's log holds no GC trace line before the stall (not run with " + gctraceEnv + "?)")
	}
	h := heapSpan{gcs: len(during), ceiling: 2 * before[len(before)-1].Live}
	if len(during) == 0 {
		return h, nil
	}
	for _, g := range during {
		h.ceiling = max(h.ceiling, g.Start, g.End)
		h.liveMax = max(h.liveMax, g.Live)
	}
	h.ceiling = max(h.ceiling, 2*during[len(during)-1].Live)
	return h, nil
}
