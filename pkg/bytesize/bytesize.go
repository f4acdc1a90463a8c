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
// (one decimal unless the value is a whole number of units). A value that
// rounds up to 1024 of a unit is given in the next one ("1 MiB", not
// "1024.0 KiB").
func Format(n int64) string {
	v, unit := scale(n)
	if unit == "B" {
		return fmt.Sprintf("%d B", n)
	}
	if v == math.Trunc(v) {
		return fmt.Sprintf("%d %s", int64(v), unit)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// FormatFixed is Format with always one decimal from KiB up ("12.0 MiB",
// "12.1 MiB"): for figures that change while they are shown (progress
// lines), so that their width does not jump.
func FormatFixed(n int64) string {
	v, unit := scale(n)
	if unit == "B" {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// scale returns n in its binary unit, rounded to one decimal: 1023 B is
// "B", 1024 and up KiB, and so on; a value that would round to 1024.0 of a
// unit moves to the next.
func scale(n int64) (float64, string) {
	const units = "KMGTPE"
	if n < 1024 {
		return float64(n), "B"
	}
	v := float64(n)
	i := -1
	for v >= 1024 || math.Round(v*10)/10 >= 1024 {
		v /= 1024
		i++
		if i == len(units)-1 {
			break
		}
	}
	return math.Round(v*10) / 10, string(units[i]) + "iB"
}
