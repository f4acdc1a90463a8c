package exchange

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/source"
)

// TestServeScripts replays testdata/serve/*.txt (as pkg/tree replays
// testdata/keeper): each command line is applied to a ServeState and its
// output must equal the "> " line that follows it. Times (at=D) are
// offsets from the script's epoch; the clock stays where the last at= put
// it and never goes back. Blobs are named by a word (blob=a), peers by
// theirs (w1). Commands:
//
//	new [direct=N fanout=N max-failures=N idle=D max-deflect=N] [streams=N]
//	    [no-exchange] [hedge-backlog=N] [copy-share=F copy-burst=F]
//	                                  a fresh state (MaxUploadStreams N,
//	                                  HedgeBacklog N bytes, CopyShare F,
//	                                  CopyBurst F)
//	open P rel=R                      P (parent, child, sibling, other) opens a fetch stream
//	close P rel=R                     a stream of P that was served ends
//	ask P blob=B chunk=I [group=G] [direct [deflect]] [hedge] [failed=Q]
//	    [slow=Q] [at=D] [hop=D [hopdev=D]] [backlog=N [drained=N]]
//	                                  P asks for a chunk; group=G: P is a
//	                                  connected child of site G (else a
//	                                  stranger); hop: the site's pace as the
//	                                  server measured it (ServeEvent.Pace);
//	                                  backlog: the bytes it has to write to
//	                                  its children (ServeEvent.Backlog),
//	                                  drained: the bytes it handed them so
//	                                  far (Backlog.Sent); deflect: a 1.4.0
//	                                  GET_DIRECT that takes REDIRECT or BUSY
//	delivered P blob=B chunk=I group=G [at=D]
//	                                  the whole chunk was written to P
//	gone Q P blob=B chunk=I group=G [direct] [at=D]
//	                                  Q, the target decided for P's ask, is gone
//	sent blob=B chunk=I [second] [at=D]
//	                                  the chunk is on its way from here;
//	                                  second: a hedge's or GET_DIRECT's copy
//	budget                            the copy budget's tokens
//	left P                            P's tree session ended
//	tick [at=D]                       time passed
//	holders blob=B chunk=I            what the distribution knows of a chunk
//	                                  (a holder with the chunk complete
//	                                  marked "complete")
//	depths blob=B chunk=I             each holder's hops from the relay
//
// A decision prints as "serve", "redirect Q", "busy D" (ask again in D),
// "decline D" (hedges declined
// for D more), "decline busy" (for the backlog), "decline budget" (for the
// copy budget), "refuse", or "ok" for
// events that ask nothing.
func TestServeScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/serve/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runServeScript(t, f) })
	}
}

func runServeScript(t *testing.T, path string) {
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	epoch := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	now := epoch
	blobs := map[string]cid.Cid{}
	blobOf := func(name string) cid.Cid {
		if id, ok := blobs[name]; ok {
			return id
		}
		m := &blob.Manifest{Size: 1, ChunkSize: blob.MinChunkSize, Chunks: []blob.Hash{{byte(len(blobs) + 1)}}}
		blobs[name] = m.CID()
		return blobs[name]
	}
	var s *ServeState
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
		where := fmt.Sprintf("%s:%d", path, line)
		cmd, a := parseServeCmd(l)
		if s == nil && cmd != "new" {
			t.Fatalf("%s: %s before new", where, cmd)
		}
		if at, ok := a.kv["at"]; ok {
			d, err := time.ParseDuration(at)
			if err != nil || epoch.Add(d).Before(now) {
				t.Fatalf("%s: at=%s: not a time at or after the last (%v)", where, at, err)
			}
			now = epoch.Add(d)
		}
		ask := func() Ask {
			g, grouped := a.kv["group"]
			q := Ask{Blob: blobOf(a.kv["blob"]), Index: uint32(a.int(t, where, "chunk", 0)), Child: a.peer(t, where, 0),
				Grouped: grouped, Group: g, Direct: a.flags["direct"], Hedge: a.flags["hedge"], Deflect: a.flags["deflect"],
				Failed: peer.ID(a.kv["failed"]), Slow: peer.ID(a.kv["slow"])}
			return q
		}
		var ev ServeEvent
		switch cmd {
		case "new":
			s = NewServeState(ServeConfig{
				SiblingExchange: !a.flags["no-exchange"],
				Distribution: DistributorConfig{
					Direct: a.int(t, where, "direct", 0), Fanout: a.int(t, where, "fanout", 0),
					MaxFailures: a.int(t, where, "max-failures", 0), Idle: a.dur(t, where, "idle"),
					MaxDeflect: a.int(t, where, "max-deflect", 0),
				},
				MaxUploadStreams: a.int(t, where, "streams", 0),
				HedgeBacklog:     int64(a.int(t, where, "hedge-backlog", 0)),
				CopyShare:        a.float(t, where, "copy-share"),
				CopyBurst:        a.float(t, where, "copy-burst"),
			})
			got = "ok"
			pending = true
			continue
		case "budget":
			got = fmt.Sprintf("%.2f", s.copies.Tokens())
			pending = true
			continue
		case "holders":
			got = formatHolders(s, now, epoch, blobOf(a.kv["blob"]), uint32(a.int(t, where, "chunk", 0)))
			pending = true
			continue
		case "depths":
			got = formatDepths(s, blobOf(a.kv["blob"]), uint32(a.int(t, where, "chunk", 0)))
			pending = true
			continue
		case "open", "close":
			ev = ServeEvent{Kind: ServeStreamOpened, Peer: a.peer(t, where, 0), Rel: a.rel(t, where)}
			if cmd == "close" {
				ev.Kind = ServeStreamClosed
			}
		case "ask":
			ev = ServeEvent{Kind: ServeAsk, Ask: ask(), Pace: Pace{Hop: a.dur(t, where, "hop"), Dev: a.dur(t, where, "hopdev")}}
			if _, ok := a.kv["backlog"]; ok {
				ev.Backlog = Backlog{Bytes: int64(a.int(t, where, "backlog", 0)), Sent: int64(a.int(t, where, "drained", 0)), Known: true}
			}
		case "delivered":
			ev = ServeEvent{Kind: ServeDelivered, Ask: ask()}
		case "gone":
			gone := a.peer(t, where, 0)
			a.pos = a.pos[1:]
			ev = ServeEvent{Kind: ServeTargetGone, Peer: gone, Ask: ask()}
		case "sent":
			ev = ServeEvent{Kind: ServeSent, Ask: Ask{Blob: blobOf(a.kv["blob"]), Index: uint32(a.int(t, where, "chunk", 0))}, Second: a.flags["second"]}
		case "left":
			ev = ServeEvent{Kind: ServePeerLeft, Peer: a.peer(t, where, 0)}
		case "tick":
			ev = ServeEvent{Kind: ServeTick}
		default:
			t.Fatalf("%s: unknown command %q", where, cmd)
		}
		got = s.Step(now, ev).String()
		pending = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if pending {
		t.Fatalf("%s: the last command has no expected output", path)
	}
}

// formatHolders shows what the distribution knows at now of chunk index
// of id: the copies the relay sent itself, and each holder in the order it
// was assigned with the siblings sent to it for this chunk and for the
// blob, its failures, and until when (since epoch) it is slow.
func formatHolders(s *ServeState, now, epoch time.Time, id cid.Cid, index uint32) string {
	if s.dist == nil {
		return "no exchange"
	}
	b := s.dist.blobs[id]
	if b == nil || b.chunks[index] == nil {
		return "unknown"
	}
	c := b.chunks[index]
	var sb strings.Builder
	fmt.Fprintf(&sb, "relay sent %d", c.direct)
	for _, h := range c.holders {
		fmt.Fprintf(&sb, "; %s fed %d/%d", string(h.peer), h.fed, b.fed[h.peer])
		if h.complete {
			sb.WriteString(" complete")
		}
		if n := b.failures[h.peer]; n > 0 {
			fmt.Fprintf(&sb, " failed %d", n)
		}
		if until := b.slow[h.peer]; now.Before(until) {
			fmt.Fprintf(&sb, " slow until %v", until.Sub(epoch))
		}
	}
	return sb.String()
}

// formatDepths shows each holder of chunk index of id with its hops from
// the relay in the chunk's fanout tree.
func formatDepths(s *ServeState, id cid.Cid, index uint32) string {
	if s.dist == nil || s.dist.blobs[id] == nil || s.dist.blobs[id].chunks[index] == nil {
		return "unknown"
	}
	var parts []string
	for _, h := range s.dist.blobs[id].chunks[index].holders {
		parts = append(parts, fmt.Sprintf("%s %d", string(h.peer), h.depth))
	}
	return strings.Join(parts, "; ")
}

// serveArgs are a command's arguments: k=v pairs, flags (a bare word the
// scripts know as one), and the other bare words in order.
type serveArgs struct {
	kv    map[string]string
	flags map[string]bool
	pos   []string
}

var serveFlags = map[string]bool{"direct": true, "hedge": true, "no-exchange": true, "second": true, "deflect": true}

func parseServeCmd(l string) (string, serveArgs) {
	fields := strings.Fields(l)
	a := serveArgs{kv: map[string]string{}, flags: map[string]bool{}}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			a.kv[k] = v
		} else if serveFlags[f] {
			a.flags[f] = true
		} else {
			a.pos = append(a.pos, f)
		}
	}
	return fields[0], a
}

func (a serveArgs) peer(t *testing.T, where string, i int) peer.ID {
	if i >= len(a.pos) {
		t.Fatalf("%s: a peer is missing", where)
	}
	return peer.ID(a.pos[i])
}

func (a serveArgs) int(t *testing.T, where, k string, def int) int {
	v, ok := a.kv[k]
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: argument %s: %v", where, k, err)
	}
	return n
}

func (a serveArgs) float(t *testing.T, where, k string) float64 {
	v, ok := a.kv[k]
	if !ok {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s: argument %s: %v", where, k, err)
	}
	return f
}

func (a serveArgs) dur(t *testing.T, where, k string) time.Duration {
	v, ok := a.kv[k]
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: argument %s: %v", where, k, err)
	}
	return d
}

func (a serveArgs) rel(t *testing.T, where string) source.Kind {
	for k := range source.Kind(source.NumKinds) {
		if k.String() == a.kv["rel"] {
			return k
		}
	}
	t.Fatalf("%s: rel=%q: want parent, child, sibling or other", where, a.kv["rel"])
	return 0
}
