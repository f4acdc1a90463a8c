//go:build !linux

package main

import (
	"fmt"
	"os"
)

// omst-wan needs Linux network namespaces, tc and netfilter.
func main() {
	fmt.Fprintln(os.Stderr, "omst-wan: cannot emulate a WAN here: it needs Linux (network namespaces, tc, NFQUEUE)")
	os.Exit(77)
}
