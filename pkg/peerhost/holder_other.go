//go:build !linux

package peerhost

// portHolder names the process that holds port; only Linux is supported.
func portHolder(network string, port int) string { return "" }
