package faults

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// caseGatherKill (issue 27, many names in one call): a root and two heads
// with two workers each (no fallback; the DHT on or off, drawn). Each worker puts 100 small results
// (1..32 KiB) under g/ in one PUT_MANY (not in the ledger). The root runs
// `omst get -r g -o DIR` and one head, drawn, is SIGKILLed at a random
// moment within the command's first 150 ms. What must hold: the command
// ends (exit 0, or 1 naming the names it could not get), never hangs;
// without the DHT it is exit 1 (the killed site's results have no other
// source) unless the gather was done before the kill;
// every file in DIR holds exactly its name's bytes, none is partial and
// no temporary file is left; every result of the other site is there.
// The head restarts on the same home; a second `get -r` into a new
// directory brings every result exactly; no daemon logged a panic.
func caseGatherKill(e *Env) error {
	// With the DHT (drawn) the root finds the killed site's workers
	// there and the gather completes; without it those results are
	// reported missing.
	spec := TreeSpec{Heads: 2, WorkersPerHead: 2}
	noDHT := e.Rng.IntN(2) == 0
	if noDHT {
		spec.RootArgs, spec.HeadArgs, spec.WorkerArgs = []string{"--no-dht"}, []string{"--no-dht"}, []string{"--no-dht"}
	}
	e.Step("start root, h1, h2, two workers each (no fallback; DHT off: %v)", noDHT)
	t, err := e.StartTree(spec)
	if err != nil {
		return err
	}
	const perWorker = 100
	want := map[string][]byte{}
	e.Step("the workers put %d small results each under g/, one PUT_MANY each", perWorker)
	for _, w := range t.Workers {
		items := make([]rpcbridge.PutItem, perWorker)
		for k := range items {
			name := fmt.Sprintf("g/%s/%03d", w.Name, k)
			b := e.Blob(e.Size(1, 32<<10))
			want[name] = b
			items[k] = rpcbridge.PutItem{Name: name, Size: uint64(len(b)), Open: func() (io.ReadCloser, error) {
				return io.NopCloser(bytes.NewReader(b)), nil
			}}
		}
		c, err := rpcbridge.Dial(filepath.Join(w.Home, "omst.sock"))
		if err != nil {
			return err
		}
		_, sum, err := c.PutMany(e.Ctx, items, rpcbridge.PutOptions{})
		c.Close()
		if err != nil || sum.Failed > 0 {
			return fmt.Errorf("put many at %s: %+v, %v", w.Name, sum, err)
		}
	}
	if err := e.waitListed(t.Root, "g/", len(want), reconnectWithin); err != nil {
		return err
	}

	victim := t.Heads[e.Rng.IntN(len(t.Heads))]
	dir := filepath.Join(e.Dir, "gather")
	delay := time.Duration(e.Rng.IntN(150)) * time.Millisecond
	e.Step("get -r g at the root; SIGKILL %s %v after its start", victim.Name, delay)
	p, err := StartCLI(e.Bin, false, false, "--home", t.Root.Home, "get", "-r", "g", "-o", dir)
	if err != nil {
		return err
	}
	e.sleep(delay)
	if err := victim.Kill(); err != nil {
		return err
	}
	r := p.Wait(e.Ctx, OpTimeout)
	if r.Err != nil || r.TimedOut || r.Signal != "" || (r.Code != 0 && r.Code != 1) {
		return violation("get -r with %s killed: %s", victim.Name, r.Describe())
	}
	e.Logf("get -r: exit %d: %s", r.Code, strings.TrimSpace(string(r.Stdout)))
	got, err := checkGathered(dir, "g/", want)
	if err != nil {
		return err
	}
	for name := range want {
		if !strings.HasPrefix(name, "g/"+victim.Name+"w") && !got[name] {
			return violation("%s of the surviving site missing after the gather", name)
		}
	}
	if r.Code == 0 && len(got) != len(want) {
		return violation("get -r exited 0 with %d of %d files", len(got), len(want))
	}
	if r.Code == 1 && !strings.Contains(r.Stderr, "g/"+victim.Name+"w") {
		return violation("get -r failed without naming %s's results: %s", victim.Name, r.Stderr)
	}

	e.Step("%s restarts on the same home; get -r again brings every result", victim.Name)
	if err := e.Restart(victim, false, "SIGKILL"); err != nil {
		return err
	}
	if err := e.waitParents(t.All, reconnectWithin); err != nil {
		return err
	}
	dir2 := filepath.Join(e.Dir, "gather2")
	deadline := time.Now().Add(reconnectWithin)
	for {
		os.RemoveAll(dir2)
		r = RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", t.Root.Home, "get", "-r", "g", "-o", dir2)
		if r.Code == 0 || time.Now().After(deadline) {
			break
		}
		e.sleep(500 * time.Millisecond)
	}
	if r.Code != 0 {
		return violation("get -r after the restart: %s: %s", r.Describe(), r.Stderr)
	}
	if got, err := checkGathered(dir2, "g/", want); err != nil {
		return err
	} else if len(got) != len(want) {
		return violation("get -r after the restart: %d of %d files", len(got), len(want))
	}
	e.Step("daemons alive, answering, no panics")
	return e.CheckDaemons(t.All...)
}

// checkGathered walks dir: every file must be a name of want (prefix +
// its path) with exactly its bytes, and no temporary file may be left. It
// returns the names found.
func checkGathered(dir, prefix string, want map[string][]byte) (map[string]bool, error) {
	got := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			if path == dir && os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if de.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		name := prefix + filepath.ToSlash(rel)
		w, ok := want[name]
		if !ok {
			return violation("%s in DIR: no such name (a temporary file left?)", rel)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Equal(b, w) {
			return violation("%s: %d bytes, not the %d put (partial or other bytes)", rel, len(b), len(w))
		}
		got[name] = true
		return nil
	})
	return got, err
}
