//go:build omstfault

package faultinject

import (
	"fmt"
	"os"
)

// Enabled: this is a fault-injection build (-tags omstfault).
const Enabled = true

// EnvVar names the environment variable that selects the fault.
const EnvVar = "OMST_FAULT"

var current = fromEnv()

// fromEnv reads EnvVar: an unknown value ends the process with a message
// (a suite that asks for a fault the binary does not know must not run a
// daemon that behaves); a known one is announced on standard error, which
// the suite reads in the daemon's log to know the fault is armed.
func fromEnv() Mode {
	v, ok := os.LookupEnv(EnvVar)
	if !ok || v == "" {
		return None
	}
	m, err := Parse(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "omst: %s: %v\n", EnvVar, err)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "omst: fault injection armed: %s=%s\n", EnvVar, m)
	return m
}

// Current returns the fault this process injects.
func Current() Mode { return current }
