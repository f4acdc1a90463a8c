package faults

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// gctraceEnv makes a daemon's Go runtime print a line to its standard
// error (the daemon's log) at the end of every GC, with its heap's sizes:
// a reading of the Go heap that needs nothing of the daemon (its metrics
// endpoint can block on the node's own locks while its disk stalls).
const gctraceEnv = "GODEBUG=gctrace=1"

// ErrNotGCTrace: a line is not a GC's trace line (GODEBUG=gctrace=1).
var ErrNotGCTrace = errors.New("not a gctrace line")

// GCTrace is one GC as GODEBUG=gctrace=1 reports it, sizes in MiB (the
// runtime's "MB"):
//
//	gc 12 @3.456s 1%: 0.02+1.1+0.01 ms clock, ..., 40->42->21 MB, 44 MB goal, 0 MB stacks, 0 MB globals, 2 P
type GCTrace struct {
	N int // the GC's number
	// Start, End: the heap when the GC started and ended; Live: the heap
	// it marked live; Goal: the heap size it aimed to start at.
	Start, End, Live, Goal int64
}

// ParseGCTrace parses one line of GODEBUG=gctrace=1 output (the
// runtime's format since Go 1.19, where "MB" fields follow the timings).
// A line that is not one, or has a field it cannot read, gives an error
// wrapping ErrNotGCTrace.
func ParseGCTrace(line string) (GCTrace, error) {
	var g GCTrace
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "gc ")
	if !ok {
		return g, ErrNotGCTrace
	}
	num, rest, ok := strings.Cut(rest, " @")
	if !ok {
		return g, fmt.Errorf("%w: no @time in %q", ErrNotGCTrace, line)
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 {
		return g, fmt.Errorf("%w: GC number %q", ErrNotGCTrace, num)
	}
	g.N = n
	var heap, goal bool
	for _, f := range strings.Split(rest, ", ") {
		f = strings.TrimSpace(f)
		switch {
		case strings.HasSuffix(f, " MB goal"):
			v, err := strconv.ParseInt(strings.TrimSuffix(f, " MB goal"), 10, 64)
			if err != nil || v < 0 {
				return g, fmt.Errorf("%w: goal %q", ErrNotGCTrace, f)
			}
			g.Goal, goal = v, true
		case strings.HasSuffix(f, " MB") && strings.Contains(f, "->"):
			parts := strings.Split(strings.TrimSuffix(f, " MB"), "->")
			if len(parts) != 3 {
				return g, fmt.Errorf("%w: heap sizes %q", ErrNotGCTrace, f)
			}
			var vs [3]int64
			for i, p := range parts {
				v, err := strconv.ParseInt(p, 10, 64)
				if err != nil || v < 0 {
					return g, fmt.Errorf("%w: heap sizes %q", ErrNotGCTrace, f)
				}
				vs[i] = v
			}
			g.Start, g.End, g.Live, heap = vs[0], vs[1], vs[2], true
		}
	}
	if !heap || !goal {
		return g, fmt.Errorf("%w: no heap sizes or goal in %q", ErrNotGCTrace, line)
	}
	return g, nil
}

// logOffset is the size of d's log now: GCTracesSince reads what comes
// after it.
func (d *Daemon) logOffset() int64 {
	fi, err := os.Stat(d.LogPath)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// GCTracesSince returns the GCs d's log reports after offset (the daemon
// run with gctraceEnv).
func (d *Daemon) GCTracesSince(offset int64) ([]GCTrace, error) {
	f, err := os.Open(d.LogPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	var out []GCTrace
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if g, err := ParseGCTrace(sc.Text()); err == nil {
			out = append(out, g)
		}
	}
	return out, sc.Err()
}
