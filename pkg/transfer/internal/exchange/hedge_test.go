package exchange

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/transfer/internal/peerrate"
)

// TestHedgeScripts replays testdata/hedge/*.txt (as pkg/tree replays
// testdata/keeper): each command line is applied to a hedger and its
// output must equal the "> " line that follows it. Times are offsets from
// the script's epoch. Commands:
//
//	new timeout=D [budget=S/B|off]
//	                         a fresh policy (Config.SiblingTimeout D) and rates;
//	                         its hedge budget earns S per copy delivered and
//	                         holds B (default HedgeShare/HedgeBurst)
//	follow F P at=T [size=N] [relay=R]
//	                         follow redirect F to sibling P for a chunk of N
//	                         bytes (its request sent at T, after Follow), made
//	                         by relay R (default h)
//	arrived F REQ at=T       a verified copy from REQ (sibling, hedge, direct)
//	failed F REQ at=T        REQ failed (NOT_FOUND, a declined hedge, an error)
//	tick F at=T              the clock reads T
//	redirected F P at=T      the relay answered F's plain request with a
//	                         REDIRECT to P (fetch 1.4.0)
//	busy F retry=D at=T      ... with BUSY, retry-after D
//	policy                   the moving average, the prior hedge delay, the counts
//	budget                   the hedge and give-up budgets' tokens
//
// and, for the rates the timers come from (peerrate.Table, as the
// redirect follower feeds it with every request it makes):
//
//	request R P at=T         request R sent to P
//	reply R size=N at=T      its reply, a chunk of N bytes, received whole
//	answer R at=T            answered at once (a REDIRECT, a declined hedge)
//	lose R                   ended without a measure (failed, cancelled)
//	chunks P n=K size=N took=D[,D2...] at=T [gap=G]
//	                         K requests to P one after the other, from T,
//	                         each replied to D after it was sent (D, D2, ...
//	                         in turn), G apart
//	rtts P n=K took=D at=T   K requests to P answered at once, D each
//	rates P [size=N] [relay=R]
//	                         P's and the site's (without P) figures, and the
//	                         timers a redirect by R (default h) to P would get now
//
// Sizes are bytes or KiB/MiB. An action prints as what to do ("give up on
// the sibling", "(timed out)", "(silent)", "hedge", "naming it slow",
// "direct", "deliver", "fail", or "wait") and the next tick wanted ("tick
// at T").
func TestHedgeScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/hedge/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runHedgeScript(t, f) })
	}
}

func runHedgeScript(t *testing.T, path string) {
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	epoch := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	var h *Hedger
	var rates *peerrate.Table
	fetches := map[string]*SiblingFetch{}
	requests := map[string]peerrate.Pending{}
	var got string
	pending := false // a command's output awaits its "> " line
	sc := bufio.NewScanner(fh)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
			continue
		case strings.HasPrefix(l, ">"):
			if !pending {
				t.Fatalf("%s:%d: expected output without a command", path, line)
			}
			if want := strings.TrimSpace(l[1:]); got != want {
				t.Errorf("%s:%d: got %q, want %q", path, line, got, want)
			}
			pending = false
			continue
		}
		if pending {
			t.Fatalf("%s:%d: the command before has no expected output", path, line)
		}
		cmd, pos, args := parseHedgeCmd(l)
		fail := func(format string, a ...any) {
			t.Helper()
			t.Fatalf("%s:%d: %s", path, line, fmt.Sprintf(format, a...))
		}
		if h == nil && cmd != "new" {
			fail("%s before new", cmd)
		}
		dur := func(k string) time.Duration {
			d, err := time.ParseDuration(args[k])
			if err != nil {
				fail("argument %s: %v", k, err)
			}
			return d
		}
		at := func() time.Time { return epoch.Add(dur("at")) }
		num := func(k string, def int) int {
			v, ok := args[k]
			if !ok {
				return def
			}
			n, err := parseSize(v)
			if err != nil {
				fail("argument %s: %v", k, err)
			}
			return n
		}
		relay := func() peer.ID {
			if r, ok := args["relay"]; ok {
				return peer.ID(r)
			}
			return "h"
		}
		ended := func() peerrate.Pending {
			r, ok := requests[pos[0]]
			if len(pos) != 1 || !ok {
				fail("%s: no such request %v", cmd, pos)
			}
			delete(requests, pos[0])
			return r
		}
		fetch := func() *SiblingFetch {
			if len(pos) == 0 || fetches[pos[0]] == nil {
				fail("%s: no such redirect %v", cmd, pos)
			}
			return fetches[pos[0]]
		}
		req := func() HedgeReq {
			if len(pos) == 2 {
				for r := range NumHedgeReqs {
					if r.String() == pos[1] {
						return r
					}
				}
			}
			fail("%s: want a request (sibling, hedge, direct): %v", cmd, pos)
			return 0
		}
		switch cmd {
		case "new":
			d, err := time.ParseDuration(args["timeout"])
			if err != nil {
				fail("argument timeout: %v", err)
			}
			rates = peerrate.New()
			h = NewHedger(d, rates)
			if v, ok := args["budget"]; ok { // budget=SHARE/BURST, or off
				h.SetBudget(parseBudget(v, fail))
			}
			fetches = map[string]*SiblingFetch{}
			requests = map[string]peerrate.Pending{}
			got = "hedge after " + h.delay().String()
		case "follow":
			if len(pos) != 2 || fetches[pos[0]] != nil {
				fail("follow F P with a new F: %v", pos)
			}
			var act HedgeAction
			fetches[pos[0]], act = h.Follow(at(), peer.ID(pos[1]), relay(), num("size", 0))
			got = formatHedgeAction(act, epoch)
		case "request":
			if len(pos) != 2 {
				fail("request R P: %v", pos)
			}
			if _, dup := requests[pos[0]]; dup {
				fail("request %s is outstanding already", pos[0])
			}
			requests[pos[0]] = rates.Sent(at(), peer.ID(pos[1]))
			got = rates.Peer(peer.ID(pos[1])).String()
		case "reply":
			rates.Replied(at(), ended(), num("size", -1))
			got = "ok"
		case "answer":
			rates.Answered(at(), ended())
			got = "ok"
		case "lose":
			rates.Lost(ended())
			got = "ok"
		case "chunks", "rtts":
			if len(pos) != 1 {
				fail("%s P: %v", cmd, pos)
			}
			p, t0, size := peer.ID(pos[0]), at(), num("size", 0)
			var took []time.Duration
			for _, v := range strings.Split(args["took"], ",") {
				d, err := time.ParseDuration(v)
				if err != nil {
					fail("argument took: %v", err)
				}
				took = append(took, d)
			}
			var gap time.Duration
			if _, ok := args["gap"]; ok {
				gap = dur("gap")
			}
			for i := range num("n", 1) {
				d := took[i%len(took)]
				r := rates.Sent(t0, p)
				if cmd == "rtts" {
					rates.Answered(t0.Add(d), r)
				} else {
					rates.Replied(t0.Add(d), r, size)
				}
				t0 = t0.Add(d + gap)
			}
			got = rates.Peer(p).String()
		case "rates":
			if len(pos) != 1 {
				fail("rates P: %v", pos)
			}
			p := peer.ID(pos[0])
			own, _ := rates.Expect(p, num("size", 0))
			tm := h.Timers(p, relay(), num("size", 0))
			got = fmt.Sprintf("%s; site: %s; from %s: hedge after %v, give up after %v",
				rates.Peer(p), rates.Site(p), own.From, tm.Hedge.Round(time.Millisecond), tm.GiveUp.Round(time.Millisecond))
		case "arrived":
			got = formatHedgeAction(h.Arrived(fetch(), at(), req()), epoch)
		case "failed":
			got = formatHedgeAction(h.Failed(fetch(), at(), req()), epoch)
		case "tick":
			got = formatHedgeAction(h.Tick(fetch(), at()), epoch)
		case "redirected":
			if len(pos) != 2 {
				fail("redirected F P: %v", pos)
			}
			got = formatHedgeAction(h.Redirected(fetch(), at(), peer.ID(pos[1])), epoch)
		case "busy":
			got = formatHedgeAction(h.Busy(fetch(), at(), dur("retry")), epoch)
		case "policy":
			got = formatHedger(h)
		case "budget":
			hb, gb := h.Budget()
			got = fmt.Sprintf("hedges %.2f, give-ups %.2f", hb, gb)
		default:
			fail("unknown command %q", cmd)
		}
		pending = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if pending {
		t.Fatalf("%s: the last command has no expected output", path)
	}
}

// parseBudget reads a budget "SHARE/BURST", or "off" (none).
func parseBudget(v string, fail func(string, ...any)) Budget {
	if v == "off" {
		return Budget{}
	}
	a, b, ok := strings.Cut(v, "/")
	share, err1 := strconv.ParseFloat(a, 64)
	burst, err2 := strconv.ParseFloat(b, 64)
	if !ok || err1 != nil || err2 != nil || share <= 0 || burst < 1 {
		fail("budget %q: want SHARE/BURST (share > 0, burst >= 1) or off", v)
	}
	return NewBudget(share, burst)
}

// parseSize reads a size in bytes, KiB or MiB.
func parseSize(v string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(v, "MiB"):
		v, mult = strings.TrimSuffix(v, "MiB"), 1<<20
	case strings.HasSuffix(v, "KiB"):
		v, mult = strings.TrimSuffix(v, "KiB"), 1<<10
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q: want a size (bytes, KiB, MiB)", v)
	}
	return n * mult, nil
}

// parseHedgeCmd splits "cmd a b k=v ..." into the command, its positional
// arguments and its named ones.
func parseHedgeCmd(l string) (string, []string, map[string]string) {
	fields := strings.Fields(l)
	var pos []string
	args := map[string]string{}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			args[k] = v
		} else {
			pos = append(pos, f)
		}
	}
	return fields[0], pos, args
}

func formatHedgeAction(a HedgeAction, epoch time.Time) string {
	var parts []string
	if a.GiveUp {
		s := "give up on the sibling"
		if a.TimedOut {
			s += " (timed out)"
		}
		if a.Silent {
			s += " (silent)"
		}
		parts = append(parts, s)
	}
	if a.Deferred {
		parts = append(parts, "hedge deferred (budget spent)")
	}
	if a.DirectDeferred {
		parts = append(parts, "give-up deferred (budget spent)")
	}
	if a.Hedge {
		s := "hedge"
		if a.Slow {
			s += " naming it slow"
		}
		parts = append(parts, s)
	}
	if a.Direct {
		parts = append(parts, "direct")
	}
	if a.Follow != "" {
		parts = append(parts, "follow "+string(a.Follow))
	}
	if a.Deliver {
		parts = append(parts, "deliver")
	}
	if a.Fail {
		parts = append(parts, "fail")
	}
	if len(parts) == 0 {
		parts = append(parts, "wait")
	}
	if !a.Wake.IsZero() {
		parts = append(parts, "tick at "+scriptTime(ceilMillis(a.Wake.Sub(epoch))))
	}
	return strings.Join(parts, ", ")
}

// ceilMillis rounds d up to a whole millisecond: a script that ticks at
// the time printed ticks at or after the time wanted.
func ceilMillis(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1).Truncate(time.Millisecond)
}

// scriptTime prints an offset from a script's epoch as a duration, in
// seconds from a minute on (64s, not 1m4s).
func scriptTime(d time.Duration) string {
	if d < time.Minute {
		return d.String()
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
}

func formatHedger(h *Hedger) string {
	s := fmt.Sprintf("avg %v, hedge after %v", h.avg, h.delay())
	var ps []string
	for p, st := range h.stats {
		ps = append(ps, fmt.Sprintf("%s asked %d hedged %d", string(p), st.asked, st.hedged))
	}
	slices.Sort(ps)
	if len(ps) > 0 {
		s += "; " + strings.Join(ps, "; ")
	}
	return s
}

// The per-sibling counts follow recent behaviour: halved at statWindow
// requests, all forgotten past maxStatPeers siblings.
func TestHedgerStatsBounded(t *testing.T) {
	h := NewHedger(10*time.Second, nil) // transfer.DefaultSiblingTimeout
	h.SetBudget(Budget{})               // every request hedged, none delivered
	now := time.Now()
	for i := range statWindow - 1 {
		f, _ := h.Follow(now, "s1", "h", 0)
		h.Tick(f, now.Add(h.delay())) // every request hedged
		if st := h.stats["s1"]; st.asked != i+1 || st.hedged != i+1 {
			t.Fatalf("after %d requests: %+v", i+1, *st)
		}
	}
	h.Follow(now, "s1", "h", 0)
	if st := h.stats["s1"]; st.asked != statWindow/2 || st.hedged != (statWindow-1)/2 {
		t.Fatalf("at %d requests the counts are not halved: %+v", statWindow, *st)
	}
	for i := range maxStatPeers - 1 {
		h.Follow(now, peer.ID(fmt.Sprint("p", i)), "h", 0)
	}
	if len(h.stats) != maxStatPeers {
		t.Fatalf("%d siblings counted, want %d", len(h.stats), maxStatPeers)
	}
	h.Follow(now, "one more", "h", 0)
	if len(h.stats) != 1 || h.stats["one more"] == nil {
		t.Fatalf("past %d siblings the counts are not started over: %d counted", maxStatPeers, len(h.stats))
	}
}
