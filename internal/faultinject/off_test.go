//go:build !omstfault

package faultinject

import "testing"

// TestDefaultBuildInjectsNothing: without the omstfault tag the hook is
// off whatever OMST_FAULT says (the variable is not even read).
func TestDefaultBuildInjectsNothing(t *testing.T) {
	t.Setenv("OMST_FAULT", "corrupt-serve")
	if Enabled {
		t.Fatal("Enabled is true in a build without the omstfault tag")
	}
	if m := Current(); m != None {
		t.Fatalf("Current() = %v in a build without the omstfault tag, want none", m)
	}
}
