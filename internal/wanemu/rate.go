package wanemu

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is a link bandwidth in bits per second. Zero means unshaped.
type Rate uint64

// Common rates.
const (
	Kbit Rate = 1000
	Mbit Rate = 1000 * Kbit
	Gbit Rate = 1000 * Mbit
)

// ErrBadRate is wrapped by ParseRate's errors.
var ErrBadRate = errors.New("bad rate")

var rateUnits = []struct {
	suffix string
	mult   Rate
}{
	{"tbit", 1000 * Gbit}, {"gbit", Gbit}, {"mbit", Mbit}, {"kbit", Kbit}, {"bit", 1},
}

// ParseRate reads a bandwidth the way tc writes it in bits: "100mbit",
// "1gbit", "500kbit", "1.5gbit" (case-insensitive). "0", "" and "none" mean
// unshaped. Byte units ("mbps", "MB/s") are refused: tc reads "mbps" as
// megabytes, most people as megabits.
func ParseRate(s string) (Rate, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "", "0", "none", "off":
		return 0, nil
	}
	for _, u := range rateUnits {
		num, ok := strings.CutSuffix(t, u.suffix)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("%w %q: want a number and a unit (bit, kbit, mbit, gbit)", ErrBadRate, s)
		}
		r := Rate(v * float64(u.mult))
		if r > 0 && r < 8*Kbit {
			return 0, fmt.Errorf("%w %q: below 8kbit", ErrBadRate, s)
		}
		return r, nil
	}
	return 0, fmt.Errorf("%w %q: want a unit of bit, kbit, mbit or gbit (bits per second)", ErrBadRate, s)
}

// String writes r in tc's syntax, in the largest unit that divides it.
func (r Rate) String() string {
	if r == 0 {
		return "unshaped"
	}
	for _, u := range rateUnits {
		if r%u.mult == 0 {
			return strconv.FormatUint(uint64(r/u.mult), 10) + u.suffix
		}
	}
	return strconv.FormatUint(uint64(r), 10) + "bit"
}

// Mbits is r in megabits per second.
func (r Rate) Mbits() float64 { return float64(r) / float64(Mbit) }

// BytesPer is the number of bytes r carries in d.
func (r Rate) BytesPer(d time.Duration) uint64 {
	return uint64(float64(r) / 8 * d.Seconds())
}

// splitList splits a comma-separated per-site list. An empty string gives
// one empty element.
func splitList(s string) []string {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// ParseRates parses a comma-separated list of rates ("100mbit,50mbit").
func ParseRates(s string) ([]Rate, error) {
	var out []Rate
	for _, p := range splitList(s) {
		r, err := ParseRate(p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// ParseDelays parses a comma-separated list of durations ("20ms,40ms");
// empty elements and "0" mean no delay.
func ParseDelays(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, p := range splitList(s) {
		if p == "" || p == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(p)
		if err != nil {
			return nil, fmt.Errorf("bad delay %q: %w", p, err)
		}
		if d < 0 || d > 10*time.Second {
			return nil, fmt.Errorf("bad delay %q: want 0 to 10s", p)
		}
		out = append(out, d)
	}
	return out, nil
}
