//go:build !omstfault

package faultinject

// Enabled: this is not a fault-injection build; every hook is compiled
// out.
const Enabled = false

// Current returns None: no fault is injected in this build, whatever the
// environment says.
func Current() Mode { return None }
