package faults

import (
	"time"
)

// killGetWithin bounds each surviving get of worker-kill-mid-chunk: the
// paced root needs 1.5..2.3 s for the blob, and a request to the killed
// sibling fails at once (the kernel resets its connections), so the chunk
// is asked of the head without waiting out the sibling timeout (10 s).
// Measured: 1.5-3.2 s in all (4.4-6.4 s while the harness polled the
// victim's status every 10 ms).
const killGetWithin = 15 * time.Second

// caseWorkerKillMidChunk: a root paced to 8 MiB/s, a head h1 with 6
// workers (fallback: the root) that exchange chunks. All six get a fresh
// 12..18 MiB blob at once; the first worker (in a drawn order) seen with
// the chunk bytes it sent its siblings (its status: bytes_out.sibling)
// past a drawn 1..4 MiB and up since the last look at it (every 0.1-0.2
// s) is SIGKILLed: it is sending chunks to siblings then, with requests
// of theirs in flight. (A worker that asks for each chunk after all its
// siblings is sent to nobody: the victim is chosen among those that feed
// others.)
//
// The other five read exactly the put bytes, each within killGetWithin;
// the killed one's get returns the put bytes (if it had them all before
// the kill) or fails clearly, and, restarted on the same home and port,
// it reads them exactly (within reconnectWithin); the head redirected
// requests to siblings; no daemon panics or leaks descriptors.
func caseWorkerKillMidChunk(e *Env) error {
	e.Step("start root (paced to 8 MiB/s), h1, 6 workers (fallback: root)")
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 6, Fallback: true,
		RootArgs: []string{"--max-upload-rate", "8M"}, WorkerArgs: []string{"--parent-retry", "2s"}})
	if err != nil {
		return err
	}
	if err := e.SetBaselines(t.All...); err != nil {
		return err
	}
	h1, ws := t.Heads[0], t.Workers
	name := "wk/blob"
	data := e.Blob(e.Size(12<<20, 18<<20))
	e.Step("put %q (%d bytes) at the root", name, len(data))
	if err := e.MustPut(t.Root, name, data); err != nil {
		return err
	}
	order := e.Rng.Perm(len(ws))
	at := uint64(1<<20 + e.Rng.IntN(3<<20))
	e.Step("get %q at every worker at once; SIGKILL the first worker (in a drawn order) that sent %d chunk bytes to siblings and is sending more", name, at)
	gets := e.startGets(ws, name)
	vi, sent, err := e.pickSending(ws, order, at, gets)
	if err == nil {
		err = ws[vi].Kill()
	}
	if err != nil {
		gets.wait()
		return err
	}
	victim := ws[vi]
	killedAt := time.Since(gets.Started)
	e.Printf("%s killed %.1fs into the broadcast, having sent %d chunk bytes to siblings", victim.Name, killedAt.Seconds(), sent)
	verdicts, results, err := gets.judge(e, victim.Name+" killed while sending chunks to siblings")
	if err != nil {
		return err
	}
	for i, w := range ws {
		if i == vi {
			continue
		}
		r, v := results[i], verdicts[i]
		if v != Exact {
			return violation("get %q at %s must return the put bytes while its sibling %s died sending it chunks: %s, exit %d: %s",
				name, w.Name, victim.Name, v, r.Code, trim(r.Stderr))
		}
		e.Printf("%s: done in %.1fs", w.Name, gets.Took(i).Seconds())
		if gets.Took(i) > killGetWithin {
			return violation("get %q at %s took %.1fs (more than %v) after its sibling %s was killed %.1fs into it",
				name, w.Name, gets.Took(i).Seconds(), killGetWithin, victim.Name, killedAt.Seconds())
		}
	}
	st, _, err := h1.Status(e.Ctx)
	if err != nil {
		return err
	}
	e.Printf("h1 redirected %d requests to siblings", st.RedirectsSent)
	if st.RedirectsSent == 0 {
		return violation("h1 redirected no request: the workers did not exchange chunks (the case proves nothing)")
	}
	e.Step("restart %s, get %q there", victim.Name, name)
	if err := e.Restart(victim, true, "SIGKILL while sending chunks to siblings"); err != nil {
		return err
	}
	if err := e.GetExact(victim, name, reconnectWithin, "restarted, its head and siblings up"); err != nil {
		return err
	}
	for _, w := range ws {
		e.ShowStatus(w)
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(t.All...)
}

// pickSending looks at the daemons of ds in the given order, round after
// round (each look is a status, ~10-30 ms), until one counts at least at
// chunk bytes sent to siblings (bytes_out.sibling) and more than at its
// last look, and returns its index and count. The gets ending first is a
// Violation: no worker was seen sending (the case would prove nothing).
func (e *Env) pickSending(ds []*Daemon, order []int, at uint64, gets *broadcastGets) (int, uint64, error) {
	last := make([]uint64, len(ds))
	for {
		ended := true
		for i := range ds {
			if _, ok := gets.End(i); !ok {
				ended = false
			}
		}
		for _, i := range order {
			st, _, err := ds[i].Status(e.Ctx)
			if err != nil {
				return 0, 0, err
			}
			n := st.BytesOut["sibling"]
			if n >= at && n > last[i] {
				return i, n, nil
			}
			last[i] = n
		}
		if ended || e.Ctx.Err() != nil {
			return 0, 0, violation("the gets ended and no worker was seen sending chunk bytes to siblings past %d (bytes_out.sibling: %v): the case proves nothing", at, last)
		}
	}
}
