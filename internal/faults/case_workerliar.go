package faults

import (
	"fmt"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// liarGetWithin bounds each get of worker-corrupt and worker-liar: a lie
// costs its receiver one round trip (the bytes fail their hash, or
// NOT_FOUND comes back, and the head is asked at once), so a get takes
// about the time the paced root needs for the blob (1..2 s; measured
// 0.7-2.0 s in all, the step-by-step get of the second blob 0.1-0.2 s). A
// get that waited out a sibling timeout (10 s) for a lie, or hung on the
// liar, would take longer.
const liarGetWithin = 15 * time.Second

// maxSiblingFailures is exchange.DistributorConfig.MaxFailures' default:
// a sibling reported failed that many times for a blob is no redirect
// target for it (docs/protocol.md).
const maxSiblingFailures = 2

// caseWorkerCorrupt: a root paced to 8 MiB/s, a head h1 with 7 workers
// (fallback: the root) that exchange chunks; one of the first six, drawn
// at random, runs the fault-injection build with OMST_FAULT=corrupt-serve:
// every chunk it sends a sibling has a byte flipped in its first piece
// (its own store and its own gets are honest); h1w7 runs with --window 1
// (one chunk in flight: its requests reach the head one after the other).
//
//  1. A broadcast: the liar gets a fresh 6..12 MiB blob and, as soon as
//     its fetch began (its status: it is then a holder of every chunk),
//     the other five of the first six get it at once. Every get returns
//     exactly the put bytes within liarGetWithin (the liar's included);
//     the liar lied (else the case proves nothing); the receivers counted
//     the corrupt copies (corrupt_received: at least 1, at most the lies)
//     and gave up on a sibling (asking the head, naming the liar), each
//     receiver of one counts an error against the liar (errors_by_peer),
//     the liar received REPORTs of them (corrupt_reports > 0) and itself
//     no corrupt copy. (Measured with fetch 1.3.0: 2-4 lies, 2 corrupt
//     pieces counted, 9-11 give-ups: a receiver ends its stream to the
//     sender of a corrupt piece, which fails its other requests on it;
//     every worker asks for all its chunks at once, so the head decides
//     every redirect before the first failure comes back.)
//  2. The drop: the liar gets a second, 6..8 MiB blob alone (a holder of
//     each of its chunks, and the only one), then h1w7 gets it. Its first
//     request is sent to the liar, gets a corrupt copy and asks the head
//     (GET_DIRECT naming the liar), and so does its second; from then on
//     the liar is no redirect target for that blob (two failures,
//     docs/protocol.md), so h1w7 is served by the head: it reads the put
//     bytes within liarGetWithin, was redirected exactly twice, received
//     exactly two corrupt copies, and the liar told exactly two lies for
//     that blob (a head that kept the liar a target would send h1w7 to it
//     for every one of the 6..8 chunks: h1w7 asks for one at a time, each
//     after the head took the report of the last).
//
// No daemon panics or leaks descriptors.
func caseWorkerCorrupt(e *Env) error { return caseLyingWorker(e, FaultCorruptServe) }

// caseWorkerLiar: worker-corrupt with the liar run with
// OMST_FAULT=notfound-serve: it asks the head for every chunk like the
// others (so the head counts it as a holder of each and sends siblings to
// it) but answers every sibling's request NOT_FOUND.
//
//  1. The broadcast: every get returns exactly the put bytes within
//     liarGetWithin; the liar lied (else the case proves nothing) and its
//     siblings gave up on a sibling (sibling_failures: each asked the
//     head, naming it; measured 7-13 lies, as many give-ups).
//  2. The drop, as in worker-corrupt: h1w7 (--window 1) reads the second
//     blob exactly within liarGetWithin, redirected exactly twice, with
//     two sibling failures, and the liar told exactly two lies for it.
//
// No daemon panics or leaks descriptors.
func caseWorkerLiar(e *Env) error { return caseLyingWorker(e, FaultNotFoundServe) }

func caseLyingWorker(e *Env, fault string) error {
	li := e.Rng.IntN(6)
	liarName := fmt.Sprintf("h1w%d", li+1)
	e.Step("start root (paced to 8 MiB/s), h1, 7 workers (fallback: root), %s lying (%s), h1w7 with --window 1", liarName, fault)
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 7, Fallback: true,
		RootArgs: []string{"--max-upload-rate", "8M"}, WorkerArgs: []string{"--parent-retry", "2s"},
		Faults: map[string]string{liarName: fault}, Extra: map[string][]string{"h1w7": {"--window", "1"}}})
	if err != nil {
		return err
	}
	if err := e.SetBaselines(t.All...); err != nil {
		return err
	}
	h1, wave, late, liar := t.Heads[0], t.Workers[:6], t.Workers[6], t.Workers[li]
	name := "wl/blob"
	data := e.Blob(e.Size(6<<20, 12<<20))
	e.Step("put %q (%d bytes) at the root", name, len(data))
	if err := e.MustPut(t.Root, name, data); err != nil {
		return err
	}
	// The liar asks first, so that it is a holder of every chunk when
	// the others ask (a worker that asks last is sent to nobody).
	e.Step("get %q at %s (lying to its siblings: %s), then at once at the other five", name, liar.Name, fault)
	first := e.startGets([]*Daemon{liar}, name)
	if _, _, err := e.waitStopPoint(liar, nil, name, 0, OpTimeout); err != nil {
		first.wait()
		return err
	}
	others := append(append([]*Daemon(nil), wave[:li]...), wave[li+1:]...)
	rest := e.startGets(others, name)
	for _, g := range []*broadcastGets{first, rest} {
		verdicts, results, err := g.judge(e, liar.Name+" lying: "+fault)
		if err != nil {
			return err
		}
		for i, w := range g.ds {
			r, v := results[i], verdicts[i]
			if v != Exact {
				return violation("get %q at %s must return the put bytes (%s lies to its siblings: %s): %s, exit %d: %s",
					name, w.Name, liar.Name, fault, v, r.Code, trim(r.Stderr))
			}
			e.Printf("%s: done in %.1fs", w.Name, g.Took(i).Seconds())
			if g.Took(i) > liarGetWithin {
				return violation("get %q at %s took %.1fs (more than %v) while %s lied to its siblings (%s)",
					name, w.Name, g.Took(i).Seconds(), liarGetWithin, liar.Name, fault)
			}
		}
	}
	lies := liar.CountLog(liedMarker)
	sts := map[*Daemon]rpcbridge.Status{}
	var corrupt, failures uint64
	for _, w := range wave {
		st, _, err := w.Status(e.Ctx)
		if err != nil {
			return err
		}
		sts[w] = st
		if w != liar {
			corrupt, failures = corrupt+st.CorruptReceived, failures+st.SiblingFailures
		}
	}
	hst, _, err := h1.Status(e.Ctx)
	if err != nil {
		return err
	}
	e.Printf("%s told %d lies; the others received %d corrupt copies and gave %d up on a sibling; h1 redirected %d requests",
		liar.Name, lies, corrupt, failures, hst.RedirectsSent)
	if lies < 1 {
		return violation("%s told no lie (%s): the head sent no sibling to it, the case proves nothing", liar.Name, fault)
	}
	if failures < 1 {
		return violation("%s told %d lies but its siblings never gave up on a sibling: a lie must make its receiver ask the head, naming the liar",
			liar.Name, lies)
	}
	if fault == FaultCorruptServe {
		if err := e.checkCorruptCounted(liar, wave, sts, lies, corrupt); err != nil {
			return err
		}
	}

	if err := e.checkDropped(t.Root, liar, late, fault); err != nil {
		return err
	}
	for _, w := range t.Workers {
		e.ShowStatus(w)
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(t.All...)
}

// silentLimit is exchange's silentLimit: a sibling that left that many
// requests in a row unanswered is not asked for a sibling timeout.
const silentLimit = 3

// checkDropped puts a fresh 6..8 MiB blob at root, has liar (which lies
// to its siblings: fault) get it alone, so that it is the only holder of
// each of its chunks besides the head, then late, run with --window 1,
// get it: late's requests reach the head one after the other, each after
// the head took what late reported of the last. late must read exactly the
// put bytes within liarGetWithin (silentGetWithin for a silent liar), and
// the head must send it to the liar only until it is no target for the
// blob: for a liar that answers (corrupt-serve, notfound-serve), exactly
// maxSiblingFailures times (each a lie, a failure late reports); for one
// that never answers (silent-serve), silentLimit times (each ended by
// late's hedge) and then maxSiblingFailures more that late gives up on at
// once (not sent). A head that kept the liar a target would send late to
// it for every chunk.
func (e *Env) checkDropped(root, liar, late *Daemon, fault string) error {
	name := "wl/second"
	data := e.Blob(e.Size(6<<20, 8<<20))
	e.Step("put %q (%d bytes) at the root; get it at %s alone, then at %s (one chunk at a time)", name, len(data), liar.Name, late.Name)
	if err := e.MustPut(root, name, data); err != nil {
		return err
	}
	if err := e.GetExact(liar, name, 0, "the liar's own gets are honest"); err != nil {
		return err
	}
	before := liar.CountLog(liedMarker)
	lst0, _, err := late.Status(e.Ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	v, rd, err := e.Get(late, name, e.RandGetMode(), false)
	if err != nil {
		return err
	}
	took := time.Since(start)
	if v != Exact {
		return violation("get %q at %s (%s lying to its siblings: %s): %s%s", name, late.Name, liar.Name, fault, v, errText(rd))
	}
	lst, _, err := late.Status(e.Ctx)
	if err != nil {
		return err
	}
	told := liar.CountLog(liedMarker) - before
	redirected, failed, bad := lst.RedirectsTaken-lst0.RedirectsTaken, lst.SiblingFailures-lst0.SiblingFailures, lst.CorruptReceived-lst0.CorruptReceived
	e.Printf("%s: %q (%d chunks) done in %.1fs, redirected %d times, %d sibling failures, %d corrupt copies; %s told %d lies for it",
		late.Name, name, chunksOf(len(data)), took.Seconds(), redirected, failed, bad, liar.Name, told)
	within, wantTold, wantRedirected, wantBad := liarGetWithin, maxSiblingFailures, maxSiblingFailures, 0
	switch fault {
	case FaultCorruptServe:
		wantBad = maxSiblingFailures
	case FaultSilentServe:
		within, wantTold, wantRedirected = silentGetWithin, silentLimit, silentLimit+maxSiblingFailures
	}
	if took > within {
		return violation("get %q at %s took %.1fs (more than %v) with %s lying to its siblings (%s)", name, late.Name, took.Seconds(), within, liar.Name, fault)
	}
	if told != wantTold || redirected != uint64(wantRedirected) || failed != maxSiblingFailures || bad != uint64(wantBad) {
		return violation("%s, asking for %q's %d chunks one at a time, was sent to siblings %d times, gave up on %d (%d corrupt copies), and %s (%s) was asked %d times: want %d, %d (%d) and %d: the liar is a target until %d failures are reported against it for the blob, and none after",
			late.Name, name, chunksOf(len(data)), redirected, failed, bad, liar.Name, fault, told,
			wantRedirected, maxSiblingFailures, wantBad, wantTold, maxSiblingFailures)
	}
	return nil
}

// silentGetWithin bounds worker-silent's get: each of the silentLimit
// requests the liar leaves unanswered costs a hedge (2..4 s after it, up
// to twice as the head declines one for 4 s after it sent the chunk into
// the site) or at worst the sibling timeout (10 s); the rest are served
// by the head. Measured: 7-8 s. Before the Hedger skipped silent
// siblings, every chunk cost that: 16 s for 7 chunks, growing with the
// blob.
const silentGetWithin = 3*10*time.Second + 5*time.Second

// caseWorkerSilent: a root paced to 8 MiB/s, a head h1, a worker h1w1
// that runs the fault-injection build with OMST_FAULT=silent-serve (it
// takes every chunk request of a sibling and never answers it), and h1w2
// with --window 1. h1w1 gets a fresh 6..8 MiB blob alone, then h1w2 gets
// it (checkDropped): h1w2 reads exactly the put bytes within
// silentGetWithin; the head sent it to h1w1 exactly silentLimit times
// (each ended by a hedge to the head: a silent sibling is named neither
// failed nor more than slow, and a slow holder that is the only one
// stays a target), after which h1w2 gave up on h1w1 at once twice,
// naming it failed, and the head served the rest itself (h1w1 is no
// target for the blob). No daemon panics or leaks descriptors.
func caseWorkerSilent(e *Env) error {
	e.Step("start root (paced to 8 MiB/s), h1, h1w1 (silent to its siblings), h1w2 (--window 1)")
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 2, Fallback: true,
		RootArgs: []string{"--max-upload-rate", "8M"}, WorkerArgs: []string{"--parent-retry", "2s"},
		Faults: map[string]string{"h1w1": FaultSilentServe}, Extra: map[string][]string{"h1w2": {"--window", "1"}}})
	if err != nil {
		return err
	}
	if err := e.SetBaselines(t.All...); err != nil {
		return err
	}
	if err := e.checkDropped(t.Root, t.Workers[0], t.Workers[1], FaultSilentServe); err != nil {
		return err
	}
	for _, w := range t.Workers {
		e.ShowStatus(w)
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(t.All...)
}

// chunksOf is the number of 1 MiB chunks of a blob of n bytes.
func chunksOf(n int) int { return (n + 1<<20 - 1) >> 20 }

// checkCorruptCounted checks what worker-corrupt's receivers counted of
// the liar's corrupt copies (sts: the wave's statuses, corrupt their sum
// of corrupt_received without the liar's): at least two and at most the
// lies; an error counted against the liar by each receiver of one; none
// received by the liar itself; the liar told by REPORT (corrupt_reports,
// awaited for a few seconds: a report is sent in the background).
func (e *Env) checkCorruptCounted(liar *Daemon, wave []*Daemon, sts map[*Daemon]rpcbridge.Status, lies int, corrupt uint64) error {
	if corrupt < 1 || corrupt > uint64(lies) {
		return violation("the siblings of %s counted %d corrupt copies for its %d lies: want at least 1, at most the lies", liar.Name, corrupt, lies)
	}
	if n := sts[liar].CorruptReceived; n != 0 {
		return violation("%s, the only liar, received %d corrupt copies", liar.Name, n)
	}
	for _, w := range wave {
		if w == liar || sts[w].CorruptReceived == 0 {
			continue
		}
		if sts[w].ErrorsByPeer[liar.PeerID()] == 0 {
			return violation("%s received %d corrupt copies but counts no error against %s (errors_by_peer %v)",
				w.Name, sts[w].CorruptReceived, liar.Name, sts[w].ErrorsByPeer)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, _, err := liar.Status(e.Ctx)
		if err != nil {
			return err
		}
		if st.CorruptReports > 0 {
			e.Printf("%s received %d reports of corrupt copies", liar.Name, st.CorruptReports)
			return nil
		}
		if time.Now().After(deadline) {
			return violation("%s sent %d corrupt copies but received no REPORT of one (corrupt_reports 0)", liar.Name, corrupt)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
