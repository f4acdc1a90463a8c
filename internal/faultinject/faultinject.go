// Package faultinject lets a daemon built for the fault suite misbehave on
// purpose, so that internal/faults can test how its peers cope with a
// worker that lies to its siblings (docs/faults.md: worker-corrupt,
// worker-liar, worker-silent) or a relay that lies to its children
// (relay-busy, relay-redirect).
//
// The hook exists only in a build with the tag omstfault (the suite's
// bin/omst-fault, built by `make faults`): there Enabled is true and
// Current returns the fault named by the environment variable OMST_FAULT
// of the process (read once, at start; an unknown value makes the process
// exit at once with a message naming it). In every other build, the omst
// binary users run included, Enabled is the constant false and Current
// returns None whatever the environment holds, so the compiler drops every
// call site (`if faultinject.Enabled { ... }`) and the binary holds no
// fault code (cmd/omst's TestDefaultBuildHasNoFaultInjection checks the
// binary; the suite checks both binaries before it runs).
package faultinject

import "fmt"

// Mode is the fault a daemon injects.
type Mode uint8

const (
	// None: the daemon behaves.
	None Mode = iota
	// CorruptServe: every chunk the daemon sends to a sibling (a peer of
	// its site that asked with GET_SIBLING) has one byte of its first
	// bytes flipped: of its first piece (fetch 1.3.0), or of the whole
	// chunk (1.2.0).
	CorruptServe
	// NotFoundServe: the daemon answers every chunk request of a sibling
	// NOT_FOUND at once, although it holds or fetches the chunk (the
	// relay believes it holds it and keeps sending siblings to it).
	NotFoundServe
	// SilentServe: the daemon never answers a chunk request of a sibling
	// (the reply is held until the stream ends).
	SilentServe
	// BusyRelay: as a relay, the daemon serves its connected children no
	// chunk: it REDIRECTs every plain GET of one to a peer that is no
	// member (a made-up peer ID at a closed port), declines every hedge
	// (NOT_FOUND) and answers every GET_DIRECT that allows it (fetch
	// 1.4.0's deflect flag) BUSY, forever, past the protocol's bound of
	// fetchwire.MaxDeflections per chunk.
	BusyRelay
	// RedirectRelay: as BusyRelay, but the plain GETs are REDIRECTed in
	// turn to a made-up non-member, to another connected child of the
	// relay (which may not hold the chunk), to the relay itself and to
	// the asker (the last two malformed, fetch 1.4.0), and every
	// GET_DIRECT that allows it is REDIRECTed to a made-up non-member,
	// forever.
	RedirectRelay
)

// modeNames are the values OMST_FAULT takes, by Mode.
var modeNames = [...]string{None: "", CorruptServe: "corrupt-serve", NotFoundServe: "notfound-serve", SilentServe: "silent-serve",
	BusyRelay: "busy-relay", RedirectRelay: "redirect-relay"}

func (m Mode) String() string {
	if int(m) < len(modeNames) {
		if m == None {
			return "none"
		}
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", m)
}

// Parse reads a value of OMST_FAULT: "" (None), corrupt-serve,
// notfound-serve, silent-serve, busy-relay or redirect-relay. Any other
// value is an error that names it and lists the values.
func Parse(s string) (Mode, error) {
	for m, name := range modeNames {
		if s == name {
			return Mode(m), nil
		}
	}
	return None, fmt.Errorf("unknown fault %q (want one of corrupt-serve, notfound-serve, silent-serve, busy-relay, redirect-relay)", s)
}
