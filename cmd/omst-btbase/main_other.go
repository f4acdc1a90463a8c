//go:build !linux

package main

import (
	"fmt"
	"os"
)

// omst-btbase runs inside omst-wan's network namespaces, which need Linux.
func main() {
	fmt.Fprintln(os.Stderr, "omst-btbase: runs under omst-wan, which needs Linux")
	os.Exit(77)
}
