package faults

import (
	"time"
)

// caseSiblingKill: a root paced to 16 MiB/s (--max-upload-rate), a head
// h1 with 4 workers (fallback: the root) that exchange chunks (the head
// sends each chunk once and redirects the other workers to siblings). All
// four get a fresh blob at once; a worker drawn at random is SIGKILLed
// after a random delay, while its siblings fetch chunks from it.
//
// The other three complete with exact bytes (their requests to the dead
// sibling fail fast, and they ask the head instead); the killed one exits
// clearly and, restarted, gets the blob; the head's status shows it
// redirected requests to siblings, and the surviving workers' show what
// they sent each other as sent to siblings (none to other peers); no
// daemon panics or leaks descriptors.
func caseSiblingKill(e *Env) error {
	e.Step("start root (paced to 16 MiB/s), h1, 4 workers (fallback: root)")
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 4, Fallback: true,
		RootArgs: []string{"--max-upload-rate", "16M"}, WorkerArgs: []string{"--parent-retry", "2s"}})
	if err != nil {
		return err
	}
	if err := e.SetBaselines(t.All...); err != nil {
		return err
	}
	root, h1, ws := t.Root, t.Heads[0], t.Workers

	name := "sk/blob"
	data := e.Blob(e.Size(24<<20, 48<<20))
	e.Step("put %q (%d bytes) at the root", name, len(data))
	if err := e.MustPut(root, name, data); err != nil {
		return err
	}
	victim := e.Rng.IntN(len(ws))
	delay := time.Duration(200+e.Rng.IntN(1200)) * time.Millisecond
	e.Step("get %q at every worker at once; SIGKILL %s after %v", name, ws[victim].Name, delay)
	gets := e.startGets(ws, name)
	killErr := make(chan error, 1)
	go func() {
		e.sleep(delay)
		killErr <- ws[victim].Kill()
	}()
	gets.wait()
	if err := <-killErr; err != nil {
		return err
	}
	verdicts, results, err := gets.judge(e, ws[victim].Name+" killed")
	if err != nil {
		return err
	}
	for i, w := range ws {
		r, v := results[i], verdicts[i]
		if i != victim && v != Exact {
			return violation("get %q at %s must return the put bytes while its sibling %s died mid-broadcast: %s, exit %d: %s",
				name, w.Name, ws[victim].Name, v, r.Code, trim(r.Stderr))
		}
	}
	st, _, err := h1.Status(e.Ctx)
	if err != nil {
		return err
	}
	e.Printf("h1 redirected %d requests to siblings; sent %d chunk bytes to its workers (%.2f blobs)",
		st.RedirectsSent, st.BytesOut["child"], float64(st.BytesOut["child"])/float64(len(data)))
	if st.RedirectsSent == 0 {
		return violation("h1 redirected no request: the workers did not exchange chunks (the case proves nothing)")
	}
	e.Step("restart %s, get %q there", ws[victim].Name, name)
	if err := e.Restart(ws[victim], true, "SIGKILL mid-broadcast"); err != nil {
		return err
	}
	if err := e.GetExact(ws[victim], name, reconnectWithin, "restarted, its head and siblings up"); err != nil {
		return err
	}
	for _, w := range ws {
		e.ShowStatus(w)
	}
	// The survivors served each other (GET_SIBLING): each counts what it
	// sent its siblings as such, and nothing as sent to other peers.
	var toSiblings uint64
	for i, w := range ws {
		if i == victim {
			continue
		}
		st, _, err := w.Status(e.Ctx)
		if err != nil {
			return err
		}
		if st.BytesOut["other"] != 0 {
			return violation("%s counts %d chunk bytes sent to other peers: a worker's uploads go to its siblings (bytes_out %v)", w.Name, st.BytesOut["other"], st.BytesOut)
		}
		toSiblings += st.BytesOut["sibling"]
	}
	e.Printf("the surviving workers sent %d chunk bytes to siblings (%.2f blobs)", toSiblings, float64(toSiblings)/float64(len(data)))
	if toSiblings == 0 {
		return violation("h1 redirected %d requests but no surviving worker counts bytes sent to siblings", st.RedirectsSent)
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(t.All...)
}
