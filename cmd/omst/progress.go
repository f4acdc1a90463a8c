package main

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"github.com/omst-project/omst/pkg/bytesize"
)

// progress draws a one-line progress bar on a terminal while bytes move.
type progress struct {
	label string
	total int64 // 0 when unknown
	done  atomic.Int64
	start time.Time
	stop  chan struct{}
	ended chan struct{}
	out   io.Writer
}

// newProgress returns nil (no bar) unless stderr is a terminal and quiet is off.
func newProgress(label string, total int64, quiet bool) *progress {
	if quiet || !isTerminal() {
		return nil
	}
	p := &progress{label: label, total: total, start: time.Now(), stop: make(chan struct{}), ended: make(chan struct{}), out: os.Stderr}
	go p.loop()
	return p
}

func (p *progress) loop() {
	defer close(p.ended)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			p.draw()
			fmt.Fprintln(p.out)
			return
		case <-t.C:
			p.draw()
		}
	}
}

func (p *progress) draw() {
	n := p.done.Load()
	rate := float64(n) / time.Since(p.start).Seconds()
	if p.total > 0 {
		pct := float64(n) * 100 / float64(p.total)
		const width = 30
		fill := int(pct / 100 * width)
		if fill > width {
			fill = width
		}
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = ' '
			if i < fill {
				bar[i] = '#'
			}
		}
		fmt.Fprintf(p.out, "\r%s [%s] %5.1f%% %s / %s  %s/s   ", p.label, bar, pct, bytesize.Format(n), bytesize.Format(p.total), bytesize.Format(int64(rate)))
		return
	}
	fmt.Fprintf(p.out, "\r%s %s  %s/s   ", p.label, bytesize.Format(n), bytesize.Format(int64(rate)))
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
