package emugrid

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// TestTreeBeatsStar runs the demo small: the tree must deliver identical
// bytes to every worker and beat the star by a clear margin, since with 4
// workers each star link gets a quarter of the WAN bandwidth.
//
// The star's time is set by its links (at least 2 s here, whatever the
// load); the tree's, about 0.6 s quiet, by the CPU as much as the links.
// A CI run took 2.72 s for the tree against the star's 2.11 s: 2 s more
// than usual, as when the grid gave a site's workers no link to each
// other and the head redirected one to a sibling (Build links them now).
// Under load (-race beside the other packages on 2 cores; three nice'd
// CPU burners beside it made 1.62 s against 2.19 s) the tree is slower
// still. Load only adds to a round, so the demo runs up to three times
// and the best round must show the win; a tree that is not faster fails
// all three. What makes the
// tree faster is checked apart from the clock: the master sends the blob
// once per site, not once per worker (rootBytes).
func TestTreeBeatsStar(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cfg := DemoConfig{
		Topology: Topology{
			Sites: 2, WorkersPerSite: 2,
			WAN: Link{Bandwidth: 8 << 20, Latency: 5 * time.Millisecond},
			LAN: Link{Bandwidth: 128 << 20, Latency: 100 * time.Microsecond},
		},
		Size: 4 << 20,
	}
	var rounds []DemoResult
	for len(rounds) < 3 {
		var out bytes.Buffer
		res, err := RunDemo(ctx, &out, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("\n%s", out.String())
		if res.Limit != 500*time.Millisecond {
			t.Fatalf("limit %v, want 500ms", res.Limit)
		}
		// Star: 4 MiB at 2 MiB/s per worker is at least 2 s; tree near 0.5 s.
		if res.Star < 3*res.Limit {
			t.Fatalf("star took %v, faster than its links allow (%v)", res.Star, 2*time.Second)
		}
		rounds = append(rounds, res)
		// In theory the star takes 2x the tree here (2 workers behind
		// each WAN link); allow for a loaded machine (-race, 2 cores) but
		// demand a clear win.
		if res.Tree < res.Star*3/4 {
			break
		}
	}
	if best := rounds[len(rounds)-1]; best.Tree >= best.Star*3/4 {
		var s []string
		for _, r := range rounds {
			s = append(s, fmt.Sprintf("tree %v, star %v", r.Tree, r.Star))
		}
		t.Fatalf("tree not clearly faster than star in any of %d rounds: %s", len(rounds), strings.Join(s, "; "))
	}

	star, tree := rootBytes(t, ctx, cfg, true), rootBytes(t, ctx, cfg, false)
	t.Logf("the master sent %d bytes for the star, %d for the tree", star, tree)
	if n := uint64(cfg.Topology.Sites*cfg.Topology.WorkersPerSite) * uint64(cfg.Size); star < n {
		t.Fatalf("the master sent %d bytes for the star, less than the blob to each worker (%d)", star, n)
	}
	// Once per site: half the star's bytes here (2 workers a site).
	if tree > star*3/5 {
		t.Fatalf("the master sent %d bytes for the tree, more than 3/5 of the star's %d: the heads did not share their copy", tree, star)
	}
}

// rootBytes distributes a blob of cfg's size as RunDemo does, through a
// star or a tree on links without a bandwidth limit (the bytes do not
// depend on it), and returns the bytes the master sent.
func rootBytes(t *testing.T, ctx context.Context, cfg DemoConfig, star bool) uint64 {
	t.Helper()
	top := cfg.Topology
	top.Star, top.WAN.Bandwidth, top.LAN.Bandwidth = star, 0, 0
	g, err := Build(ctx, top, "")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	data := make([]byte, cfg.Size)
	rand.Read(data)
	if _, err := g.Distribute(ctx, "demo/bytes", data); err != nil {
		t.Fatal(err)
	}
	st, err := g.Root.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st.BytesServed
}

// TestSiteWorkersReachEachOther: a site's workers are linked to each
// other, so that the sibling a head redirects a worker to answers. Before,
// they were linked to their head only: every tree round had 4 sibling
// requests fail per site (peer errors), and some stalled their worker 2 s.
func TestSiteWorkersReachEachOther(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, err := Build(ctx, Topology{Sites: 2, WorkersPerSite: 2}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	data := make([]byte, 4<<20)
	rand.Read(data)
	if _, err := g.Distribute(ctx, "x/siblings", data); err != nil {
		t.Fatal(err)
	}
	var fromSiblings uint64
	for _, w := range g.AllWorkers() {
		st, err := w.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.SiblingFailures != 0 || st.PeerErrors != 0 {
			t.Errorf("worker %s: %d sibling failures, %d peer errors; want none", w.ID(), st.SiblingFailures, st.PeerErrors)
		}
		fromSiblings += st.BytesIn["sibling"]
	}
	if fromSiblings == 0 {
		t.Error("no worker received bytes from a sibling: the test proves nothing")
	}
}

func TestBuildRejectsEmpty(t *testing.T) {
	if _, err := Build(context.Background(), Topology{}, ""); err == nil {
		t.Fatal("empty topology accepted")
	}
}

// TestSurvivesRootLoss: once a head holds a blob, its workers get it with
// the root gone.
func TestSurvivesRootLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, err := Build(ctx, Topology{Sites: 1, WorkersPerSite: 2}, "")
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	data := bytes.Repeat([]byte("omst"), 1<<18)
	w0 := g.Workers[0][0]
	if _, err := g.Root.Put(ctx, "x/init", bytes.NewReader(data), putOpts()); err != nil {
		t.Fatal(err)
	}
	if err := getAndCheck(ctx, w0, "x/init", blob.HashChunk(data), len(data)); err != nil {
		t.Fatal(err)
	}
	g.Root.Close()
	if err := getAndCheck(ctx, g.Workers[0][1], "x/init", blob.HashChunk(data), len(data)); err != nil {
		t.Fatalf("sibling after root loss: %v", err)
	}
	if err := getAndCheck(ctx, g.Workers[0][1], "x/none", blob.HashChunk(nil), 0); !errors.Is(err, blob.ErrUnreachable) {
		t.Fatalf("unknown name after root loss: %v", err)
	}
}

func putOpts() rpcbridge.PutOptions { return rpcbridge.PutOptions{} }
