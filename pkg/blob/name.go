package blob

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest valid name, in bytes.
const MaxNameLen = 1024

// ValidateName returns nil if name is a valid blob name, else an error
// wrapping ErrInvalidName that says which rule it breaks. A valid name is
// 1..MaxNameLen bytes of UTF-8 without control characters (C0, DEL, C1),
// made of '/'-separated segments that are neither empty, "." nor "..";
// so it neither starts nor ends with '/'. Names are compared byte-wise.
func ValidateName(name string) error {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrInvalidName, truncate(name), why) }
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidName)
	case len(name) > MaxNameLen:
		return bad(fmt.Sprintf("%d bytes, more than %d", len(name), MaxNameLen))
	case !utf8.ValidString(name):
		return bad("not valid UTF-8")
	case name[0] == '/':
		return bad("starts with '/'")
	}
	for _, r := range name {
		if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
			return bad(fmt.Sprintf("contains control character %U", r))
		}
	}
	for _, seg := range strings.Split(name, "/") {
		switch seg {
		case "":
			return bad("has an empty segment ('//' or a trailing '/')")
		case ".", "..":
			return bad(fmt.Sprintf("has a %q segment", seg))
		}
	}
	return nil
}

// ValidatePrefix checks a listing prefix: empty, or a string that would be a
// valid name once completed (so the same character rules apply, but it may
// end with '/').
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	p := strings.TrimSuffix(prefix, "/")
	if p == "" {
		return fmt.Errorf("%w: prefix %q: starts with '/'", ErrInvalidName, prefix)
	}
	if err := ValidateName(p); err != nil {
		return fmt.Errorf("prefix: %w", err)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
