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
)

// TestHedgeScripts replays testdata/hedge/*.txt (as pkg/tree replays
// testdata/keeper): each command line is applied to a hedger and its
// output must equal the "> " line that follows it. Times are offsets from
// the script's epoch. Commands:
//
//	new timeout=D            a fresh policy (Config.SiblingTimeout D)
//	follow F P at=T          follow redirect F to sibling P (its request sent at T)
//	arrived F REQ at=T       a verified copy from REQ (sibling, hedge, direct)
//	failed F REQ at=T        REQ failed (NOT_FOUND, a declined hedge, an error)
//	tick F at=T              the clock reads T
//	policy                   the moving average, the hedge delay, the counts
//
// An action prints as what to do ("give up on the sibling", "(timed
// out)", "(silent)", "hedge", "naming it slow", "direct", "deliver", "fail", or
// "wait") and the next tick wanted ("tick at T").
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
	fetches := map[string]*SiblingFetch{}
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
		at := func() time.Time {
			d, err := time.ParseDuration(args["at"])
			if err != nil {
				fail("argument at: %v", err)
			}
			return epoch.Add(d)
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
			h = NewHedger(d)
			fetches = map[string]*SiblingFetch{}
			got = "hedge after " + h.delay().String()
		case "follow":
			if len(pos) != 2 || fetches[pos[0]] != nil {
				fail("follow F P with a new F: %v", pos)
			}
			var act HedgeAction
			fetches[pos[0]], act = h.Follow(at(), peer.ID(pos[1]))
			got = formatHedgeAction(act, epoch)
		case "arrived":
			got = formatHedgeAction(h.Arrived(fetch(), at(), req()), epoch)
		case "failed":
			got = formatHedgeAction(h.Failed(fetch(), at(), req()), epoch)
		case "tick":
			got = formatHedgeAction(h.Tick(fetch(), at()), epoch)
		case "policy":
			got = formatHedger(h)
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
		parts = append(parts, "tick at "+scriptTime(a.Wake.Sub(epoch)))
	}
	return strings.Join(parts, ", ")
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
	h := NewHedger(10 * time.Second) // transfer.DefaultSiblingTimeout
	now := time.Now()
	for i := range statWindow - 1 {
		f, _ := h.Follow(now, "s1")
		h.Tick(f, now.Add(h.delay())) // every request hedged
		if st := h.stats["s1"]; st.asked != i+1 || st.hedged != i+1 {
			t.Fatalf("after %d requests: %+v", i+1, *st)
		}
	}
	h.Follow(now, "s1")
	if st := h.stats["s1"]; st.asked != statWindow/2 || st.hedged != (statWindow-1)/2 {
		t.Fatalf("at %d requests the counts are not halved: %+v", statWindow, *st)
	}
	for i := range maxStatPeers - 1 {
		h.Follow(now, peer.ID(fmt.Sprint("p", i)))
	}
	if len(h.stats) != maxStatPeers {
		t.Fatalf("%d siblings counted, want %d", len(h.stats), maxStatPeers)
	}
	h.Follow(now, "one more")
	if len(h.stats) != 1 || h.stats["one more"] == nil {
		t.Fatalf("past %d siblings the counts are not started over: %d counted", maxStatPeers, len(h.stats))
	}
}
