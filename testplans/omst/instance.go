package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/omst-project/omst/internal/wanemu/ifstat"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/testground/sdk-go/network"
	"github.com/testground/sdk-go/run"
	"github.com/testground/sdk-go/runtime"
	"github.com/testground/sdk-go/sync"
)

// Roles of an instance (one per composition group).
const (
	roleRoot   = "root"
	roleHead   = "head"
	roleWorker = "worker"
)

// Sync states and topics (the sync client scopes them to the run).
const (
	stateReady       = sync.State("omst-ready")        // all instances: set up; its release is the common start
	stateWorkersDone = sync.State("omst-workers-done") // each worker once, when it is done (or gave up)
	stateFinished    = sync.State("omst-finished")     // all instances: results are in; daemons may stop
	topicRootAddr    = "omst-addr-root"
	topicResults     = "omst-results"
)

func headTopic(site int) string { return fmt.Sprintf("omst-addr-head-%d", site) }

// nodeAddr is what a node publishes so that its children can join it.
type nodeAddr struct {
	Role   string `json:"role"`
	Site   int    `json:"site"`
	PeerID string `json:"peer_id"`
	Addr   string `json:"addr"` // multiaddr with /p2p/ID
}

// caseImpl is one test case. The instance life cycle (runInstance) calls
// prepare before the common start barrier and act after it; act fills in the
// instance's record (bytes, seconds, ok ...).
type caseImpl interface {
	name() string
	// workerStartsLate: this worker starts its daemon in act, not before the barrier.
	workerStartsLate(in *instance) bool
	// workerParents: the worker's --parent list (the first is preferred).
	workerParents(in *instance) []string
	prepare(ctx context.Context, in *instance) error
	act(ctx context.Context, in *instance, rec *record) error
	// measured: the records whose seconds make the case's result, and
	// how many of them the root expects.
	measured(in *instance, all []record, own []record) ([]record, int)
}

// instance is this test instance: one host with one omst daemon.
type instance struct {
	re    *runtime.RunEnv
	ic    *run.InitContext
	sc    sync.Client
	cfg   *config
	c     caseImpl
	role  string
	site  int // -1 for the root
	index int // worker index within its site; site number for a head
	ip    string
	tag   string // e.g. workers-3
	out   *resultsFile

	d     *daemon
	root  nodeAddr
	head  nodeAddr // the site's head (workers only)
	start time.Time
	blob  blobInfo // the broadcast blob (root: as put; workers: as published)
	local []record // extra records this instance wrote (the root's gather fetches)

	// dht case: the other sites' results this worker reads; the root's
	// and a head's status when the reading phase starts.
	reads     []blobInfo
	readStart *rpcbridge.Status

	// A head under the namespace harness: its WAN link's interface and its
	// counters at the start signal.
	wanIface string
	wanStart ifstat.Counters

	// grid on: this instance's join token (heads, workers) and its
	// daemon's membership.
	joinToken string
	grid      *gridStatus

	workerDoneSent bool
}

func runInstance(re *runtime.RunEnv, ic *run.InitContext, c caseImpl) error {
	cfg, err := loadConfig(re)
	if err != nil {
		return err
	}
	in := &instance{re: re, ic: ic, sc: ic.SyncClient, cfg: cfg, c: c, site: -1}
	in.out, err = openResults(re.TestOutputsPath)
	if err != nil {
		return err
	}
	defer in.out.Close()
	defer func() { in.d.stop(10 * time.Second) }()

	rec := record{Case: c.name(), Mode: cfg.mode, Site: -1}
	runErr := in.setupAndAct(&rec)
	rec.Role, rec.Site, rec.Index, rec.Instance = in.role, in.site, in.index, in.tag
	rec.Grid = in.grid
	if runErr != nil {
		rec.OK = false
		rec.Error = runErr.Error()
		re.RecordMessage("FAILED: %v", runErr)
	}
	in.out.Write(rec)
	re.R().RecordPoint(fmt.Sprintf("%s_%s_seconds", c.name(), in.role), rec.Seconds)

	// Report and finish, bounded even if the main timeout has expired.
	// The root may still be gathering (up to timeout) while the others wait.
	fctx, cancel := context.WithTimeout(context.Background(), cfg.timeout+30*time.Second)
	defer cancel()
	if _, err := in.sc.Publish(fctx, sync.NewTopic(topicResults, &record{}), &rec); err != nil {
		re.RecordMessage("publish result: %v", err)
	}
	var sumErr error
	if in.role == roleRoot {
		sumErr = in.collect(fctx, rec)
	}
	// Every daemon stays up until every instance is done with it.
	if _, err := in.sc.SignalAndWait(fctx, stateFinished, re.TestInstanceCount); err != nil {
		re.RecordMessage("finish barrier: %v", err)
	}
	if err := in.d.stop(10 * time.Second); err != nil {
		re.RecordMessage("stop daemon: %v", err)
	}
	in.d = nil
	if runErr != nil {
		return runErr
	}
	return sumErr
}

// setupAndAct: role, network, daemon, addresses, the start barrier, the case.
func (in *instance) setupAndAct(rec *record) error {
	re, cfg := in.re, in.cfg
	sctx, scancel := context.WithTimeout(context.Background(), cfg.startupTimeout)
	defer scancel()
	var pctx context.Context = sctx // replaced once set-up is done

	if err := in.assignRole(sctx); err != nil {
		return err
	}
	re.RecordMessage("omst plan: case=%s mode=%s role=%s site=%d index=%d ip=%s bin=%s grid=%v",
		in.c.name(), cfg.mode, in.role, in.site, in.index, in.ip, cfg.omstBin, cfg.grid)
	if err := in.configureNetwork(sctx); err != nil {
		return err
	}

	// Signal readiness on every path below, so that one broken instance
	// does not leave the others waiting until the timeout.
	readyDone := false
	signalReady := func() error {
		if readyDone {
			return nil
		}
		readyDone = true
		_, err := in.sc.SignalAndWait(pctx, stateReady, re.TestInstanceCount)
		return err
	}
	defer func() {
		if !readyDone {
			readyDone = true
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = in.sc.SignalEntry(ctx, stateReady)
		}
		in.signalWorkerDone()
	}()

	switch in.role {
	case roleRoot:
		if err := in.startDaemon(sctx, nil, nil); err != nil {
			return err
		}
		if cfg.grid {
			if err := in.publishTokens(sctx); err != nil {
				return err
			}
		}
		if _, err := in.sc.Publish(sctx, sync.NewTopic(topicRootAddr, &nodeAddr{}), in.self()); err != nil {
			return err
		}
	case roleHead:
		root, err := waitFirst[nodeAddr](sctx, in.sc, topicRootAddr, nil)
		if err != nil {
			return fmt.Errorf("wait for the root's address: %w", err)
		}
		in.root = *root
		if err := in.waitToken(sctx); err != nil {
			return err
		}
		if in.flat() {
			// A flat cluster: no parent, the DHT joined through the root.
			if err := in.startDaemon(sctx, nil, []string{root.Addr}); err != nil {
				return err
			}
			in.waitDHT(sctx)
		} else {
			if err := in.startDaemon(sctx, []string{root.Addr}, nil); err != nil {
				return err
			}
			in.waitParent(sctx, root.PeerID)
		}
		if _, err := in.sc.Publish(sctx, sync.NewTopic(headTopic(in.site), &nodeAddr{}), in.self()); err != nil {
			return err
		}
	case roleWorker:
		root, err := waitFirst[nodeAddr](sctx, in.sc, topicRootAddr, nil)
		if err != nil {
			return fmt.Errorf("wait for the root's address: %w", err)
		}
		in.root = *root
		if cfg.mode != modeStar || in.flat() {
			head, err := waitFirst[nodeAddr](sctx, in.sc, headTopic(in.site), nil)
			if err != nil {
				return fmt.Errorf("wait for head %d's address: %w", in.site, err)
			}
			in.head = *head
		}
		if err := in.waitToken(sctx); err != nil {
			return err
		}
		if !in.c.workerStartsLate(in) {
			if err := in.startWorker(sctx); err != nil {
				return err
			}
		}
	}

	pctx, pcancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer pcancel()
	// Preparing (the root's put of a large blob) and the start barrier are
	// bounded by timeout, not by startup_timeout.
	if err := in.c.prepare(pctx, in); err != nil {
		return err
	}
	if err := signalReady(); err != nil {
		return fmt.Errorf("start barrier: %w", err)
	}
	in.start = time.Now()
	in.readWANStart()

	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	err := in.c.act(ctx, in, rec)
	if in.role == roleWorker {
		in.signalWorkerDone()
	}
	// Wait for the workers (a worker keeps serving its siblings until all
	// are done), then read the byte counters.
	nworkers := cfg.sites * cfg.workersPerSite
	if nworkers > 0 && (in.role != roleWorker || in.d != nil) {
		b, werr := in.sc.Barrier(ctx, stateWorkersDone, nworkers)
		if werr == nil {
			werr = <-b.C
		}
		if werr != nil && err == nil {
			err = fmt.Errorf("wait for the workers: %w", werr)
		}
	}
	if rec.Seconds == 0 {
		rec.Seconds = in.since() // root and heads: until the last worker was done
	}
	in.wireCounters(rec)
	in.counters(rec)
	return err
}

// signalWorkerDone tells the root and heads that this worker is done (or
// gave up); once per worker.
func (in *instance) signalWorkerDone() {
	if in.role != roleWorker || in.workerDoneSent {
		return
	}
	in.workerDoneSent = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := in.sc.SignalEntry(ctx, stateWorkersDone); err != nil {
		in.re.RecordMessage("signal workers-done: %v", err)
	}
}

// assignRole derives role, site, worker index and data IP.
func (in *instance) assignRole(ctx context.Context) error {
	re, cfg := in.re, in.cfg
	seq := int(in.ic.GroupSeq) // 1-based
	in.tag = fmt.Sprintf("%s-%d", re.TestGroupID, seq)
	want := map[string]int{groupRoot: 1, groupHeads: cfg.sites, groupWorkers: cfg.sites * cfg.workersPerSite}
	switch re.TestGroupID {
	case groupRoot:
		in.role = roleRoot
	case groupHeads:
		in.role = roleHead
	case groupWorkers:
		in.role = roleWorker
	default:
		return fmt.Errorf("group %q: the composition's groups must be root, heads and workers", re.TestGroupID)
	}
	if n := re.TestGroupInstanceCount; n != want[re.TestGroupID] {
		return fmt.Errorf("group %s has %d instances; sites=%d workers_per_site=%d want %d",
			re.TestGroupID, n, cfg.sites, cfg.workersPerSite, want[re.TestGroupID])
	}
	if in.role != roleRoot {
		in.site = (seq - 1) % cfg.sites
		if s := os.Getenv("OMST_WAN_SITE"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 || n >= cfg.sites {
				return fmt.Errorf("OMST_WAN_SITE=%q: want 0..%d", s, cfg.sites-1)
			}
			in.site = n
		}
	}
	switch in.role {
	case roleHead:
		in.index = in.site
	case roleWorker:
		n, err := in.sc.SignalEntry(ctx, sync.State(fmt.Sprintf("omst-site-%d-workers", in.site)))
		if err != nil {
			return err
		}
		in.index = int(n) - 1
		if in.index >= cfg.workersPerSite {
			return fmt.Errorf("site %d has more than workers_per_site=%d workers (check OMST_WAN_SITE)", in.site, cfg.workersPerSite)
		}
	}
	switch {
	case os.Getenv("OMST_WAN_IP") != "":
		in.ip = os.Getenv("OMST_WAN_IP")
	case re.TestSidecar:
		ip, err := in.ic.NetClient.GetDataNetworkIP()
		if err != nil {
			return err
		}
		in.ip = ip.String()
	default:
		in.ip = "127.0.0.1"
	}
	return nil
}

// configureNetwork asks testground's sidecar (local:docker) for the link
// shape; without a sidecar (local:exec, the namespace harness) the shaping
// is the environment's business and this does nothing. The sidecar applies
// one egress shape per instance: the root's egress is the WAN (the path of a
// broadcast), heads' and workers' egress the LAN.
func (in *instance) configureNetwork(ctx context.Context) error {
	if !in.re.TestSidecar {
		if in.cfg.wanBW != 0 || in.cfg.wanLatency != 0 || in.cfg.lanBW != 0 {
			in.re.RecordMessage("no sidecar: wan_bw, wan_latency and lan_bw are left to the environment")
		}
		return nil
	}
	shape := network.LinkShape{Bandwidth: in.cfg.lanBW}
	if in.role == roleRoot {
		shape = network.LinkShape{Bandwidth: in.cfg.wanBW, Latency: in.cfg.wanLatency}
	}
	return in.ic.NetClient.ConfigureNetwork(ctx, &network.Config{
		Network:       "default",
		Enable:        true,
		Default:       shape,
		CallbackState: "omst-network-configured",
		RoutingPolicy: network.AllowAll,
	})
}

func (in *instance) daemonSpec(parents, bootstrap []string) daemonSpec {
	cfg := in.cfg
	spec := daemonSpec{
		bin: cfg.omstBin, ip: in.ip, transport: cfg.transport, parents: parents,
		bootstrap: bootstrap, noDHT: !cfg.dht,
		window: cfg.window, cacheSize: cfg.cacheSize, chunkSize: cfg.chunkSize,
		logLevel: cfg.logLevel, keepHome: cfg.keepHome, trustedLAN: cfg.trustedLAN,
		logPath:  filepath.Join(in.re.TestOutputsPath, "daemon.log"),
		gridInit: cfg.grid && in.role == roleRoot,
		join:     in.joinToken,
	}
	if in.site >= 0 {
		spec.site = fmt.Sprintf("site-%d", in.site)
	} else {
		spec.site = "root"
	}
	switch cfg.mode {
	case modeStoreForward:
		// OmniStorage's relay as it was: the head waits for the whole
		// blob, then serves every worker itself.
		spec.relayMode = "store-forward"
		spec.noSiblings = true
	case modeTreeAlone:
		spec.noSiblings = true
	case modeStar:
		// The baseline is the master sending every worker its copy: with
		// sibling exchange the root would send workers to each other.
		spec.noSiblings = true
	}
	return spec
}

func (in *instance) startDaemon(ctx context.Context, parents, bootstrap []string) error {
	d, err := startDaemon(ctx, in.tag, in.daemonSpec(parents, bootstrap))
	if err != nil {
		return err
	}
	in.d = d
	if err := in.checkMember(); err != nil {
		return fmt.Errorf("daemon %s (log %s): %w", in.tag, d.spec.logPath, err)
	}
	grid := "off"
	if in.grid != nil {
		grid = fmt.Sprintf("member of %s as %s %q", in.grid.Grid, in.grid.Role, in.grid.Prefixes)
	}
	in.re.RecordMessage("daemon up: %s (parents %v, bootstrap %v, dht %v, grid %s)", d.addr, parents, bootstrap, in.cfg.dht, grid)
	return nil
}

// startWorker starts a worker's daemon under the case's parents and waits
// (softly) until it is connected to the first. In the flat topology it has
// no parent: it joins the DHT through the root and its site's head.
func (in *instance) startWorker(ctx context.Context) error {
	if in.flat() {
		if err := in.startDaemon(ctx, nil, []string{in.root.Addr, in.head.Addr}); err != nil {
			return err
		}
		in.waitDHT(ctx)
		return nil
	}
	parents := in.c.workerParents(in)
	if err := in.startDaemon(ctx, parents, nil); err != nil {
		return err
	}
	in.waitParent(ctx, peerOf(parents[0]))
	return nil
}

// flat: the topology has no tree (param topology=flat).
func (in *instance) flat() bool { return in.cfg.topology == topologyFlat }

// waitDHT waits up to 10 s for the daemon's DHT routing table to hold a
// peer; softly, as waitParent.
func (in *instance) waitDHT(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		st, err := in.d.client.Status(ctx)
		if err == nil && st.DHTPeers > 0 {
			return
		}
		select {
		case <-ctx.Done():
			in.re.RecordMessage("DHT routing table still empty after 10s (status err=%v)", err)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// defaultParent is the worker's parent in the mode: the site's head, or
// the root in star mode.
func (in *instance) defaultParent() string {
	if in.cfg.mode == modeStar {
		return in.root.Addr
	}
	return in.head.Addr
}

// waitParent waits up to 10 s for the daemon to report its parent
// connected; a daemon that connects lazily is not an error here (the
// fetches will tell).
func (in *instance) waitParent(ctx context.Context, peer string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		st, err := in.d.client.Status(ctx)
		if err == nil && st.ParentConnected && (peer == "" || sameNode(st.Parent, peer)) {
			return
		}
		select {
		case <-ctx.Done():
			in.re.RecordMessage("parent %s not reported connected after 10s (status err=%v parent=%q connected=%v)",
				peer, err, st.Parent, st.ParentConnected)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sameNode compares a status' parent (a peer ID or a multiaddr with /p2p/ID:
// daemons have reported both) with a peer ID.
func sameNode(parent, peer string) bool {
	return parent == peer || peerOf(parent) == peer
}

func peerOf(addr string) string {
	if i := strings.LastIndex(addr, "/p2p/"); i >= 0 {
		return addr[i+len("/p2p/"):]
	}
	return ""
}

func (in *instance) self() *nodeAddr {
	return &nodeAddr{Role: in.role, Site: in.site, PeerID: in.d.status.PeerID, Addr: in.d.addr}
}

// counters copies the daemon's byte counters into the record.
func (in *instance) counters(rec *record) {
	if in.d == nil || !in.d.running() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cpu, err := procCPUSeconds(in.d.cmd.Process.Pid); err == nil {
		rec.CPUSeconds = cpu
	}
	if st, err := in.d.client.Status(ctx); err == nil {
		rec.BytesServed, rec.BytesFetched, rec.PeerErrors = st.BytesServed, st.BytesFetched, st.PeerErrors
		rec.BytesIn, rec.BytesOut, rec.RedirectsSent, rec.SiblingFailures = st.BytesIn, st.BytesOut, st.RedirectsSent, st.SiblingFailures
		rec.RedirectsTaken, rec.Hedges, rec.HedgesDeclined = st.RedirectsTaken, st.Hedges, st.HedgesDeclined
		rec.PushSent, rec.PushReceived = st.PushSent, st.PushReceived
		rec.HedgesBusy, rec.HedgesServed, rec.HedgesDeferred = st.HedgesBusy, st.HedgesServed, st.HedgesDeferred
		rec.Directs, rec.DirectsServed = st.Directs, st.DirectsServed
		rec.DirectsRedirected, rec.DirectsBusy = st.DirectsRedirected, st.DirectsBusy
		if rec.Role == roleWorker && rec.OK && rec.Case == "broadcast" {
			rec.DuplicateBytes = duplicateBytes(st.BytesIn, rec.Bytes)
		}
		if in.cfg.grid && st.Membership != nil {
			in.grid = gridStatusOf(st.Membership)
		}
	}
}

// readWANStart (heads under the namespace harness, which names the WAN
// link's interface in OMST_WAN_WAN_IFACE) notes the interface's counters at
// the start signal.
func (in *instance) readWANStart() {
	iface := os.Getenv("OMST_WAN_WAN_IFACE")
	if in.role != roleHead || iface == "" {
		return
	}
	c, err := ifstat.Read(iface)
	if err != nil {
		in.re.RecordMessage("WAN counters: %v", err)
		return
	}
	in.wanIface, in.wanStart = iface, c
}

// wireCounters puts into a head's record the bytes its WAN link's interface
// received and sent since the start signal: what entered and left the site,
// with every header and retransmission (the daemon's counters have chunk
// bytes only).
func (in *instance) wireCounters(rec *record) {
	if in.wanIface == "" {
		return
	}
	c, err := ifstat.Read(in.wanIface)
	if err != nil {
		in.re.RecordMessage("WAN counters: %v", err)
		return
	}
	d := c.Sub(in.wanStart)
	rec.WANIface, rec.WANRxBytes, rec.WANTxBytes = in.wanIface, d.RxBytes, d.TxBytes
}

// since is the time from the common start signal.
func (in *instance) since() float64 { return time.Since(in.start).Seconds() }

// waitFirst subscribes to a topic and returns the first item that ok
// accepts (every item if ok is nil). The subscription replays items
// published before it.
func waitFirst[T any](ctx context.Context, sc sync.Client, topic string, ok func(*T) bool) (*T, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan *T, 64)
	sub, err := sc.Subscribe(ctx, sync.NewTopic(topic, new(T)), ch)
	if err != nil {
		return nil, err
	}
	for {
		select {
		case v := <-ch:
			if ok == nil || ok(v) {
				return v, nil
			}
		case err := <-sub.Done():
			if err == nil {
				err = errors.New("subscription closed")
			}
			return nil, fmt.Errorf("topic %s: %w", topic, err)
		case <-ctx.Done():
			return nil, fmt.Errorf("topic %s: %w", topic, ctx.Err())
		}
	}
}
