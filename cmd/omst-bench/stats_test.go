package main

import (
	"bytes"
	"math"
	"testing"
)

func TestFitStartupRateRecoversModel(t *testing.T) {
	const t0, r = 0.8e-3, 750e6 // 0.8 ms, 750 MB/s
	var ms, ts []float64
	for _, m := range fitSizes(1<<10, 1<<30) {
		ms = append(ms, float64(m))
		ts = append(ts, t0+float64(m)/r)
	}
	f, ok := fitStartupRate(ms, ts)
	if !ok {
		t.Fatal("no fit")
	}
	if math.Abs(f.t0-t0) > 1e-9 || math.Abs(f.rInf-r)/r > 1e-6 {
		t.Fatalf("fit t0 %g r_inf %g, want %g %g", f.t0, f.rInf, t0, r)
	}
	if got := f.at(1 << 20); math.Abs(got-(t0+(1<<20)/r)) > 1e-12 {
		t.Fatalf("at(1 MiB) = %g", got)
	}
}

func TestFitStartupRateSmallSizesSetT0(t *testing.T) {
	// 10% noise on the largest size must not swamp a 0.1 ms start-up time.
	ms := []float64{1 << 10, 1 << 20, 1 << 30}
	ts := []float64{0.1e-3, 0.1e-3 + (1<<20)/1e9, 1.1 * (1 << 30) / 1e9}
	f, _ := fitStartupRate(ms, ts)
	if f.t0 < 0.05e-3 || f.t0 > 0.15e-3 {
		t.Fatalf("t0 = %g, want about 0.1 ms", f.t0)
	}
}

func TestFitStartupRateDegenerate(t *testing.T) {
	if _, ok := fitStartupRate([]float64{1, 1}, []float64{1, 2}); ok {
		t.Fatal("fit from one distinct size")
	}
	f, ok := fitStartupRate([]float64{1, 2}, []float64{2, 1})
	if !ok || !math.IsInf(f.rInf, 1) {
		t.Fatalf("falling times: %+v %v, want r_inf = +Inf", f, ok)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %g, want %g", c.in, got, c.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is not NaN")
	}
}

func TestPayloadBlobsDiffer(t *testing.T) {
	p := newPayload(64<<10, 1)
	a := bytes.Clone(p.next(64 << 10))
	b := p.next(64 << 10)
	for off := 0; off < len(a); off += stampStride {
		if bytes.Equal(a[off:off+stampStride], b[off:off+stampStride]) {
			t.Fatalf("4 KiB block at %d repeats across blobs", off)
		}
	}
}
