package faults

import (
	"fmt"
	"syscall"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// StopFor is how long worker-stop keeps its worker stopped (SIGSTOP).
const StopFor = 10 * time.Second

// resumeWithin bounds how long a worker stopped for StopFor mid-get takes
// to complete it once resumed (measured 0.0-0.2 s).
const resumeWithin = 30 * time.Second

// caseWorkerStop: a root paced to 4 MiB/s (--max-upload-rate, so that an
// 8..12 MiB blob takes 2..3 s to enter the site), a head h1 with 6
// workers (fallback: the root) that exchange chunks. All six get a fresh
// blob at once; once a worker drawn at random holds a drawn 40..75% of its
// chunks (read from its status's transfer, not a fixed sleep) and every
// other worker began its fetch stopGuard ago, it is stopped (SIGSTOP) for
// StopFor, then resumed (SIGCONT). Stopped, it keeps its connections and
// streams open and answers nothing: a sibling the head sent to it for a
// chunk it did not hold yet waits on it.
//
// The other five complete with exact bytes before the stopped one is
// resumed: none waits for it to come back. That is the bound, and why it
// holds today: a request to a silent sibling ends at the latest at the
// sibling timeout (10 s, transfer.DefaultSiblingTimeout), and the chunk is
// then asked of the head; the blob has at most 16 chunks (a fetch's
// window), so every worker asks for all of them, and is sent to the
// worker to be stopped, when its fetch begins, stopGuard or more before
// the stop. Measured (on an idle and on a loaded machine alike): a worker
// sent to it for no chunk it lacked ends 0.3-2.5 s after the stop (2-5 s
// in all); one that was ends when a hedge to the head succeeds or, often, at
// the sibling timeout of its first requests (10.2 s after the start, 5-8.4
// s after the stop, 1.6-5 s before the resume): a hedge is declined for 4
// s after the head sent the chunk into the site and retried only 4 s
// later, so it often comes too late. The stopped one completes with exact
// bytes after it is resumed, within resumeWithin (measured 0.0-0.2 s).
// The head redirected requests to siblings (else the case proves
// nothing); no daemon panics or leaks descriptors.
func caseWorkerStop(e *Env) error {
	e.Step("start root (paced to 4 MiB/s), h1, 6 workers (fallback: root)")
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 6, Fallback: true,
		RootArgs: []string{"--max-upload-rate", "4M"}, WorkerArgs: []string{"--parent-retry", "2s"}})
	if err != nil {
		return err
	}
	if err := e.SetBaselines(t.All...); err != nil {
		return err
	}
	h1, ws := t.Heads[0], t.Workers
	name := "ws/blob"
	// At most 16 chunks: every worker asks for all of them at once.
	data := e.Blob(e.Size(8<<20, 12<<20))
	e.Step("put %q (%d bytes) at the root", name, len(data))
	if err := e.MustPut(t.Root, name, data); err != nil {
		return err
	}
	vi := e.Rng.IntN(len(ws))
	victim := ws[vi]
	frac := 0.4 + 0.35*e.Rng.Float64()
	e.Step("get %q at every worker at once; SIGSTOP %s once it holds %.0f%% of the chunks", name, victim.Name, 100*frac)
	gets := e.startGets(ws, name)
	others := append(append([]*Daemon(nil), ws[:vi]...), ws[vi+1:]...)
	done, chunks, err := e.waitStopPoint(victim, others, name, frac, OpTimeout)
	if err != nil {
		gets.wait()
		return err
	}
	stopAt := time.Now()
	if err := victim.Signal(syscall.SIGSTOP); err != nil {
		gets.wait()
		return err
	}
	e.Printf("%s stopped %.1fs into the broadcast, holding %d of %d chunks", victim.Name, stopAt.Sub(gets.Started).Seconds(), done, chunks)
	e.sleep(StopFor)
	contAt := time.Now()
	if err := victim.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	e.Step("%s resumed after %v; wait for the gets", victim.Name, contAt.Sub(stopAt).Round(time.Millisecond))
	verdicts, results, err := gets.judge(e, victim.Name+" stopped for "+StopFor.String())
	if err != nil {
		return err
	}
	for i, w := range ws {
		r, v := results[i], verdicts[i]
		end, _ := gets.End(i)
		if v != Exact {
			return violation("get %q at %s must return the put bytes (%s stopped for %v mid-broadcast): %s, exit %d: %s",
				name, w.Name, victim.Name, StopFor, v, r.Code, trim(r.Stderr))
		}
		if i == vi {
			e.Printf("%s (stopped): done %.1fs after it resumed (%.1fs in all)", w.Name, end.Sub(contAt).Seconds(), gets.Took(i).Seconds())
			if end.Sub(contAt) > resumeWithin {
				return violation("get %q at %s ended %.1fs after the daemon resumed: more than %v", name, w.Name, end.Sub(contAt).Seconds(), resumeWithin)
			}
			continue
		}
		e.Printf("%s: done %.1fs after the stop (%.1fs in all)", w.Name, end.Sub(stopAt).Seconds(), gets.Took(i).Seconds())
		if !end.Before(contAt) {
			return violation("get %q at %s ended %.1fs after its sibling %s was stopped, not before it was resumed (%v later): it waited for the stopped sibling",
				name, w.Name, end.Sub(stopAt).Seconds(), victim.Name, StopFor)
		}
	}
	st, _, err := h1.Status(e.Ctx)
	if err != nil {
		return err
	}
	var hedges, failures uint64
	for i, w := range ws {
		if i == vi {
			continue
		}
		if wst, _, err := w.Status(e.Ctx); err == nil {
			hedges, failures = hedges+wst.Hedges, failures+wst.SiblingFailures
		}
	}
	e.Printf("h1 redirected %d requests to siblings, declined %d hedges; the other workers hedged %d requests and gave %d up on their sibling",
		st.RedirectsSent, st.HedgesDeclined, hedges, failures)
	if st.RedirectsSent == 0 {
		return violation("h1 redirected no request: the workers did not exchange chunks (the case proves nothing)")
	}
	for _, w := range ws {
		e.ShowStatus(w)
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(t.All...)
}

// stopGuard is how long after the last of the other workers' fetches
// started (each asks for every chunk at once) worker-stop waits at least
// before it stops its victim: a request sent to the victim before the
// stop ends within the sibling timeout of when it was sent, so the others
// end that much before the resume at least.
const stopGuard = 1500 * time.Millisecond

// waitStopPoint waits until victim's fetch of name holds at least frac of
// its chunks and every other daemon of others began its fetch of name
// (its status lists it, or already holds it) stopGuard ago or more, for
// at most within; it returns the chunks victim holds and in all. The
// victim's fetch ending first is an error: the point was missed.
func (e *Env) waitStopPoint(victim *Daemon, others []*Daemon, name string, frac float64, within time.Duration) (done, chunks int, err error) {
	deadline := time.Now().Add(within)
	seen := false
	began := map[*Daemon]time.Time{}
	for {
		now := time.Now()
		var last time.Time // when the last of the others began
		for _, d := range others {
			b, ok := began[d]
			if !ok {
				st, _, err := d.Status(e.Ctx)
				if err != nil {
					return 0, 0, err
				}
				if ok = transferOf(st.Transfers, name) != nil || st.Names > 0; ok {
					b, began[d] = now, now
				}
			}
			if ok && b.After(last) {
				last = b
			}
		}
		st, _, err := victim.Status(e.Ctx)
		if err != nil {
			return 0, 0, err
		}
		tr := transferOf(st.Transfers, name)
		if tr != nil {
			seen = true
			if len(began) == len(others) && tr.Chunks > 0 && float64(tr.Done) >= frac*float64(tr.Chunks) && time.Since(last) >= stopGuard {
				return tr.Done, tr.Chunks, nil
			}
		} else if seen {
			return 0, 0, fmt.Errorf("%s's fetch of %q ended before it held %.0f%% of the chunks and %v had passed since every other worker began (the broadcast was too quick to stop it in the middle)",
				victim.Name, name, 100*frac, stopGuard)
		}
		if time.Now().After(deadline) || e.Ctx.Err() != nil {
			return 0, 0, violation("%s's fetch of %q did not reach %.0f%% of the chunks within %v", victim.Name, name, 100*frac, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// transferOf returns the transfer of name among trs, or nil.
func transferOf(trs []rpcbridge.Transfer, name string) *rpcbridge.Transfer {
	for i := range trs {
		if trs[i].Name == name {
			return &trs[i]
		}
	}
	return nil
}
