// Package schedule holds a blob fetch's decisions as plain code: which
// chunks to request next and from which source, and after a failure
// whether to ask the same source again, switch to the next or give up. No
// sockets, no clocks, no goroutines: the engine (pkg/transfer: a blob's
// fetch, a relay's pull-through of one chunk) feeds it events and carries
// out what it returns.
package schedule

import (
	"slices"
	"time"
)

// FailKind classifies a failed chunk request.
type FailKind int

const (
	// FailUnreachable: the source could not be reached or the stream broke.
	FailUnreachable FailKind = iota
	// FailNotFound: the source answered that it cannot provide the chunk.
	FailNotFound
	// FailCorrupt: the source sent bytes that do not match the chunk hash.
	FailCorrupt
)

// Action is the scheduler's decision after a failed chunk request.
type Action int

const (
	// RetrySame asks the same source again.
	RetrySame Action = iota
	// SwitchSource asks the next source.
	SwitchSource
	// GiveUp fails the chunk (and with it the blob).
	GiveUp
)

func (a Action) String() string {
	switch a {
	case RetrySame:
		return "retry-same"
	case SwitchSource:
		return "switch-source"
	case GiveUp:
		return "give-up"
	}
	return "unknown"
}

// DefaultMaxTries bounds the requests made for one chunk.
const DefaultMaxTries = 4

// RetryDelay is the pause before a chunk's request number attempt (0: the
// first, no pause).
func RetryDelay(attempt int) time.Duration {
	return time.Duration(attempt) * 50 * time.Millisecond
}

// Request is one chunk request the edge should issue. Attempt counts the
// earlier failed requests for this chunk (0 on the first); the edge waits
// RetryDelay(Attempt) before it.
type Request struct {
	Chunk   int
	Source  int
	Attempt int
}

type chunkState uint8

const (
	chunkMissing chunkState = iota
	chunkInFlight
	chunkDone
	chunkFailed
)

// Schedule decides which chunks of one blob to request next and from which
// source. Sources are indices into a preference-ordered list (a
// Provider's, best first). It keeps at most Window chunks in flight, requests chunks in
// blob order, and never runs more than Ahead chunks past the reader's
// cursor (Deliver) when Ahead > 0. Schedule is not safe for concurrent use.
type Schedule struct {
	window, ahead, maxTries int
	nSources                int

	state     []chunkState
	tries     []uint8 // failed requests per chunk
	triesHere []uint8 // failed requests on the chunk's current source
	src       []int   // current source of each chunk
	srcFails  []int   // failures per source

	frontier  int   // chunks >= frontier have never been requested
	retry     []int // chunks below frontier waiting to be re-requested, sorted
	inflight  int
	done      int
	delivered int // chunks below this have been consumed by the reader
	failed    int // index of a chunk that gave up, or -1
}

// New returns a schedule for n chunks over nSources sources, with
// the chunks for which present[i] is true already done. window < 1 means 1.
func New(n, window, nSources int, present []bool) *Schedule {
	s := &Schedule{
		window:    max(window, 1),
		maxTries:  DefaultMaxTries,
		nSources:  nSources,
		state:     make([]chunkState, n),
		tries:     make([]uint8, n),
		triesHere: make([]uint8, n),
		src:       make([]int, n),
		srcFails:  make([]int, nSources),
		failed:    -1,
	}
	for i := range n {
		if i < len(present) && present[i] {
			s.state[i] = chunkDone
			s.done++
		}
	}
	return s
}

// SetAhead bounds how far past the reader's cursor chunks are requested; 0
// means no bound (a background fetch with no reader).
func (s *Schedule) SetAhead(k int) { s.ahead = k }

// SetMaxTries sets how many requests one chunk may take before GiveUp.
func (s *Schedule) SetMaxTries(k int) { s.maxTries = max(k, 1) }

// Next returns the requests to issue now and marks them in flight: retries
// first, then new chunks in blob order, until the window is full.
func (s *Schedule) Next() []Request {
	if s.failed >= 0 || s.nSources == 0 {
		return nil
	}
	var out []Request
	limit := len(s.state)
	if s.ahead > 0 {
		limit = min(limit, s.delivered+s.ahead)
	}
	for len(s.retry) > 0 && s.inflight < s.window && s.retry[0] < limit {
		i := s.retry[0]
		s.retry = s.retry[1:]
		out = append(out, s.start(i))
	}
	for s.inflight < s.window && s.frontier < limit {
		i := s.frontier
		s.frontier++
		if s.state[i] != chunkMissing {
			continue
		}
		s.src[i] = s.bestSource()
		out = append(out, s.start(i))
	}
	return out
}

func (s *Schedule) start(i int) Request {
	s.state[i] = chunkInFlight
	s.inflight++
	return Request{Chunk: i, Source: s.src[i], Attempt: int(s.tries[i])}
}

// bestSource is the most preferred source with the fewest failures.
func (s *Schedule) bestSource() int {
	best := 0
	for j := 1; j < s.nSources; j++ {
		if s.srcFails[j] < s.srcFails[best] {
			best = j
		}
	}
	return best
}

// Done records that chunk i arrived and was verified.
func (s *Schedule) Done(i int) {
	if s.state[i] == chunkInFlight {
		s.inflight--
	}
	if s.state[i] != chunkDone {
		s.state[i] = chunkDone
		s.done++
	}
}

// Failed records a failed request for chunk i and returns the decision:
// a corrupt chunk is asked from the same source once more, then from the
// next source; a source that is unreachable or lacks the chunk is switched
// away from at once when there is another; after maxTries requests the
// chunk gives up.
func (s *Schedule) Failed(i int, kind FailKind) Action {
	if s.state[i] != chunkInFlight {
		return GiveUp
	}
	s.inflight--
	s.srcFails[s.src[i]]++
	s.tries[i]++
	s.triesHere[i]++
	a := Decide(int(s.tries[i]), int(s.triesHere[i]), kind, s.nSources, s.maxTries)
	switch a {
	case GiveUp:
		s.state[i] = chunkFailed
		s.failed = i
		return a
	case SwitchSource:
		s.src[i] = (s.src[i] + 1) % s.nSources
		s.triesHere[i] = 0
	}
	s.state[i] = chunkMissing
	s.requeue(i)
	return a
}

// Decide is the retry rule on its own: tries failed requests for a chunk
// in total, triesHere of them on the current source.
func Decide(tries, triesHere int, kind FailKind, nSources, maxTries int) Action {
	if tries >= maxTries || nSources == 0 {
		return GiveUp
	}
	if kind == FailCorrupt && triesHere < 2 {
		return RetrySame
	}
	if nSources > 1 {
		return SwitchSource
	}
	return RetrySame
}

// AddSources appends k sources to the end of the preference order (found
// after the first ones failed). Every chunk that gave up is requested
// again, from the first new source, with its tries counted afresh; chunks
// in flight or waiting keep their state. New chunks go to the source with
// the fewest failures, so to the new ones once the old have failed.
func (s *Schedule) AddSources(k int) {
	if k <= 0 {
		return
	}
	first := s.nSources
	s.nSources += k
	s.srcFails = append(s.srcFails, make([]int, k)...)
	if s.failed < 0 {
		return
	}
	s.failed = -1
	for i, st := range s.state {
		if st != chunkFailed {
			continue
		}
		s.state[i] = chunkMissing
		s.tries[i], s.triesHere[i] = 0, 0
		s.src[i] = first
		s.requeue(i)
	}
}

// Sources returns the number of sources.
func (s *Schedule) Sources() int { return s.nSources }

// Lost records that chunk i, counted done (present locally), vanished or
// failed verification in the store: it is requested again.
func (s *Schedule) Lost(i int) {
	if s.state[i] != chunkDone {
		return
	}
	s.state[i] = chunkMissing
	s.done--
	s.requeue(i)
}

func (s *Schedule) requeue(i int) {
	if i >= s.frontier {
		return // Next reaches it in order
	}
	if j, found := slices.BinarySearch(s.retry, i); !found {
		s.retry = slices.Insert(s.retry, j, i)
	}
}

// Deliver records that the reader consumed every chunk below i+1.
func (s *Schedule) Deliver(i int) { s.delivered = max(s.delivered, i+1) }

// IsDone reports whether chunk i is done.
func (s *Schedule) IsDone(i int) bool { return s.state[i] == chunkDone }

// NumDone returns the number of chunks done.
func (s *Schedule) NumDone() int { return s.done }

// Complete reports whether every chunk is done.
func (s *Schedule) Complete() bool { return s.done == len(s.state) }

// GaveUp returns the chunk that gave up, or -1.
func (s *Schedule) GaveUp() int { return s.failed }

// InFlight returns the number of requests outstanding.
func (s *Schedule) InFlight() int { return s.inflight }

// SourceFailures returns the failures counted against source j.
func (s *Schedule) SourceFailures(j int) int { return s.srcFails[j] }
