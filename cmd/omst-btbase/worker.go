//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/omst-project/omst/internal/wanemu/ifstat"
)

// worker downloads the torrent with aria2c from the start instant, records
// when aria2c reports it complete, verifies the bytes and seeds until the
// root says the run is over. Failures before the start end the program (and
// through omst-wan's -fail-fast, the run); failures after it are reported
// in the worker's record.
func (h *host) worker(ctx context.Context) error {
	c := h.cfg
	if err := needTools("aria2c"); err != nil {
		return err
	}
	var m meta
	err := waitFor(ctx, c.startup, "wait for the root's torrent, tracker and seeder", func() bool {
		var err error
		m, err = readMeta(c.path(fileMeta))
		return err == nil
	})
	if err != nil {
		return err
	}
	dl := filepath.Join(c.tmp, "dl")
	if err := os.MkdirAll(dl, 0o755); err != nil {
		return err
	}
	complete := filepath.Join(c.tmp, "complete")
	hook, err := writeHook(c.tmp, complete)
	if err != nil {
		return err
	}
	if err := h.ready(); err != nil {
		return err
	}
	start, err := h.readStart(ctx, 2*c.startup)
	if err != nil {
		return err
	}
	if err := sleepUntil(ctx, start); err != nil {
		return err
	}

	rec := record{Case: "broadcast", Mode: modeBitTorrent, Role: "worker", Site: c.site, Index: c.index, Instance: c.host}
	aria, err := h.download(ctx, start, m, dl, hook, complete, &rec)
	if err != nil {
		rec.OK, rec.Error = false, err.Error()
	}
	if werr := writeJSON(c.path(dirDone, c.host+".json"), rec); werr != nil {
		return fmt.Errorf("report: %w (and: %v)", werr, err)
	}
	_ = appendResult(c.out, rec)
	h.logf("done: ok=%v seconds=%.3f verified_seconds=%.3f %s", rec.OK, rec.Seconds, rec.VerifiedSeconds, rec.Error)

	// Seed until every worker is done and the root has its summary, as a
	// swarm would.
	if ferr := h.waitFinish(ctx, time.Until(start.Add(c.timeout+time.Minute))); ferr != nil && err == nil {
		err = ferr
	}
	if aria != nil && aria.exited() && err == nil && aria.err != nil {
		h.logf("aria2c exited while seeding: %v", aria.err)
	}
	return err
}

// download runs the leecher and fills rec; it returns the aria2c process
// (still seeding) when it started.
func (h *host) download(ctx context.Context, start time.Time, m meta, dl, hook, complete string, rec *record) (*child, error) {
	c := h.cfg
	aria, err := h.start("aria2c", append(h.ariaArgs(dl), "--on-bt-download-complete="+hook, m.Torrent), nil)
	if err != nil {
		return nil, err
	}
	err = waitFor(ctx, time.Until(start.Add(c.timeout)), "download", func() bool {
		return exists(complete) || aria.exited()
	})
	if err != nil {
		return aria, err
	}
	b, rerr := os.ReadFile(complete)
	if rerr != nil {
		return aria, fmt.Errorf("aria2c exited (%v) before it reported the download complete; see %s", aria.err,
			filepath.Join(c.out, "aria2c.log"))
	}
	f := strings.Fields(string(b))
	ns, perr := int64(0), fmt.Errorf("hook wrote %q", b)
	if len(f) >= 1 {
		ns, perr = strconv.ParseInt(f[0], 10, 64)
	}
	if perr != nil {
		return aria, fmt.Errorf("completion time: %w", perr)
	}
	rec.Seconds = time.Unix(0, ns).Sub(start).Seconds()
	path := filepath.Join(dl, "payload")
	n, sum, err := hashFile(path)
	rec.VerifiedSeconds = time.Since(start).Seconds()
	rec.Bytes = n
	switch {
	case err != nil:
		return aria, fmt.Errorf("read %s: %w", path, err)
	case n != m.Size:
		return aria, fmt.Errorf("wrong bytes: %s has %d bytes, want %d", path, n, m.Size)
	case sum != m.SHA256:
		return aria, fmt.Errorf("wrong bytes: %s: SHA-256 %s, the root's is %s", path, sum, m.SHA256)
	}
	rec.OK = true
	return aria, nil
}

// writeHook writes the script aria2c runs when the download is complete
// (--on-bt-download-complete, with GID, number of files and path): it
// writes the time (Unix ns) and the path to complete.
func writeHook(dir, complete string) (string, error) {
	path := filepath.Join(dir, "complete.sh")
	script := "#!/bin/sh\n" +
		"# aria2c --on-bt-download-complete: $1 GID, $2 number of files, $3 path\n" +
		"t=$(date +%s%N) || exit 1\n" +
		"printf '%s %s\\n' \"$t\" \"$3\" > " + shQuote(complete+".tmp") + " && mv " + shQuote(complete+".tmp") + " " + shQuote(complete) + "\n"
	return path, os.WriteFile(path, []byte(script), 0o755)
}

// shQuote quotes s for sh.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// head only routes; it counts the bytes on its WAN link from the start
// instant until every worker is done.
func (h *host) head(ctx context.Context) error {
	c := h.cfg
	if err := os.MkdirAll(c.path(dirHeads), 0o755); err != nil {
		return err
	}
	if err := h.ready(); err != nil {
		return err
	}
	start, err := h.readStart(ctx, 3*c.startup)
	if err != nil {
		return err
	}
	if err := sleepUntil(ctx, start); err != nil {
		return err
	}
	rec := record{Case: "broadcast", Mode: modeBitTorrent, Role: "head", Site: c.site, Index: c.site, Instance: c.host, OK: true}
	var c0 ifstat.Counters
	if c.wanIface != "" {
		if c0, err = ifstat.Read(c.wanIface); err != nil {
			rec.OK, rec.Error = false, err.Error()
		}
	} else {
		rec.Note = "OMST_WAN_WAN_IFACE not set: no WAN counters"
	}
	nw := c.sites * c.workers
	err = waitFor(ctx, time.Until(start.Add(c.timeout+10*time.Second)), "wait for every worker", func() bool {
		return count(c.path(dirDone)) >= nw || exists(c.path(fileFinish))
	})
	rec.Seconds = time.Since(start).Seconds()
	if err != nil {
		rec.Note = strings.TrimSpace(rec.Note + " " + err.Error())
	}
	if c.wanIface != "" && rec.OK {
		c1, rerr := ifstat.Read(c.wanIface)
		if rerr != nil {
			rec.OK, rec.Error = false, rerr.Error()
		} else {
			d := c1.Sub(c0)
			rec.WANIface, rec.WANRxBytes, rec.WANTxBytes = c.wanIface, d.RxBytes, d.TxBytes
		}
	}
	if err := writeJSON(c.path(dirHeads, c.host+".json"), rec); err != nil {
		return err
	}
	_ = appendResult(c.out, rec)
	h.logf("WAN %s: received %d bytes, sent %d bytes in %.3fs", rec.WANIface, rec.WANRxBytes, rec.WANTxBytes, rec.Seconds)
	return h.waitFinish(ctx, time.Until(start.Add(c.timeout+time.Minute)))
}
