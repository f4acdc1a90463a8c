package faults

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// Lying relays (fetch 1.4.0). A relay may answer a child's GET with a
// REDIRECT to a sibling, and a GET_DIRECT that carries the deflect flag
// with a REDIRECT or a BUSY, at most fetchwire.MaxDeflections (3) times
// per chunk (docs/protocol.md, "Deflected GET_DIRECTs"). A relay that
// breaks the bound, or redirects to peers that cannot serve, must cost its
// children a bounded time, not the get.

// lieToChildMarker starts the line a lying relay logs for each lie
// (pkg/transfer/internal/server's lieToChild), followed by lie=KIND
// child=PEER blob=CID chunk=N.
const lieToChildMarker = "fault injection: lying to a child"

// maxDeflections is fetchwire.MaxDeflections: a child follows at most that
// many REDIRECTs and BUSYs to its GET_DIRECTs for a chunk; the next one
// fails the relay's request, and the chunk goes to its other sources.
const maxDeflections = 3

// relayLiarGetWithin bounds each get of relay-busy and relay-redirect: a
// chunk costs its child a failed dial to the made-up peer (loopback:
// refused at once) and then, against a relay that answers BUSY, four
// GET_DIRECTs a BUSY's retry-after (1 s) apart, before it is asked of the
// fallback parent; the chunks of a blob of up to 12 chunks are asked at
// once (a window of 16). A child that followed the lies without a bound
// would never end.
const relayLiarGetWithin = 20 * time.Second

// caseRelayBusy: a root, a head h1 run from the fault-injection build with
// OMST_FAULT=busy-relay, and three workers (fallback: the root). The head
// serves its children no chunk: it REDIRECTs every plain GET to a made-up
// peer that is no member (a fresh peer ID at a closed port), declines
// every hedge, and answers every GET_DIRECT that allows it BUSY, forever.
// All three workers get a fresh 6..12 MiB blob at once: each reads exactly
// the put bytes within relayLiarGetWithin; no worker sent h1 more than
// maxDeflections+1 GET_DIRECTs for one request (it follows 3 BUSYs; the
// 4th fails the head's request and the chunk is asked of the root), and
// some request reached that bound (else the case proves nothing); the
// head's own get of the blob reads it exactly; daemons alive, no panic,
// descriptors back. Against a child without the bound the gets never
// end (checked: the case fails, the get past its time bound).
func caseRelayBusy(e *Env) error { return caseLyingRelay(e, FaultBusyRelay) }

// caseRelayRedirect: relay-busy with the head run with
// OMST_FAULT=redirect-relay: it REDIRECTs its workers' plain GETs in turn
// to a made-up non-member, to another of its workers (which may not hold
// the chunk), to itself and to the asker (the last two malformed: the
// child fails the head's request at once), and every GET_DIRECT that
// allows it to a made-up non-member, forever. What must hold is as in
// relay-busy, each kind of target told at least once.
func caseRelayRedirect(e *Env) error { return caseLyingRelay(e, FaultRedirectRelay) }

func caseLyingRelay(e *Env, fault string) error {
	e.Step("start root, h1 lying to its children (%s), 3 workers (fallback: root)", fault)
	t, err := e.StartTree(TreeSpec{Heads: 1, WorkersPerHead: 3, Fallback: true,
		WorkerArgs: []string{"--parent-retry", "2s"}, Faults: map[string]string{"h1": fault}})
	if err != nil {
		return err
	}
	if err := e.SetBaselines(t.All...); err != nil {
		return err
	}
	h1, ws := t.Heads[0], t.Workers
	name := "rl/blob"
	data := e.Blob(e.Size(6<<20, 12<<20))
	e.Step("put %q (%d bytes, %d chunks) at the root; get it at the 3 workers at once", name, len(data), chunksOf(len(data)))
	if err := e.MustPut(t.Root, name, data); err != nil {
		return err
	}
	gets := e.startGets(ws, name)
	verdicts, results, err := gets.judge(e, "h1 lying to its children: "+fault)
	if err != nil {
		return err
	}
	for i, w := range ws {
		if verdicts[i] != Exact {
			return violation("get %q at %s must return the put bytes from the fallback while h1 lies (%s): %s, exit %d: %s",
				name, w.Name, fault, verdicts[i], results[i].Code, trim(results[i].Stderr))
		}
		e.Printf("%s: done in %.1fs", w.Name, gets.Took(i).Seconds())
		if gets.Took(i) > relayLiarGetWithin {
			return violation("get %q at %s took %.1fs (more than %v) while h1 lied to its children (%s)",
				name, w.Name, gets.Took(i).Seconds(), relayLiarGetWithin, fault)
		}
	}

	lies, err := readRelayLies(h1)
	if err != nil {
		return err
	}
	kinds := map[string]int{}
	for _, l := range lies {
		kinds[l.kind]++
	}
	e.Printf("h1 told %d lies: %v", len(lies), kinds)
	byPeer := map[string]string{}
	for _, w := range ws {
		byPeer[w.PeerID()] = w.Name
	}
	// A child's requests for one chunk to the relay are one at a time: a
	// GET it redirected, then the GET_DIRECTs after it (each answered
	// BUSY or REDIRECT) until the child goes elsewhere; the next
	// redirect-get of the chunk is a new request.
	type key struct{ child, blob, chunk string }
	run, most := map[key]int{}, 0
	targets := map[string]int{}
	for _, l := range lies {
		k := key{l.child, l.blob, l.chunk}
		switch l.kind {
		case "redirect-get":
			run[k] = 0
			targets[l.target]++
		case "busy", "redirect-direct":
			run[k]++
			most = max(most, run[k])
			if run[k] > maxDeflections+1 {
				return violation("%s asked h1 %d GET_DIRECTs for chunk %s of %s after one redirected GET, each answered %s: a child follows at most %d REDIRECTs and BUSYs per request, and the next fails the relay's request (at most %d GET_DIRECTs)",
					byPeer[k.child], run[k], k.chunk, k.blob, l.kind, maxDeflections, maxDeflections+1)
			}
		}
	}
	e.Printf("most GET_DIRECTs deflected for one request: %d (bound %d); GETs redirected to %v", most, maxDeflections+1, targets)
	if kinds["redirect-get"] == 0 {
		return violation("h1 redirected no GET of a worker (%s): the case proves nothing", fault)
	}
	if most != maxDeflections+1 {
		return violation("no worker asked h1 again after its %d deflections of a request (most GET_DIRECTs for one: %d): the bound was never reached, the case proves nothing", maxDeflections, most)
	}
	if fault == FaultRedirectRelay {
		for _, tg := range []string{"non-member", "child", "self", "asker"} {
			if targets[tg] == 0 {
				return violation("h1 redirected no GET to %s (redirected: %v): the case proves too little", tg, targets)
			}
		}
	}
	var directsSent uint64
	for _, w := range ws {
		st, _, err := w.Status(e.Ctx)
		if err != nil {
			return err
		}
		directsSent += st.Directs
		e.Printf("%s: redirects taken %d, sibling failures %d, GET_DIRECTs %d, bytes in %v", w.Name, st.RedirectsTaken, st.SiblingFailures, st.Directs, st.BytesIn)
	}
	if directsSent == 0 {
		return violation("the workers sent h1 no GET_DIRECT: the case proves nothing")
	}
	e.Step("h1's own get of %q (it lies only to its children)", name)
	if err := e.GetExact(h1, name, 0, "the lying relay's own gets are honest"); err != nil {
		return err
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(t.All...)
}

// relayLie is one line a lying relay logged.
type relayLie struct{ kind, child, blob, chunk, target string }

var relayLieRe = regexp.MustCompile(`lie=(\S+) child=(\S+) blob=(\S+) chunk=(\d+) target=(\S*)`)

// readRelayLies reads the lies d logged (all its runs).
func readRelayLies(d *Daemon) ([]relayLie, error) {
	b, err := os.ReadFile(d.LogPath)
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", d.Name, err)
	}
	var out []relayLie
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, lieToChildMarker) {
			continue
		}
		m := relayLieRe.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("%s logged a lie the case cannot read: %q", d.Name, line)
		}
		out = append(out, relayLie{m[1], m[2], m[3], m[4], m[5]})
	}
	return out, nil
}
