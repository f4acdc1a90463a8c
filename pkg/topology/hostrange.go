package topology

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxExpand bounds the number of hosts one host pattern may expand to.
const MaxExpand = 1 << 16

// maxHostLen is the longest host name accepted (a DNS name's limit).
const maxHostLen = 253

// maxRangeDigits bounds the digits of a number in a range, so that every
// number fits an int on any platform.
const maxRangeDigits = 9

// ExpandHosts expands a host pattern into host names, in order.
//
// A pattern is a host name in which any number of bracket groups stand for
// numbers: "node[01-64]" is node01, node02, ..., node64; "10.0.1.[10-20]" is
// 10.0.1.10 ... 10.0.1.20; a group may list several items separated by
// commas, each a number or an ascending range ("node[01-04,07,10-12]"); with
// several groups, the pattern expands to every combination, the rightmost
// group varying fastest ("rack[1-2]-n[1-3]"). A number is written in decimal
// with at most 9 digits; every number a range item yields is zero-padded to
// the width of its lower bound as written ("[08-10]" is 08, 09, 10; "[8-10]"
// is 8, 9, 10), so an upper bound with leading zeros must have that same
// width ("[1-064]" is refused as ambiguous). A pattern without brackets is
// the one host it names.
//
// Every resulting name is checked with ValidateHost. The error names the
// pattern and what is wrong: an empty group or item, a missing bound
// ("[1-]"), letters where numbers belong ("[a-c]"), a descending range
// ("[64-01]"), an unbalanced bracket, a character no host name has, or an
// expansion to more than MaxExpand names. The result is not deduplicated:
// "n[1-2,2]" or "n[1-11][1-11]" yield a name twice, which callers that need
// unique hosts must check.
func ExpandHosts(pattern string) ([]string, error) {
	if pattern != "" && (pattern[0] == '-' || pattern[0] == '.') {
		return nil, fmt.Errorf("host %q: starts with %q", pattern, pattern[0])
	}
	segs, total, err := parsePattern(pattern)
	if err != nil {
		return nil, fmt.Errorf("host %q: %w", pattern, err)
	}
	out := make([]string, 0, total)
	idx := make([]int, len(segs)) // odometer over the groups
	var b strings.Builder
	for {
		b.Reset()
		for i, s := range segs {
			b.WriteString(s[idx[i]])
		}
		h := b.String()
		if err := ValidateHost(h); err != nil {
			if h == pattern {
				return nil, err
			}
			return nil, fmt.Errorf("pattern %q: %w", pattern, err)
		}
		out = append(out, h)
		i := len(segs) - 1
		for ; i >= 0; i-- {
			if idx[i]++; idx[i] < len(segs[i]) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return out, nil
		}
	}
}

// parsePattern splits a pattern into segments, each the list of strings
// that position of the pattern may take (one for literal text), and returns
// how many names they combine into (at most MaxExpand).
func parsePattern(p string) (segs [][]string, total int, err error) {
	if p == "" {
		return nil, 0, errors.New("empty")
	}
	total = 1
	for len(p) > 0 {
		open := strings.IndexAny(p, "[]")
		lit := p
		if open >= 0 {
			lit = p[:open]
		}
		for i := 0; i < len(lit); i++ {
			if !isHostChar(lit[i]) {
				return nil, 0, badChar(lit[i])
			}
		}
		if open < 0 {
			segs = append(segs, []string{p})
			break
		}
		if p[open] == ']' {
			return nil, 0, errors.New("']' without '['")
		}
		if open > 0 {
			segs = append(segs, []string{p[:open]})
		}
		rest := p[open+1:]
		end := strings.IndexAny(rest, "[]")
		if end < 0 || rest[end] == '[' {
			return nil, 0, errors.New("'[' without its ']'")
		}
		vals, err := expandGroup(rest[:end], MaxExpand/total)
		if err != nil {
			return nil, 0, err
		}
		total *= len(vals)
		segs = append(segs, vals)
		p = rest[end+1:]
	}
	return segs, total, nil
}

// expandGroup expands the inside of one bracket group ("01-04,07") to at
// most limit numbers.
func expandGroup(g string, limit int) ([]string, error) {
	if g == "" {
		return nil, errors.New("empty brackets []: want numbers such as [01-64]")
	}
	var out []string
	for item := range strings.SplitSeq(g, ",") {
		lo, hi, isRange := strings.Cut(item, "-")
		switch {
		case item == "":
			return nil, fmt.Errorf("[%s]: empty item between commas", g)
		case isRange && lo == "":
			return nil, fmt.Errorf("[%s]: range %q lacks its lower bound", g, item)
		case isRange && hi == "":
			return nil, fmt.Errorf("[%s]: range %q lacks its upper bound", g, item)
		}
		l, err := rangeNumber(g, lo)
		if err != nil {
			return nil, err
		}
		h := l
		if isRange {
			if h, err = rangeNumber(g, hi); err != nil {
				return nil, err
			}
			if h < l {
				return nil, fmt.Errorf("[%s]: range %s runs backwards: write the lower number first", g, item)
			}
			if hi[0] == '0' && len(hi) > 1 && len(hi) != len(lo) {
				return nil, fmt.Errorf("[%s]: range %s: the bounds' widths differ and %s has leading zeros: pad both to one width", g, item, hi)
			}
		}
		if h-l >= limit-len(out) {
			return nil, fmt.Errorf("expands to more than %d hosts", MaxExpand)
		}
		for v := l; v <= h; v++ {
			out = append(out, fmt.Sprintf("%0*d", len(lo), v))
		}
	}
	return out, nil
}

// rangeNumber parses one bound of a range item in group g.
func rangeNumber(g, s string) (int, error) {
	if len(s) > maxRangeDigits {
		return 0, fmt.Errorf("[%s]: %q has more than %d digits", g, s, maxRangeDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("[%s]: %q is not a number: brackets hold numbers and ranges such as [01-64] or [1,3,5-9]", g, s)
		}
	}
	return strconv.Atoi(s)
}

// ValidateHost returns an error unless h can be a host name or address
// that ssh and the daemons are given verbatim: 1 to 253 characters among
// letters, digits, '.', '-', '_' and ':' (IPv6), not starting with '-' or
// '.' (a leading '-' would read as an option to ssh).
func ValidateHost(h string) error {
	if h == "" {
		return errors.New("an empty host name")
	}
	if len(h) > maxHostLen {
		return fmt.Errorf("host %.20q...: longer than %d characters", h, maxHostLen)
	}
	if h[0] == '-' || h[0] == '.' {
		return fmt.Errorf("host %q: starts with %q", h, h[0])
	}
	for i := 0; i < len(h); i++ {
		if !isHostChar(h[i]) {
			return fmt.Errorf("host %q: %w", h, badChar(h[i]))
		}
	}
	return nil
}

// badChar is the error for a character no host name has.
func badChar(c byte) error {
	hint := ""
	switch c {
	case '@':
		hint = " (set the ssh user with ssh_user)"
	case ',':
		hint = " (commas separate numbers inside brackets, e.g. node[1,3,5]; list hosts as separate strings)"
	}
	return fmt.Errorf("character %q is not allowed in a host name%s", c, hint)
}

func isHostChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == ':'
}
