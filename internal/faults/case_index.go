package faults

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// caseIndexDamage: a root, a head h1 and a worker h1w1. Twice: blobs are
// put at the root and at h1w1 and read everywhere; then a node drawn at
// random has its index directory (HOME/cache/index, BadgerDB) deleted or
// bits flipped / a file truncated in 1..3 of its files, after a SIGTERM,
// after a SIGKILL, or while it runs followed by a SIGKILL (drawn), and the
// node restarts. It either starts
// (names it held may be lost: data loss from injected damage is allowed)
// or exits with a clear error (non-zero exit code, a message, no panic).
// If it refused, its index is deleted (the operator's remedy) and it must
// start then. Afterwards no get anywhere returns wrong bytes; names put at
// an undamaged node still read exactly there; fresh puts and gets work.
func caseIndexDamage(e *Env) error {
	e.Step("start root, h1, h1w1")
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 1, WorkerArgs: []string{"--parent-retry", "2s"}})
	if err != nil {
		return err
	}
	origin := map[string]*Daemon{}
	put := func(d *Daemon, name string) error {
		if err := e.MustPut(d, name, e.Blob(e.Size(0, 6<<20))); err != nil {
			return err
		}
		origin[name] = d
		return nil
	}
	for it := 1; it <= 2; it++ {
		e.Step("index %d: puts at the root and at h1w1, gets everywhere", it)
		if err := put(t.Root, fmt.Sprintf("ix/root%d", it)); err != nil {
			return err
		}
		if err := put(t.Workers[0], fmt.Sprintf("ix/w%d", it)); err != nil {
			return err
		}
		for _, d := range t.All {
			for _, name := range e.Ledger.CompletedNames() {
				if _, _, err := e.Get(d, name, GetFile, true); err != nil {
					return err
				}
			}
		}
		target := t.All[e.Rng.IntN(len(t.All))]
		del := e.Rng.IntN(3) == 0
		// How the node goes down around the damage: stopped (SIGTERM) or
		// killed (SIGKILL) before it, or damaged while it runs and then
		// killed (BadgerDB still has the files open and mapped).
		how := [...]string{"SIGTERM, then damage", "SIGKILL, then damage", "damage while running, then SIGKILL"}[e.Rng.IntN(3)]
		e.Step("index %d: %s: %s its index", it, target.Name, how)
		if how == "SIGTERM, then damage" {
			if err := target.Stop(StopTimeout); err != nil {
				return violation("%v", err)
			}
		} else if how == "SIGKILL, then damage" {
			if err := target.Kill(); err != nil {
				return err
			}
		}
		desc, err := DamageIndex(target.Home, del, e.Fork())
		if err != nil {
			return err
		}
		if target.Running() {
			if err := target.Kill(); err != nil {
				return err
			}
		}
		target.indexDamaged = true
		e.Printf("index %d: %s: %s: %s", it, target.Name, how, strings.ReplaceAll(desc, target.Home+"/", ""))

		e.Step("index %d: restart %s on its damaged index", it, target.Name)
		err = target.Start(e.Ctx, StartTimeout, false)
		var se *StartError
		switch {
		case portTaken(err):
			return fmt.Errorf("port %d of %s was taken by another process while it was down (not a daemon bug): %w", target.Port, target.Name, err)
		case err == nil:
			e.Printf("index %d: %s started on the damaged index", it, target.Name)
		case errors.As(err, &se):
			if se.Signal != "" || se.Code <= 0 {
				return violation("%s on a damaged index did not exit cleanly: %v", target.Name, err)
			}
			if bad := target.ScanLog(); len(bad) > 0 {
				return violation("%s on a damaged index panicked:\n    %s", target.Name, strings.Join(bad, "\n    "))
			}
			if !strings.Contains(se.LogTail, "omst:") {
				return violation("%s refused to start on a damaged index without an error message: %v", target.Name, err)
			}
			e.Printf("index %d: %s refused to start (exit %d): %s", it, target.Name, se.Code, lastLine(se.LogTail))
			e.Step("index %d: delete %s's index and start it", it, target.Name)
			if err := os.RemoveAll(IndexDir(target.Home)); err != nil {
				return err
			}
			if err := e.Restart(target, false, "its damaged index was deleted (the remedy)"); err != nil {
				return err
			}
		default:
			return err
		}
		e.Step("index %d: every name at every node: never wrong bytes", it)
		if err := e.waitParents(t.All, reconnectWithin); err != nil {
			return err
		}
		for _, d := range t.All {
			for _, name := range e.Ledger.Names() {
				mustRead := origin[name] == d && !d.indexDamaged
				if mustRead {
					if err := e.GetExact(d, name, reconnectWithin, "put at this node, whose index is intact"); err != nil {
						return err
					}
					continue
				}
				if _, _, err := e.Get(d, name, e.RandGetMode(), true); err != nil {
					return err
				}
			}
		}
		e.Step("index %d: a fresh put at %s, read at every node", it, target.Name)
		fresh := fmt.Sprintf("ix/fresh%d", it)
		if err := put(target, fresh); err != nil {
			return err
		}
		for _, d := range t.All {
			if err := e.GetExact(d, fresh, reconnectWithin, "a put after the restart"); err != nil {
				return err
			}
		}
	}
	e.Step("daemons alive, answering, no panics")
	return e.CheckDaemons(t.All...)
}

// waitParents waits until every daemon with a parent has a parent session.
func (e *Env) waitParents(ds []*Daemon, within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, d := range ds {
		if len(d.Parents) == 0 {
			continue
		}
		for {
			st, _, err := d.Status(e.Ctx)
			if err == nil && st.ParentConnected {
				break
			}
			if time.Now().After(deadline) || e.Ctx.Err() != nil {
				return violation("%s has no parent session %v after the restart (status: %v)", d.Name, within, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}
