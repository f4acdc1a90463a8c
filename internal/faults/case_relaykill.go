package faults

import (
	"fmt"
	"time"
)

// reconnectWithin bounds how long a node may take to be usable again after
// its parent or itself restarted: the keeper's reconnect backoff is at
// most a few seconds on loopback, --parent-retry 2s for the workers here.
const reconnectWithin = 30 * time.Second

// caseRelayKill: a root, a head h1 and a worker h1w1 (parents: h1, then
// the root as fallback).
//
//  1. A get during which its own daemon dies: h1w1 gets a blob that lives
//     at the root; h1w1 is SIGKILLed once a random number of bytes came
//     out. The client ends with a clear error, never partial output (no -o
//     file, or a whole one; through stdout a prefix and a non-zero exit).
//     h1w1 restarts and the get works.
//  2. A relay that dies: twice, h1w1 gets a fresh blob from the root
//     through h1, and h1 is SIGKILLed at a random byte count. The get
//     completes with exact bytes (through the fallback) or fails clearly.
//     h1 restarts on the same home and port (same identity and address);
//     gets at h1w1 and h1 then work.
func caseRelayKill(e *Env) error {
	retry := []string{"--parent-retry", "2s"}
	e.Step("start root, h1, h1w1 (fallback: root)")
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 1, Fallback: true, WorkerArgs: retry})
	if err != nil {
		return err
	}
	root, h1, w := t.Root, t.Heads[0], t.Workers[0]

	name := "rk/local"
	data := e.Blob(e.Size(4<<20, 48<<20))
	e.Step("put %q (%d bytes) at the root", name, len(data))
	if err := e.MustPut(root, name, data); err != nil {
		return err
	}
	mode := e.RandGetMode()
	at := e.Rng.Int64N(int64(len(data)))
	e.Step("get %q at h1w1 (%s), SIGKILL h1w1 after %d bytes", name, mode, at)
	gk, err := e.getKilling(w, w, name, mode, at)
	if err != nil {
		return fmt.Errorf("%w (get at h1w1, its daemon killed)", err)
	}
	e.Printf("get with its daemon killed after %d of %d bytes (%s): %s%s", at, len(data), mode, gk.Verdict, failText(gk.Result))
	e.Step("restart h1w1, get %q there", name)
	if err := e.Restart(w, true, "SIGKILL during a get"); err != nil {
		return err
	}
	if err := e.GetExact(w, name, reconnectWithin, "h1w1 restarted, root and h1 up"); err != nil {
		return err
	}

	for it := 1; it <= 2; it++ {
		name := fmt.Sprintf("rk/relay%d", it)
		data := e.Blob(e.Size(4<<20, 48<<20))
		e.Step("relay %d: put %q (%d bytes) at the root", it, name, len(data))
		if err := e.MustPut(root, name, data); err != nil {
			return err
		}
		mode := e.RandGetMode()
		at := e.Rng.Int64N(int64(len(data)))
		e.Step("relay %d: get %q at h1w1 (%s), SIGKILL the relay h1 after %d bytes", it, name, mode, at)
		gk, err := e.getKilling(w, h1, name, mode, at)
		if err != nil {
			return fmt.Errorf("%w (get at h1w1 through h1, h1 killed)", err)
		}
		when := "during"
		if !gk.Before {
			when = "after"
		}
		e.Printf("relay %d: h1 killed %s the get, at %d of %d bytes (%s): %s%s", it, when, at, len(data), mode, gk.Verdict, failText(gk.Result))
		e.Step("relay %d: restart h1 on the same home and port", it)
		if err := e.Restart(h1, true, "SIGKILL while relaying"); err != nil {
			return err
		}
		e.Step("relay %d: get %q at h1w1 and at h1", it, name)
		if err := e.GetExact(w, name, reconnectWithin, "h1 restarted, the root up"); err != nil {
			return err
		}
		if err := e.GetExact(h1, name, reconnectWithin, "the root up"); err != nil {
			return err
		}
	}
	e.Step("every ledger name at every node")
	for _, d := range t.All {
		if err := e.CheckNames(d, false); err != nil {
			return err
		}
	}
	e.ShowStatus(w)
	e.ShowStatus(h1)
	e.Step("daemons alive, answering, no panics")
	return e.CheckDaemons(t.All...)
}
