package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/transfer"
)

// Prometheus metrics (Config.Metrics, `omst daemon --metrics ADDR`).
//
// Each node has its own registry (several nodes may run in one process,
// as in tests). Almost every figure is read at scrape time from the
// counters the node keeps anyway (the same as Status), so metrics cost
// nothing between scrapes; only gets are timed here. go-libp2p registers
// its own metrics (swarm, identify, event bus, resource manager...) with
// the same registry through peerhost.Options.Registerer. Those are
// package-level collectors in go-libp2p: nodes sharing a process share
// their values (a daemon is one node per process).
//
// The endpoint is unauthenticated: it should listen on loopback or on a
// management network (docs/operations.md, "Metrics").

// getBuckets are the bounds, in seconds, of omst_get_duration_seconds:
// from a blob read from the local cache to a large one over a WAN.
var getBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500}

// metricsReadHeaderTimeout bounds how long a scraper may take to send
// its request's headers; metricsShutdown how long Close waits for
// scrapes in progress.
const (
	metricsReadHeaderTimeout = 10 * time.Second
	metricsShutdown          = 2 * time.Second
)

// nodeMetrics serves one node's metrics over HTTP.
type nodeMetrics struct {
	reg     *prometheus.Registry
	ln      net.Listener
	srv     *http.Server
	served  chan error
	ready   atomic.Bool // the node's parts exist: the collector may read them
	getDur  prometheus.Histogram
	getFail *prometheus.CounterVec
}

// startMetrics, when Config.Metrics is set, listens on its address and
// serves the registry at /metrics. It runs before the host starts (whose
// libp2p metrics go to the registry); the node's own figures are
// collected once setReady is called at the end of Start.
func (n *Node) startMetrics() error {
	addr := n.cfg.Metrics
	if addr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics %s: %w", addr, err)
	}
	m := &nodeMetrics{reg: prometheus.NewRegistry(), ln: ln, served: make(chan error, 1)}
	m.getDur = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "omst_get_duration_seconds",
		Help:    "Duration of gets served by this node (local API get, get-file and zero-copy get), from the request to the last verified byte.",
		Buckets: getBuckets,
	})
	m.getFail = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "omst_get_failures_total",
		Help: "Gets served by this node that failed, by reason (" + strings.Join(getFailReasons, ", ") + ").",
	}, []string{"reason"})
	for _, r := range getFailReasons {
		m.getFail.WithLabelValues(r) // every series exists from the start
	}
	m.reg.MustRegister(
		m.getDur, m.getFail,
		nodeCollector{n: n, m: m},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(n.log.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		Registry:            m.reg,
		MaxRequestsInFlight: 4,
	}))
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: metricsReadHeaderTimeout}
	go func() { m.served <- m.srv.Serve(ln) }()
	n.metrics = m
	url := "http://" + ln.Addr().String() + "/metrics"
	if ta, ok := ln.Addr().(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		n.log.Warn("metrics are served without authentication on a non-loopback address: keep it on a management network", "url", url)
	} else {
		n.log.Info("serving metrics", "url", url)
	}
	return nil
}

// MetricsAddr returns the address the metrics endpoint listens on (its
// port chosen when Config.Metrics asked for port 0), "" without metrics.
func (n *Node) MetricsAddr() string {
	if n.metrics == nil {
		return ""
	}
	return n.metrics.ln.Addr().String()
}

// registerer is where go-libp2p registers its metrics: nil (its default
// registry) without metrics.
func (m *nodeMetrics) registerer() prometheus.Registerer {
	if m == nil {
		return nil
	}
	return m.reg
}

// setReady lets the collector read the node's parts (Start calls it once
// they all exist).
func (m *nodeMetrics) setReady() {
	if m != nil {
		m.ready.Store(true)
	}
}

// close stops serving, waiting a little for scrapes in progress.
func (m *nodeMetrics) close() error {
	if m == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), metricsShutdown)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil {
		m.srv.Close()
	}
	if err := <-m.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// getFailReasons are the values of omst_get_failures_total's reason.
var getFailReasons = []string{"not_found", "unavailable", "corrupt", "forbidden", "canceled", "other"}

// getFailed counts a get that failed with err.
func (m *nodeMetrics) getFailed(err error) {
	if m != nil {
		m.getFail.WithLabelValues(failReason(err)).Inc()
	}
}

// failReason classifies a get's error for omst_get_failures_total.
func failReason(err error) string {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, blob.ErrUnavailable), errors.Is(err, blob.ErrUnreachable):
		return "unavailable" // before not_found: a name whose blob is missing is both
	case errors.Is(err, blob.ErrNotFound):
		return "not_found"
	case errors.Is(err, blob.ErrCorrupt):
		return "corrupt"
	case errors.Is(err, blob.ErrForbidden):
		return "forbidden"
	}
	return "other"
}

// getTimer times one get: its duration since start is observed when it
// ends well (io.EOF or nil), another error counts it as failed; only the
// first end counts.
type getTimer struct {
	m     *nodeMetrics
	start time.Time
	once  sync.Once
}

func (t *getTimer) end(err error) {
	if err == nil || err == io.EOF {
		t.once.Do(func() { t.m.getDur.Observe(time.Since(t.start).Seconds()) })
	} else {
		t.once.Do(func() { t.m.getFailed(err) })
	}
}

// getDone observes a get that read every byte, took long.
func (m *nodeMetrics) getDone(took time.Duration) {
	if m != nil {
		m.getDur.Observe(took.Seconds())
	}
}

// timeExtents times GET_FD's extents.
func (m *nodeMetrics) timeExtents(start time.Time, it rpcbridge.ExtentIter) rpcbridge.ExtentIter {
	if m == nil {
		return it
	}
	return &timedExtents{ExtentIter: it, t: getTimer{m: m, start: start}}
}

type timedExtents struct {
	rpcbridge.ExtentIter
	t getTimer
}

func (x *timedExtents) Next() (rpcbridge.Extent, error) {
	e, err := x.ExtentIter.Next()
	if err != nil {
		x.t.end(err)
	}
	return e, err
}

// nodeCollector reads a node's figures at scrape time.
type nodeCollector struct {
	n *Node
	m *nodeMetrics
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	mInfo = desc("omst_info", "Constant 1, labelled with the daemon's version, peer ID and site.", "version", "peer", "site")

	mChunkReceived = desc("omst_chunk_receive_bytes_total", "Verified chunk bytes received from peers, by kind of source (parent, child, sibling, other).", "kind")
	mChunkSent     = desc("omst_chunk_send_bytes_total", "Chunk bytes sent to peers, by the asker's relation to this node (parent, child, sibling, other; a sibling asking a worker is other to it).", "kind")
	mReceived      = desc("omst_receive_bytes_total", "Chunk and manifest bytes received from peers.")
	mSent          = desc("omst_send_bytes_total", "Chunk and manifest bytes sent to peers.")
	mTransfers     = desc("omst_transfers_active", "Blob fetches in progress.")
	mCorrupt       = desc("omst_chunks_corrupt_received_total", "Chunks received from peers that did not match their hash (fetched again).")
	mCorruptRep    = desc("omst_corrupt_reports_total", "Peers' reports that a chunk this node sent them did not match its hash.")
	mPeerErrors    = desc("omst_peer_errors_total", "Requests that failed because of a peer: corrupt data, broken streams, error replies, malformed messages.")
	mRedirSent     = desc("omst_redirects_sent_total", "Chunk requests this relay answered with a sibling to ask instead.")
	mRedirTaken    = desc("omst_redirects_taken_total", "Redirects to a sibling this node followed.")
	mSibFail       = desc("omst_sibling_failures_total", "Redirects whose sibling could not deliver (the chunk then came from the relay).")
	mUpRefused     = desc("omst_uploads_refused_total", "Fetch streams refused for --max-upload-streams.")
	mReplyHeld     = desc("omst_fetch_reply_bytes_held", "Fetch reply bytes held for peers now (being made or waiting to be written; at most 64 MiB per peer).")
	mReplWaiting   = desc("omst_replications_waiting", "Children's puts waiting to be copied here (one child's at a time, 64 waiting per child, small ones together).")
	mReplDropped   = desc("omst_replications_dropped_total", "Children's puts not copied because 64 of that child's (small ones: 1 MiB of their records) were waiting already.")
	mHedges        = desc("omst_hedges_total", "Sibling requests slow enough to be asked of the relay too.")
	mHedgesDecl    = desc("omst_hedges_declined_total", "Children's hedges this relay declined (it had just sent the chunk into the site).")
	mPassedOn      = desc("omst_bytes_passed_on_total", "Chunk bytes sent on in verified pieces while the chunk was still arriving (fetch 1.3.0).")
	mPushSent      = desc("omst_push_sent_bytes_total", "Chunk bytes pushed with answers to lookups of children in other sites.")
	mPushRecv      = desc("omst_push_received_bytes_total", "Verified chunk bytes the parent pushed with its answers to lookups.")
	mUnhashed      = desc("omst_chunks_served_unhashed_total", "Chunks read from the store and sent with the outboard kept when they were written, not hashed again (the receiver verifies).")
	mSendfile      = desc("omst_chunks_served_sendfile_total", "Of those, chunks sent from their file with sendfile(2) on a plain bulk connection.")
	mReplBatched   = desc("omst_replications_batched_total", "Children's small puts copied here together, in batch requests.")
	mBulkOpen      = desc("omst_bulk_connections_open", "Bulk connections open now, at either end.")
	mBulkConns     = desc("omst_bulk_connections_total", "Bulk connections: opened to peers, fallen back to libp2p, accepted and refused by the listener.", "event")
	mBulkTickets   = desc("omst_bulk_tickets_total", "Bulk tickets: issued, redeemed and refused by the listener; ticket requests refused.", "event")
	mBulkBytes     = desc("omst_bulk_bytes_total", "Fetch protocol bytes over bulk connections, by direction (sent, received) and mode (plain, sealed).", "direction", "mode")

	mCacheUsed     = desc("omst_cache_used_bytes", "Bytes of chunks in the cache.")
	mCacheCap      = desc("omst_cache_capacity_bytes", "The cache's size cap.")
	mCachePinned   = desc("omst_cache_pinned_bytes", "Bytes of cached chunks that cannot be evicted (pinned, or held by a put in progress).")
	mCacheOrphaned = desc("omst_cache_orphaned_bytes", "Bytes of cached chunks no manifest lists (left by uploads that did not complete; evicted first).")
	mCacheChunks   = desc("omst_cache_chunks", "Chunks in the cache.")
	mEvictions     = desc("omst_cache_evictions_total", "Chunks evicted from the cache to make room.")
	mEvictedBytes  = desc("omst_cache_evicted_bytes_total", "Bytes of chunks evicted from the cache to make room.")
	mDamaged       = desc("omst_cache_chunks_damaged_total", "Chunks found damaged in the cache (bytes not matching their hash, a file truncated or missing) and dropped.")
	mPins          = desc("omst_pins", "Blobs pinned in the cache (put here or below).")
	mNames         = desc("omst_names", "Names this node knows: its own, those announced from below, those looked up.")

	mPeers           = desc("omst_peers_connected", "Connected peers by role (parent, child, sibling, dht, other).", "role")
	mParentConnected = desc("omst_tree_parent_connected", "1 while the tree session with a parent is up, else 0 (absent on the root).")
	mChildren        = desc("omst_tree_children", "Children this node knows in the tree.")
	mChildrenConn    = desc("omst_tree_children_connected", "Children whose tree session with this node is up.")
	mChildRefused    = desc("omst_tree_children_refused_total", "Peers refused as children: their certificate's role or claimed site does not allow it (closed grid).")
	mUnrouted        = desc("omst_tree_records_unrouted_total", "Records children announced that they neither put nor may write, kept without a route (closed grid).")

	mDHTPeers    = desc("omst_dht_routing_table_peers", "Peers in the DHT routing table (absent with --no-dht).")
	mDHTServer   = desc("omst_dht_server", "1 while this node answers DHT queries (server mode), else 0.")
	mDHTProvided = desc("omst_dht_provides_total", "Provider records (this node holds a blob) announced in the DHT.")
	mDHTNames    = desc("omst_dht_names_put_total", "Name records put in the DHT.")
	mDHTRejected = desc("omst_dht_records_rejected_total", "Records from the DHT refused (invalid, or unsigned/forged in a closed grid).")

	mOpen          = desc("omst_member_open", "1 if this daemon has no grid material (open to any host that reaches it), else 0.")
	mAdmitted      = desc("omst_member_admitted_peers", "Peers admitted as members now.")
	mRefused       = desc("omst_member_refused_total", "Membership certificates refused (bad, expired, revoked, of another grid).")
	mUnshown       = desc("omst_member_unshown_total", "Connections closed for showing no certificate in time.")
	mDenied        = desc("omst_member_denied_total", "Streams reset because their peer was not admitted.")
	mRecRejected   = desc("omst_member_records_rejected_total", "Name records refused: unsigned, forged, outside their origin's rights.")
	mJoins         = desc("omst_member_joins_total", "Join requests served (redeemed or forwarded).")
	mCertExpiresAt = desc("omst_member_cert_expiry_timestamp_seconds", "When this node's membership certificate expires (Unix time; absent without one).")
)

var allDescs = []*prometheus.Desc{
	mInfo, mChunkReceived, mChunkSent, mReceived, mSent, mTransfers, mCorrupt, mCorruptRep, mPeerErrors,
	mRedirSent, mRedirTaken, mSibFail, mUpRefused, mHedges, mHedgesDecl, mPassedOn, mPushSent, mPushRecv,
	mReplyHeld, mReplWaiting, mReplDropped,
	mUnhashed, mSendfile, mReplBatched, mBulkOpen, mBulkConns, mBulkTickets, mBulkBytes,
	mCacheUsed, mCacheCap, mCachePinned, mCacheOrphaned, mCacheChunks, mEvictions, mEvictedBytes, mDamaged, mPins, mNames,
	mPeers, mParentConnected, mChildren, mChildrenConn, mChildRefused, mUnrouted,
	mDHTPeers, mDHTServer, mDHTProvided, mDHTNames, mDHTRejected,
	mOpen, mAdmitted, mRefused, mUnshown, mDenied, mRecRejected, mJoins, mCertExpiresAt,
}

// peerRoles are the roles of omst_peers_connected (Node.roleOf), all
// reported, zero or not, so that each series always exists.
var peerRoles = []string{"parent", "child", "sibling", "dht", "other"}

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.m.ready.Load() {
		return // still starting: libp2p's and the runtime's metrics only
	}
	n := c.n
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	gauge(mInfo, 1, Version, n.host.ID().String(), n.cfg.Site)

	ts, es := n.tree.Status(), n.engine.Status()
	for _, k := range []transfer.SourceKind{transfer.KindParent, transfer.KindChild, transfer.KindSibling, transfer.KindOther} {
		counter(mChunkReceived, es.BytesIn[k.String()], k.String())
		counter(mChunkSent, es.BytesOut[k.String()], k.String())
	}
	counter(mReceived, es.BytesFetched)
	counter(mSent, es.BytesServed)
	gauge(mTransfers, float64(len(n.engine.Transfers())))
	counter(mCorrupt, es.CorruptReceived)
	counter(mCorruptRep, es.CorruptReports)
	counter(mPeerErrors, ts.PeerErrors+es.PeerErrors)
	counter(mRedirSent, es.RedirectsSent)
	counter(mRedirTaken, es.RedirectsTaken)
	counter(mSibFail, es.SiblingFailures)
	counter(mUpRefused, es.UploadsRefused)
	counter(mHedges, es.Hedges)
	counter(mHedgesDecl, es.HedgesDeclined)
	counter(mPassedOn, es.BytesPassedOn)
	counter(mPushSent, es.PushSent)
	counter(mPushRecv, es.PushReceived)
	gauge(mReplyHeld, float64(es.ReplyBytesHeld))
	gauge(mReplWaiting, float64(es.ReplicationsWaiting))
	counter(mReplDropped, es.ReplicationsDropped)
	counter(mUnhashed, es.ServedUnhashed)
	counter(mSendfile, es.ServedSendfile)
	counter(mReplBatched, es.ReplicationsBatched)
	gauge(mBulkOpen, float64(es.BulkOpen))
	counter(mBulkConns, es.BulkOpened, "opened")
	counter(mBulkConns, es.BulkFallbacks, "fallback")
	counter(mBulkConns, es.BulkAccepted, "accepted")
	counter(mBulkConns, es.BulkRefused, "refused")
	counter(mBulkTickets, es.BulkTicketsIssued, "issued")
	counter(mBulkTickets, es.BulkTicketsRedeemed, "redeemed")
	counter(mBulkTickets, es.BulkTicketsRefused, "refused")
	counter(mBulkTickets, es.BulkRequestsRefused, "request_refused")
	counter(mBulkBytes, es.BulkSentPlain, "sent", "plain")
	counter(mBulkBytes, es.BulkSentSealed, "sent", "sealed")
	counter(mBulkBytes, es.BulkReceivedPlain, "received", "plain")
	counter(mBulkBytes, es.BulkReceivedSealed, "received", "sealed")

	u := n.store.Usage()
	gauge(mCacheUsed, float64(u.UsedBytes))
	gauge(mCacheCap, float64(u.CapBytes))
	gauge(mCachePinned, float64(u.PinnedBytes))
	gauge(mCacheOrphaned, float64(u.OrphanedBytes))
	gauge(mCacheChunks, float64(u.Chunks))
	counter(mEvictions, u.Evictions)
	counter(mEvictedBytes, u.EvictedBytes)
	counter(mDamaged, u.DamagedChunks)
	gauge(mPins, float64(u.PinnedBlobs))
	if recs, err := n.store.List(""); err == nil {
		gauge(mNames, float64(len(recs)))
	}

	roles := map[string]int{}
	for _, p := range n.peers() {
		roles[p.Role]++
	}
	for _, r := range peerRoles {
		gauge(mPeers, float64(roles[r]), r)
	}
	if n.cfg.Parent != "" {
		gauge(mParentConnected, b(ts.ParentConnected))
	}
	conn := 0
	for _, c := range ts.Children {
		if c.Connected {
			conn++
		}
	}
	gauge(mChildren, float64(len(ts.Children)))
	gauge(mChildrenConn, float64(conn))
	counter(mChildRefused, ts.ChildrenRefused)
	counter(mUnrouted, ts.Unrouted)

	if n.dht != nil {
		gauge(mDHTPeers, float64(n.dht.RoutingTableSize()))
		gauge(mDHTServer, b(n.dht.Server()))
		counter(mDHTProvided, n.provN.Load())
		counter(mDHTNames, n.namesN.Load())
		counter(mDHTRejected, n.dht.RecordsRejected())
	}

	ms := n.adm.Stats()
	gauge(mOpen, b(ms.Open))
	gauge(mAdmitted, float64(ms.Admitted))
	counter(mRefused, ms.Refused)
	counter(mUnshown, ms.Unshown)
	counter(mDenied, ms.Denied)
	counter(mRecRejected, ms.RecordsRejected)
	counter(mJoins, ms.Joins)
	if !ms.CertExpires.IsZero() {
		gauge(mCertExpiresAt, float64(ms.CertExpires.Unix()))
	}
}
