//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// record is one host's result, in the shape of the omst plan's records
// (testplans/omst/results.go) so that the same tools read both.
type record struct {
	Case     string  `json:"case"`
	Mode     string  `json:"mode"`
	Role     string  `json:"role"`
	Site     int     `json:"site"`
	Index    int     `json:"index"`
	Instance string  `json:"instance"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"` // workers: start instant to aria2c's download-complete hook
	OK       bool    `json:"ok"`
	Error    string  `json:"error,omitempty"`
	Note     string  `json:"note,omitempty"`

	// Workers: start instant to the SHA-256 check of the downloaded file done.
	VerifiedSeconds float64 `json:"verified_seconds,omitempty"`

	// Heads: bytes received and sent on the WAN link's interface from the
	// start instant until every worker was done (headers included).
	WANIface   string `json:"wan_iface,omitempty"`
	WANRxBytes uint64 `json:"wan_rx_bytes,omitempty"`
	WANTxBytes uint64 `json:"wan_tx_bytes,omitempty"`
}

// summary is OUT/root/summary.json, the fields of the omst plan's summary
// that apply to BitTorrent.
type summary struct {
	Case           string  `json:"case"`
	Mode           string  `json:"mode"`
	Run            string  `json:"run"`
	Sites          int     `json:"sites"`
	WorkersPerSite int     `json:"workers_per_site"`
	Bytes          int64   `json:"bytes"`
	PieceSize      int64   `json:"piece_size"`
	Expected       int     `json:"expected"`
	Verified       int     `json:"verified"`
	TimeToLast     float64 `json:"time_to_last"`
	Min            float64 `json:"min"`
	Median         float64 `json:"median"`
	Max            float64 `json:"max"`
	// SiteIn is SiteInWire: BitTorrent has no byte count of its own per
	// site, so both are the heads' interface counts (in blobs).
	SiteIn      []float64 `json:"site_in_blobs,omitempty"`
	SiteInWire  []float64 `json:"site_in_wire_blobs,omitempty"`
	SiteOutWire []float64 `json:"site_out_wire_blobs,omitempty"`
	Pass        bool      `json:"pass"`
	Failures    []string  `json:"failures,omitempty"`
	Notes       []string  `json:"notes,omitempty"`
	Records     []record  `json:"records"`
}

// summarize builds the summary from the records found (failures holds
// what went wrong outside them).
func summarize(cfg *config, recs []record, failures []string) summary {
	recs = append([]record(nil), recs...)
	failures = append([]string(nil), failures...)
	sort.Slice(recs, func(i, j int) bool {
		rank := map[string]int{"root": 0, "head": 1, "worker": 2}
		a, b := recs[i], recs[j]
		if a.Role != b.Role {
			return rank[a.Role] < rank[b.Role]
		}
		if a.Site != b.Site {
			return a.Site < b.Site
		}
		return a.Index < b.Index
	})
	s := summary{Case: "broadcast", Mode: modeBitTorrent, Run: cfg.run, Sites: cfg.sites,
		WorkersPerSite: cfg.workers, Bytes: cfg.blobSize, PieceSize: cfg.pieceSize,
		Expected: cfg.sites * cfg.workers, Failures: failures, Records: recs}
	var secs []float64
	heads := 0
	in, out := make([]float64, cfg.sites), make([]float64, cfg.sites)
	for _, r := range recs {
		if !r.OK {
			s.Failures = append(s.Failures, fmt.Sprintf("%s (%s site %d #%d): %s", r.Instance, r.Role, r.Site, r.Index, r.Error))
		}
		switch {
		case r.Role == "worker" && r.OK:
			secs = append(secs, r.Seconds)
		case r.Role == "head" && r.WANIface != "" && r.Site >= 0 && r.Site < cfg.sites:
			in[r.Site] = float64(r.WANRxBytes) / float64(cfg.blobSize)
			out[r.Site] = float64(r.WANTxBytes) / float64(cfg.blobSize)
			heads++
		}
	}
	s.Verified = len(secs)
	if s.Verified < s.Expected {
		s.Failures = append(s.Failures, fmt.Sprintf("%d of %d transfers verified", s.Verified, s.Expected))
	}
	if len(secs) > 0 {
		sort.Float64s(secs)
		s.Min, s.Max, s.Median = secs[0], secs[len(secs)-1], secs[len(secs)/2]
		s.TimeToLast = s.Max
	}
	if heads == cfg.sites {
		s.SiteIn, s.SiteInWire, s.SiteOutWire = in, in, out
	} else {
		s.Notes = append(s.Notes, fmt.Sprintf("WAN counters from %d of %d heads: no site_in_blobs", heads, cfg.sites))
	}
	s.Notes = append(s.Notes,
		"seconds: start instant to aria2c's download-complete hook (every piece SHA-1-checked by aria2c); "+
			"verified_seconds: to this program's SHA-256 check of the file against the root's",
		"site_in_blobs = site_in_wire_blobs: bytes received on each head's WAN interface from the start "+
			"until every worker was done, headers included, in blobs")
	s.Pass = len(s.Failures) == 0
	return s
}

// appendResult adds rec to OUT/results.jsonl, as the omst plan does.
func appendResult(dir string, rec record) error {
	f, err := os.OpenFile(filepath.Join(dir, "results.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(rec)
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readRecords reads every *.json record in dir.
func readRecords(dir string) ([]record, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var recs []record
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return recs, err
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			return recs, fmt.Errorf("%s: %w", p, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}
