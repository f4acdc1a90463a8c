package node

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/omst-project/omst/pkg/blob"
)

// Debug lines of the get path (--log-level debug): where a name was found
// (the tree or the DHT), the blob and the sources its fetch starts with,
// and the end of the get with its bytes, time and the peers they came
// from. At other levels none of this costs anything but a level check.

func (n *Node) debugOn() bool { return n.log.Enabled(context.Background(), slog.LevelDebug) }

// debugLookup logs the outcome of one step of a name's lookup (via: "tree"
// or "DHT").
func (n *Node) debugLookup(via, name string, rec blob.Record, start time.Time, err error) {
	if !n.debugOn() {
		return
	}
	if err != nil {
		n.log.Debug("name lookup", "name", name, "via", via, "err", err, "took", time.Since(start).Round(time.Microsecond))
		return
	}
	n.log.Debug("name lookup", "name", name, "via", via, "id", rec.ID, "size", rec.Size, "origin", rec.Origin,
		"took", time.Since(start).Round(time.Microsecond))
}

// debugResolved logs a get's blob and the sources its fetch starts from.
func (n *Node) debugResolved(name string, rec blob.Record, m *blob.Manifest, start time.Time, err error) {
	if !n.debugOn() {
		return
	}
	if err != nil {
		n.log.Debug("get: not resolved", "name", name, "err", err, "took", time.Since(start).Round(time.Microsecond))
		return
	}
	local := n.holds(m)
	var srcs []string
	if !local {
		for _, s := range n.tree.Sources(rec.ID, "") {
			srcs = append(srcs, s.Kind.String()+" "+s.ID.String())
		}
		if n.loc != nil {
			srcs = append(srcs, "then holders found in the DHT")
		}
	}
	sources := strings.Join(srcs, ", ")
	switch {
	case local:
		sources = "none needed: every chunk is here"
	case sources == "":
		sources = "none known"
	}
	n.log.Debug("get: resolved", "name", name, "id", rec.ID, "size", rec.Size, "chunks", len(m.Chunks),
		"chunk_size", m.ChunkSize, "local", local, "sources", sources, "took", time.Since(start).Round(time.Microsecond))
}

// debugManifest logs where a get's manifest came from: with the lookup's
// answer (m, verified), or else the store or the blob's sources (read
// next). It is read once per get, and carried to the fetch.
func (n *Node) debugManifest(name string, rec blob.Record, m *blob.Manifest) {
	if !n.debugOn() {
		return
	}
	from := "the store or the blob's sources"
	if m != nil {
		from = "the lookup's answer"
	}
	n.log.Debug("get: manifest", "name", name, "id", rec.ID, "from", from)
}

// getSources describes the peers the get of id's transfer had bytes from.
func (n *Node) getSources(id cid.Cid) string {
	var from []string
	for _, t := range n.engine.Transfers() {
		if t.ID != id {
			continue
		}
		for _, f := range t.From {
			from = append(from, fmt.Sprintf("%s %s: %d", f.Kind, f.ID, f.Bytes))
		}
		break
	}
	if len(from) == 0 {
		return "this node's store"
	}
	return strings.Join(from, ", ")
}

// debugGetDone logs a get that read every byte (from: its sources, noted
// with its last bytes; "" to look them up now).
func (n *Node) debugGetDone(name string, id cid.Cid, bytes int64, took time.Duration, from string) {
	if from == "" {
		from = n.getSources(id)
	}
	mbps := 0.0
	if s := took.Seconds(); s > 0 {
		mbps = float64(bytes) / s / 1e6
	}
	n.log.Debug("get: done", "name", name, "id", id, "bytes", bytes, "took", took.Round(time.Microsecond),
		"MB_per_s", fmt.Sprintf("%.1f", mbps), "from", from)
}
