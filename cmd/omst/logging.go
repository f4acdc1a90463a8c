package main

import (
	"fmt"
	"log/slog"
	"os"
)

// newLogHandler returns the daemon's log handler on standard error: text
// (logfmt-like key=value lines) or json (one object per line, with time,
// level, msg and the attributes).
func newLogHandler(format string, lvl slog.Level) (slog.Handler, error) {
	o := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text", "":
		return slog.NewTextHandler(os.Stderr, o), nil
	case "json":
		return slog.NewJSONHandler(os.Stderr, o), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: want text or json", format)}
}
