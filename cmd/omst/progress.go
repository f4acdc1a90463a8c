package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/omst-project/omst/pkg/bytesize"
)

// progress draws a one-line progress bar on a terminal while bytes move:
//
//	get shared/init [#########             ]  31.2%  80.0 MiB / 256.0 MiB  40.1 MiB/s  ETA 4s
//
// Byte counts use bytesize.FormatFixed (one decimal, so that the line's
// width holds still); the rate is that of the last few seconds; the ETA
// is the rest at that rate. The last line gives the total time and the
// average rate.
type progress struct {
	label string
	total int64 // 0 when unknown
	done  atomic.Int64
	start time.Time
	stop  chan struct{}
	ended chan struct{}
	out   io.Writer
	// samples of (time, done) over the last rateWindow, for the rate
	// (only the drawing goroutine touches them).
	samples []progressSample
	width   func() int // the terminal's columns (0: unknown)
}

type progressSample struct {
	at time.Time
	n  int64
}

// rateWindow is how far back the rate of a progress line looks.
const rateWindow = 3 * time.Second

// newProgress returns nil (no bar) unless stderr is a terminal and quiet is off.
func newProgress(label string, total int64, quiet bool) *progress {
	if quiet || !isTerminal() {
		return nil
	}
	p := &progress{label: label, total: total, start: time.Now(), stop: make(chan struct{}), ended: make(chan struct{}), out: os.Stderr,
		width: func() int {
			w, _, err := term.GetSize(int(os.Stderr.Fd()))
			if err != nil {
				return 0
			}
			return w
		}}
	go p.loop()
	return p
}

// set sets the bytes done so far (for progress measured rather than
// counted). Safe on a nil progress.
func (p *progress) set(n int64) {
	if p != nil {
		p.done.Store(n)
	}
}

func (p *progress) loop() {
	defer close(p.ended)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			p.drawFinal()
			return
		case <-t.C:
			p.draw()
		}
	}
}

func (p *progress) draw() {
	fmt.Fprint(p.out, "\r"+p.fit(p.line(time.Now()))+"\x1b[K")
}

// drawFinal draws the last line: what moved, in how long, at what average.
func (p *progress) drawFinal() {
	n := p.done.Load()
	took := time.Since(p.start)
	avg := ""
	if s := took.Seconds(); s > 0 {
		avg = ", " + bytesize.FormatFixed(int64(float64(n)/s)) + "/s"
	}
	fmt.Fprintf(p.out, "\r%s\x1b[K\n", p.fit(fmt.Sprintf("%s  %s in %s%s", p.label, bytesize.FormatFixed(n), formatDuration(took), avg)))
}

// line is the progress line at now.
func (p *progress) line(now time.Time) string {
	n := p.done.Load()
	rate := p.rate(now, n)
	rateText := bytesize.FormatFixed(int64(rate)) + "/s"
	if p.total <= 0 {
		return fmt.Sprintf("%s  %s  %s  %s", p.label, bytesize.FormatFixed(n), rateText, formatDuration(now.Sub(p.start)))
	}
	pct := min(float64(n)*100/float64(p.total), 100)
	const width = 24
	fill := min(int(pct/100*width), width)
	bar := strings.Repeat("#", fill) + strings.Repeat(" ", width-fill)
	eta := "ETA --"
	if rate > 0 && n < p.total {
		eta = "ETA " + formatDuration(time.Duration(float64(p.total-n)/rate*float64(time.Second)))
	} else if n >= p.total {
		eta = "ETA 0s"
	}
	return fmt.Sprintf("%s [%s] %5.1f%%  %s / %s  %s  %s", p.label, bar, pct, bytesize.FormatFixed(n), bytesize.FormatFixed(p.total), rateText, eta)
}

// rate is the bytes per second over the last rateWindow (since the start,
// at first).
func (p *progress) rate(now time.Time, n int64) float64 {
	p.samples = append(p.samples, progressSample{now, n})
	for len(p.samples) > 2 && now.Sub(p.samples[1].at) >= rateWindow {
		p.samples = p.samples[1:]
	}
	first := progressSample{p.start, 0}
	if len(p.samples) > 1 && now.Sub(p.samples[0].at) >= rateWindow/2 {
		first = p.samples[0]
	}
	dt := now.Sub(first.at).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(n-first.n) / dt
}

// fit cuts a line to the terminal's width, so that it never wraps (a
// wrapped line is not overwritten by the next).
func (p *progress) fit(s string) string {
	if p.width == nil {
		return s
	}
	if w := p.width(); w > 1 && utf8.RuneCountInString(s) >= w {
		r := []rune(s)
		return string(r[:w-1])
	}
	return s
}

// formatDuration gives d to the second ("4s", "1m05s", "2h03m"); under a
// second, in milliseconds ("40ms").
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// finish stops the bar. Safe on a nil progress.
func (p *progress) finish() {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.ended
}

// reader counts bytes read through r. Safe on a nil progress.
func (p *progress) reader(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	return &countingReader{r: r, n: &p.done}
}

// writer counts bytes written through w. Safe on a nil progress.
func (p *progress) writer(w io.Writer) io.Writer {
	if p == nil {
		return w
	}
	return &countingWriter{w: w, n: &p.done}
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	k, err := c.r.Read(b)
	c.n.Add(int64(k))
	return k, err
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	k, err := c.w.Write(b)
	c.n.Add(int64(k))
	return k, err
}

// isTerminal reports whether standard error is a terminal.
func isTerminal() bool { return term.IsTerminal(int(os.Stderr.Fd())) }
