package tree

import (
	"log/slog"
)

// failLog picks the level of the keeper's "parent session ended" lines, so
// that an unreachable parent does not fill the log: the first failure of a
// run is a warning, the following identical ones (same parent, same
// error) are debug lines, until the session comes up again or the failure
// changes.
type failLog struct {
	key string
	n   int // failures logged under key
}

// level returns the level for a failure with parent and err, and how many
// identical failures in a row this makes.
func (f *failLog) level(parent string, err error) (slog.Level, int) {
	key := parent + "\x00"
	if err != nil {
		key += err.Error()
	}
	if key == f.key {
		f.n++
		return slog.LevelDebug, f.n
	}
	f.key, f.n = key, 1
	return slog.LevelWarn, 1
}

// recovered ends a run of failures (the session came up).
func (f *failLog) recovered() { f.key, f.n = "", 0 }
