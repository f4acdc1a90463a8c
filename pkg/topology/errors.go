package topology

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Error is one thing wrong with a topology file.
type Error struct {
	// File is the file's path as given to ParseFile; "" from Parse.
	File string
	// Line is the 1-based line the error is about: the key at fault, the
	// list element at fault, or for a missing key the header of the table
	// that lacks it (line 1 for a missing top-level table).
	Line int
	// Key is the dotted TOML key at fault without array indices, e.g.
	// "site.workers" or "defaults.cache_size"; "" for a syntax error.
	Key string
	// Msg says what is wrong.
	Msg string
}

// Error formats the error as FILE:LINE: KEY: MSG ("line LINE: ..." without
// a file, and without "KEY: " when there is no key).
func (e *Error) Error() string {
	loc := fmt.Sprintf("line %d", e.Line)
	if e.File != "" {
		loc = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key != "" {
		return loc + ": " + e.Key + ": " + e.Msg
	}
	return loc + ": " + e.Msg
}

// ErrorList is every error found in a file, ordered by line. Parse and
// ParseFile return a non-empty ErrorList for a file they refuse.
type ErrorList []*Error

// maxErrors bounds an ErrorList (a range of a thousand hosts with one bad
// setting is reported once per line and key, but a file may still have
// many distinct errors).
const maxErrors = 50

// Error is the errors' messages, one a line.
func (l ErrorList) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap returns the errors, for errors.As with *Error.
func (l ErrorList) Unwrap() []error {
	out := make([]error, len(l))
	for i, e := range l {
		out[i] = e
	}
	return out
}

// sorted orders the list by line, key and message, drops repeats of one message
// at one line and key, and keeps at most maxErrors.
func (l ErrorList) sorted() ErrorList {
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Msg, b.Msg))
	})
	l = slices.CompactFunc(l, func(a, b *Error) bool { return *a == *b })
	if len(l) > maxErrors {
		l = l[:maxErrors]
	}
	return l
}

// withFile sets File on every error.
func (l ErrorList) withFile(name string) ErrorList {
	for _, e := range l {
		e.File = name
	}
	return l
}
