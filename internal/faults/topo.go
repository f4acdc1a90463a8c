package faults

import (
	"fmt"
	"strings"
)

// TreeSpec describes a tree of daemons on loopback.
type TreeSpec struct {
	Heads          int  // head nodes under the root, sites s1, s2, ...
	WorkersPerHead int  // workers under each head
	RootWorkers    int  // workers directly under the root
	Fallback       bool // workers under a head get the root as fallback parent
	// NoFallback names workers that get no fallback parent even with
	// Fallback set (they depend on their head alone).
	NoFallback map[string]bool
	// Faults names daemons that lie: each runs Env.FaultBin with
	// OMST_FAULT set to the value given (internal/faultinject).
	Faults map[string]string
	// Extra gives further flags to the daemons it names.
	Extra map[string][]string
	// Env adds to the environment of the daemons it names (NAME=VALUE).
	Env        map[string][]string
	RootArgs   []string
	HeadArgs   []string
	WorkerArgs []string
}

// Tree is a running tree. Every daemon listens on a port picked up front,
// so a restart on the same home keeps identity and address.
type Tree struct {
	Root    *Daemon
	Heads   []*Daemon
	Workers []*Daemon // head 1's, head 2's, ..., then the root's own
	All     []*Daemon // root, heads, workers
}

// Below returns the daemons under d (by first parent), depth first.
func (t *Tree) Below(d *Daemon) []*Daemon {
	var out []*Daemon
	for _, x := range t.All {
		if len(x.Parents) > 0 && x.Parents[0] == d {
			out = append(out, x)
			out = append(out, t.Below(x)...)
		}
	}
	return out
}

// StartTree starts the daemons of spec, parents first, each waiting for
// its parent session.
func (e *Env) StartTree(spec TreeSpec) (*Tree, error) {
	n := 1 + spec.Heads*(1+spec.WorkersPerHead) + spec.RootWorkers
	ports, err := FreePorts(n)
	if err != nil {
		return nil, err
	}
	next := func() int { p := ports[0]; ports = ports[1:]; return p }
	t := &Tree{}
	mk := func(name string, parents []*Daemon, args []string) *Daemon {
		d := e.NewDaemonAt(name, e.Dir+"/"+name, next(), parents, append(append([]string(nil), args...), spec.Extra[name]...)...)
		if fault := spec.Faults[name]; fault != "" {
			d.bin, d.Environ = e.FaultBin, []string{faultEnv + "=" + fault}
		}
		d.Environ = append(d.Environ, spec.Env[name]...)
		t.All = append(t.All, d)
		return d
	}
	for name, fault := range spec.Faults {
		if !faultNames[fault] {
			return nil, fmt.Errorf("TreeSpec: %s: unknown fault %q", name, fault)
		}
		if err := checkFaultBuilds(e.Bin, e.FaultBin); err != nil {
			return nil, err
		}
	}
	t.Root = mk("root", nil, spec.RootArgs)
	if err := e.Start(t.Root); err != nil {
		return nil, err
	}
	for h := 1; h <= spec.Heads; h++ {
		site := fmt.Sprintf("s%d", h)
		hd := mk(fmt.Sprintf("h%d", h), []*Daemon{t.Root}, append([]string{"--site", site}, spec.HeadArgs...))
		t.Heads = append(t.Heads, hd)
	}
	for _, hd := range t.Heads {
		if err := e.Start(hd); err != nil {
			return nil, err
		}
	}
	var ws []*Daemon
	for h, hd := range t.Heads {
		for w := 1; w <= spec.WorkersPerHead; w++ {
			name := fmt.Sprintf("h%dw%d", h+1, w)
			parents := []*Daemon{hd}
			if spec.Fallback && !spec.NoFallback[name] {
				parents = append(parents, t.Root)
			}
			ws = append(ws, mk(name, parents,
				append([]string{"--site", fmt.Sprintf("s%d", h+1)}, spec.WorkerArgs...)))
		}
	}
	for w := 1; w <= spec.RootWorkers; w++ {
		ws = append(ws, mk(fmt.Sprintf("rw%d", w), []*Daemon{t.Root}, spec.WorkerArgs))
	}
	for _, w := range ws {
		if err := e.Start(w); err != nil {
			return nil, err
		}
	}
	for _, d := range t.All {
		if fault := spec.Faults[d.Name]; fault != "" && !d.armed(fault) {
			return nil, fmt.Errorf("%s runs %s with %s=%s but did not log that the fault is armed (not a fault-injection build?); log tail:\n%s",
				d.Name, d.bin, faultEnv, fault, d.LogTail(10))
		}
	}
	t.Workers = ws
	return t, nil
}

// SetBaselines records every running daemon's descriptor baseline.
func (e *Env) SetBaselines(ds ...*Daemon) error {
	for _, d := range ds {
		if err := d.SetBaseline(); err != nil {
			return err
		}
	}
	return nil
}

// pacedRoot is the root's flags in the cases that kill a worker mid-get:
// paced to 16 MiB/s (--max-upload-rate), so that a get of tens of MiB
// lasts long enough for a kill point to be reached mid-transfer.
var pacedRoot = []string{"--max-upload-rate", "16M"}

// StartRootAndWorker creates and starts a root (flags rootArgs) and a
// worker "w1" under it (w1's only parent; flags wArgs), homes DIR/root
// and DIR/w1 on ports picked up front (a restart keeps identity and
// address), and records both descriptor baselines. The step it names
// says the flags.
func (e *Env) StartRootAndWorker(rootArgs, wArgs []string) (root, w1 *Daemon, err error) {
	ports, err := FreePorts(2)
	if err != nil {
		return nil, nil, err
	}
	root = e.NewDaemonAt("root", e.Dir+"/root", ports[0], nil, rootArgs...)
	w1 = e.NewDaemonAt("w1", e.Dir+"/w1", ports[1], []*Daemon{root}, wArgs...)
	e.Step("start root%s and w1 under it%s", flagsText(rootArgs), flagsText(wArgs))
	for _, d := range []*Daemon{root, w1} {
		if err := e.Start(d); err != nil {
			return nil, nil, err
		}
	}
	if err := e.SetBaselines(root, w1); err != nil {
		return nil, nil, err
	}
	return root, w1, nil
}

// flagsText is " (FLAGS)" for a step's text, "" without flags.
func flagsText(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return " (" + strings.Join(args, " ") + ")"
}
