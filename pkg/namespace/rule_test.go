package namespace

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

var t0 = time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)

func rec(name string, at time.Time) blob.Record {
	return blob.Record{Name: name, Time: at.UnixNano(), Origin: "12D3KooWorigin"}
}

func TestScopes(t *testing.T) {
	for _, in := range []struct{ typed, scope string }{{"job1", "job1/"}, {"job1/", "job1/"}, {"a/b", "a/b/"}} {
		got, err := PrefixScope(in.typed)
		if err != nil || got != in.scope {
			t.Errorf("PrefixScope(%q) = %q, %v; want %q", in.typed, got, err, in.scope)
		}
	}
	for _, bad := range []string{"", "/", "//", "..", "a/../b", "./x", "/abs", "a//b", "a\x00b"} {
		_, err := PrefixScope(bad)
		if !errors.Is(err, ErrInvalidScope) {
			t.Errorf("PrefixScope(%q) = %v, want ErrInvalidScope", bad, err)
		}
	}
}

// TestWithdraws is the decision table: a removal withdraws what is older,
// never a later put or a name outside its scope; a TTL withdraws at the
// record's time + TTL, not a nanosecond before, whatever the clock did.
func TestWithdraws(t *testing.T) {
	rm := Rule{Kind: KindRemove, Scope: "job1/", Time: t0.UnixNano(), Origin: "o"}
	ttl := Rule{Kind: KindTTL, Scope: "job1/", Time: t0.UnixNano(), TTL: 2 * time.Hour, Origin: "o"}
	one := Rule{Kind: KindTTL, Scope: "job1/x", Time: t0.UnixNano(), TTL: time.Hour, Origin: "o"}
	cases := []struct {
		name string
		r    Rule
		rec  blob.Record
		now  time.Time
		want bool
	}{
		{"older put removed", rm, rec("job1/a", t0.Add(-time.Second)), t0, true},
		{"same time removed", rm, rec("job1/a/b", t0), t0, true},
		{"newer put lives", rm, rec("job1/a", t0.Add(time.Nanosecond)), t0.Add(time.Hour), false},
		{"sibling prefix untouched", rm, rec("job10/a", t0.Add(-time.Hour)), t0, false},
		{"the directory's own name untouched", rm, rec("job1", t0.Add(-time.Hour)), t0, false},
		{"ttl not yet", ttl, rec("job1/a", t0), t0.Add(2*time.Hour - time.Nanosecond), false},
		{"ttl due", ttl, rec("job1/a", t0), t0.Add(2 * time.Hour), true},
		{"ttl covers later puts", ttl, rec("job1/a", t0.Add(time.Hour)), t0.Add(3 * time.Hour), true},
		{"ttl of a later put not due", ttl, rec("job1/a", t0.Add(time.Hour)), t0.Add(2 * time.Hour), false},
		{"clock jumped back: nothing expires", ttl, rec("job1/a", t0), t0.Add(-24 * time.Hour), false},
		{"one name's ttl", one, rec("job1/x", t0), t0.Add(time.Hour), true},
		{"one name's ttl spares a rebind", one, rec("job1/x", t0.Add(time.Second)), t0.Add(5 * time.Hour), false},
		{"one name's ttl spares others", one, rec("job1/xy", t0), t0.Add(5 * time.Hour), false},
		{"ttl 0 clears", Rule{Kind: KindTTL, Scope: "job1/", Time: 1, Origin: "o"}, rec("job1/a", t0), t0.Add(1000 * time.Hour), false},
	}
	for _, c := range cases {
		if got := c.r.Withdraws(c.rec, c.now); got != c.want {
			t.Errorf("%s: Withdraws = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestClockJumps: a node's clock that jumps forward by d withdraws a
// record at most d early (the skew the docs state), never earlier; one
// that jumps back withdraws it late, never early.
func TestClockJumps(t *testing.T) {
	ttl := Rule{Kind: KindTTL, Scope: "job1/", Time: t0.UnixNano(), TTL: 2 * time.Hour, Origin: "o"}
	r := rec("job1/a", t0)
	for _, skew := range []time.Duration{time.Second, time.Minute, 5 * time.Minute} {
		// The true time at which a node with its clock ahead by skew
		// first sees the record withdrawn.
		for true_ := t0; ; true_ = true_.Add(time.Second) {
			if ttl.Withdraws(r, true_.Add(skew)) {
				early := t0.Add(2 * time.Hour).Sub(true_)
				if early > skew {
					t.Fatalf("clock ahead by %v: withdrawn %v early", skew, early)
				}
				break
			}
		}
	}
}

func TestSet(t *testing.T) {
	s := NewSet()
	old := Rule{Kind: KindRemove, Scope: "job1/", Time: 10, Origin: "a"}
	newer := old
	newer.Time = 20
	if ok, err := s.Add(newer); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, _ := s.Add(old); ok {
		t.Fatal("an older rule replaced a newer one")
	}
	if ok, _ := s.Add(newer); ok {
		t.Fatal("the same rule counted as a change")
	}
	if _, err := s.Add(Rule{Kind: KindRemove, Scope: "/", Time: 1, Origin: "a"}); !errors.Is(err, ErrInvalidScope) {
		t.Fatalf("bad scope: %v", err)
	}
	if _, ok := s.Withdrawn(blob.Record{Name: "job1/a/b/c", Time: 15}, t0); !ok {
		t.Fatal("deep name not withdrawn")
	}
	if _, ok := s.Withdrawn(blob.Record{Name: "job1/a", Time: 21}, t0); ok {
		t.Fatal("newer put withdrawn")
	}
	if got := s.Under("job1/a/"); len(got) != 1 {
		t.Fatalf("Under: %v", got)
	}
	for i := range MaxRules - 1 {
		if _, err := s.Add(Rule{Kind: KindTTL, Scope: "n/" + string(rune('a'+i%26)) + "/" + itoa(i), Time: 1, TTL: time.Hour, Origin: "a"}); err != nil {
			t.Fatal(i, err)
		}
	}
	if _, err := s.Add(Rule{Kind: KindRemove, Scope: "full/", Time: 1, Origin: "a"}); !errors.Is(err, ErrTooManyRules) {
		t.Fatalf("past MaxRules: %v", err)
	}
	if ok, err := s.Add(Rule{Kind: KindRemove, Scope: "job1/", Time: 30, Origin: "a"}); !ok || err != nil {
		t.Fatalf("replacing when full: %v %v", ok, err)
	}
}

func itoa(i int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}

func TestPrunable(t *testing.T) {
	one := Rule{Kind: KindTTL, Scope: "job1/x", Time: t0.UnixNano(), TTL: time.Hour, Origin: "o"}
	if Prunable(one, t0.Add(time.Hour+PruneAfter)) || !Prunable(one, t0.Add(time.Hour+PruneAfter+time.Second)) {
		t.Fatal("one name's TTL pruned at the wrong time")
	}
	pre := one
	pre.Scope = "job1/"
	if Prunable(pre, t0.Add(1000*time.Hour)) {
		t.Fatal("a prefix TTL pruned")
	}
	if Prunable(Rule{Kind: KindRemove, Scope: "a/", Origin: "o"}, t0.Add(1000*time.Hour)) {
		t.Fatal("a removal pruned")
	}
}

func TestEncodeDecode(t *testing.T) {
	for _, r := range []Rule{
		{Kind: KindRemove, Scope: "job1/", Time: t0.UnixNano(), Origin: "12D3KooWx"},
		{Kind: KindTTL, Scope: "job1/x", Time: -5, TTL: MaxTTL, Origin: "o", Proof: []byte{1, 2, 3}},
	} {
		got, err := Decode(r.Encode())
		if err != nil || got.Kind != r.Kind || got.Scope != r.Scope || got.Time != r.Time || got.TTL != r.TTL || got.Origin != r.Origin || !bytes.Equal(got.Proof, r.Proof) {
			t.Fatalf("round trip of %+v: %+v, %v", r, got, err)
		}
	}
	good := Rule{Kind: KindRemove, Scope: "job1/", Time: 1, Origin: "o"}.Encode()
	bad := map[string][]byte{
		"empty":     nil,
		"version":   append([]byte{9}, good[1:]...),
		"kind":      append([]byte{1, 7}, good[2:]...),
		"trailing":  append(append([]byte(nil), good...), 0),
		"truncated": good[:len(good)-3],
		"scope /":   Rule{Kind: KindRemove, Scope: "/", Time: 1, Origin: "o"}.Encode(),
		"no origin": Rule{Kind: KindRemove, Scope: "a/", Time: 1}.Encode(),
		"ttl<0":     Rule{Kind: KindTTL, Scope: "a/", TTL: -1, Time: 1, Origin: "o"}.Encode(),
		"rm ttl":    Rule{Kind: KindRemove, Scope: "a/", TTL: 1, Time: 1, Origin: "o"}.Encode(),
	}
	for what, b := range bad {
		if _, err := Decode(b); err == nil {
			t.Errorf("%s: decoded", what)
		} else if !errors.Is(err, wire.ErrMalformed) && !errors.Is(err, ErrInvalidScope) && what != "ttl<0" {
			t.Errorf("%s: %v wraps neither ErrMalformed nor ErrInvalidScope", what, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Rule{Kind: KindRemove, Scope: "job1/", Time: 1, Origin: "o"}.Encode())
	f.Add(Rule{Kind: KindTTL, Scope: "job1/x", Time: 1, TTL: time.Hour, Origin: "o", Proof: []byte("p")}.Encode())
	f.Add([]byte{1, 1, 0, 1, '/'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Decode(b)
		if err != nil {
			return
		}
		back, err := Decode(r.Encode())
		if err != nil || back.Key() != r.Key() || back.Time != r.Time {
			t.Fatalf("re-decode of %+v: %+v, %v", r, back, err)
		}
	})
}

func TestScopeMessages(t *testing.T) {
	for _, p := range []string{"", "/", "..", "a/../b"} {
		_, err := PrefixScope(p)
		if !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("%q: %v does not wrap blob.ErrInvalidName", p, err)
		}
		t.Logf("%q: %v", p, err)
	}
}
