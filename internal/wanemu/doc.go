// Package wanemu emulates a WAN grid on one Linux machine with network
// namespaces, for running real omst daemons (one per emulated host) over
// links with a bandwidth and a latency.
//
// The topology is the one omst is built for: a root (the master), and per
// site a head node and W workers.
//
//	root ──WAN(site a)── a-head ──LAN── a-sw (bridge) ──LAN── a-w1 .. a-wW
//	     ──WAN(site b)── b-head ──LAN── b-sw (bridge) ──LAN── b-w1 .. b-wW
//
// Every host is a network namespace. A site's switch is a bridge in its own
// namespace, so the head's LAN port is one shaped link like every worker's:
// the head cannot send to its W workers faster than one LAN link, as on a
// real switch. Each WAN link is a veth pair between the root and a head.
//
// Two halves, kept apart:
//
//   - The plan (plan.go, rate.go, steps.go) is pure: NewPlan turns a Config
//     into hosts, addresses, the exact `ip`/`tc`/`iptables` command lines
//     that build the topology, the delay queues, and each host's
//     environment. It needs no root and is unit tested.
//   - The emulator (the *_linux.go files) runs those commands, holds the
//     packet delayers, runs processes inside namespaces, and tears
//     everything down.
//
// # Bandwidth and latency
//
// This kernel has htb but no netem. Bandwidth: an htb class on the egress
// of both ends of every link. Latency: an NFQUEUE delayer on the receiving
// side. An iptables rule in the receiving namespace's mangle PREROUTING chain
// (so it catches both traffic for the host and traffic it forwards) queues
// every packet that arrives on the link to a goroutine that accepts it after
// the one-way delay. Delaying on the receiving side matters: on the sender's
// OUTPUT chain, TCP small queues count the held packets as still in the
// host and collapse throughput to a few Mbit/s. Once the sender's veth has
// handed a packet over, the sender's socket no longer owns it.
//
// Measured on this machine (2 cores; `omst-wan check`, iperf3, ping):
// 100mbit/20ms WAN gives a TCP round trip of 41 ms (each delayed hop adds
// about 0.5 ms of wake-up and verdict) and 92-96 Mbit/s per direction
// (iperf3: 95.6 Mbit/s, no retransmissions); 1gbit/20ms gives 945-955
// Mbit/s; a 1gbit LAN port 930-956 Mbit/s.
//
// ping under-reports: it reads the kernel's receive timestamp, taken
// before the receiving host's PREROUTING delay, so a ping to the far end
// of one WAN link shows one delay instead of two (20 ms for a 40 ms RTT).
// TCP, and so omst, iperf3 and `omst-wan check`, sees the full round trip.
//
// Hosts get TCP buffers large enough for their links (see tcpBufMax):
// with Linux's 6 MiB default, one connection over 1gbit/40 ms RTT stops at
// about 590 Mbit/s, a limit of the host and not of the link.
//
// # Addresses
//
// Addresses exist only inside the namespaces of the run; two runs may use
// the same addresses. The data network is 10.0.0.0/8: the root is 10.0.0.1
// (on its loopback, reachable over every WAN link), site s (0-based) is
// 10.(s+1).0.0/24 with its head at .1 and worker k (1-based) at .(k+1). WAN
// links are point-to-point transfer nets 172.16.s.0/30 outside the data
// network, so each host has exactly one data IP. Routes: workers default via
// their head, heads default via the root, the root to each site via its WAN
// link. Workers reach the root (and other sites) through their head and its
// WAN link, as a star baseline needs.
//
// # Control path
//
// Processes inside namespaces reach a service in the host namespace (such as
// testground's sync service on 127.0.0.1:5050) through a TCP relay that the
// emulator runs: it listens on 127.0.0.1:5050 inside every host namespace and
// forwards each connection to the service. No address is added to the host
// namespace and the relay bypasses the shaped links. See ControlRelay.
package wanemu
