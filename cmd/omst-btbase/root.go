//go:build linux

package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// meta is what the root publishes (meta.json) once the swarm can start.
type meta struct {
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
	InfoHash  string `json:"info_hash"`
	PieceSize int64  `json:"piece_size"`
	Tracker   string `json:"tracker"`
	Torrent   string `json:"torrent"`
}

// startDelay is how far ahead of the last host's readiness the root puts
// the common start instant, so that every host has seen it in time.
const startDelay = 250 * time.Millisecond

// tools are the Debian packages' programs the baseline runs.
var tools = map[string]string{"aria2c": "aria2", "opentracker": "opentracker", "mktorrent": "mktorrent"}

func needTools(names ...string) error {
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			return fmt.Errorf("%s not found on PATH (Debian: apt-get install %s)", n, tools[n])
		}
	}
	return nil
}

// root prepares the swarm (payload, torrent, tracker, seeder), gives the
// start signal, collects the records and writes summary.json.
func (h *host) root(ctx context.Context) error {
	c := h.cfg
	if err := needTools("aria2c", "opentracker", "mktorrent"); err != nil {
		return err
	}
	for _, d := range []string{dirReady, dirDone, dirHeads, dirTracker} {
		if err := os.MkdirAll(c.path(d), 0o755); err != nil {
			return err
		}
	}
	pctx, cancel := context.WithTimeout(ctx, c.startup)
	defer cancel()
	m, seeder, tracker, err := h.prepareSwarm(pctx)
	if err != nil {
		return err
	}
	alive := func() error {
		for _, ch := range []*child{tracker, seeder} {
			if ch.exited() {
				return fmt.Errorf("%s exited (%v); see OUT/root/%s.log", ch.name, ch.err, ch.name)
			}
		}
		return nil
	}
	if err := writeJSON(c.path(fileMeta), m); err != nil {
		return err
	}
	if err := h.ready(); err != nil {
		return err
	}
	err = waitFor(pctx, c.startup, "wait for every host to be ready", func() bool {
		return count(c.path(dirReady)) >= c.instances || alive() != nil
	})
	if err == nil {
		err = alive()
	}
	if err != nil {
		return fmt.Errorf("%w (%d of %d hosts ready)", err, count(c.path(dirReady)), c.instances)
	}
	start := time.Now().Add(startDelay)
	if err := writeAtomic(c.path(fileStart), []byte(strconv.FormatInt(start.UnixNano(), 10)+"\n")); err != nil {
		return err
	}
	if err := sleepUntil(ctx, start); err != nil {
		return err
	}
	h.logf("start: %d hosts ready", c.instances)

	// Collect: every worker's record and every head's, while the seeder
	// and the tracker stay up. The workers give up at start + timeout; the
	// margin lets their records in.
	var failures []string
	nw := c.sites * c.workers
	err = waitFor(ctx, time.Until(start.Add(c.timeout+15*time.Second)), "wait for the workers' and heads' records", func() bool {
		return (count(c.path(dirDone)) >= nw && count(c.path(dirHeads)) >= c.sites) || alive() != nil
	})
	if err == nil {
		err = alive()
	}
	if err != nil {
		failures = append(failures, fmt.Sprintf("%v (%d of %d workers, %d of %d heads reported)",
			err, count(c.path(dirDone)), nw, count(c.path(dirHeads)), c.sites))
	}
	own := record{Case: "broadcast", Mode: modeBitTorrent, Role: "root", Site: -1, Instance: c.host,
		Bytes: c.blobSize, Seconds: time.Since(start).Seconds(), OK: true}
	recs := []record{own}
	for _, d := range []string{dirHeads, dirDone} {
		r, err := readRecords(c.path(d))
		if err != nil {
			failures = append(failures, err.Error())
		}
		recs = append(recs, r...)
	}
	s := summarize(c, recs, failures)
	s.Notes = append(s.Notes, fmt.Sprintf("torrent: %d pieces of %d bytes, info hash %s; tracker %s",
		(c.blobSize+c.pieceSize-1)/c.pieceSize, c.pieceSize, m.InfoHash, m.Tracker))
	if err := writeJSON(filepath.Join(c.out, "summary.json"), s); err != nil {
		h.logf("write summary: %v", err)
	}
	_ = appendResult(c.out, own)
	h.logf("SUMMARY case=%s mode=%s verified=%d/%d time_to_last=%.3fs median=%.3fs site_in_blobs=%.3f pass=%v",
		s.Case, s.Mode, s.Verified, s.Expected, s.TimeToLast, s.Median, s.SiteIn, s.Pass)
	for _, f := range s.Failures {
		h.logf("failure: %s", f)
	}
	if err := writeAtomic(c.path(fileFinish), nil); err != nil {
		h.logf("finish: %v", err)
	}
	if !s.Pass {
		return fmt.Errorf("broadcast/%s failed: %d failure(s), first: %s", modeBitTorrent, len(s.Failures), s.Failures[0])
	}
	return nil
}

// prepareSwarm writes the payload and its torrent, starts opentracker with
// the torrent whitelisted and an aria2c seeder, and waits until the tracker
// knows the seeder.
func (h *host) prepareSwarm(ctx context.Context) (m meta, seeder, tracker *child, err error) {
	c := h.cfg
	seedDir := filepath.Join(c.tmp, "seed")
	if err := os.MkdirAll(seedDir, 0o755); err != nil {
		return m, nil, nil, err
	}
	t0 := time.Now()
	data := filepath.Join(seedDir, "payload")
	m.Size, m.PieceSize = c.blobSize, c.pieceSize
	if m.SHA256, err = writePayload(data, c.seed, c.blobSize); err != nil {
		return m, nil, nil, err
	}
	m.Tracker = fmt.Sprintf("http://%s:%d/announce", c.rootIP, trackerPort)
	m.Torrent = c.path(fileTorrent)
	// mktorrent -l takes the piece length's base-2 logarithm.
	out, err := exec.CommandContext(ctx, "mktorrent", "-l", strconv.Itoa(bits.TrailingZeros64(uint64(c.pieceSize))),
		"-a", m.Tracker, "-n", "payload", "-o", m.Torrent, data).CombinedOutput()
	if err != nil {
		return m, nil, nil, fmt.Errorf("mktorrent: %w: %s", err, strings.TrimSpace(string(out)))
	}
	out, err = exec.CommandContext(ctx, "aria2c", "-S", m.Torrent).CombinedOutput()
	if err == nil {
		m.InfoHash, err = parseInfoHash(string(out))
	}
	if err != nil {
		return m, nil, nil, fmt.Errorf("aria2c -S %s: %w", m.Torrent, err)
	}
	h.logf("payload %d bytes, sha256 %s; torrent %s, info hash %s (%v)", m.Size, m.SHA256, m.Torrent, m.InfoHash,
		time.Since(t0).Round(time.Millisecond))

	// Debian's opentracker is built closed: it serves only whitelisted info
	// hashes. It chroots into -d and drops to nobody before it reads the
	// whitelist, so the list lives in that directory, readable by nobody.
	tdir := c.path(dirTracker)
	if err := os.Chmod(tdir, 0o755); err != nil {
		return m, nil, nil, err
	}
	wl := filepath.Join(tdir, "whitelist")
	if err := os.WriteFile(wl, []byte(m.InfoHash+"\n"), 0o644); err != nil {
		return m, nil, nil, err
	}
	if err := os.Chmod(wl, 0o644); err != nil {
		return m, nil, nil, err
	}
	port := strconv.Itoa(trackerPort)
	tracker, err = h.start("opentracker", []string{"opentracker", "-i", c.rootIP, "-p", port, "-P", port,
		"-d", tdir, "-u", "nobody", "-w", "whitelist"}, nil)
	if err != nil {
		return m, nil, nil, err
	}
	addr := net.JoinHostPort(c.rootIP, port)
	err = waitFor(ctx, c.startup, "wait for opentracker to listen on "+addr, func() bool {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil || tracker.exited()
	})
	if err == nil && tracker.exited() {
		err = fmt.Errorf("opentracker exited: %v (see OUT/root/opentracker.log)", tracker.err)
	}
	if err != nil {
		return m, nil, tracker, err
	}

	// The seeder checks the payload against the torrent (-V) and seeds.
	seeder, err = h.start("aria2c", append(h.ariaArgs(seedDir), "-V", m.Torrent), nil)
	if err != nil {
		return m, nil, tracker, err
	}
	var last error
	err = waitFor(ctx, c.startup, "wait for the tracker to list the seeder", func() bool {
		var n int
		n, last = scrapeComplete(ctx, c.rootIP, m.InfoHash)
		return n >= 1 || seeder.exited()
	})
	if err == nil && seeder.exited() {
		err = fmt.Errorf("the aria2c seeder exited: %v (see OUT/root/aria2c.log)", seeder.err)
	}
	if err != nil {
		return m, seeder, tracker, fmt.Errorf("%w (last scrape: %v)", err, last)
	}
	h.logf("tracker %s lists the seeder (%v after the start of the preparation)", m.Tracker, time.Since(t0).Round(time.Millisecond))
	return m, seeder, tracker, nil
}

var infoHashRE = regexp.MustCompile(`(?m)^Info Hash: ([0-9a-fA-F]{40})\s*$`)

// parseInfoHash finds the info hash in the output of `aria2c -S`.
func parseInfoHash(out string) (string, error) {
	mm := infoHashRE.FindStringSubmatch(out)
	if mm == nil {
		return "", errors.New("no \"Info Hash:\" line in its output")
	}
	return strings.ToLower(mm[1]), nil
}

var completeRE = regexp.MustCompile(`8:completei(\d+)e`)

// scrapeComplete asks the tracker how many seeders (peers with the whole
// torrent) it lists for the info hash.
func scrapeComplete(ctx context.Context, ip, infoHash string) (int, error) {
	raw, err := hex.DecodeString(infoHash)
	if err != nil {
		return 0, err
	}
	var q strings.Builder
	for _, b := range raw {
		fmt.Fprintf(&q, "%%%02X", b)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://%s/scrape?info_hash=%s", net.JoinHostPort(ip, strconv.Itoa(trackerPort)), q.String()), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, err
	}
	return parseScrape(body)
}

// parseScrape reads the seeders' count from a scrape response (bencoded
// "d5:filesd20:<hash>d8:completei1e...eee"); 0 when the hash is not listed.
func parseScrape(body []byte) (int, error) {
	if len(body) == 0 || body[0] != 'd' {
		return 0, fmt.Errorf("scrape: not a bencoded dictionary: %q", trim(body))
	}
	mm := completeRE.FindSubmatch(body)
	if mm == nil {
		return 0, nil
	}
	return strconv.Atoi(string(mm[1]))
}

func trim(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// readMeta reads the root's meta.json.
func readMeta(path string) (meta, error) {
	var m meta
	b, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(b, &m)
}
