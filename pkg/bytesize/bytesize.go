// Package bytesize parses and formats byte counts for flags and reports:
// "512K", "64MiB", "1.5G" in, "64 MiB", "1.5 GiB" out. Units are binary
// multiples (K = 1024).
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Parse parses a byte count such as "1048576", "512K", "64MiB", "10G" or
// "1.5TB". K, M, G, T are binary multiples (KiB, MiB, ...); the "B" and
// "iB" suffixes are optional and case does not matter. Negative, non-finite
// and values beyond 2^62 bytes are rejected; the error quotes the input.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(strings.ToUpper(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "IB"), "B")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			t = t[:n-1]
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional K, M, G or T suffix", s)
	}
	return int64(v * float64(mult)), nil
}

// Format formats n bytes with a binary unit: "512 B", "64 MiB", "1.5 GiB"
// (one decimal unless the value is a whole number of units).
func Format(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %ciB", int64(v), "KMGTPE"[exp])
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[exp])
}
