package faults

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// caseProviderKill: sources found in the DHT. A root and three heads
// (sites s1, s2, s3), one worker each (no fallback parent).
//
//  1. h1w1 puts a result; h1 copies it; h3 reads it (head to head) and so
//     holds it too. h2 then sees both as providers (`omst providers`).
//  2. h2w1 gets the result, through h2, which fetches from another site's
//     head; at a random byte count the provider h2 is fetching from (of h1
//     and h3, the one whose bytes sent grew most) is SIGKILLed. The get
//     completes with exact bytes (h2 goes on with the other, or the root's
//     path), never partial ones; the root served less than the whole blob
//     (it is the last source, not the path).
//  3. With the provider still down, a get by blob ID at h2w1 works; it
//     restarts and reads the result again.
func caseProviderKill(e *Env) error {
	e.Step("start root, h1..h3 (sites s1..s3), one worker each")
	t, err := e.StartTree(TreeSpec{Heads: 3, WorkersPerHead: 1})
	if err != nil {
		return err
	}
	root, h1, h2, h3 := t.Root, t.Heads[0], t.Heads[1], t.Heads[2]
	w1, w2 := t.Workers[0], t.Workers[1]

	name := "pk/result"
	data := e.Blob(e.Size(8<<20, 48<<20))
	e.Step("put %q (%d bytes) at h1w1; h3 reads it", name, len(data))
	if err := e.MustPut(w1, name, data); err != nil {
		return err
	}
	if err := e.GetExact(h3, name, reconnectWithin, "h1 holds its worker's result"); err != nil {
		return err
	}
	ids := map[string]string{}
	for _, d := range []*Daemon{h1, h3} {
		st, _, err := d.Status(e.Ctx)
		if err != nil {
			return err
		}
		ids[d.Name] = st.PeerID
	}
	e.Step("wait until h2 finds h1 and h3 as providers")
	var id string
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := RunCLI(e.Ctx, e.Bin, 30*time.Second, nil, "--home", h2.Home, "providers", name, "--json")
		var res rpcbridge.Providers
		if r.Code == 0 && json.Unmarshal(r.Stdout, &res) == nil {
			has := func(p string) bool {
				return slices.ContainsFunc(res.Providers, func(x rpcbridge.Provider) bool { return x.Peer == p && x.Known })
			}
			if has(ids["h1"]) && has(ids["h3"]) {
				id = res.ID
				break
			}
		}
		if time.Now().After(deadline) {
			return violation("h2 does not find h1 and h3 as providers of %q within 30 s: exit %d, %s%s", name, r.Code, trim(string(r.Stdout)), trim(r.Stderr))
		}
		e.sleep(300 * time.Millisecond)
	}

	rst, _, err := root.Status(e.Ctx)
	if err != nil {
		return err
	}
	sent := func(d *Daemon) uint64 {
		st, _, err := d.Status(e.Ctx)
		if err != nil {
			return 0
		}
		return st.BytesOut["other"]
	}
	before := map[*Daemon]uint64{h1: sent(h1), h3: sent(h3)}
	busiest := func() *Daemon {
		if sent(h3)-before[h3] > sent(h1)-before[h1] {
			return h3
		}
		return h1
	}
	mode := e.RandGetMode()
	at := e.Rng.Int64N(int64(len(data)))
	e.Step("get %q at h2w1 (%s), SIGKILL the provider in use after %d bytes", name, mode, at)
	gk, err := e.getKillingPick(w2, busiest, name, mode, at)
	if err != nil {
		return fmt.Errorf("%w (get at h2w1, a provider killed)", err)
	}
	victim := gk.Victim
	e.Printf("provider %s killed at %d of %d bytes (%s): %s%s", victim.Name, at, len(data), mode, gk.Verdict, failText(gk.Result))
	if gk.Verdict != Exact {
		return violation("get at h2w1 with another provider (h3) and the root up must return the put bytes, got %s%s", gk.Verdict, failText(gk.Result))
	}
	rst2, _, err := root.Status(e.Ctx)
	if err != nil {
		return err
	}
	e.Printf("the root served %d bytes during the get (blob: %d)", rst2.BytesServed-rst.BytesServed, len(data))
	if rst2.BytesServed-rst.BytesServed >= uint64(len(data)) {
		return violation("the root served %d bytes of a %d-byte result that other sites' heads hold: the DHT's sources were not used", rst2.BytesServed-rst.BytesServed, len(data))
	}

	e.Step("%s down: get by blob ID %s at h2w1", victim.Name, id)
	if r := RunCLI(e.Ctx, e.Bin, time.Minute, nil, "--home", w2.Home, "get", id, "-o", e.Path("byid-")); r.Code != 0 {
		return violation("get by blob ID at h2w1 with %s down: exit %d: %s", victim.Name, r.Code, trim(r.Stderr))
	}
	e.Step("restart %s, get %q there", victim.Name, name)
	if err := e.Restart(victim, true, "SIGKILL while serving another site"); err != nil {
		return err
	}
	if err := e.GetExact(victim, name, reconnectWithin, "restarted"); err != nil {
		return err
	}
	e.ShowStatus(h2)
	e.Step("daemons alive, answering, no panics")
	return e.CheckDaemons(t.All...)
}
