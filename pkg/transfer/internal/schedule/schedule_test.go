package schedule

import (
	"slices"
	"testing"
)

func chunks(reqs []Request) []int {
	var out []int
	for _, r := range reqs {
		out = append(out, r.Chunk)
	}
	return out
}

func TestScheduleWindowAndOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n, win  int
		present []bool
		ahead   int
		want    []int
	}{
		{"fills the window in order", 10, 3, nil, 0, []int{0, 1, 2}},
		{"skips present chunks", 6, 3, []bool{true, false, true, false, false, true}, 0, []int{1, 3, 4}},
		{"window larger than blob", 2, 16, nil, 0, []int{0, 1}},
		{"ahead bounds the run", 10, 8, nil, 2, []int{0, 1}},
		{"nothing missing", 3, 4, []bool{true, true, true}, 0, nil},
		{"zero window means one", 5, 0, nil, 0, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(tc.n, tc.win, 2, tc.present)
			s.SetAhead(tc.ahead)
			if got := chunks(s.Next()); !slices.Equal(got, tc.want) {
				t.Fatalf("Next = %v, want %v", got, tc.want)
			}
			if got := s.Next(); len(got) != 0 {
				t.Fatalf("second Next = %v, want nothing (window full)", got)
			}
		})
	}
}

func TestScheduleProgress(t *testing.T) {
	s := New(5, 2, 1, nil)
	if got := chunks(s.Next()); !slices.Equal(got, []int{0, 1}) {
		t.Fatal(got)
	}
	s.Done(1)
	if got := chunks(s.Next()); !slices.Equal(got, []int{2}) {
		t.Fatalf("after Done(1): %v", got)
	}
	s.Done(0)
	s.Done(2)
	if got := chunks(s.Next()); !slices.Equal(got, []int{3, 4}) {
		t.Fatalf("%v", got)
	}
	s.Done(3)
	s.Done(4)
	if !s.Complete() || s.InFlight() != 0 {
		t.Fatal("not complete")
	}
	s.Lost(2)
	if s.Complete() {
		t.Fatal("complete after Lost")
	}
	if got := chunks(s.Next()); !slices.Equal(got, []int{2}) {
		t.Fatalf("lost chunk not re-requested: %v", got)
	}
}

func TestScheduleAheadFollowsReader(t *testing.T) {
	s := New(6, 4, 1, nil)
	s.SetAhead(2)
	s.Next()
	s.Done(0)
	s.Done(1)
	if got := s.Next(); len(got) != 0 {
		t.Fatalf("ran ahead of the reader: %v", chunks(got))
	}
	s.Deliver(0)
	if got := chunks(s.Next()); !slices.Equal(got, []int{2}) {
		t.Fatalf("after Deliver(0): %v", got)
	}
}

func TestScheduleFailures(t *testing.T) {
	type step struct {
		kind       FailKind
		wantAction Action
		wantSource int // source of the next request (when not GiveUp)
	}
	for _, tc := range []struct {
		name     string
		nSources int
		steps    []step
	}{
		{"corrupt: same source once, then the other", 2, []step{
			{FailCorrupt, RetrySame, 0},
			{FailCorrupt, SwitchSource, 1},
			{FailCorrupt, RetrySame, 1},
			{FailCorrupt, GiveUp, 0},
		}},
		{"unreachable switches at once", 2, []step{
			{FailUnreachable, SwitchSource, 1},
			{FailNotFound, SwitchSource, 0},
			{FailUnreachable, SwitchSource, 1},
			{FailUnreachable, GiveUp, 0},
		}},
		{"one source retries until the bound", 1, []step{
			{FailUnreachable, RetrySame, 0},
			{FailCorrupt, RetrySame, 0},
			{FailNotFound, RetrySame, 0},
			{FailNotFound, GiveUp, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(3, 1, tc.nSources, nil)
			r := s.Next()
			if len(r) != 1 || r[0].Chunk != 0 || r[0].Source != 0 {
				t.Fatalf("first request %v", r)
			}
			for k, st := range tc.steps {
				a := s.Failed(0, st.kind)
				if a != st.wantAction {
					t.Fatalf("step %d: %v, want %v", k, a, st.wantAction)
				}
				if a == GiveUp {
					if s.GaveUp() != 0 || s.Next() != nil {
						t.Fatal("gave up but still scheduling")
					}
					return
				}
				r := s.Next()
				if len(r) != 1 || r[0].Chunk != 0 || r[0].Source != st.wantSource || r[0].Attempt != k+1 {
					t.Fatalf("step %d: next %+v, want chunk 0 from source %d attempt %d", k, r, st.wantSource, k+1)
				}
			}
		})
	}
}

func TestScheduleRetriesFirstAndAvoidsFailingSource(t *testing.T) {
	s := New(10, 3, 2, nil)
	s.Next() // 0,1,2 from source 0
	s.Failed(1, FailUnreachable)
	s.Done(0)
	got := s.Next()
	if len(got) != 2 || got[0].Chunk != 1 || got[0].Source != 1 {
		t.Fatalf("retry not first or not switched: %+v", got)
	}
	// source 0 has a failure, source 1 none: new chunks prefer source 1.
	if got[1].Chunk != 3 || got[1].Source != 1 {
		t.Fatalf("new chunk %+v, want chunk 3 from source 1", got[1])
	}
	if s.SourceFailures(0) != 1 || s.SourceFailures(1) != 0 {
		t.Fatal("failure counts")
	}
}

func TestNoSources(t *testing.T) {
	s := New(2, 2, 0, nil)
	if s.Next() != nil {
		t.Fatal("requests with no source")
	}
}

// Sources found after every source failed revive the chunks that gave up,
// and new chunks go to them.
func TestScheduleAddSourcesRevives(t *testing.T) {
	s := New(4, 2, 1, nil)
	s.SetMaxTries(2)
	if reqs := s.Next(); len(reqs) != 2 { // chunks 0 and 1 from source 0
		t.Fatalf("Next = %v", reqs)
	}
	if a := s.Failed(0, FailUnreachable); a != RetrySame {
		t.Fatalf("first failure: %v", a)
	}
	if again := s.Next(); len(again) != 1 || again[0].Chunk != 0 {
		t.Fatalf("retry of chunk 0 = %v", again)
	}
	if a := s.Failed(0, FailUnreachable); a != GiveUp {
		t.Fatalf("second failure: %v, want give-up", a)
	}
	if a := s.Failed(1, FailUnreachable); a != RetrySame { // waits in the retry queue
		t.Fatalf("chunk 1: %v", a)
	}
	if s.GaveUp() != 0 || len(s.Next()) != 0 {
		t.Fatalf("after giving up: GaveUp %d, or the schedule still issues requests", s.GaveUp())
	}
	s.AddSources(2)
	if s.GaveUp() != -1 || s.Sources() != 3 {
		t.Fatalf("after AddSources: GaveUp %d, sources %d", s.GaveUp(), s.Sources())
	}
	got := s.Next()
	if !slices.Equal(chunks(got), []int{0, 1}) {
		t.Fatalf("Next after AddSources = %v, want the chunk that gave up and the one waiting", got)
	}
	if got[0].Source != 1 || got[0].Attempt != 0 {
		t.Fatalf("revived request %+v, want source 1 (the first new one), attempt 0", got[0])
	}
	for _, r := range got {
		s.Done(r.Chunk)
	}
	got = s.Next()
	if !slices.Equal(chunks(got), []int{2, 3}) || got[0].Source == 0 || got[1].Source == 0 {
		t.Fatalf("new chunks = %+v, want 2 and 3 from new sources", got)
	}
	s.AddSources(0) // no-op
	if s.Sources() != 3 {
		t.Fatalf("AddSources(0) changed the sources: %d", s.Sources())
	}
}
