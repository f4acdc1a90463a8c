package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

type families map[string]*dto.MetricFamily

// scrape fetches and parses addr's /metrics.
func scrape(addr string) (families, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET /metrics: %s: %s", resp.Status, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		return nil, fmt.Errorf("GET /metrics: content type %q", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse /metrics: %w", err)
	}
	return fams, nil
}

func mustScrape(t *testing.T, addr string) families {
	t.Helper()
	fams, err := scrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value returns the value of the series of name with the given labels
// (name=value pairs): a counter's or gauge's value, a histogram's sample
// count; ok is false if there is none.
func (f families) value(name string, labels ...string) (v float64, ok bool) {
	fam := f[name]
	if fam == nil {
		return 0, false
	}
next:
	for _, m := range fam.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

func (f families) must(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, ok := f.value(name, labels...)
	if !ok {
		t.Fatalf("no series %s%v in the metrics", name, labels)
	}
	return v
}

func startMetricsNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Metrics = "127.0.0.1:0"
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.Home, err)
	}
	t.Cleanup(func() { n.Close() })
	if n.MetricsAddr() == "" || strings.HasSuffix(n.MetricsAddr(), ":0") {
		t.Fatalf("MetricsAddr %q: want the bound address", n.MetricsAddr())
	}
	return n
}

// TestMetricsGet scrapes a root and its child before, during and after a
// get at the child, and checks that the counters move.
func TestMetricsGet(t *testing.T) {
	dir := t.TempDir()
	// The root sends at 8 MB/s, so that the get lasts long enough to be
	// scraped while it runs.
	root := startMetricsNode(t, Config{Home: filepath.Join(dir, "root"), MaxUploadRate: 8 << 20})
	child := startMetricsNode(t, Config{Home: filepath.Join(dir, "w"), Parent: root.Addrs()[0], Site: "a"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const size = 6<<20 + 123
	data := make([]byte, size)
	rand.Read(data)
	if _, err := root.Put(ctx, "data/blob", bytes.NewReader(data), rpcbridge.PutOptions{ChunkSize: 256 << 10}); err != nil {
		t.Fatal(err)
	}

	// Before.
	deadline := time.Now().Add(20 * time.Second)
	for {
		c := mustScrape(t, child.MetricsAddr())
		r := mustScrape(t, root.MetricsAddr())
		if c.must(t, "omst_tree_parent_connected") == 1 && r.must(t, "omst_tree_children_connected") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child's tree session never showed up in the metrics")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c := mustScrape(t, child.MetricsAddr())
	r := mustScrape(t, root.MetricsAddr())
	if v := c.must(t, "omst_chunk_receive_bytes_total", "kind", "parent"); v != 0 {
		t.Fatalf("child received %v bytes from its parent before the get", v)
	}
	if v := c.must(t, "omst_get_duration_seconds"); v != 0 {
		t.Fatalf("child: %v gets before the get", v)
	}
	if v := r.must(t, "omst_chunk_send_bytes_total", "kind", "child"); v != 0 {
		t.Fatalf("root sent %v bytes to children before the get", v)
	}
	if v := r.must(t, "omst_cache_used_bytes"); v < size {
		t.Fatalf("root cache holds %v bytes after a put of %d", v, size)
	}
	if v := r.must(t, "omst_pins"); v != 1 {
		t.Fatalf("root: %v pins after a put", v)
	}
	if v := r.must(t, "omst_names"); v != 1 {
		t.Fatalf("root: %v names after a put", v)
	}
	if _, ok := r.value("omst_tree_parent_connected"); ok {
		t.Fatal("the root reports a parent connection")
	}
	if v := c.must(t, "omst_peers_connected", "role", "parent"); v != 1 {
		t.Fatalf("child: %v connected parents", v)
	}
	if v := c.must(t, "omst_member_open"); v != 1 {
		t.Fatalf("child without grid material: omst_member_open %v", v)
	}
	if v := c.must(t, "omst_info", "version", Version, "peer", child.ID().String(), "site", "a"); v != 1 {
		t.Fatalf("omst_info %v", v)
	}
	for _, f := range []families{c, r} {
		libp2p := 0
		for name := range f {
			if strings.HasPrefix(name, "libp2p_") {
				libp2p++
			}
		}
		if libp2p == 0 {
			t.Fatal("no libp2p_ metrics")
		}
		f.must(t, "go_goroutines")
		f.must(t, "process_start_time_seconds")
		f.must(t, "omst_dht_routing_table_peers")
	}

	// During: scrape the child while it fetches.
	var (
		wg     sync.WaitGroup
		getErr error
		got    []byte
	)
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		_, rc, err := child.Open(ctx, "data/blob")
		if err != nil {
			getErr = err
			return
		}
		defer rc.Close()
		got, getErr = io.ReadAll(rc)
	})
	var last float64
	partial := 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(10 * time.Millisecond):
		}
		f, err := scrape(child.MetricsAddr())
		if err != nil {
			t.Fatalf("scrape during the get: %v", err)
		}
		v := f.must(t, "omst_chunk_receive_bytes_total", "kind", "parent")
		if v < last {
			t.Fatalf("bytes received from the parent went down: %v after %v", v, last)
		}
		if v > 0 && v < size {
			partial++
		}
		last = v
	}
	wg.Wait()
	if getErr != nil || !bytes.Equal(got, data) {
		t.Fatalf("get at the child: %v (%d bytes)", getErr, len(got))
	}
	if partial == 0 {
		t.Error("no scrape saw the get in progress")
	}

	// After.
	c = mustScrape(t, child.MetricsAddr())
	r = mustScrape(t, root.MetricsAddr())
	if v := c.must(t, "omst_chunk_receive_bytes_total", "kind", "parent"); v < size {
		t.Fatalf("child received %v bytes from its parent, want >= %d", v, size)
	}
	if v := c.must(t, "omst_receive_bytes_total"); v < size {
		t.Fatalf("child received %v bytes in all, want >= %d", v, size)
	}
	if v := r.must(t, "omst_chunk_send_bytes_total", "kind", "child"); v < size {
		t.Fatalf("root sent %v bytes to its child, want >= %d", v, size)
	}
	// The root wrote its chunks' outboards at the put and served them
	// unhashed; the bulk counters are there, whatever path was taken.
	if v := r.must(t, "omst_chunks_served_unhashed_total"); v < 1 {
		t.Fatalf("root served %v chunks with their kept outboards, want >= 1", v)
	}
	for _, name := range []string{"omst_chunks_served_sendfile_total", "omst_replications_batched_total", "omst_bulk_connections_open"} {
		r.must(t, name)
	}
	r.must(t, "omst_bulk_connections_total", "event", "accepted")
	r.must(t, "omst_bulk_tickets_total", "event", "issued")
	r.must(t, "omst_bulk_bytes_total", "direction", "sent", "mode", "plain")
	if v := c.must(t, "omst_get_duration_seconds"); v != 1 {
		t.Fatalf("child: %v gets timed, want 1", v)
	}
	if h := c["omst_get_duration_seconds"].GetMetric()[0].GetHistogram(); h.GetSampleSum() <= 0 {
		t.Fatalf("get duration sum %v", h.GetSampleSum())
	}
	if v := c.must(t, "omst_cache_used_bytes"); v < size {
		t.Fatalf("child cache holds %v bytes after the get, want >= %d", v, size)
	}
	if v := c.must(t, "omst_cache_capacity_bytes"); v < size {
		t.Fatalf("child cache capacity %v", v)
	}
	if v := c.must(t, "omst_chunks_corrupt_received_total"); v != 0 {
		t.Fatalf("child: %v corrupt chunks", v)
	}

	// A zero-copy get (GET_FD's extents) is timed too.
	_, it, err := child.OpenExtents(ctx, "data/blob")
	if err != nil {
		t.Fatal(err)
	}
	for {
		x, err := it.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		x.File.Close()
	}
	it.Close()
	if v := mustScrape(t, child.MetricsAddr()).must(t, "omst_get_duration_seconds"); v != 2 {
		t.Fatalf("child: %v gets timed after a zero-copy get, want 2", v)
	}

	// A failed get is counted by reason.
	if _, _, err := child.Open(ctx, "data/none"); err == nil {
		t.Fatal("get of a missing name succeeded")
	}
	c = mustScrape(t, child.MetricsAddr())
	if v := c.must(t, "omst_get_failures_total", "reason", "not_found"); v != 1 {
		t.Fatalf("omst_get_failures_total{reason=not_found} %v, want 1", v)
	}

	// Close frees the port.
	addr := child.MetricsAddr()
	if err := child.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("metrics port still taken after Close: %v", err)
	}
	ln.Close()
}

// TestMetricsAddressTaken: a metrics address that cannot be bound fails
// the start, naming it, and leaves the home free.
func TestMetricsAddressTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	home := t.TempDir()
	addr := ln.Addr().String()
	_, err = Start(context.Background(), Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Metrics: addr})
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "--metrics "+addr) {
		t.Fatalf("metrics on a taken port: got %v", err)
	}
	_, err = Start(context.Background(), Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Metrics: "no-port"})
	if err == nil || !strings.Contains(err.Error(), "--metrics no-port") {
		t.Fatalf("metrics on a bad address: got %v", err)
	}
	n := startNode(t, home, "", "") // the failed starts released the home
	if n.MetricsAddr() != "" {
		t.Fatalf("MetricsAddr without metrics: %q", n.MetricsAddr())
	}
}
