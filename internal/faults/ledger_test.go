package faults

import (
	"errors"
	"strings"
	"testing"
)

func ver(s string) *Version { v := NewVersion([]byte(s)); return &v }

func TestJudgeCompleted(t *testing.T) {
	l := NewLedger()
	l.Attempt("a", *ver("hello world"))
	l.Completed("a", *ver("hello world"))

	if v, err := l.Judge("a", Read{Got: ver("hello world")}, JudgeOpts{}); err != nil || v != Exact {
		t.Fatalf("exact read: %v, %v", v, err)
	}
	// A prefix is never right, and is named as one.
	_, err := l.Judge("a", Read{Got: ver("hello")}, JudgeOpts{})
	var viol *Violation
	if !errors.As(err, &viol) || !strings.Contains(err.Error(), "PREFIX") {
		t.Fatalf("prefix read: %v", err)
	}
	// Other bytes of the same size.
	if _, err := l.Judge("a", Read{Got: ver("hello WORLD")}, JudgeOpts{}); !errors.As(err, &viol) {
		t.Fatalf("wrong bytes: %v", err)
	}
	// A clear error is allowed; an unclear one is not.
	if v, err := l.Judge("a", Read{Code: 1, Stderr: "omst: peer unreachable"}, JudgeOpts{}); err != nil || v != Failed {
		t.Fatalf("clear error: %v, %v", v, err)
	}
	if _, err := l.Judge("a", Read{Code: 1}, JudgeOpts{}); !errors.As(err, &viol) {
		t.Fatalf("error without a message: %v", err)
	}
	if _, err := l.Judge("a", Read{Code: 7, Stderr: "x"}, JudgeOpts{}); !errors.As(err, &viol) {
		t.Fatalf("undocumented exit code: %v", err)
	}
	if _, err := l.Judge("a", Read{Signal: "segmentation fault"}, JudgeOpts{}); !errors.As(err, &viol) {
		t.Fatalf("client died of a signal: %v", err)
	}
	if _, err := l.Judge("a", Read{Hung: true}, JudgeOpts{}); !errors.As(err, &viol) {
		t.Fatalf("hung get: %v", err)
	}
	// A completed put does not read as absent, unless it may be lost.
	if _, err := l.Judge("a", Read{Code: 3, Stderr: "not found"}, JudgeOpts{}); !errors.As(err, &viol) {
		t.Fatalf("lost completed put: %v", err)
	}
	if v, err := l.Judge("a", Read{Code: 3, Stderr: "not found"}, JudgeOpts{MayBeLost: true}); err != nil || v != Absent {
		t.Fatalf("lost completed put, allowed: %v, %v", v, err)
	}
}

func TestJudgeUncompleted(t *testing.T) {
	l := NewLedger()
	l.Attempt("a", *ver("first"))
	l.Completed("a", *ver("first"))
	l.Attempt("a", *ver("second, longer"))

	// The earlier completed bytes, or the whole uncompleted ones.
	if v, err := l.Judge("a", Read{Got: ver("first")}, JudgeOpts{}); err != nil || v != Exact {
		t.Fatalf("earlier bytes: %v, %v", v, err)
	}
	if v, err := l.Judge("a", Read{Got: ver("second, longer")}, JudgeOpts{}); err != nil || v != Attempt {
		t.Fatalf("whole uncompleted bytes: %v, %v", v, err)
	}
	// A cut upload: a prefix of the uncompleted put.
	if _, err := l.Judge("a", Read{Got: ver("second")}, JudgeOpts{}); err == nil || !strings.Contains(err.Error(), "PREFIX") {
		t.Fatalf("cut upload: %v", err)
	}
	// A name whose only put never completed may be absent.
	l.Attempt("b", *ver("never acknowledged"))
	if v, err := l.Judge("b", Read{Code: 3, Stderr: "not found"}, JudgeOpts{}); err != nil || v != Absent {
		t.Fatalf("absent uncompleted name: %v, %v", v, err)
	}
	// A new completed put replaces everything before it.
	l.Completed("a", *ver("third"))
	if _, err := l.Judge("a", Read{Got: ver("first")}, JudgeOpts{}); err == nil {
		t.Fatal("bytes of a replaced put accepted")
	}
	if names := l.CompletedNames(); len(names) != 1 || names[0] != "a" {
		t.Fatalf("completed names %v", names)
	}
	if names := l.Names(); len(names) != 2 {
		t.Fatalf("names %v", names)
	}
}

func TestJudgeLeftovers(t *testing.T) {
	l := NewLedger()
	l.Completed("a", *ver("0123456789"))
	// A failed get -o leaves no file, or the whole blob.
	if _, err := l.Judge("a", Read{Code: 1, Stderr: "cut", Got: ver("0123456789")}, JudgeOpts{}); err != nil {
		t.Fatalf("whole file after a failure: %v", err)
	}
	if _, err := l.Judge("a", Read{Code: 1, Stderr: "cut", Got: ver("01234")}, JudgeOpts{}); err == nil {
		t.Fatal("partial -o file accepted")
	}
	// Through stdout, a prefix and a non-zero exit is a clear failure...
	if _, err := l.Judge("a", Read{Code: 1, Stderr: "cut", Got: ver("01234"), ToStdout: true}, JudgeOpts{}); err != nil {
		t.Fatalf("stdout prefix with an error: %v", err)
	}
	// ...but not other bytes, and not a prefix with exit 0.
	if _, err := l.Judge("a", Read{Code: 1, Stderr: "cut", Got: ver("xyz"), ToStdout: true}, JudgeOpts{}); err == nil {
		t.Fatal("stdout garbage accepted")
	}
	if _, err := l.Judge("a", Read{Got: ver("01234"), ToStdout: true}, JudgeOpts{}); err == nil {
		t.Fatal("stdout prefix with exit 0 accepted")
	}
}

func TestSeeds(t *testing.T) {
	// A case's RNG depends on the seed and its name only.
	a, b := caseRNG(42, "put-kill"), caseRNG(42, "put-kill")
	for range 10 {
		if a.Uint64() != b.Uint64() {
			t.Fatal("same seed and case, different draws")
		}
	}
	if caseRNG(42, "put-kill").Uint64() == caseRNG(42, "relay-kill").Uint64() {
		t.Fatal("two cases draw the same")
	}
	if s := NextSeed(1); s == 1 || s != NextSeed(1) {
		t.Fatalf("NextSeed(1) = %d", s)
	}
	cs, err := SelectCases([]string{"many-gets", "put-kill"})
	if err != nil || len(cs) != 2 || cs[0].Name != "put-kill" {
		t.Fatalf("select: %v %v", cs, err)
	}
	if _, err := SelectCases([]string{"nope"}); err == nil {
		t.Fatal("unknown case accepted")
	}
}
