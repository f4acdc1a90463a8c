package namespace

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/omst-project/omst/pkg/blob"
)

// MaxRules bounds the rules a Set keeps (about 1 KiB each with a closed
// grid's proof). A rule past it is refused (ErrTooManyRules); a newer rule
// of a scope held replaces the old one whatever the count.
const MaxRules = 1 << 16

// PruneAfter is how long after it has withdrawn its record a TTL of one
// name (a put's) is kept: past that, a copy of the old record that a node
// down for longer announces again would come back (removals and prefix
// TTLs are kept for good, within MaxRules).
const PruneAfter = 48 * time.Hour

// ErrTooManyRules wraps the refusal of a rule past MaxRules.
var ErrTooManyRules = errors.New("too many namespace rules")

// Set is the rules a node holds: at most one per kind and scope, the
// newest. Not safe for concurrent use; the zero value is not ready (New).
type Set struct {
	rules map[string]Rule // by Key
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{rules: map[string]Rule{}} }

// Add keeps r if it is newer than the rule of its kind and scope (or there
// is none) and reports whether it did. A rule that does not validate, or
// one past MaxRules, is an error.
func (s *Set) Add(r Rule) (bool, error) {
	if err := r.Validate(); err != nil {
		return false, err
	}
	old, had := s.rules[r.Key()]
	if had && !r.Newer(old) {
		return false, nil
	}
	if !had && len(s.rules) >= MaxRules {
		return false, fmt.Errorf("%w: %d held (at most %d); rule of %q refused", ErrTooManyRules, len(s.rules), MaxRules, r.Scope)
	}
	s.rules[r.Key()] = r
	return true, nil
}

// Get returns the rule of kind k and scope.
func (s *Set) Get(k Kind, scope string) (Rule, bool) {
	r, ok := s.rules[string([]byte{byte(k)})+scope]
	return r, ok
}

// Delete forgets the rule of kind k and scope.
func (s *Set) Delete(k Kind, scope string) { delete(s.rules, string([]byte{byte(k)})+scope) }

// Len is the number of rules held.
func (s *Set) Len() int { return len(s.rules) }

// All returns every rule, by scope then kind.
func (s *Set) All() []Rule {
	out := make([]Rule, 0, len(s.rules))
	for _, r := range s.rules {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Rule) int {
		if c := strings.Compare(a.Scope, b.Scope); c != 0 {
			return c
		}
		return int(a.Kind) - int(b.Kind)
	})
	return out
}

// Under returns the rules whose scope is within prefix ("" all), or that
// cover all of it (a prefix scope that prefix starts with).
func (s *Set) Under(prefix string) []Rule {
	var out []Rule
	for _, r := range s.All() {
		if strings.HasPrefix(r.Scope, prefix) || (r.Prefix() && strings.HasPrefix(prefix, r.Scope)) {
			out = append(out, r)
		}
	}
	return out
}

// Withdrawn returns the rule that withdraws rec at now, if any: rules of
// rec's name and of every prefix above it ("a/", "a/b/", ...) are asked.
// Cost: one map lookup per kind and level of the name.
func (s *Set) Withdrawn(rec blob.Record, now time.Time) (Rule, bool) {
	if len(s.rules) == 0 {
		return Rule{}, false
	}
	for _, k := range []Kind{KindRemove, KindTTL} {
		if r, ok := s.Get(k, rec.Name); ok && r.Withdraws(rec, now) {
			return r, true
		}
		for i := 0; i < len(rec.Name); i++ {
			if rec.Name[i] != '/' {
				continue
			}
			if r, ok := s.Get(k, rec.Name[:i+1]); ok && r.Withdraws(rec, now) {
				return r, true
			}
		}
	}
	return Rule{}, false
}

// Prunable reports whether r may be forgotten at now: a TTL of one name
// PruneAfter past the expiry of the put it was made with, or a TTL of 0
// (which only cleared an earlier one) as old as PruneAfter.
func Prunable(r Rule, now time.Time) bool {
	if r.Kind != KindTTL {
		return false
	}
	if r.TTL == 0 {
		return now.Sub(r.When()) > PruneAfter
	}
	return !r.Prefix() && now.Sub(r.When().Add(r.TTL)) > PruneAfter
}
