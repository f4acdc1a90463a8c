//go:build omstfault

package faultinject

import "testing"

// TestFaultBuildEnabled: with the omstfault tag the hook is compiled in
// (run with go test -tags omstfault).
func TestFaultBuildEnabled(t *testing.T) {
	if !Enabled {
		t.Fatal("Enabled is false in a build with the omstfault tag")
	}
}
