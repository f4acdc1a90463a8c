package main

import (
	"cmp"
	"slices"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// routableFirst returns addrs (multiaddrs as strings) ordered for another
// host: addresses other hosts can dial first (global and private ones, DNS
// names), then IPv6 link-local ones, then loopback ones, each group in its
// given order. So `omst id | head -n 1` is an address a remote host can
// use whenever the daemon listens on one. A string that does not parse
// stays in the first group.
func routableFirst(addrs []string) []string {
	out := slices.Clone(addrs)
	slices.SortStableFunc(out, func(a, b string) int { return cmp.Compare(addrRank(a), addrRank(b)) })
	return out
}

// addrRank is the group of one address for routableFirst: 0 routable,
// 1 link-local, 2 loopback.
func addrRank(s string) int {
	a, err := ma.NewMultiaddr(s)
	if err != nil {
		return 0
	}
	switch {
	case manet.IsIPLoopback(a):
		return 2
	case manet.IsIP6LinkLocal(a):
		return 1
	}
	return 0
}
