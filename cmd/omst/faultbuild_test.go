package main

import (
	"bytes"
	"debug/elf"
	"os"
	"strings"
	"testing"
)

// TestDefaultBuildHasNoFaultInjection: the omst binary built without the
// omstfault tag (TestMain builds it as `make build` does) holds none of
// internal/faultinject's fault code: no symbol of that package or of the
// fetch server's fault hooks (refuseSibling, corruptForSibling, lieToChild), and not
// the name of the variable that would arm it. (Built with -tags omstfault, as bin/omst-fault for the fault
// suite, it holds all three, and this test fails on it.)
func TestDefaultBuildHasNoFaultInjection(t *testing.T) {
	f, err := elf.Open(omstBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatalf("symbols of %s: %v (the test needs a binary that is not stripped)", omstBin, err)
	}
	if len(syms) < 1000 {
		t.Fatalf("%s has %d symbols: too few to tell", omstBin, len(syms))
	}
	for _, s := range syms {
		if strings.Contains(s.Name, "internal/faultinject.") || strings.Contains(s.Name, ").refuseSibling") || strings.Contains(s.Name, ").corruptForSibling") || strings.Contains(s.Name, ").lieToChild") {
			t.Errorf("the default build links fault-injection code: symbol %s", s.Name)
		}
	}
	b, err := os.ReadFile(omstBin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("OMST_FAULT")) {
		t.Error("the default build holds the string OMST_FAULT: it reads the fault-injection variable")
	}
}
