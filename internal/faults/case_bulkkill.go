package faults

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// caseBulkKill: the bulk path (docs/protocol.md, "The bulk path") under
// kill -9 of either end. A root paced to 16 MiB/s, a head h1 and two
// workers (fallback: the root); h1 and its workers say their LAN is
// trusted (--trusted-lan, site s1): between them chunks go over plain
// bulk connections, between the root (no site) and the others over
// sealed ones (every daemon has the default --bulk-conns 4).
//
//  1. The server dies: both workers get a fresh blob at once through h1,
//     and h1 is SIGKILLed after a random delay, its bulk connections cut
//     mid-reply. Both gets complete with exact bytes (the chunks asked
//     again of the fallback, the root, over its bulk connections).
//  2. The receiver dies: h1 restarted, a worker gets a fresh blob into a
//     new file (omst get -o F) and is SIGKILLed at a random byte count:
//     its client ends clearly, and the get's directory holds neither F
//     nor its temporary file (unless the get had completed: then F is
//     whole); restarted, the worker's store holds nothing of the cut get
//     (its tmp directory empty, no chunk counted damaged or orphaned),
//     and it gets the blob. (Issue 26: kill -9 of either side of the
//     bulk path mid-transfer.)
//
// Every ledger name is then at every node, and no daemon panicked.
func caseBulkKill(e *Env) error {
	trusted := []string{"--trusted-lan"}
	e.Step("start root (paced to 16 MiB/s), h1 and 2 workers (--trusted-lan; fallback: root)")
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 2, Fallback: true,
		RootArgs: []string{"--max-upload-rate", "16M"}, HeadArgs: trusted,
		WorkerArgs: append([]string{"--parent-retry", "2s"}, trusted...)})
	if err != nil {
		return err
	}
	if err := e.SetBaselines(t.All...); err != nil {
		return err
	}
	root, h1, ws := t.Root, t.Heads[0], t.Workers

	name := "bk/server"
	data := e.Blob(e.Size(24<<20, 48<<20))
	e.Step("put %q (%d bytes) at the root", name, len(data))
	if err := e.MustPut(root, name, data); err != nil {
		return err
	}
	delay := time.Duration(200+e.Rng.IntN(1000)) * time.Millisecond
	e.Step("get %q at both workers at once; SIGKILL h1 (their bulk server) after %v", name, delay)
	gets := e.startGets(ws, name)
	killErr := make(chan error, 1)
	go func() {
		e.sleep(delay)
		killErr <- h1.Kill()
	}()
	gets.wait()
	if err := <-killErr; err != nil {
		return err
	}
	verdicts, results, err := gets.judge(e, "h1 killed")
	if err != nil {
		return err
	}
	for i, w := range ws {
		if verdicts[i] != Exact {
			return violation("get %q at %s must return the put bytes from the fallback when h1 dies mid-transfer: %s, exit %d: %s",
				name, w.Name, verdicts[i], results[i].Code, trim(results[i].Stderr))
		}
	}
	e.Step("restart h1 on the same home and port")
	if err := e.Restart(h1, true, "SIGKILL while serving bulk connections"); err != nil {
		return err
	}

	w := ws[e.Rng.IntN(len(ws))]
	name = "bk/receiver"
	data = e.Blob(e.Size(8<<20, 48<<20))
	e.Step("put %q (%d bytes) at the root", name, len(data))
	if err := e.MustPut(root, name, data); err != nil {
		return err
	}
	mode := GetFile
	at := e.Rng.Int64N(int64(len(data)))
	e.Step("get %q at %s (%s), SIGKILL %s after %d bytes", name, w.Name, mode, w.Name, at)
	gk, err := e.getKilling(w, w, name, mode, at)
	if err != nil {
		return fmt.Errorf("%w (get at %s, its daemon killed)", err, w.Name)
	}
	e.Printf("get with its daemon killed after %d of %d bytes (%s): %s%s", at, len(data), mode, gk.Verdict, failText(gk.Result))
	// getKilling made the get's directory last (get-N, N the case's
	// latest path number).
	getDir := filepath.Join(e.Dir, fmt.Sprintf("get-%d", e.seq))
	for _, f := range filesIn(getDir) {
		if f != "out" || gk.Verdict != Exact {
			return violation("get %q cut by %s's SIGKILL (%s) left %s in its directory: a partial destination is visible",
				name, w.Name, gk.Verdict, filepath.Join(getDir, f))
		}
	}
	e.Step("restart %s: its store holds nothing of the cut get; get %q there", w.Name, name)
	if err := e.Restart(w, true, "SIGKILL while receiving over bulk connections"); err != nil {
		return err
	}
	if left := filesIn(filepath.Join(w.Home, storeDir, tmpDir)); len(left) > 0 {
		return violation("after the restart %s's store tmp directory still holds %s", w.Name, strings.Join(left, ", "))
	}
	st, _, err := w.Status(e.Ctx)
	if err != nil {
		return err
	}
	if st.ChunksDamaged != 0 || st.CacheOrphaned != 0 {
		return violation("after the restart %s counts %d damaged chunks and %d orphaned bytes: the cut get left them", w.Name, st.ChunksDamaged, st.CacheOrphaned)
	}
	if err := e.GetExact(w, name, reconnectWithin, "restarted, h1 and the root up"); err != nil {
		return err
	}
	e.Step("every ledger name at every node")
	for _, d := range t.All {
		if err := e.CheckNames(d, false); err != nil {
			return err
		}
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(t.All...)
}
