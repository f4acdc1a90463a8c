package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/omst-project/omst/pkg/bytesize"
)

// writeCSVs (re)writes every CSV file from what has been measured so far,
// so a run that fails half-way still leaves its finished figures.
func writeCSVs(dir string, r *results) error {
	runs := [][]string{{"figure", "size_bytes", "run", "seconds", "mbps"}}
	for _, s := range r.samples {
		runs = append(runs, []string{s.figure, itoa(s.size), strconv.Itoa(s.run), ftoa(s.secs, 9), ftoa(s.mbps(), 3)})
	}
	if err := writeCSV(filepath.Join(dir, "loopback-runs.csv"), runs); err != nil {
		return err
	}

	if fits := r.fits(); len(fits) > 0 {
		med := [][]string{{"series", "size_bytes", "median_seconds"}}
		params := [][]string{{"series", "t0_ms", "r_inf_mbps", "t0_ms_min", "t0_ms_max", "r_inf_mbps_min", "r_inf_mbps_max", "runs", "method"}}
		for _, f := range fits {
			for i, m := range f.sizes {
				med = append(med, []string{f.series, itoa(m), ftoa(f.medians[i], 9)})
			}
			params = append(params, []string{f.series, ftoa(f.fit.t0*1e3, 6), ftoa(f.fit.rInf/1e6, 3),
				ftoa(f.t0Lo*1e3, 6), ftoa(f.t0Hi*1e3, 6), ftoa(f.rLo/1e6, 3), ftoa(f.rHi/1e6, 3),
				strconv.Itoa(r.cfg.runs), "least squares on relative residuals over per-size medians"})
		}
		if err := writeCSV(filepath.Join(dir, "fit.csv"), med); err != nil {
			return err
		}
		if err := writeCSV(filepath.Join(dir, "fit-params.csv"), params); err != nil {
			return err
		}
	}

	if len(r.served) > 0 {
		rows := [][]string{{"run", "size_bytes", "root_bytes_served", "child_bytes_fetched", "root_cpu_s", "child_cpu_s"}}
		for _, s := range r.served {
			rows = append(rows, []string{strconv.Itoa(s.run), itoa(s.size), itoa(s.served), itoa(s.fetched), ftoa(s.senderCPU, 3), ftoa(s.receiverCPU, 3)})
		}
		if err := writeCSV(filepath.Join(dir, "parent-served.csv"), rows); err != nil {
			return err
		}
	}
	return nil
}

func writeCSV(path string, rows [][]string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// seriesFit is the t(m) fit of one series: over the per-size medians, and
// the spread of the fits made run by run.
type seriesFit struct {
	series     string
	sizes      []int64
	medians    []float64 // seconds, per size
	fit        linearFit
	t0Lo, t0Hi float64
	rLo, rHi   float64
}

// fits returns the fit of every series that has at least two sizes.
func (r *results) fits() []seriesFit {
	var out []seriesFit
	for _, series := range fitSeries {
		ss := r.of("fit-"+series, 0)
		if len(ss) == 0 {
			continue
		}
		f := seriesFit{series: series}
		bySize := map[int64][]float64{}
		byRun := map[int][]sample{}
		for _, s := range ss {
			if _, ok := bySize[s.size]; !ok {
				f.sizes = append(f.sizes, s.size)
			}
			bySize[s.size] = append(bySize[s.size], s.secs)
			byRun[s.run] = append(byRun[s.run], s)
		}
		slices.Sort(f.sizes)
		xs := make([]float64, len(f.sizes))
		for i, m := range f.sizes {
			xs[i] = float64(m)
			f.medians = append(f.medians, median(bySize[m]))
		}
		var ok bool
		if f.fit, ok = fitStartupRate(xs, f.medians); !ok {
			continue
		}
		var t0s, rs []float64
		for _, rs1 := range byRun {
			var ms, ts []float64
			for _, s := range rs1 {
				ms = append(ms, float64(s.size))
				ts = append(ts, s.secs)
			}
			if pf, ok := fitStartupRate(ms, ts); ok {
				t0s = append(t0s, pf.t0)
				rs = append(rs, pf.rInf)
			}
		}
		f.t0Lo, f.t0Hi = minMax(t0s)
		f.rLo, f.rHi = minMax(rs)
		out = append(out, f)
	}
	return out
}

// row is one line of the summary table.
type row struct {
	figure, size, median, spread, target, ratio, meets string
}

// writeSummary prints the markdown summary.
func writeSummary(w io.Writer, r *results) {
	cfg := r.cfg
	fmt.Fprintf(w, "# omst loopback benchmark\n\n")
	fmt.Fprintf(w, "Command (from the repository root):\n\n```\n%s\n```\n\n", cfg.cmdline)
	fmt.Fprintf(w, "- date: %s; took %v\n", r.started.UTC().Format(time.RFC3339), time.Since(r.started).Round(time.Second))
	fmt.Fprintf(w, "- machine: %d CPUs (GOMAXPROCS %d), Linux %s, %s; omst %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0),
		kernelRelease(), runtime.Version(), orDash(r.version))
	fmt.Fprintf(w, "- every figure is the median of %d runs (min..max beside it); MB = 10^6 bytes; all traffic on 127.0.0.1\n", cfg.runs)
	if cfg.figures["parent-fetch"] || cfg.figures["fit"] || cfg.figures["put-ingest"] {
		fmt.Fprintf(w, "- every fetch from the parent is cold at the child, every put new: each run uses a distinct blob (random bytes with a per-blob nonce every 4 KiB, so no chunk repeats)\n")
	}
	if cfg.figures["fit"] {
		fmt.Fprintf(w, "- t(m) = t0 + m / r_inf: least squares on relative residuals over the per-size medians (%s..%s); min..max from the same fit made run by run\n",
			bytesize.Format(cfg.minFit), bytesize.Format(fitTop(cfg)))
	}
	fmt.Fprintln(w)

	raw := mbpsOf(r.of("raw-tcp", 0))
	rawMed := median(raw)
	var rows []row
	if len(raw) > 0 {
		rows = append(rows, mbpsRow("raw TCP, two processes (MB/s)", cfg.size, raw,
			"reference limit (PERFORMANCE.md: ~2,600-3,000)", "1.00", "—"))
	}
	if lp := mbpsOf(r.of("libp2p-stream", 0)); len(lp) > 0 {
		rows = append(rows, mbpsRow("libp2p stream, TCP+TLS+yamux, one process (MB/s)", cfg.size, lp,
			"bound on any libp2p transfer (informative)", ratioStr(median(lp), rawMed), "—"))
	}
	if cf := mbpsOf(r.of("chunk-files", 0)); len(cf) > 0 {
		rows = append(rows, mbpsRow("write as fresh 1 MiB files, cache's filesystem (MB/s)", cfg.size, cf,
			"bound on caching every chunk (informative)", ratioStr(median(cf), rawMed), "—"))
	}
	if pf := mbpsOf(r.of("parent-fetch", 0)); len(pf) > 0 {
		rows = append(rows, mbpsRow("parent-fetch, cold, child socket (MB/s)", cfg.size, pf,
			"≥ 0.5 × raw TCP", ratioStr(median(pf), rawMed), meets(median(pf)/rawMed >= 0.5, !math.IsNaN(rawMed))))
	}
	if len(r.served) > 0 {
		var ratios []float64
		for _, s := range r.served {
			ratios = append(ratios, float64(s.served)/float64(s.size))
		}
		lo, hi := minMax(ratios)
		med := median(ratios)
		rows = append(rows, row{"parent-fetch: root bytes served / blob size", bytesize.Format(cfg.size), ftoa(med, 3),
			ftoa(lo, 3) + ".." + ftoa(hi, 3), "≈ 1 (one blob)", ftoa(med, 2), meets(med >= 0.99 && med <= 1.5, true)})
		for _, side := range []struct {
			who string
			cpu func(servedRow) float64
		}{{"sender (root)", func(s servedRow) float64 { return s.senderCPU }}, {"receiver (child)", func(s servedRow) float64 { return s.receiverCPU }}} {
			var perGiB []float64
			for _, s := range r.served {
				if c := side.cpu(s); !math.IsNaN(c) {
					perGiB = append(perGiB, c/(float64(s.size)/(1<<30)))
				}
			}
			if len(perGiB) == 0 {
				continue
			}
			lo, hi := minMax(perGiB)
			rows = append(rows, row{"parent-fetch: daemon CPU s per GiB, " + side.who, bytesize.Format(cfg.size), ftoa(median(perGiB), 2),
				ftoa(lo, 2) + ".." + ftoa(hi, 2), "informative (the CPU a compute node gives up)", "—", "—"})
		}
	}
	for _, f := range r.fits() {
		top := bytesize.Format(f.sizes[0]) + ".." + bytesize.Format(f.sizes[len(f.sizes)-1])
		switch f.series {
		case seriesParent:
			rows = append(rows,
				row{"parent-fetch fit: r_inf (MB/s)", top, mbpsStr(f.fit.rInf), mbpsStr(f.rLo) + ".." + mbpsStr(f.rHi),
					"≥ 0.5 × raw TCP", ratioStr(f.fit.rInf/1e6, rawMed), meets(f.fit.rInf/1e6/rawMed >= 0.5, !math.IsNaN(rawMed))},
				row{"parent-fetch fit: t0 (ms)", top, msStr(f.fit.t0), msStr(f.t0Lo) + ".." + msStr(f.t0Hi),
					"a few round trips (no fixed target)", "—", "—"})
		case seriesLocal:
			rows = append(rows,
				row{"local-get (cache hit at the node holding it) fit: t0 (ms)", top, msStr(f.fit.t0), msStr(f.t0Lo) + ".." + msStr(f.t0Hi),
					"≤ 1 ms", ftoa(f.fit.t0/1e-3, 2), meets(f.fit.t0 <= 1e-3, true)},
				row{"local-get fit: r_inf (MB/s)", top, mbpsStr(f.fit.rInf), mbpsStr(f.rLo) + ".." + mbpsStr(f.rHi),
					"— (ratio to raw TCP)", ratioStr(f.fit.rInf/1e6, rawMed), "—"})
		case seriesChildHit:
			rows = append(rows,
				row{"child-hit-get (child's cache, after its fetch) fit: t0 (ms)", top, msStr(f.fit.t0), msStr(f.t0Lo) + ".." + msStr(f.t0Hi),
					"— (informative; local-get's ≤ 1 ms)", ftoa(f.fit.t0/1e-3, 2), "—"},
				row{"child-hit-get fit: r_inf (MB/s)", top, mbpsStr(f.fit.rInf), mbpsStr(f.rLo) + ".." + mbpsStr(f.rHi),
					"— (ratio to raw TCP)", ratioStr(f.fit.rInf/1e6, rawMed), "—"})
		}
	}
	for _, p := range []struct{ figure, label string }{
		{"put-mem", "put from client memory, over the socket (MB/s)"},
		{"put-file", "put-file, daemon reads a page-cached file (MB/s)"},
	} {
		if xs := mbpsOf(r.of(p.figure, 0)); len(xs) > 0 {
			rows = append(rows, mbpsRow(p.label, cfg.size, xs, "≥ 500 MB/s", ftoa(median(xs)/500, 2), meets(median(xs) >= 500, true)))
		}
	}
	fmt.Fprintln(w, "| figure | size | median | min..max | target | ratio | meets |")
	fmt.Fprintln(w, "|---|---|---:|---|---|---:|---|")
	for _, x := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", x.figure, x.size, x.median, x.spread, x.target, x.ratio, x.meets)
	}

	if fits := r.fits(); len(fits) > 0 {
		fmt.Fprintf(w, "\nPer-size medians of single gets (ms; MB/s in brackets):\n\n")
		hdr, sep := "| size |", "|---:|"
		for _, f := range fits {
			hdr += " " + f.series + " |"
			sep += "---:|"
		}
		fmt.Fprintln(w, hdr)
		fmt.Fprintln(w, sep)
		for _, m := range fits[0].sizes {
			line := "| " + bytesize.Format(m) + " |"
			for _, f := range fits {
				i := slices.Index(f.sizes, m)
				if i < 0 {
					line += " — |"
					continue
				}
				t := f.medians[i]
				line += fmt.Sprintf(" %s (%s) |", msStr(t), mbpsStr(float64(m)/t))
			}
			fmt.Fprintln(w, line)
		}
	}
	files := []string{"loopback-runs.csv (every run)"}
	if len(r.fits()) > 0 {
		files = append(files, "fit.csv (per-size medians)", "fit-params.csv")
	}
	if len(r.served) > 0 {
		files = append(files, "parent-served.csv")
	}
	fmt.Fprintf(w, "\nCSV files in %s: %s.\n", cfg.out, strings.Join(files, ", "))
}

func fitTop(cfg *config) int64 {
	fs := fitSizes(cfg.minFit, cfg.maxFit)
	if len(fs) == 0 {
		return cfg.maxFit
	}
	return fs[len(fs)-1]
}

func mbpsOf(ss []sample) []float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = s.mbps()
	}
	return xs
}

func mbpsRow(label string, size int64, xs []float64, target, ratio, ok string) row {
	lo, hi := minMax(xs)
	return row{label, bytesize.Format(size), mbpsStr(median(xs) * 1e6), mbpsStr(lo*1e6) + ".." + mbpsStr(hi*1e6), target, ratio, ok}
}

// mbpsStr formats a rate in bytes per second as MB/s.
func mbpsStr(bps float64) string {
	switch {
	case math.IsInf(bps, 1):
		return "∞"
	case math.IsNaN(bps):
		return "—"
	}
	return strconv.FormatFloat(bps/1e6, 'f', 0, 64)
}

func msStr(secs float64) string {
	if math.IsNaN(secs) {
		return "—"
	}
	ms := secs * 1e3
	switch a := math.Abs(ms); {
	case a >= 100:
		return strconv.FormatFloat(ms, 'f', 0, 64)
	case a >= 1:
		return strconv.FormatFloat(ms, 'f', 2, 64)
	}
	return strconv.FormatFloat(ms, 'f', 3, 64)
}

func ratioStr(x, ref float64) string {
	if math.IsNaN(ref) || ref == 0 {
		return "— (no raw-tcp)"
	}
	if math.IsInf(x, 1) {
		return "∞"
	}
	return strconv.FormatFloat(x/ref, 'f', 2, 64)
}

func meets(ok, known bool) string {
	switch {
	case !known:
		return "—"
	case ok:
		return "yes"
	}
	return "**no**"
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func ftoa(x float64, prec int) string {
	if math.IsInf(x, 1) {
		return "inf"
	}
	if math.IsNaN(x) {
		return ""
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}
