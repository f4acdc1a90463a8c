package tree

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFailLogLevels(t *testing.T) {
	var f failLog
	e1, e2 := errors.New("connection refused"), errors.New("timeout")
	steps := []struct {
		parent string
		err    error
		lvl    slog.Level
		n      int
	}{
		{"p", e1, slog.LevelWarn, 1},
		{"p", e1, slog.LevelDebug, 2},
		{"p", e1, slog.LevelDebug, 3},
		{"p", e2, slog.LevelWarn, 1}, // another failure: said once
		{"p", e2, slog.LevelDebug, 2},
		{"q", e2, slog.LevelWarn, 1}, // another parent
	}
	for i, s := range steps {
		lvl, n := f.level(s.parent, s.err)
		if lvl != s.lvl || n != s.n {
			t.Fatalf("step %d: level %v, count %d; want %v, %d", i, lvl, n, s.lvl, s.n)
		}
	}
	f.recovered()
	if lvl, _ := f.level("q", e2); lvl != slog.LevelWarn {
		t.Fatalf("after recovery: %v, want a warning again", lvl)
	}
}

// recordLog keeps the records of a logger.
type recordLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (r *recordLog) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec.Clone())
	r.mu.Unlock()
	return nil
}
func (r *recordLog) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recordLog) WithGroup(string) slog.Handler      { return r }

// count returns the records with message msg, by level.
func (r *recordLog) count(msg string) map[slog.Level]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[slog.Level]int{}
	for _, rec := range r.recs {
		if rec.Message == msg {
			out[rec.Level]++
		}
	}
	return out
}

// TestUnreachableParentLogsOnce: a parent that does not answer is a
// warning once, then debug lines at each retry (it used to be an INFO line
// at every retry); when it is back, the next failure is a warning again.
func TestUnreachableParentLogsOnce(t *testing.T) {
	root := newNode(t, nil, "", nil)
	rootInfo := root.info() // while it listens
	root.stop()
	logs := &recordLog{}
	w := newNode(t, nil, "a", nil, func(c *nodeCfg) { c.Parent = rootInfo; c.Logger = slog.New(logs) })
	const msg = "parent session ended"
	waitFor(t, "four failed attempts", 20*time.Second, func() bool {
		c := logs.count(msg)
		return c[slog.LevelWarn]+c[slog.LevelDebug] >= 4
	})
	c := logs.count(msg)
	if c[slog.LevelWarn] != 1 || c[slog.LevelInfo] != 0 || c[slog.LevelDebug] < 3 {
		t.Fatalf("%q lines by level: %v; want 1 warning, then debug lines only", msg, c)
	}
	logs.mu.Lock()
	for _, rec := range logs.recs {
		if rec.Message == msg && rec.Level == slog.LevelWarn {
			var note string
			rec.Attrs(func(a slog.Attr) bool {
				if a.Key == "note" {
					note = a.Value.String()
				}
				return true
			})
			if !strings.Contains(note, "debug") {
				t.Errorf("the warning does not say repeats go to debug level: note %q", note)
			}
		}
	}
	logs.mu.Unlock()

	// The parent comes back, then goes away again: one more warning.
	root2 := root.restart(t, nil, "")
	waitConnected(t, w)
	root2.stop()
	waitFor(t, "a warning for the new failure", 20*time.Second, func() bool { return logs.count(msg)[slog.LevelWarn] == 2 })
}
