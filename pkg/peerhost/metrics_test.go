package peerhost

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// libp2pFamilies returns the names of the go-libp2p metric families g
// holds but the event bus's (go-libp2p v0.51 registers those in the
// default registry whatever its options).
func libp2pFamilies(t *testing.T, g prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "libp2p_") && !strings.HasPrefix(mf.GetName(), "libp2p_eventbus_") {
			names = append(names, mf.GetName())
		}
	}
	return names
}

// TestMetricsOnlyWithRegisterer: hosts made without a Registerer keep no
// go-libp2p metrics (in the process's default registry, where no one
// reads them, they cost CPU on every stream and connection), while a host
// given one fills it. It runs in a process of its own: other tests make
// libp2p hosts with its defaults, which register in the default registry.
func TestMetricsOnlyWithRegisterer(t *testing.T) {
	if os.Getenv("PEERHOST_METRICS_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMetricsOnlyWithRegisterer$", "-test.count=1")
		cmd.Env = append(os.Environ(), "PEERHOST_METRICS_CHILD=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return
	}
	dir := t.TempDir()
	ka, _ := LoadOrCreateKey(filepath.Join(dir, "a"))
	kb, _ := LoadOrCreateKey(filepath.Join(dir, "b"))
	reg := prometheus.NewRegistry()
	a, err := New(Options{Key: ka, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(Options{Key: kb, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const proto = protocol.ID("/omst-test/echo")
	a.SetStreamHandler(proto, func(s network.Stream) { s.Close() })
	info, err := ParsePeerAddr(FullAddrs(a)[0])
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Connect(ctx, *info); err != nil {
		t.Fatal(err)
	}
	s, err := b.NewStream(ctx, a.ID(), proto)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if got := libp2pFamilies(t, prometheus.DefaultGatherer); len(got) != 0 {
		t.Errorf("hosts without a Registerer put go-libp2p metrics in the default registry: %v", got)
	}
	if got := libp2pFamilies(t, reg); len(got) == 0 {
		t.Error("the host given a Registerer put no go-libp2p metrics in it")
	}
}
