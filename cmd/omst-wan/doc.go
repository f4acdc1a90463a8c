// Command omst-wan emulates a WAN grid on one Linux machine with network
// namespaces and runs a command on every emulated host: a testground plan
// instance, an omst daemon with a script, anything. See `omst-wan -h`.
package main
