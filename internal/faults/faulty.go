package faults

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Lying daemons. A case makes a daemon lie to its peers by running it from
// the fault-injection build of omst (Env.FaultBin: -tags omstfault, see
// internal/faultinject) with OMST_FAULT set (TreeSpec.Faults); every other
// daemon runs Env.Bin.

// faultEnv is the variable a fault-injection build reads.
const faultEnv = "OMST_FAULT"

// The faults a fault-injection build knows (faultinject.Parse), by their
// OMST_FAULT value.
const (
	FaultCorruptServe  = "corrupt-serve"  // flips a byte of every chunk it sends a sibling
	FaultNotFoundServe = "notfound-serve" // answers every sibling's chunk request NOT_FOUND
	FaultSilentServe   = "silent-serve"   // never answers a sibling's chunk request
	FaultBusyRelay     = "busy-relay"     // a relay that answers its children's GET_DIRECTs BUSY forever
	FaultRedirectRelay = "redirect-relay" // a relay that REDIRECTs its children's GET_DIRECTs to peers that cannot serve
)

var faultNames = map[string]bool{FaultCorruptServe: true, FaultNotFoundServe: true, FaultSilentServe: true,
	FaultBusyRelay: true, FaultRedirectRelay: true}

// liedMarker starts the line a lying daemon logs for each lie
// (pkg/transfer/internal/server's lieLog, logged by refuseSibling).
const liedMarker = "fault injection: lying to a sibling"

var (
	buildsMu      sync.Mutex
	buildsChecked = map[[2]string]error{}
)

// checkFaultBuilds checks, once per pair, that bin is no fault-injection
// build (the binary users run must not hold the hook: a Violation) and
// that faultBin is one.
func checkFaultBuilds(bin, faultBin string) error {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	key := [2]string{bin, faultBin}
	if err, ok := buildsChecked[key]; ok {
		return err
	}
	err := func() error {
		if faultBin == "" {
			return fmt.Errorf("no fault-injection build of omst given (-fault-bin; make faults builds bin/omst-fault with -tags omstfault)")
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			return fmt.Errorf("omst binary: %w", err)
		}
		if bytes.Contains(b, []byte(faultEnv)) {
			return violation("%s holds fault-injection code (the string %s): the omst binary must be built without -tags omstfault", bin, faultEnv)
		}
		f, err := os.ReadFile(faultBin)
		if err != nil {
			return fmt.Errorf("fault-injection build: %w (make faults builds it: go build -tags omstfault -o bin/omst-fault ./cmd/omst)", err)
		}
		if !bytes.Contains(f, []byte(faultEnv)) {
			return fmt.Errorf("%s is no fault-injection build (no %s in it): build it with go build -tags omstfault -o %s ./cmd/omst", faultBin, faultEnv, faultBin)
		}
		return nil
	}()
	buildsChecked[key] = err
	return err
}

// armed reports whether the daemon's log shows that it armed fault (what
// a fault-injection build prints at start when OMST_FAULT is set).
func (d *Daemon) armed(fault string) bool {
	return d.CountLog("fault injection armed: "+faultEnv+"="+fault) > 0
}

// CountLog counts the lines of the daemon's log (all its runs) that
// contain s.
func (d *Daemon) CountLog(s string) int {
	b, err := os.ReadFile(d.LogPath)
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}
