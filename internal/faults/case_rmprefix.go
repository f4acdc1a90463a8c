package faults

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// caseRemovePrefixKill (issue 27, job namespaces): a root, a head h1 with
// workers h1w1 and h1w2 (the root their fallback), and rw1 under the root.
// The workers put 300 names each under rmk/ (through the local API; not
// in the ledger: they are to be removed). The root runs `omst rm -r rmk
// --everywhere`, and a random node below it is SIGKILLed at a random
// moment within the command's first 80 ms (it takes about 100 ms on loopback), then restarted
// on the same home. Afterwards: the command ended (each node it could not
// reach is reported), every node lists no name under rmk/ (the killed one
// too, learning the removal when its session comes up), none comes back
// at the root after the re-announces, a name put under rmk/ afterwards
// reads exactly at every node, and no daemon logged a panic.
func caseRemovePrefixKill(e *Env) error {
	e.Step("start root, h1, h1w1, h1w2 (fallback: root), rw1")
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 2, RootWorkers: 1, Fallback: true})
	if err != nil {
		return err
	}
	const perWorker = 300
	e.Step("the workers put %d names each under rmk/", perWorker)
	for _, w := range t.Workers {
		c, err := rpcbridge.Dial(filepath.Join(w.Home, "omst.sock"))
		if err != nil {
			return err
		}
		for k := range perWorker {
			name := fmt.Sprintf("rmk/%s/%04d", w.Name, k)
			if _, err := c.Put(e.Ctx, name, strings.NewReader(name), rpcbridge.PutOptions{}); err != nil {
				c.Close()
				return fmt.Errorf("put %s at %s: %w", name, w.Name, err)
			}
		}
		c.Close()
	}
	want := perWorker * len(t.Workers)
	if err := e.waitListed(t.Root, "rmk/", want, reconnectWithin); err != nil {
		return err
	}

	below := t.All[1:]
	victim := below[e.Rng.IntN(len(below))]
	e.Step("rm -r rmk --everywhere at the root; SIGKILL %s mid-removal", victim.Name)
	p, err := StartCLI(e.Bin, false, false, "--home", t.Root.Home, "rm", "-r", "rmk", "--everywhere")
	if err != nil {
		return err
	}
	e.sleep(time.Duration(e.Rng.IntN(80)) * time.Millisecond)
	if err := victim.Kill(); err != nil {
		return err
	}
	r := p.Wait(e.Ctx, OpTimeout)
	if r.Code != 0 {
		return violation("rm -r --everywhere with %s killed: %s", victim.Name, r.Describe())
	}
	e.Logf("rm -r: %s %s", strings.TrimSpace(string(r.Stdout)), strings.TrimSpace(r.Stderr))
	e.Step("%s restarts on the same home", victim.Name)
	if err := e.Restart(victim, false, "SIGKILL"); err != nil {
		return err
	}
	if err := e.waitParents(t.All, reconnectWithin); err != nil {
		return err
	}
	e.Step("every node lists no name under rmk/")
	for _, d := range t.All {
		if err := e.waitListed(d, "rmk/", 0, reconnectWithin); err != nil {
			return err
		}
	}
	e.sleep(2 * time.Second) // the re-announces after the restart
	if err := e.waitListed(t.Root, "rmk/", 0, time.Second); err != nil {
		return fmt.Errorf("after the re-announces: %w", err)
	}
	e.Step("a put after the removal reads at every node")
	if err := e.MustPut(t.Workers[0], "rmk/after", e.Blob(e.Size(1, 1<<20))); err != nil {
		return err
	}
	for _, d := range t.All {
		if err := e.GetExact(d, "rmk/after", reconnectWithin, "put after the removal"); err != nil {
			return err
		}
	}
	e.Step("daemons alive, answering, no panics")
	return e.CheckDaemons(t.All...)
}

// waitListed waits until d lists exactly n names under prefix.
func (e *Env) waitListed(d *Daemon, prefix string, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	got := -1
	for {
		c, err := rpcbridge.Dial(filepath.Join(d.Home, "omst.sock"))
		if err == nil {
			ctx, cancel := context.WithTimeout(e.Ctx, 10*time.Second)
			var infos []rpcbridge.Info
			infos, err = c.List(ctx, prefix)
			cancel()
			c.Close()
			got = len(infos)
		}
		if err == nil && got == n {
			return nil
		}
		if time.Now().After(deadline) {
			return violation("%s lists %d names under %s after %v, want %d (last error: %v)", d.Name, got, prefix, within, n, err)
		}
		e.sleep(100 * time.Millisecond)
	}
}
