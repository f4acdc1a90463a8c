package faults

import (
	"fmt"
	"time"
)

// pushWithin bounds how long a case waits for a head to report pushed
// bytes: the root's answer to the head's LOOKUP_GET comes within a round
// trip on loopback, its first pushed chunk within a second at 2 MiB/s.
const pushWithin = 20 * time.Second

// casePushKill: a root paced to 2 MiB/s (--max-upload-rate) with 256 KiB
// chunks, a head h1 (another site than the root's) and a worker h1w1
// (fallback: the root). A get at h1 asks the root LOOKUP_GET, and the root
// pushes the blob's first chunks with its answer (names 1.2.0): at most a
// second of its upload rate, 8 chunks paced over about a second, so that
// a kill aimed at the push lands in it.
//
//  1. The pusher dies: h1 gets a fresh blob; as soon as h1's status shows
//     pushed bytes received, the root is SIGKILLed, the push cut short.
//     h1's get returns the put bytes or fails clearly (its one parent is
//     gone), never other bytes and never a hang; the root restarts on the
//     same home and port, and gets at h1 and at h1w1 return the put bytes.
//  2. The receiver dies: h1w1 gets a fresh blob through h1; as soon as h1
//     shows pushed bytes received, h1 is SIGKILLed, chunks in flight from
//     the push with it. h1w1's get completes through its fallback or fails
//     clearly; h1 restarts, and gets at h1 and h1w1 return the put bytes.
//
// After both, no fetch is left under way at h1 (status transfers) and
// every daemon is alive, answering, without a panic or leaked descriptors.
func casePushKill(e *Env) error {
	e.Step("start root (paced to 2 MiB/s, 256 KiB chunks), h1, h1w1 (fallback: root)")
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 1, Fallback: true,
		RootArgs:   []string{"--max-upload-rate", "2M", "--chunk-size", "256K"},
		WorkerArgs: []string{"--parent-retry", "2s"}})
	if err != nil {
		return err
	}
	if err := e.SetBaselines(t.All...); err != nil {
		return err
	}
	root, h1, w := t.Root, t.Heads[0], t.Workers[0]

	// pushed fires once h1 reports more pushed bytes received than base;
	// seen is how many more it reported then.
	var seen uint64
	pushed := func(base uint64, start time.Time) func(int64) (bool, error) {
		return func(int64) (bool, error) {
			st, _, err := h1.Status(e.Ctx)
			if err != nil {
				return false, err
			}
			if st.PushReceived > base {
				seen = st.PushReceived - base
				return true, nil
			}
			if time.Since(start) > pushWithin {
				return false, violation("h1 reported no pushed bytes within %v of the get: the root did not push (the case proves nothing)", pushWithin)
			}
			return false, nil
		}
	}

	type round struct {
		name       string
		at, victim *Daemon
		who        string
	}
	rounds := []round{
		{"pk/pusher", h1, root, "the root (pushing)"},
		{"pk/receiver", w, h1, "h1 (receiving the push)"},
	}
	for _, r := range rounds {
		data := e.Blob(e.Size(6<<20, 12<<20))
		e.Step("put %q (%d bytes) at the root", r.name, len(data))
		if err := e.MustPut(root, r.name, data); err != nil {
			return err
		}
		e.Step("get %q at %s; SIGKILL %s once h1 shows pushed bytes", r.name, r.at.Name, r.who)
		before, _, err := h1.Status(e.Ctx)
		if err != nil {
			return err
		}
		gk, err := e.getKillingIf(r.at, func() *Daemon { return r.victim }, r.name, GetFile, pushed(before.PushReceived, time.Now()))
		if err != nil {
			return fmt.Errorf("%w (get at %s, %s killed mid-push)", err, r.at.Name, r.who)
		}
		e.Printf("%s killed with %d pushed bytes at h1 (a push here is at most 2 MiB), the get %s: %s%s",
			r.victim.Name, seen, map[bool]string{true: "still running", false: "over"}[gk.Before], gk.Verdict, failText(gk.Result))
		e.Step("restart %s on the same home and port; get %q at h1 and at h1w1", r.victim.Name, r.name)
		if err := e.Restart(r.victim, true, "SIGKILL mid-push"); err != nil {
			return err
		}
		if err := e.GetExact(h1, r.name, reconnectWithin, "the root and h1 up again"); err != nil {
			return err
		}
		if err := e.GetExact(w, r.name, reconnectWithin, "the root and h1 up again"); err != nil {
			return err
		}
	}
	st, _, err := h1.Status(e.Ctx)
	if err != nil {
		return err
	}
	if len(st.Transfers) != 0 {
		return violation("h1 still lists %d fetches under way after every get ended: %+v", len(st.Transfers), st.Transfers)
	}
	e.ShowStatus(h1)
	e.Step("every ledger name at every node")
	for _, d := range t.All {
		if err := e.CheckNames(d, false); err != nil {
			return err
		}
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(t.All...)
}
