package emugrid

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/node"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// DemoConfig sizes the demo.
type DemoConfig struct {
	Topology Topology
	Size     int64 // blob size in bytes
}

// DefaultDemo is what `omst demo` runs: 2 sites x 3 workers, 32 MiB over
// 32 MiB/s WAN links with 10 ms latency, LAN links of 256 MiB/s.
func DefaultDemo() DemoConfig {
	return DemoConfig{
		Topology: Topology{
			Sites: 2, WorkersPerSite: 3,
			WAN: Link{Bandwidth: 32 << 20, Latency: 10 * time.Millisecond},
			LAN: Link{Bandwidth: 256 << 20, Latency: 200 * time.Microsecond},
		},
		Size: 32 << 20,
	}
}

// DemoResult holds the measured times.
type DemoResult struct {
	Star  time.Duration // master sends to every worker itself
	Tree  time.Duration // omst: through the head nodes' caches
	Limit time.Duration // S / B_wan
}

// Distribute puts data at the root under name and has every worker get it
// at once; it returns the time until the last worker holds verified,
// identical bytes.
func (g *Grid) Distribute(ctx context.Context, name string, data []byte) (time.Duration, error) {
	if _, err := g.Root.Put(ctx, name, bytes.NewReader(data), rpcbridge.PutOptions{}); err != nil {
		return 0, fmt.Errorf("put at root: %w", err)
	}
	want := blob.HashChunk(data)
	g.Reset()
	start := time.Now()
	eg, ectx := errgroup.WithContext(ctx)
	for _, w := range g.AllWorkers() {
		eg.Go(func() error { return getAndCheck(ectx, w, name, want, len(data)) })
	}
	err := eg.Wait()
	return time.Since(start), err
}

func getAndCheck(ctx context.Context, n *node.Node, name string, want blob.Hash, size int) error {
	_, rc, err := n.Open(ctx, name)
	if err != nil {
		return fmt.Errorf("worker %s: %w", n.ID(), err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	buf.Grow(size)
	if _, err := io.Copy(&buf, rc); err != nil {
		return fmt.Errorf("worker %s: %w", n.ID(), err)
	}
	if got := blob.HashChunk(buf.Bytes()); got != want {
		return fmt.Errorf("worker %s: got different bytes (%d bytes)", n.ID(), buf.Len())
	}
	return nil
}

// RunDemo builds a star grid and a tree grid of the same size, distributes
// the same random blob through each, and prints the comparison to w.
func RunDemo(ctx context.Context, w io.Writer, cfg DemoConfig) (DemoResult, error) {
	t := cfg.Topology
	data := make([]byte, cfg.Size)
	rand.Read(data)
	n := t.Sites * t.WorkersPerSite
	fmt.Fprintf(w, "omst demo: one %s blob from the master to %d workers (%d sites x %d)\n",
		human(float64(cfg.Size)), n, t.Sites, t.WorkersPerSite)
	fmt.Fprintf(w, "emulated in-process (libp2p mocknet): WAN %s/s, %v one way; LAN %s/s, %v one way\n\n",
		human(t.WAN.Bandwidth), t.WAN.Latency, human(t.LAN.Bandwidth), t.LAN.Latency)
	var res DemoResult
	res.Limit = time.Duration(float64(cfg.Size) / t.WAN.Bandwidth * float64(time.Second))
	run := func(star bool) (time.Duration, error) {
		tt := t
		tt.Star = star
		g, err := Build(ctx, tt, "")
		if err != nil {
			return 0, err
		}
		defer g.Close()
		return g.Distribute(ctx, "demo/init", data)
	}
	var err error
	if res.Star, err = run(true); err != nil {
		return res, fmt.Errorf("star: %w", err)
	}
	if res.Tree, err = run(false); err != nil {
		return res, fmt.Errorf("tree: %w", err)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "distribution\ttime to last worker\tx limit\t")
	row := func(label string, d time.Duration) {
		fmt.Fprintf(tw, "%s\t%.2f s\t%.2f\t\n", label, d.Seconds(), d.Seconds()/res.Limit.Seconds())
	}
	row("master to every worker (star)", res.Star)
	row("omst tree (head-node caches)", res.Tree)
	row("limit S/B_wan", res.Limit)
	tw.Flush()
	fmt.Fprintf(w, "\nomst was %.1fx faster than the master sending to every worker.\n", res.Star.Seconds()/res.Tree.Seconds())
	return res, nil
}

func human(b float64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", b/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	}
	return fmt.Sprintf("%.0f B", b)
}

// ErrBadDemo rejects a demo without sites, workers or bytes.
var ErrBadDemo = fmt.Errorf("demo: --sites, --workers and --size must be positive")
