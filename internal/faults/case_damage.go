package faults

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/omst-project/omst/pkg/blob"
)

// MemoFlushBytes is pushed through the nodes to evict the chunks a
// daemon keeps in memory (pkg/cache's verified-chunk memory, 64 MiB by
// default) before their files are damaged.
const MemoFlushBytes = 72 << 20

// caseChunkDamage: a root, a head h1, workers h1w1 (fallback parent: the
// root) and h1w2 (no fallback: it depends on h1 alone). Three times, with
// the damaged node drawn from root, h1, h1w1 in random order: a fresh blob
// is put at the root and fetched by h1w1 and h1 (so the root, h1 and h1w1
// hold its chunk files), then 1..3 of its chunk files at the drawn node are
// damaged (bit flips, truncation or deletion, drawn): either while the
// daemons run, after MemoFlushBytes of other chunks went through them (so
// that the damaged files are read again), or followed by a restart of the
// damaged node (drawn). Then gets: first at the nodes below the damaged
// one that do not hold the blob yet (h1w2, whose chunks come through h1),
// then at the damaged node, then everywhere. Only the root has no intact
// copy to repair from: a get there may fail (clearly). Every other get
// must return the put bytes: a damaged chunk is noticed (its hash) and
// fetched again from the parent, by a node for itself and for its
// children.
func caseChunkDamage(e *Env) error {
	e.Step("start root, h1, h1w1 (fallback: root), h1w2 (no fallback)")
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 2, Fallback: true, NoFallback: map[string]bool{"h1w2": true}})
	if err != nil {
		return err
	}
	root, h1, w1, w2 := t.Root, t.Heads[0], t.Workers[0], t.Workers[1]
	if err := e.SetBaselines(t.All...); err != nil {
		return err
	}
	rootDamaged := map[string]bool{} // names whose chunks the root lost
	targets := []*Daemon{root, h1, w1}
	for it, ti := range e.Rng.Perm(len(targets)) {
		target := targets[ti]
		name := fmt.Sprintf("cd/b%d", it+1)
		data := e.Blob(e.Size(3<<20, 24<<20))
		e.Step("damage %d: put %q (%d bytes) at the root, get it at h1w1 and h1", it+1, name, len(data))
		if err := e.MustPut(root, name, data); err != nil {
			return err
		}
		// h1w1 may be on its fallback parent (the root) since an earlier
		// restart of h1, and fetch some chunks around h1: the get at h1
		// makes sure h1 holds a whole copy too.
		for _, d := range []*Daemon{w1, h1} {
			if err := e.GetExact(d, name, 0, "no fault yet"); err != nil {
				return err
			}
		}
		// A daemon keeps the bytes of recently verified chunks in memory
		// (pkg/cache: 64 MiB by default) and serves them from there, so
		// damage to their files would go unseen. Either push MemoFlushBytes
		// of other chunks through the nodes first (damage while running),
		// or restart the damaged node after the damage (drawn).
		restart := e.Rng.IntN(2) == 0
		if !restart {
			filler := fmt.Sprintf("cd/filler%d", it+1)
			e.Step("damage %d: push %d MiB through root, h1, h1w1 to flush their chunk memories", it+1, MemoFlushBytes>>20)
			if err := e.MustPut(root, filler, e.Blob(MemoFlushBytes)); err != nil {
				return err
			}
			for _, d := range []*Daemon{w1, h1} {
				if err := e.GetExact(d, filler, 0, "no fault yet"); err != nil {
					return err
				}
			}
		}
		hashes := ChunkHashes(data, 1<<20)
		n := 1 + e.Rng.IntN(min(3, len(hashes)))
		var did []string
		blobFile := "" // the blob file holding the blob at target, once found
		for _, ci := range e.Rng.Perm(len(hashes))[:n] {
			kind := DamageKinds[e.Rng.IntN(len(DamageKinds))]
			e.Step("damage %d: %s chunk %d of %q at %s", it+1, kind, ci, name, target.Name)
			path, off, size, err := waitChunk(target.Home, hashes, data, 1<<20, ci, blobFile, 5*time.Second)
			if err != nil {
				return fmt.Errorf("chunk %d of %q at %s: %w (the store layout of pkg/cache changed?)", ci, name, target.Name, err)
			}
			if st, err := os.Stat(path); err == nil && strings.Contains(path, "/blobs/") && st.Size() == int64(len(data)) {
				blobFile = path // a file of the whole blob
			}
			desc, err := DamageRange(path, off, size, kind, e.Fork())
			if errors.Is(err, ErrEmpty) {
				continue
			}
			if err != nil {
				return err
			}
			did = append(did, fmt.Sprintf("chunk %d: %s", ci, strings.Replace(desc, target.Home+"/", "", 1)))
		}
		when := "while it runs"
		if restart {
			when = "then restarted"
		}
		e.Printf("damage %d at %s (%s): %s", it+1, target.Name, when, strings.Join(did, "; "))
		if restart {
			e.Step("damage %d: restart %s", it+1, target.Name)
			if err := target.Stop(StopTimeout); err != nil {
				return violation("%v", err)
			}
			if err := e.Restart(target, true, "damage to its chunk files"); err != nil {
				return err
			}
			if err := target.SetBaseline(); err != nil {
				return err
			}
		}
		if target == root {
			rootDamaged[name] = true
		}

		// Gets: first the nodes below the damaged one that lack the blob
		// (they are served by it), then the damaged node, then the rest.
		var order []*Daemon
		for _, d := range t.Below(target) {
			if d == w2 {
				order = append(order, d)
			}
		}
		order = append(order, target)
		for _, d := range t.All {
			if !contains(order, d) {
				order = append(order, d)
			}
		}
		for _, d := range order {
			e.Step("damage %d at %s: get %q at %s", it+1, target.Name, name, d.Name)
			if d == root && rootDamaged[name] {
				// No intact copy above the root: a clear error is fine.
				v, rd, err := e.Get(d, name, e.RandGetMode(), true)
				if err != nil {
					return err
				}
				e.Printf("damage %d: get at the damaged root: %s%s", it+1, v, errText(rd))
				continue
			}
			why := fmt.Sprintf("%s's chunks were damaged, an intact copy is above it", target.Name)
			if err := e.GetExact(d, name, 10*time.Second, why); err != nil {
				return err
			}
		}
		for _, d := range uniq(target, h1) {
			st, raw, err := d.Status(e.Ctx)
			if err == nil {
				if HasExtraCounters(raw) {
					e.Printf("damage %d at %s: %s: %s", it+1, target.Name, d.Name, Counters(st, raw))
				} else {
					e.Logf("%s: %s", d.Name, Counters(st, raw))
				}
			}
		}
	}
	e.Step("every name at every node")
	for _, d := range t.All {
		for _, name := range e.Ledger.Names() {
			if strings.HasPrefix(name, "cd/filler") {
				continue
			}
			lost := d == root && rootDamaged[name]
			v, rd, err := e.Get(d, name, e.RandGetMode(), lost)
			if err != nil {
				return err
			}
			if v != Exact && !lost {
				return violation("get %q at %s after the damage: %s%s", name, d.Name, v, errText(rd))
			}
		}
	}
	e.Step("daemons alive, answering, no panics, no descriptor leaks")
	return e.CheckDaemons(t.All...)
}

func contains(ds []*Daemon, d *Daemon) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

func errText(rd Read) string {
	if rd.Code == 0 {
		return ""
	}
	return fmt.Sprintf(" (exit %d: %s)", rd.Code, trim(rd.Stderr))
}

// waitFile waits until path exists (a relay stores a chunk just after
// handing it on).
// waitChunk is FindChunk, waiting up to within for the chunk to be stored.
func waitChunk(home string, hs []blob.Hash, data []byte, chunkSize, ci int, known string, within time.Duration) (string, int64, int64, error) {
	deadline := time.Now().Add(within)
	for {
		path, off, n, err := FindChunk(home, hs, data, chunkSize, ci, known)
		if err == nil || time.Now().After(deadline) {
			return path, off, n, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func uniq(ds ...*Daemon) []*Daemon {
	var out []*Daemon
	for _, d := range ds {
		if !contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}
