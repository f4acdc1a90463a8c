package gridops

import (
	"strconv"
	"strings"

	"github.com/omst-project/omst/pkg/bytesize"
	"github.com/omst-project/omst/pkg/topology"
)

// Host states in `grid status`.
const (
	StateUp          = "up"          // the daemon answered
	StateDown        = "down"        // omst is installed, no daemon answered
	StateMissing     = "no-omst"     // no omst binary in DIR/bin
	StateUnreachable = "unreachable" // ssh failed
)

// Probe is one host's probe for `grid status`: what it observed, or the
// error (ssh's) that kept it from observing.
type Probe struct {
	Obs Observation
	Err string
}

// StatusRow is one host's line of `grid status`.
type StatusRow struct {
	Host  *topology.Host
	State string
	// Parent is the host the daemon's current parent is (its peer ID
	// matched against the other hosts' status; a short peer ID when none
	// matches), with "(fallback)" when it is a fallback, then "connected"
	// or "DISCONNECTED"; "-" for the root and hosts not up.
	Parent string
	// ParentOK: the daemon is connected to its own parent (not a fallback);
	// the root is always.
	ParentOK bool
	// Cache is "USED/CAP"; In and Out the bytes received and sent (every
	// kind of peer); Transfers the fetches under way. "-" when not up.
	Cache, In, Out, Transfers string
	// Detail says why a host is not up.
	Detail string
}

// StatusRows makes `grid status`'s rows, in t's order, from each host's
// probe (by lower-cased Host; a missing one reads as not probed).
func StatusRows(t *topology.Topology, probes map[string]Probe) []StatusRow {
	byID := map[string]string{}
	for _, h := range t.Hosts {
		if p, ok := probes[strings.ToLower(h.Host)]; ok && p.Obs.Status != nil && p.Obs.Status.PeerID != "" {
			byID[p.Obs.Status.PeerID] = h.Host
		}
	}
	rows := make([]StatusRow, 0, len(t.Hosts))
	for _, h := range t.Hosts {
		r := StatusRow{Host: h, Parent: "-", Cache: "-", In: "-", Out: "-", Transfers: "-"}
		p, ok := probes[strings.ToLower(h.Host)]
		switch {
		case !ok:
			r.State, r.Detail = StateUnreachable, "not probed"
		case p.Err != "":
			r.State, r.Detail = StateUnreachable, p.Err
		case p.Obs.Status == nil && !p.Obs.HasBinary:
			r.State, r.Detail = StateMissing, "no omst at "+h.Bin()+": run omst grid up"
		case p.Obs.Status == nil:
			r.State, r.Detail = StateDown, "no daemon answers"
			if p.Obs.StatusErr != "" {
				r.Detail += ": " + p.Obs.StatusErr
			}
			if p.Obs.Pid != 0 {
				r.Detail += " (pid " + strconv.Itoa(p.Obs.Pid) + " holds its home)"
			}
		default:
			st := p.Obs.Status
			r.State = StateUp
			r.Cache = bytesize.Format(st.CacheUsed) + "/" + bytesize.Format(st.CacheCap)
			r.In, r.Out = bytesize.Format(int64(sum(st.BytesIn))), bytesize.Format(int64(sum(st.BytesOut)))
			r.Transfers = strconv.Itoa(len(st.Transfers))
			r.ParentOK = h.Parent == ""
			if st.Parent != "" {
				id := ParentID(st.Parent)
				name, known := byID[id]
				if !known {
					name = shortID(id)
				}
				r.Parent = name
				if known && !strings.EqualFold(name, h.Parent) {
					r.Parent += " (fallback)"
				}
				if st.ParentConnected {
					r.Parent += " connected"
					r.ParentOK = known && strings.EqualFold(name, h.Parent)
				} else {
					r.Parent += " DISCONNECTED"
				}
			} else if h.Parent != "" {
				r.Parent = "none"
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// ParentID is the peer ID in a daemon's status's parent: its multiaddr
// ends in /p2p/ID.
func ParentID(addr string) string {
	if i := strings.LastIndex(addr, "/p2p/"); i >= 0 {
		return addr[i+len("/p2p/"):]
	}
	return addr
}

func sum(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}

// shortID shortens a peer ID to its last 8 characters.
func shortID(p string) string {
	if len(p) <= 12 {
		return p
	}
	return "…" + p[len(p)-8:]
}
