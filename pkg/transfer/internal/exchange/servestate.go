package exchange

import (
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/transfer/internal/peerrate"
	"github.com/omst-project/omst/pkg/transfer/internal/source"
)

// This file holds the server's decisions as one state machine, in the shape
// of etcd-io/raft's Step: events in (a peer opened or closed a fetch
// stream, a peer asks for a chunk, a chunk was sent, the sibling a child
// was to be sent to is gone, a child left, time passed), a decision out
// (serve the stream or refuse it; serve the chunk here, redirect the asker
// to a sibling, or decline a hedge). The clock is passed in with each
// event; there are no goroutines, locks or clock reads inside. The
// engine's server holds one mutex around Step, feeds it what happened and acts
// on what it decides: it reads the store, pulls through, writes replies
// and counts. The in-site distribution itself is the Distributor
// (distribute.go), which ServeState drives.

// ServeConfig configures a ServeState.
type ServeConfig struct {
	// SiblingExchange: a connected child's chunk requests are answered by
	// the Distributor (served here or redirected to a sibling of its
	// group), and hedges are declined for a grace after the chunk was
	// sent into the site (HedgeGraceFor; Config.SiblingExchange).
	SiblingExchange bool
	// Distribution tunes the Distributor (zero: the defaults).
	Distribution DistributorConfig
	// MaxUploadStreams bounds the fetch streams served at once to peers
	// that are neither children nor parents (KindOther); 0: no bound
	// (Config.MaxUploadStreams).
	MaxUploadStreams int
	// HedgeBacklog is the most reply bytes the server may have on their
	// way to its children (ServeEvent.Backlog) for it to serve a hedge
	// past its grace (default DefaultHedgeBacklog; < 0: no bound).
	HedgeBacklog int64
	// CopyShare > 0 budgets the second copies (hedges served, plain
	// GET_DIRECTs) the server sends into its site: CopyShare per chunk it
	// sent there first (Budget), at most CopyBurst (0: the package's
	// CopyBurst) kept. A hedge is declined (Busy) while the budget is
	// spent; a GET_DIRECT, which is not refused, spends it whatever is
	// there. Off by default (0): measured, a relay's second copies in a
	// hedge storm were GET_DIRECTs, which it cannot refuse without a BUSY
	// reply in the protocol, not hedges (docs/benchmarks.md, "Hedge
	// storms"), and a budget of hedges starves a site whose one slow
	// sibling holds every chunk (TestSlowSiblingHedged).
	CopyShare, CopyBurst float64
}

// DefaultHedgeBacklog is ServeConfig.HedgeBacklog's default: one chunk
// of the default size. A hedge is a second copy of a chunk into the site,
// for a child whose sibling is late; served while the relay's port has
// more than that to write, second copies would share the port with the
// first copies every sibling waits on, and late chunks make more late
// chunks (the hedge storms of docs/benchmarks.md). So a relay serves
// hedges only from a port that has about nothing else to send.
const DefaultHedgeBacklog = 1 << 20

// Backlog is what the server has to write to its connected children when
// a child's request is decided (ServeEvent.Backlog): Bytes taken up by its
// reply writers and not yet handed to the children's streams, and Sent,
// the chunk bytes it has handed to them so far (a count that only grows:
// with Bytes, how fast its port drains, peerrate.Drain). Known: the server
// measures it; the zero Backlog (not measured) gates nothing.
type Backlog struct {
	Bytes, Sent int64
	Known       bool
}

// Bounds of a BUSY's retry-after (fetch 1.4.0): the time the relay's
// backlog above HedgeBacklog takes to drain at the rate measured, within
// [minRetryAfter, maxRetryAfter]. The floor is timer and scheduling
// noise; the ceiling keeps a child's wait for a chunk bounded by
// MaxDeflect ceilings (2 x 2 s by default) however slow the port, well
// within a request's timeout.
const (
	minRetryAfter = 50 * time.Millisecond
	maxRetryAfter = 2 * time.Second
)

// ServeEventKind says what happened.
type ServeEventKind uint8

const (
	// ServeStreamOpened: Peer, which is Rel to this node, opened a fetch
	// stream. ActServe or ActRefuse.
	ServeStreamOpened ServeEventKind = iota + 1
	// ServeStreamClosed: a stream of Peer (Rel) that was served ended
	// (one that ServeStreamOpened answered with ActServe). ActNone.
	ServeStreamClosed
	// ServeAsk: Ask.Child asks for a chunk (Ask). ActServe, ActRedirect
	// (to Target) or ActDecline (a hedge, for Wait more). Asks also tick.
	ServeAsk
	// ServeSent: chunk Ask.Index of Ask.Blob is on its way from here to
	// its asker (the first time counts for the hedge grace, and earns the
	// copy budget its share); Second: it answers a connected child's hedge
	// or plain GET_DIRECT, a second copy into the site (it spends the
	// copy budget). ActNone.
	ServeSent
	// ServeTargetGone: the Target of the redirect decided for Ask (Peer)
	// is no connected child any more: it is forgotten as ServePeerLeft
	// forgets, and Ask is decided again. ActServe or ActRedirect.
	ServeTargetGone
	// ServePeerLeft: Peer is no connected child any more (its tree
	// session ended): it is forgotten as a holder of anything, so that no
	// child is sent to it for what it held. ActNone.
	ServePeerLeft
	// ServeTick: time passed; blobs idle for DistributorConfig.Idle are
	// forgotten (at most once per sweepEvery). ActNone.
	ServeTick
	// ServeDelivered: the whole of chunk Ask.Index of Ask.Blob was written
	// to Ask.Child, a connected child of Ask.Group (Ask.Grouped), and its
	// stream took the last byte: the child holds it complete, a target
	// for deflected GET_DIRECTs (Distributor.NoteComplete). ActNone.
	ServeDelivered
)

// ServeEvent is one thing that happened to the server, for Step.
type ServeEvent struct {
	Kind ServeEventKind
	// Peer: whose stream (ServeStreamOpened, ServeStreamClosed), the
	// target gone (ServeTargetGone), the child that left (ServePeerLeft).
	Peer peer.ID
	// Rel is what Peer is to this node (ServeStreamOpened,
	// ServeStreamClosed).
	Rel source.Kind
	// Ask is the request (ServeAsk, ServeTargetGone), or the chunk sent
	// (ServeSent: Blob and Index).
	Ask Ask
	// Pace is what the server measured of how fast chunks of Ask.Blob
	// move through its site (ServeAsk of a hedge, or of an ask that names
	// a sibling slow): the hedge grace and the slow backoff derive from it
	// (HedgeGraceFor, SlowBackoffFor). Zero: not measured; the constants
	// HedgeGrace and SlowBackoff apply.
	Pace Pace
	// Backlog is what the server has to write to its children (ServeAsk
	// of a connected child): past its grace, a hedge is served only while
	// Backlog.Bytes is at most ServeConfig.HedgeBacklog, and above it a
	// deflectable GET_DIRECT with no complete holder to go to is answered
	// BUSY. Every ask with a Backlog known feeds the drain rate.
	Backlog Backlog
	// Second (ServeSent): the chunk sent is a second copy into the site.
	Second bool
}

// ServeAction is what the server does.
type ServeAction uint8

const (
	// ActNone: nothing to do (the event asked nothing).
	ActNone ServeAction = iota
	// ActServe: serve the stream; or serve the chunk from here (from the
	// store, else, unless it is a hedge, pulled through from this node's
	// sources).
	ActServe
	// ActRedirect: answer with a REDIRECT to the sibling Target.
	ActRedirect
	// ActDecline: answer the hedge NOT_FOUND: the chunk was sent into the
	// site less than its grace ago (HedgeGraceFor; Wait more to go), or
	// the server's port is busy with other replies (Busy).
	ActDecline
	// ActRefuse: refuse (reset) the stream: MaxUploadStreams are served.
	ActRefuse
	// ActBusy: answer the deflectable GET_DIRECT BUSY, to be asked again
	// after Wait (fetch 1.4.0).
	ActBusy
)

// ServeDecision is Step's answer.
type ServeDecision struct {
	Action ServeAction
	Target peer.ID       // ActRedirect: the sibling to send the asker to
	Wait   time.Duration // ActDecline: how much longer hedges for the chunk are declined; ActBusy: the retry-after
	Busy   bool          // ActDecline: declined for the backlog to the children (or Budget), not the grace
	Budget bool          // ActDecline (with Busy): declined for the copy budget
}

func (d ServeDecision) String() string {
	switch d.Action {
	case ActNone:
		return "ok"
	case ActServe:
		return "serve"
	case ActRedirect:
		return "redirect " + string(d.Target)
	case ActDecline:
		if d.Budget {
			return "decline budget"
		}
		if d.Busy {
			return "decline busy"
		}
		return "decline " + d.Wait.String()
	case ActRefuse:
		return "refuse"
	case ActBusy:
		return "busy " + d.Wait.String()
	}
	return fmt.Sprintf("action(%d)", d.Action)
}

// ServeState is the server's decision state: the fetch streams it serves
// to other peers, and with sibling exchange the in-site distribution
// (Distributor). Not safe for concurrent use: the server serialises Step.
type ServeState struct {
	dist      *Distributor // nil without sibling exchange
	maxOther  int          // MaxUploadStreams
	other     int          // fetch streams served to peers of KindOther
	backlog   int64        // HedgeBacklog (< 0: no bound)
	copies    Budget       // second copies into the site (CopyShare)
	drain     peerrate.Drain
	lastSweep time.Time
}

// sweepEvery is how often the distributor forgets idle blobs.
const sweepEvery = time.Minute

// NewServeState returns a ServeState; zero fields of cfg take defaults.
func NewServeState(cfg ServeConfig) *ServeState {
	s := &ServeState{maxOther: max(cfg.MaxUploadStreams, 0), backlog: cfg.HedgeBacklog}
	if s.backlog == 0 {
		s.backlog = DefaultHedgeBacklog
	}
	if cfg.SiblingExchange {
		s.dist = NewDistributor(cfg.Distribution)
	}
	share, burst := cfg.CopyShare, cfg.CopyBurst
	if burst <= 0 {
		burst = CopyBurst
	}
	if share > 0 {
		s.copies = NewBudget(share, burst)
	}
	return s
}

// Step applies ev, which happened at now, and returns what to do.
func (s *ServeState) Step(now time.Time, ev ServeEvent) ServeDecision {
	switch ev.Kind {
	case ServeStreamOpened:
		if ev.Rel == source.KindOther && s.maxOther > 0 {
			if s.other >= s.maxOther {
				return ServeDecision{Action: ActRefuse}
			}
			s.other++
		}
		return ServeDecision{Action: ActServe}
	case ServeStreamClosed:
		if ev.Rel == source.KindOther && s.maxOther > 0 && s.other > 0 {
			s.other--
		}
	case ServeAsk:
		return s.ask(now, ev.Ask, ev.Pace, ev.Backlog)
	case ServeSent:
		if s.dist != nil && s.dist.NoteSent(now, ev.Ask.Blob, ev.Ask.Index) {
			s.copies.Earn(1) // a first copy into the site
		}
		if ev.Second {
			s.copies.Spend()
		}
	case ServeTargetGone:
		if s.dist == nil {
			return ServeDecision{Action: ActServe}
		}
		return redirectOrServe(s.dist.Redecide(now, ev.Ask, ev.Peer))
	case ServePeerLeft:
		if s.dist != nil {
			s.dist.DropPeer(ev.Peer)
		}
	case ServeDelivered:
		if s.dist != nil && ev.Ask.Grouped {
			s.dist.NoteComplete(now, ev.Ask.Blob, ev.Ask.Index, ev.Ask.Child, ev.Ask.Group)
		}
	case ServeTick:
		s.tick(now)
	}
	return ServeDecision{}
}

// ask decides a chunk request a, with the site's pace as measured and
// what the server has to write to its children.
func (s *ServeState) ask(now time.Time, a Ask, pace Pace, bl Backlog) ServeDecision {
	if s.dist == nil {
		return ServeDecision{Action: ActServe}
	}
	if bl.Known {
		s.drain.Note(now, bl.Sent, bl.Bytes)
	}
	if a.Direct && a.Deflect && a.Grouped && !a.Hedge {
		// A GET_DIRECT that takes a REDIRECT or BUSY (fetch 1.4.0):
		// while the port has more than HedgeBacklog to write, to a
		// sibling that holds the chunk complete, else asked again once
		// the backlog has drained; at most MaxDeflect times per child
		// and chunk, then served; served at once while the port is not
		// busy.
		s.tick(now)
		busy := bl.Known && s.backlog >= 0 && bl.Bytes > s.backlog
		retry, canWait := s.busyFor(bl)
		switch df := s.dist.Deflect(now, a, busy, canWait); {
		case df.Target != "":
			return ServeDecision{Action: ActRedirect, Target: df.Target}
		case df.Busy:
			return ServeDecision{Action: ActBusy, Wait: retry}
		}
		a.Failed = "" // counted by Deflect
		return redirectOrServe(s.dist.Decide(now, a, pace))
	}
	if a.Hedge {
		// A hedge for a chunk just sent into the site is declined (and
		// names no sibling slow): the sibling has it or gets it soon.
		// Serving hedges that name their sibling slow was measured worse:
		// under load most siblings get named, and the relay's port again
		// carries most copies (docs/protocol.md). Otherwise the chunk
		// comes from here if it is here, or not at all; no holder changes.
		if wait := s.dist.HedgeWait(now, a.Blob, a.Index, a.Child, pace); wait > 0 {
			return ServeDecision{Action: ActDecline, Wait: wait}
		}
		// Past the grace, a second copy goes into the site only from a
		// port with about nothing else to write: the first copies, which
		// plain requests get whatever the backlog, are not slowed by
		// copies for late children (nor named slow by them). The child
		// hedges again later.
		if bl.Known && s.backlog >= 0 && bl.Bytes > s.backlog {
			return ServeDecision{Action: ActDecline, Busy: true}
		}
		// And only while the copy budget has a token: second copies
		// stay a share of the first however late the siblings are
		// (budget.go); the token is spent when the copy is sent
		// (ServeSent with Second).
		if a.Grouped && !s.copies.Has() {
			return ServeDecision{Action: ActDecline, Busy: true, Budget: true}
		}
		if a.Grouped && a.Slow != "" {
			s.dist.NoteSlow(now, a.Blob, a.Index, a.Slow, pace)
		}
		return ServeDecision{Action: ActServe}
	}
	if !a.Grouped {
		return ServeDecision{Action: ActServe}
	}
	s.tick(now)
	return redirectOrServe(s.dist.Decide(now, a, pace))
}

// busyFor reports whether a deflectable GET_DIRECT finds the port busy
// (bl above HedgeBacklog, and a drain rate measured to say when to ask
// again), and the retry-after: the time the bytes above the bound take to
// leave at that rate, within [minRetryAfter, maxRetryAfter].
func (s *ServeState) busyFor(bl Backlog) (time.Duration, bool) {
	if !bl.Known || s.backlog < 0 || bl.Bytes <= s.backlog {
		return 0, false
	}
	d, ok := s.drain.Time(bl.Bytes - s.backlog)
	if !ok {
		return 0, false
	}
	return min(max(d, minRetryAfter), maxRetryAfter), true
}

func redirectOrServe(t peer.ID) ServeDecision {
	if t == "" {
		return ServeDecision{Action: ActServe}
	}
	return ServeDecision{Action: ActRedirect, Target: t}
}

// tick forgets idle blobs, at most once per sweepEvery.
func (s *ServeState) tick(now time.Time) {
	if s.dist != nil && now.Sub(s.lastSweep) > sweepEvery {
		s.dist.Sweep(now)
		s.lastSweep = now
	}
}
