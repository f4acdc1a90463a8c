// Package namespace holds the rules that end names grid-wide: a job's
// namespace removed everywhere (`omst rm -r PREFIX --everywhere`), and the
// time to live of a prefix's names (`omst ttl PREFIX 2h`) or of one put
// (`omst put --ttl 2h`). It is plain code: the Rule, its encoding, and the
// decisions (which records a rule withdraws at a given time, which of two
// rules stands), with the clock passed in. The tree carries rules from
// node to node (pkg/tree), the store keeps them and drops what they
// withdraw (pkg/cache), and a closed grid proves and checks them
// (pkg/member: ProveRule, CheckRule, over RuleRecord).
//
// Invariants:
//
//   - A rule's scope is either a prefix ending in '/' (every name under
//     it) or one name; never empty, never "/", never with "." or ".."
//     segments (ValidateScope).
//   - Of two rules of the same kind and scope, the newer one (Time, then
//     Origin, as blob.Record.Newer) stands: every node converges whatever
//     order rules arrive in.
//   - A removal withdraws the records of its scope dated at or before it:
//     a put made after the removal lives, an older one arriving later does
//     not come back.
//   - A TTL withdraws a record once now >= the record's time + TTL; the
//     record's time is its origin's clock, so a node whose clock runs ahead
//     of the origin's by d withdraws it d early (the grid's clocks agree to
//     ClockSkew). A TTL of one name (a put's) covers only records dated at
//     or before the rule (the put it was made with, not a later rebind).
package namespace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

// Kind is what a rule does.
type Kind uint8

// Kinds of rules.
const (
	// KindRemove withdraws every record of the scope dated at or before
	// the rule (a tombstone).
	KindRemove Kind = 1
	// KindTTL withdraws every record of the scope once its age passes
	// the rule's TTL; a TTL of 0 clears an earlier TTL of the scope.
	KindTTL Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindRemove:
		return "remove"
	case KindTTL:
		return "ttl"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MaxTTL bounds a rule's TTL (it is carried in 56 bits of nanoseconds).
const MaxTTL = 365 * 24 * time.Hour

// Rule is one signed decision about a scope of names.
type Rule struct {
	Kind   Kind
	Scope  string        // "job1/" (every name under it) or "job1/x" (that name)
	Time   int64         // when it was made, Unix nanoseconds at its origin
	TTL    time.Duration // KindTTL only: 0 clears
	Origin string        // the peer ID (string form) of the node that made it
	// Proof, in a closed grid, is the origin's signature of RuleRecord and
	// its certificate (pkg/member.ProveRule); nil in an open grid.
	Proof []byte
}

// ErrInvalidScope marks a scope that is neither a prefix nor a name; the
// errors that wrap it wrap blob.ErrInvalidName too (the local API's
// INVALID_NAME).
var ErrInvalidScope = errors.New("invalid prefix")

// scopeError is a bad scope: its message, and what it wraps.
type scopeError struct {
	msg   string
	cause error
}

func (e *scopeError) Error() string { return e.msg }
func (e *scopeError) Unwrap() []error {
	return []error{ErrInvalidScope, blob.ErrInvalidName, e.cause}
}

// Prefix reports whether the scope is a prefix (ends with '/').
func (r Rule) Prefix() bool { return strings.HasSuffix(r.Scope, "/") }

// Key identifies the rules that replace each other: kind and scope.
func (r Rule) Key() string { return string([]byte{byte(r.Kind)}) + r.Scope }

// Newer reports whether r replaces old (same Key): by time, then origin.
func (r Rule) Newer(old Rule) bool {
	if r.Time != old.Time {
		return r.Time > old.Time
	}
	return r.Origin > old.Origin
}

// When returns Time as a time.Time.
func (r Rule) When() time.Time { return time.Unix(0, r.Time) }

// Covers reports whether name is in r's scope.
func (r Rule) Covers(name string) bool {
	if r.Prefix() {
		return strings.HasPrefix(name, r.Scope)
	}
	return name == r.Scope
}

// Withdraws is the rule's decision, plain code: whether it withdraws
// record rec at now (see the package's invariants).
func (r Rule) Withdraws(rec blob.Record, now time.Time) bool {
	if !r.Covers(rec.Name) {
		return false
	}
	switch r.Kind {
	case KindRemove:
		return rec.Time <= r.Time
	case KindTTL:
		if r.TTL <= 0 || (!r.Prefix() && rec.Time > r.Time) {
			return false
		}
		return !now.Before(rec.When().Add(r.TTL))
	}
	return false
}

// ExpiresAt is when r withdraws rec (ok false: never, as far as r goes).
func (r Rule) ExpiresAt(rec blob.Record) (time.Time, bool) {
	if !r.Covers(rec.Name) {
		return time.Time{}, false
	}
	switch r.Kind {
	case KindRemove:
		if rec.Time <= r.Time {
			return rec.When(), true
		}
	case KindTTL:
		if r.TTL > 0 && (r.Prefix() || rec.Time <= r.Time) {
			return rec.When().Add(r.TTL), true
		}
	}
	return time.Time{}, false
}

// ValidateScope checks a rule's scope: a valid name (blob.ValidateName),
// or a valid name followed by '/'. The error wraps ErrInvalidScope (and
// blob.ErrInvalidName) and says what is wrong.
func ValidateScope(scope string) error {
	switch {
	case scope == "":
		return &scopeError{msg: "invalid prefix: empty (name one such as job1/)"}
	case strings.Trim(scope, "/") == "":
		return &scopeError{msg: fmt.Sprintf("invalid prefix %q: that is the whole namespace (name a prefix such as job1/)", scope)}
	}
	if err := blob.ValidateName(strings.TrimSuffix(scope, "/")); err != nil {
		return &scopeError{msg: fmt.Sprintf("invalid prefix %q: %v", scope, err), cause: err}
	}
	return nil
}

// PrefixScope turns what a user typed for `rm -r PREFIX` or `ttl PREFIX`
// into a prefix scope: "job1" and "job1/" both mean every name under
// "job1/" (never "job10/..."). Bad input is an error naming it.
func PrefixScope(prefix string) (string, error) {
	if prefix == "" {
		return "", ValidateScope("")
	}
	s := prefix
	if !strings.HasSuffix(s, "/") {
		s += "/"
	}
	if err := ValidateScope(s); err != nil {
		return "", err
	}
	return s, nil
}

// Validate checks every field of r but the proof's contents.
func (r Rule) Validate() error {
	if err := ValidateScope(r.Scope); err != nil {
		return err
	}
	switch r.Kind {
	case KindRemove:
		if r.TTL != 0 {
			return wire.Malformed("removal of %q with a TTL", r.Scope)
		}
	case KindTTL:
		if r.TTL < 0 || r.TTL > MaxTTL {
			return fmt.Errorf("TTL of %q: %v is not within 0 and %v", r.Scope, r.TTL, MaxTTL)
		}
	default:
		return wire.Malformed("rule of unknown kind %d", r.Kind)
	}
	if r.Origin == "" || len(r.Origin) > maxOrigin {
		return wire.Malformed("rule of %q: origin of %d bytes", r.Scope, len(r.Origin))
	}
	if len(r.Proof) > blob.MaxProofLen {
		return wire.Malformed("rule of %q: proof of %d bytes", r.Scope, len(r.Proof))
	}
	return nil
}

// RuleRecord is the record a rule's proof signs (pkg/member, over a
// domain of its own so that it never passes for a name's record or
// removal): the scope as Name (so that the certificate's rights are
// checked against it: a prefix is writable only if every name under it
// is), the kind and TTL in Size, the rule's time and origin.
func (r Rule) RuleRecord() blob.Record {
	return blob.Record{Name: r.Scope, Size: uint64(r.Kind)<<56 | uint64(r.TTL), Time: r.Time, Origin: r.Origin, Proof: r.Proof}
}

// Unproved returns r without its proof.
func (r Rule) Unproved() Rule {
	r.Proof = nil
	return r
}

// Encoding, version 1 (big-endian):
//
//	version u8 = 1
//	kind    u8
//	scope   u16 length + bytes
//	time    i64
//	ttl     i64 (nanoseconds)
//	origin  u16 length + bytes
//	proof   u16 length + bytes
const (
	ruleVersion = 1
	maxOrigin   = 256
	// MaxEncodedLen bounds an encoded rule.
	MaxEncodedLen = 2 + 2 + blob.MaxNameLen + 1 + 16 + 2 + maxOrigin + 2 + blob.MaxProofLen
)

// Encode returns the binary form of r.
func (r Rule) Encode() []byte {
	b := make([]byte, 0, 2+2+len(r.Scope)+16+2+len(r.Origin)+2+len(r.Proof))
	b = append(b, ruleVersion, byte(r.Kind))
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Scope)))
	b = append(b, r.Scope...)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Time))
	b = binary.BigEndian.AppendUint64(b, uint64(r.TTL))
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Origin)))
	b = append(b, r.Origin...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.Proof)))
	return append(b, r.Proof...)
}

// Decode parses Encode's bytes and validates the rule (Validate); errors
// wrap wire.ErrMalformed or ErrInvalidScope. It never panics.
func Decode(b []byte) (Rule, error) {
	var r Rule
	if len(b) > MaxEncodedLen {
		return r, wire.Malformed("rule of %d bytes", len(b))
	}
	if len(b) < 2 {
		return r, wire.Malformed("rule of %d bytes", len(b))
	}
	if b[0] != ruleVersion {
		return r, wire.Malformed("rule version %d", b[0])
	}
	r.Kind = Kind(b[1])
	b = b[2:]
	scope, b, err := take16(b, blob.MaxNameLen+1)
	if err != nil {
		return r, wire.Malformed("rule scope: %v", err)
	}
	if len(b) < 16 {
		return r, wire.Malformed("rule: truncated time")
	}
	r.Scope = string(scope)
	r.Time = int64(binary.BigEndian.Uint64(b))
	r.TTL = time.Duration(binary.BigEndian.Uint64(b[8:]))
	b = b[16:]
	origin, b, err := take16(b, maxOrigin)
	if err != nil {
		return r, wire.Malformed("rule origin: %v", err)
	}
	r.Origin = string(origin)
	proof, b, err := take16(b, blob.MaxProofLen)
	if err != nil {
		return r, wire.Malformed("rule proof: %v", err)
	}
	if len(proof) > 0 {
		r.Proof = append([]byte(nil), proof...)
	}
	if len(b) != 0 {
		return r, wire.Malformed("rule: %d trailing bytes", len(b))
	}
	if err := r.Validate(); err != nil {
		return r, err
	}
	return r, nil
}

func take16(b []byte, limit int) (field, rest []byte, err error) {
	if len(b) < 2 {
		return nil, nil, errors.New("truncated length")
	}
	n := int(binary.BigEndian.Uint16(b))
	if n > limit {
		return nil, nil, fmt.Errorf("length %d exceeds %d", n, limit)
	}
	if len(b) < 2+n {
		return nil, nil, fmt.Errorf("length %d, %d bytes left", n, len(b)-2)
	}
	return b[2 : 2+n], b[2+n:], nil
}
