//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The hosts share this machine's file system and coordinate through files
// in OMST_WAN_SHARED/bt (every file is written to a temporary name and
// renamed, so a reader sees it whole or not at all):
//
//	meta.json        the root: payload size and SHA-256, info hash, tracker (the torrent is ready,
//	                 the tracker and the seeder are up)
//	payload.torrent  the root's torrent
//	tracker/         opentracker's directory (it chroots there) with its whitelist
//	ready/HOST       each host, once prepared
//	start            the root, once every host is ready: the common start instant (Unix ns)
//	done/HOST.json   each worker's record
//	heads/HOST.json  each head's record (its WAN counters)
//	finish           the root, once the summary is written: every host stops
const (
	fileMeta    = "meta.json"
	fileTorrent = "payload.torrent"
	dirTracker  = "tracker"
	dirReady    = "ready"
	fileStart   = "start"
	dirDone     = "done"
	dirHeads    = "heads"
	fileFinish  = "finish"
)

// pollEvery is how often waits look at the shared directory.
const pollEvery = 20 * time.Millisecond

// btDir is the run's coordination directory.
func (c *config) btDir() string { return filepath.Join(c.shared, "bt") }

func (c *config) path(parts ...string) string {
	return filepath.Join(append([]string{c.btDir()}, parts...)...)
}

// writeAtomic writes b to path through a temporary file and a rename.
func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp." + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, append(b, '\n'))
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// waitFor polls cond until it holds, ctx ends or d passes; what names the
// wait in the error.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v", what, d.Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, context.Cause(ctx))
		case <-time.After(pollEvery):
		}
	}
	return nil
}

// count is the number of finished files (no temporary ones) in dir.
func count(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if !strings.Contains(e.Name(), ".tmp.") {
			n++
		}
	}
	return n
}

// readStart waits for the start file and returns the instant in it.
func (h *host) readStart(ctx context.Context, d time.Duration) (time.Time, error) {
	var start time.Time
	err := waitFor(ctx, d, "wait for the start signal (every host ready)", func() bool {
		b, err := os.ReadFile(h.cfg.path(fileStart))
		if err != nil {
			return false
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return false
		}
		start = time.Unix(0, ns)
		return true
	})
	return start, err
}

// sleepUntil waits until t (or ctx ends).
func sleepUntil(ctx context.Context, t time.Time) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(time.Until(t)):
		return nil
	}
}

// ready marks this host prepared.
func (h *host) ready() error {
	if err := os.MkdirAll(h.cfg.path(dirReady), 0o755); err != nil {
		return err
	}
	return writeAtomic(h.cfg.path(dirReady, h.cfg.host), nil)
}

// waitFinish waits (at most d) until the root says the run is over.
func (h *host) waitFinish(ctx context.Context, d time.Duration) error {
	return waitFor(ctx, d, "wait for the root's finish", func() bool { return exists(h.cfg.path(fileFinish)) })
}
