// Command omst-admitbench measures what membership (pkg/member) costs a
// new connection: the time from dialling a peer to the answer of a first
// one-byte request on an omst protocol, and the CPU both ends spend, with
// the grid open (no admission) and closed (certificates exchanged and
// checked), over TCP and QUIC, alternating, a fresh client identity per
// trial (so nothing is cached).
//
//	omst-admitbench loopback [-n 200]      both ends in this process
//	omst-admitbench wan [-n 8]             under omst-wan run: the root
//	                                       serves, worker 1 measures over
//	                                       the emulated WAN, the rest exit
//
// On the WAN the trials are paced 5.2 s apart: go-libp2p's resource
// manager admits new connections from one IPv4 address at 0.2 per second
// after a burst of 16 (loopback is exempt), and every trial is one.
//
// It prints one JSON document (results per mode and transport: median and
// quartiles of the set-up time, CPU per trial) on stdout.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/member"
	"github.com/omst-project/omst/pkg/peerhost"
)

const echoProto = "/omst/bench-echo/1.0.0"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: omst-admitbench loopback|wan [-n N]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	n := fs.Int("n", 0, "trials per mode and transport (default 200 on loopback, 15 on the WAN)")
	fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "loopback":
		err = loopback(or(*n, 200))
	case "wan":
		err = wan(or(*n, 8))
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "omst-admitbench:", err)
		os.Exit(1)
	}
}

func or(v, d int) int {
	if v > 0 {
		return v
	}
	return d
}

// server is one listening host: open, or closed with grid key k.
type server struct {
	h     host.Host
	addrs map[string]string // transport -> multiaddr with /p2p
}

func startServer(ip string, k *grid.Key) (*server, error) {
	priv, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return nil, err
	}
	adm, err := admission(k, priv)
	if err != nil {
		return nil, err
	}
	h, err := peerhost.New(peerhost.Options{Key: priv, Admission: adm,
		Listen: []string{"/ip4/" + ip + "/tcp/0", "/ip4/" + ip + "/udp/0/quic-v1"}})
	if err != nil {
		return nil, err
	}
	h.SetStreamHandler(echoProto, func(s network.Stream) {
		defer s.Close()
		var b [1]byte
		if _, err := io.ReadFull(s, b[:]); err == nil {
			s.Write(b[:])
		}
	})
	s := &server{h: h, addrs: map[string]string{}}
	for _, a := range peerhost.FullAddrs(h) {
		if strings.Contains(a, "/quic-v1/") {
			s.addrs["quic"] = a
		} else if strings.Contains(a, "/tcp/") {
			s.addrs["tcp"] = a
		}
	}
	return s, nil
}

// admission returns an open Admission (k nil) or one with a certificate
// of grid k for priv's peer.
func admission(k *grid.Key, priv crypto.PrivKey) (*member.Admission, error) {
	cfg := member.Config{Logger: quiet()}
	if k == nil {
		return member.New(cfg, member.Material{})
	}
	id, err := peer.IDFromPrivateKey(priv)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	cert, err := k.Issue(grid.Cert{Peer: id, Role: grid.RoleWorker, Prefixes: []string{"results/"},
		NotBefore: now.Add(-time.Minute).Unix(), NotAfter: now.Add(time.Hour).Unix(), Serial: uint64(now.UnixNano())})
	if err != nil {
		return nil, err
	}
	return member.New(cfg, member.Material{GridKey: k.Public(), Cert: cert})
}

// trial dials addr from a fresh client (closed with k, or open) and times
// connect + a one-byte request; it returns the set-up time, the connect
// time alone, and the CPU this process spent (both ends, on loopback).
func trial(ctx context.Context, addr string, k *grid.Key) (total, connect, cpu time.Duration, err error) {
	priv, _, _ := crypto.GenerateEd25519Key(nil)
	adm, err := admission(k, priv)
	if err != nil {
		return 0, 0, 0, err
	}
	h, err := peerhost.New(peerhost.Options{Key: priv, Admission: adm, Listen: []string{"/ip4/0.0.0.0/tcp/0"}})
	if err != nil {
		return 0, 0, 0, err
	}
	defer h.Close()
	ai, err := peerhost.ParsePeerAddr(addr)
	if err != nil {
		return 0, 0, 0, err
	}
	c0 := cpuTime()
	start := time.Now()
	if err := h.Connect(ctx, *ai); err != nil {
		return 0, 0, 0, err
	}
	connect = time.Since(start)
	s, err := h.NewStream(ctx, ai.ID, echoProto)
	if err != nil {
		return 0, 0, 0, err
	}
	defer s.Close()
	if _, err := s.Write([]byte{7}); err != nil {
		return 0, 0, 0, err
	}
	var b [1]byte
	if _, err := io.ReadFull(s, b[:]); err != nil {
		return 0, 0, 0, fmt.Errorf("echo: %w", err)
	}
	total = time.Since(start)
	// Let the server finish its side of the exchange before the CPU is
	// read (its HELLO handler runs concurrently).
	time.Sleep(5 * time.Millisecond)
	return total, connect, cpuTime() - c0, nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Result is one mode and transport's figures.
type Result struct {
	Mode      string     `json:"mode"` // open | closed
	Transport string     `json:"transport"`
	Trials    int        `json:"trials"`
	SetupMs   [3]float64 `json:"setup_ms"`   // quartiles: 25%, median, 75%
	ConnectMs float64    `json:"connect_ms"` // median, connect alone
	CPUMs     float64    `json:"cpu_ms"`     // median CPU per trial (this process)
}

// measure runs n trials of each mode and transport, alternating.
func measure(addrs map[string]map[string]string, k *grid.Key, n int, pace time.Duration) ([]Result, error) {
	type key struct{ mode, tr string }
	setups, conns, cpus := map[key][]float64{}, map[key][]float64{}, map[key][]float64{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for i := 0; i < n+2; i++ { // two warm-up rounds
		for _, tr := range []string{"tcp", "quic"} {
			for _, mode := range []string{"open", "closed"} {
				var kk *grid.Key
				if mode == "closed" {
					kk = k
				}
				time.Sleep(pace)
				tot, con, cpu, err := trial(ctx, addrs[mode][tr], kk)
				if err != nil {
					return nil, fmt.Errorf("%s %s trial %d: %w", mode, tr, i, err)
				}
				if i < 2 {
					continue
				}
				kk2 := key{mode, tr}
				setups[kk2] = append(setups[kk2], ms(tot))
				conns[kk2] = append(conns[kk2], ms(con))
				cpus[kk2] = append(cpus[kk2], ms(cpu))
			}
		}
	}
	var out []Result
	for _, tr := range []string{"tcp", "quic"} {
		for _, mode := range []string{"open", "closed"} {
			kk := key{mode, tr}
			out = append(out, Result{Mode: mode, Transport: tr, Trials: n,
				SetupMs:   [3]float64{q(setups[kk], 0.25), q(setups[kk], 0.5), q(setups[kk], 0.75)},
				ConnectMs: q(conns[kk], 0.5), CPUMs: q(cpus[kk], 0.5)})
		}
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func q(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(v))
	return s[int(p*float64(len(s)-1)+0.5)]
}

func loopback(n int) error {
	k, err := grid.NewKey()
	if err != nil {
		return err
	}
	open, err := startServer("127.0.0.1", nil)
	if err != nil {
		return err
	}
	defer open.h.Close()
	closed, err := startServer("127.0.0.1", &k)
	if err != nil {
		return err
	}
	defer closed.h.Close()
	res, err := measure(map[string]map[string]string{"open": open.addrs, "closed": closed.addrs}, &k, n, 0)
	if err != nil {
		return err
	}
	return emit(map[string]any{"where": "loopback", "results": res})
}

// wan runs under omst-wan: the root serves (open and closed), worker a-w1
// measures; they meet through files in OMST_WAN_SHARED.
func wan(n int) error {
	shared, self := os.Getenv("OMST_WAN_SHARED"), os.Getenv("OMST_WAN_HOST")
	if shared == "" {
		return errors.New("wan: run under omst-wan run (no OMST_WAN_SHARED)")
	}
	info := filepath.Join(shared, "admitbench.json")
	done := filepath.Join(shared, "admitbench.done")
	type meet struct {
		Seed  string                       `json:"seed"`
		Addrs map[string]map[string]string `json:"addrs"`
	}
	switch self {
	case "root":
		k, err := grid.NewKey()
		if err != nil {
			return err
		}
		open, err := startServer(os.Getenv("OMST_WAN_IP"), nil)
		if err != nil {
			return err
		}
		closed, err := startServer(os.Getenv("OMST_WAN_IP"), &k)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(meet{Seed: hex.EncodeToString(k.Private.Seed()), Addrs: map[string]map[string]string{"open": open.addrs, "closed": closed.addrs}})
		if err := os.WriteFile(info+".tmp", b, 0o600); err != nil {
			return err
		}
		if err := os.Rename(info+".tmp", info); err != nil {
			return err
		}
		for deadline := time.Now().Add(30 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if _, err := os.Stat(done); err == nil {
				return nil
			}
		}
		return errors.New("wan: the client never finished")
	case "a-w1":
		var m meet
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			b, err := os.ReadFile(info)
			if err == nil && json.Unmarshal(b, &m) == nil {
				break
			}
			if time.Now().After(deadline) {
				return errors.New("wan: no server info")
			}
		}
		defer os.WriteFile(done, nil, 0o600)
		seed, _ := hex.DecodeString(m.Seed)
		k, err := grid.KeyFromSeed(seed)
		if err != nil {
			return err
		}
		res, err := measure(m.Addrs, &k, n, 5200*time.Millisecond)
		if err != nil {
			return err
		}
		return emit(map[string]any{"where": "wan root<-a-w1", "delay_one_way": os.Getenv("OMST_WAN_WAN_DELAY"), "results": res})
	}
	return nil
}

func emit(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
