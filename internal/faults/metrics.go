package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ErrNoMetrics: the daemon was not given a metrics endpoint
// (Daemon.ServeMetrics before its start).
var ErrNoMetrics = errors.New("daemon serves no metrics")

// metricsTimeout bounds one scrape of a daemon's /metrics.
const metricsTimeout = 10 * time.Second

// ServeMetrics gives d a Prometheus endpoint on a loopback port picked
// now (`--metrics 127.0.0.1:PORT`, kept across restarts), which GoHeap
// reads. Call it before d starts.
func (d *Daemon) ServeMetrics() error {
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	d.MetricsAddr = "127.0.0.1:" + strconv.Itoa(ports[0])
	d.Args = append(d.Args, "--metrics", d.MetricsAddr)
	return nil
}

// GoHeap is a daemon's Go heap as its metrics endpoint reports it (the
// standard Go collector: runtime.MemStats read at the scrape).
type GoHeap struct {
	// Alloc is go_memstats_heap_alloc_bytes: the bytes of the heap
	// objects allocated and not yet freed, the live ones and the garbage
	// the next GC frees. Memory a leak keeps is always in it.
	Alloc int64
	// Inuse is go_memstats_heap_inuse_bytes (the spans holding those
	// objects).
	Inuse int64
	// NextGC is go_memstats_next_gc_bytes: the heap size at which the
	// next GC starts (GOGC=100: about twice the live heap the last GC
	// found).
	NextGC int64
}

func (h GoHeap) String() string {
	return fmt.Sprintf("heap alloc %d MiB, in use %d MiB, next GC at %d MiB", h.Alloc>>20, h.Inuse>>20, h.NextGC>>20)
}

// GoHeap scrapes d's metrics endpoint (ServeMetrics) for its Go heap.
func (d *Daemon) GoHeap(ctx context.Context) (GoHeap, error) {
	if d.MetricsAddr == "" {
		return GoHeap{}, fmt.Errorf("%s: %w", d.Name, ErrNoMetrics)
	}
	ctx, cancel := context.WithTimeout(ctx, metricsTimeout)
	defer cancel()
	url := "http://" + d.MetricsAddr + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return GoHeap{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return GoHeap{}, fmt.Errorf("%s: scrape %s: %w", d.Name, url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return GoHeap{}, fmt.Errorf("%s: scrape %s: %s", d.Name, url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return GoHeap{}, fmt.Errorf("%s: parse %s: %w", d.Name, url, err)
	}
	var h GoHeap
	for name, dst := range map[string]*int64{
		"go_memstats_heap_alloc_bytes": &h.Alloc,
		"go_memstats_heap_inuse_bytes": &h.Inuse,
		"go_memstats_next_gc_bytes":    &h.NextGC,
	} {
		v, err := gauge(fams, name)
		if err != nil {
			return GoHeap{}, fmt.Errorf("%s: %s: %w", d.Name, url, err)
		}
		*dst = int64(v)
	}
	return h, nil
}

// gauge is the value of the one unlabelled gauge called name.
func gauge(fams map[string]*dto.MetricFamily, name string) (float64, error) {
	f := fams[name]
	if f == nil {
		return 0, fmt.Errorf("no metric %s", name)
	}
	if len(f.GetMetric()) != 1 || f.GetMetric()[0].GetGauge() == nil {
		return 0, fmt.Errorf("metric %s is not one gauge (%d series, type %s)", name, len(f.GetMetric()), f.GetType())
	}
	return f.GetMetric()[0].GetGauge().GetValue(), nil
}
