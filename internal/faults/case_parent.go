package faults

import (
	"fmt"
	"time"
)

// caseParentRestart: a root, a head h1 with workers h1w1 and h1w2, and a
// worker rw1 directly under the root. Names are put at the root and at
// workers (results travel up). Twice: the root is SIGKILLed while its
// children hold sessions, sometimes a worker puts a result while the root
// is down, and the root restarts on the same home and port (same identity
// and address). Afterwards its children are back in session, and every
// name put before (and during) is resolvable and reads exactly at every
// node.
func caseParentRestart(e *Env) error {
	e.Step("start root, h1, h1w1, h1w2 (fallback: root), rw1")
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 2, RootWorkers: 1, Fallback: true})
	if err != nil {
		return err
	}
	root := t.Root
	e.Step("puts at the root and at workers")
	puts := []struct {
		d    *Daemon
		name string
	}{{root, "pr/root1"}, {t.Workers[0], "pr/h1w1"}, {t.Workers[2], "pr/rw1"}, {root, "pr/root2"}}
	for _, p := range puts {
		if err := e.MustPut(p.d, p.name, e.Blob(e.Size(0, 8<<20))); err != nil {
			return err
		}
	}
	for _, p := range puts {
		if err := e.GetExact(root, p.name, reconnectWithin, "put in the tree, no fault yet"); err != nil {
			return err
		}
	}
	for it := 1; it <= 2; it++ {
		e.Step("restart %d: SIGKILL the root", it)
		e.sleep(time.Duration(e.Rng.IntN(500)) * time.Millisecond)
		if err := root.Kill(); err != nil {
			return err
		}
		if e.Rng.IntN(2) == 0 {
			w := t.Workers[e.Rng.IntN(len(t.Workers))]
			name := fmt.Sprintf("pr/down%d", it)
			e.Step("restart %d: %s puts %q while the root is down", it, w.Name, name)
			if err := e.MustPut(w, name, e.Blob(e.Size(0, 4<<20))); err != nil {
				return err
			}
		}
		e.sleep(time.Duration(e.Rng.IntN(2000)) * time.Millisecond)
		e.Step("restart %d: the root restarts on the same home and port", it)
		if err := e.Restart(root, false, "SIGKILL"); err != nil {
			return err
		}
		e.Step("restart %d: children back in session", it)
		if err := e.waitParents(t.All, reconnectWithin); err != nil {
			return err
		}
		e.Step("restart %d: every name at every node", it)
		for _, d := range t.All {
			for _, name := range e.Ledger.CompletedNames() {
				if err := e.GetExact(d, name, reconnectWithin, "put before the root restarted"); err != nil {
					return err
				}
			}
		}
	}
	e.ShowStatus(root)
	e.Step("daemons alive, answering, no panics")
	return e.CheckDaemons(t.All...)
}
