package main

import (
	"math"
	"slices"
)

// median returns the median of xs (the mean of the middle two for an even
// count); NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// minMax returns the smallest and largest of xs; NaNs for none.
func minMax(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(xs), slices.Max(xs)
}

// linearFit is t(m) = t0 + m / rInf (t0 in seconds, rInf in bytes per
// second; rInf is +Inf when the fitted slope is not positive).
type linearFit struct {
	t0   float64
	rInf float64
}

// fitStartupRate fits t(m) = t0 + m/r_inf to (size, seconds) points by
// least squares on relative residuals, i.e. minimising
// sum(((t_i - t0 - m_i*b) / t_i)^2): with sizes spread over six decades, an
// unweighted fit would let the largest sizes set t0 to within their own
// noise (often negative); relative weights let the small sizes set t0 and
// the large ones set r_inf. It returns ok=false for fewer than two distinct
// sizes.
func fitStartupRate(sizes, secs []float64) (linearFit, bool) {
	var sw, sm, st, smm, smt float64
	distinct := map[float64]bool{}
	for i := range sizes {
		if secs[i] <= 0 || math.IsNaN(secs[i]) {
			continue
		}
		w := 1 / (secs[i] * secs[i])
		m, t := sizes[i], secs[i]
		sw += w
		sm += w * m
		st += w * t
		smm += w * m * m
		smt += w * m * t
		distinct[m] = true
	}
	if len(distinct) < 2 {
		return linearFit{}, false
	}
	det := sw*smm - sm*sm
	if det == 0 {
		return linearFit{}, false
	}
	b := (sw*smt - sm*st) / det
	a := (st - b*sm) / sw
	f := linearFit{t0: a, rInf: math.Inf(1)}
	if b > 0 {
		f.rInf = 1 / b
	}
	return f, true
}

// at returns the fitted time for m bytes.
func (f linearFit) at(m float64) float64 {
	if math.IsInf(f.rInf, 1) {
		return f.t0
	}
	return f.t0 + m/f.rInf
}
