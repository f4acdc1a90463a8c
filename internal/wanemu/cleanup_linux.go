package wanemu

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RunIDPrefix starts every run ID that NewRunID makes.
const RunIDPrefix = "omstw"

// NewRunID is a run ID unique on this machine while this process lives:
// "omstw<pid>", and "omstw<pid>x<n>" for the n-th further run of the process.
func NewRunID(n int) string {
	id := RunIDPrefix + strconv.Itoa(os.Getpid())
	if n > 0 {
		id += "x" + strconv.Itoa(n)
	}
	return id
}

// runOwner is the pid in a run ID made by NewRunID, or 0.
func runOwner(name string) int {
	rest, ok := strings.CutPrefix(name, RunIDPrefix)
	if !ok {
		return 0
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	pid, _ := strconv.Atoi(rest[:end])
	return pid
}

func alive(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return err == nil
}

// Leftover is a namespace or scratch directory a run left behind.
type Leftover struct {
	Path  string // /run/netns/<name> or <scratch root>/<RunID>
	Owner int    // pid of the run that made it, 0 if unknown
	Live  bool   // the owner is still running
}

// FindLeftovers lists namespaces and scratch directories (in ScratchRoots
// and the extra roots) whose names start with prefix (RunIDPrefix if empty).
func FindLeftovers(prefix string, extraRoots ...string) ([]Leftover, error) {
	if prefix == "" {
		prefix = RunIDPrefix
	}
	var out []Leftover
	seen := map[string]bool{}
	for _, dir := range append(append([]string{NetnsDir}, ScratchRoots...), extraRoots...) {
		dir = filepath.Clean(dir)
		if seen[dir] {
			continue
		}
		seen[dir] = true
		entries, err := os.ReadDir(dir)
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), prefix) {
				continue
			}
			if dir != NetnsDir && !e.IsDir() {
				continue
			}
			l := Leftover{Path: filepath.Join(dir, e.Name()), Owner: runOwner(e.Name())}
			l.Live = l.Owner > 0 && l.Owner != os.Getpid() && alive(l.Owner)
			out = append(out, l)
		}
	}
	return out, nil
}

// Cleanup removes leftovers: it kills every process inside each namespace,
// deletes the namespace and removes scratch directories. Leftovers of runs
// whose process still lives are kept unless force is set. It returns what
// it removed.
func Cleanup(ctx context.Context, prefix string, force bool, extraRoots ...string) ([]Leftover, error) {
	ls, err := FindLeftovers(prefix, extraRoots...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var removed []Leftover
	var first error
	for _, l := range ls {
		if l.Live && !force {
			continue
		}
		if filepath.Dir(l.Path) == NetnsDir {
			ns := filepath.Base(l.Path)
			killNetnsPids(ctx, ns)
			if err := run(ctx, []string{"ip", "netns", "del", ns}); err != nil {
				if first == nil {
					first = err
				}
				continue
			}
		} else if err := os.RemoveAll(l.Path); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		removed = append(removed, l)
	}
	return removed, first
}
