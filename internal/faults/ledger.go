package faults

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Version is the content of one put: its SHA-256 and size, and the bytes
// themselves when the harness has them (to tell a prefix from other bytes).
type Version struct {
	Sum  [32]byte
	Size int64
	Data []byte
}

// NewVersion describes data (and keeps it).
func NewVersion(data []byte) Version {
	return Version{Sum: sha256.Sum256(data), Size: int64(len(data)), Data: data}
}

func (v Version) String() string {
	return fmt.Sprintf("%d bytes, sha256 %s", v.Size, hex.EncodeToString(v.Sum[:6]))
}

// Ledger records what was put under each name: the last completed put (one
// whose client got a success reply) and the puts tried since then that did
// not complete (their client failed or was killed: the daemon may or may
// not have made them visible, but only whole).
type Ledger struct {
	mu    sync.Mutex
	names map[string]*entry
}

type entry struct {
	done     *Version
	attempts []Version
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{names: map[string]*entry{}} }

func (l *Ledger) get(name string) *entry {
	e := l.names[name]
	if e == nil {
		e = &entry{}
		l.names[name] = e
	}
	return e
}

// Attempt records that a put of v under name is starting.
func (l *Ledger) Attempt(name string, v Version) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.get(name)
	e.attempts = append(e.attempts, v)
}

// Completed records that the put of v under name got a success reply: v is
// now the only content name may have.
func (l *Ledger) Completed(name string, v Version) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.get(name)
	e.done = &v
	e.attempts = nil
}

// Done returns the last completed put of name.
func (l *Ledger) Done(name string) (Version, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e := l.names[name]; e != nil && e.done != nil {
		return *e.done, true
	}
	return Version{}, false
}

// Names returns every name the ledger knows, sorted.
func (l *Ledger) Names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for n := range l.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Completed names, sorted.
func (l *Ledger) CompletedNames() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for n, e := range l.names {
		if e.done != nil {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Read is the outcome of one get of a name.
type Read struct {
	Code   int    // exit code; 0 = success
	Signal string // the get was killed by this signal (not by the harness)
	Hung   bool   // the get did not finish within its time bound
	Stderr string
	// Got is the bytes the get produced: on success the blob; on failure
	// what it left behind (the -o file if one exists, or what reached
	// standard output), nil if nothing.
	Got *Version
	// ToStdout: the get streamed to standard output, where a failure may
	// legitimately have written a prefix before the error.
	ToStdout bool
}

// Verdict classifies a read that broke no invariant.
type Verdict int

const (
	Exact   Verdict = iota // the bytes of the last completed put
	Attempt                // the whole bytes of a put that did not complete
	Absent                 // exit 3: no such name
	Failed                 // another clear error (non-zero exit, a message)
)

func (v Verdict) String() string {
	return [...]string{"exact", "uncompleted-put", "absent", "error"}[v]
}

// Violation is a broken invariant.
type Violation struct{ Msg string }

func (v *Violation) Error() string { return "INVARIANT VIOLATED: " + v.Msg }

func violation(format string, a ...any) error { return &Violation{Msg: fmt.Sprintf(format, a...)} }

// JudgeOpts relax the judgement.
type JudgeOpts struct {
	// MayBeLost: the name may have been lost legitimately (the suite
	// damaged the index of a node holding it, or the put happened
	// elsewhere and may not have reached this node yet).
	MayBeLost bool
}

// documentedCodes are the CLI's exit codes for a failed get (README).
var documentedCodes = map[int]bool{1: true, 3: true, 4: true}

// Judge checks a read of name against the ledger: the bytes of the last
// completed put, or the whole bytes of a put tried since, or a clear error
// (documented non-zero exit code and a message on stderr), never partial
// or other bytes; a completed put never reads as absent unless it may have
// been lost.
func (l *Ledger) Judge(name string, rd Read, o JudgeOpts) (Verdict, error) {
	l.mu.Lock()
	e := l.names[name]
	var done *Version
	var attempts []Version
	if e != nil {
		done, attempts = e.done, append([]Version(nil), e.attempts...)
	}
	l.mu.Unlock()

	match := func(got *Version) (Verdict, bool) {
		if done != nil && got.Sum == done.Sum && got.Size == done.Size {
			return Exact, true
		}
		for _, a := range attempts {
			if got.Sum == a.Sum && got.Size == a.Size {
				return Attempt, true
			}
		}
		return 0, false
	}
	expect := func() string {
		var parts []string
		if done != nil {
			parts = append(parts, "completed put: "+done.String())
		} else {
			parts = append(parts, "no completed put")
		}
		for _, a := range attempts {
			parts = append(parts, "uncompleted put: "+a.String())
		}
		return strings.Join(parts, "; ")
	}
	switch {
	case rd.Hung:
		return Failed, violation("get %q did not finish within its time bound (a get must end, in success or a clear error)", name)
	case rd.Signal != "":
		return Failed, violation("get %q: the client died of %s", name, rd.Signal)
	case rd.Code == 0:
		if rd.Got == nil {
			return Failed, violation("get %q succeeded without output", name)
		}
		if v, ok := match(rd.Got); ok {
			return v, nil
		}
		return Failed, violation("get %q returned %s: %s; ledger: %s", name, rd.Got, l.describeWrong(rd.Got, done, attempts), expect())
	}
	if !documentedCodes[rd.Code] {
		return Failed, violation("get %q failed with exit code %d, not a documented one (1, 3, 4); stderr: %q", name, rd.Code, trim(rd.Stderr))
	}
	if strings.TrimSpace(rd.Stderr) == "" {
		return Failed, violation("get %q failed (exit %d) without a message on stderr", name, rd.Code)
	}
	if rd.Got != nil && rd.Got.Size > 0 {
		if _, ok := match(rd.Got); !ok {
			if !rd.ToStdout {
				return Failed, violation("get %q failed (exit %d) but left an output file with %s: %s (a failed get -o must leave no file or the whole blob); ledger: %s",
					name, rd.Code, rd.Got, l.describeWrong(rd.Got, done, attempts), expect())
			}
			if !prefixOfAny(rd.Got, done, attempts) {
				return Failed, violation("get %q to stdout failed (exit %d) after writing %s that are not a prefix of any put; ledger: %s",
					name, rd.Code, rd.Got, expect())
			}
		}
	}
	if rd.Code == 3 {
		if done != nil && !o.MayBeLost {
			return Absent, violation("get %q: exit 3 (not found) but a put of it completed (%s); stderr: %q", name, done, trim(rd.Stderr))
		}
		return Absent, nil
	}
	return Failed, nil
}

// describeWrong says how got relates to the versions: a prefix of one (a
// cut upload or a partial download) or other bytes.
func (l *Ledger) describeWrong(got *Version, done *Version, attempts []Version) string {
	all := append([]Version(nil), attempts...)
	if done != nil {
		all = append([]Version{*done}, all...)
	}
	if got.Data == nil {
		return "other bytes"
	}
	for _, v := range all {
		if v.Data != nil && got.Size < v.Size && bytes.HasPrefix(v.Data, got.Data) {
			return fmt.Sprintf("A PREFIX (%d of %d bytes) of the put of %s", got.Size, v.Size, v)
		}
	}
	return "other bytes (not a prefix of any put of this name)"
}

func prefixOfAny(got *Version, done *Version, attempts []Version) bool {
	all := append([]Version(nil), attempts...)
	if done != nil {
		all = append(all, *done)
	}
	for _, v := range all {
		if got.Size <= v.Size && (got.Data == nil || v.Data == nil || bytes.HasPrefix(v.Data, got.Data)) {
			return true
		}
	}
	return false
}

func trim(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 700 {
		return s[:700] + "..."
	}
	return s
}
