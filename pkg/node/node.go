package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/cache"
	"github.com/omst-project/omst/pkg/dht"
	"github.com/omst-project/omst/pkg/gridstore"
	"github.com/omst-project/omst/pkg/locate"
	"github.com/omst-project/omst/pkg/member"
	"github.com/omst-project/omst/pkg/peerhost"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/transfer"
	"github.com/omst-project/omst/pkg/tree"
)

// Version is reported by status.
const Version = "0.1.0"

// Config configures a daemon.
type Config struct {
	Home   string   // home directory; "" = DefaultHome()
	Listen []string // libp2p listen multiaddrs; empty = peerhost.DefaultListen()
	Parent string   // parent multiaddr ending in /p2p/<ID>; "" for the root
	// Fallbacks are further parents (same form), used in order when the
	// current parent cannot be reached, e.g. the root for a worker whose
	// head node may die.
	Fallbacks []string
	// RetryPreferred is how often a node on a fallback parent checks
	// whether an earlier parent is back (0: the tree's default, 30s;
	// negative: never).
	RetryPreferred time.Duration
	Site           string // site label (e.g. the cluster's name)
	CacheSize      int64  // cap on cached chunk bytes; 0 = cache default
	ChunkSize      int    // default chunk size for puts; 0 = blob.DefaultChunkSize
	Window         int    // chunks in flight per fetch; 0 = tree default
	// StoreForward makes this node, as a relay, fetch a whole blob before
	// serving any of it to a child (for comparison with the default
	// cut-through forwarding).
	StoreForward bool
	// NoReplicate turns off the background copy a relay makes of a blob put
	// directly below it (on by default: a result is durable once its head
	// node holds a copy).
	NoReplicate bool
	// NoSiblingExchange makes this node, as a relay, serve every chunk to
	// every child itself, instead of sending children of one site to each
	// other (transfer.Config.SiblingExchange).
	NoSiblingExchange bool
	// MaxUploadRate bounds the bytes per second sent to peers (0: none);
	// MaxUploadStreams the fetch streams served at once to peers that are
	// neither children nor parents (0: none). See transfer.Config.
	MaxUploadRate    int64
	MaxUploadStreams int
	// BulkListen is the TCP address of the bulk listener (docs/protocol.md,
	// "The bulk path"; "" none: peers fetch from this node over libp2p
	// streams); BulkConns the bulk connections opened to a peer this node
	// fetches from (0: none). TrustedLAN says the operator trusts the
	// site's LAN: bulk bytes between two such nodes of the same Site go in
	// plain text. BulkNoSendfile sends stored chunks on plain bulk
	// connections from memory instead of with sendfile(2). See
	// transfer.BulkConfig.
	BulkListen     string
	BulkConns      int
	TrustedLAN     bool
	BulkNoSendfile bool
	// Bootstrap are further peers (multiaddrs ending in /p2p/<ID>) to join
	// the private DHT through; the parents always are. NoDHT keeps the
	// node out of the DHT.
	Bootstrap []string
	NoDHT     bool
	// Sync makes every put durable before it is acknowledged (see
	// cache.Options.Sync).
	Sync   bool
	Logger *slog.Logger
	// Host, when non-nil, is used instead of starting a libp2p host from
	// Listen (for in-process emulated networks); Node closes it.
	Host host.Host
	// NoSocket skips the local API socket (in-process use).
	NoSocket bool
	// SocketGroup, a group name or numeric GID, opens the local API to
	// that group's members: the socket gets the group and mode 0660
	// (rpcbridge.Server.ListenGroup), the home directory the group and
	// mode 0710 (search only) and HOME/cache mode 0700. "" keeps the
	// socket 0600 (the home's mode is then left as it is).
	SocketGroup string
	// UserQuota bounds the bytes that one local user other than the
	// daemon's (a member of SocketGroup) may keep here through its puts
	// (they are pinned): 0 is a quarter of the cache's cap, a negative
	// value no bound. The daemon's own user and root have none.
	UserQuota int64
	// Join is a join token (omst-join-..., redeemed with the root through
	// the parents on the first start) or a certificate's text form
	// (omst-cert-..., from `omst grid admit`); ignored once this node
	// holds a certificate. Without grid material the node is open.
	Join string
	// Metrics, a host:port, serves Prometheus metrics at
	// http://Metrics/metrics (unauthenticated: loopback or a management
	// network; port 0 picks one, see MetricsAddr). "" serves none.
	Metrics string
}

// Node is a running daemon. Its methods implement rpcbridge.Backend and are
// safe for concurrent use.
type Node struct {
	cfg    Config
	log    *slog.Logger
	lock   *homeLock
	store  *cache.Store
	host   host.Host
	tree   *tree.Tree
	engine *transfer.Engine
	dht    *dht.DHT // nil with NoDHT
	adm    *member.Admission
	gdir   gridstore.Dir
	loc    *locate.Locator // sources beyond the tree, found in the DHT; nil with NoDHT
	provQ  chan provideItem
	provN  atomic.Uint64 // announcements made in the DHT
	namesN atomic.Uint64 // name records put in the DHT
	// batchInline counts the blobs GET_MANY's batches brought inline
	// (openmany.go).
	batchInline atomic.Uint64
	// announced: when each blob was last announced (zero: queued), so
	// that gets of a held blob do not announce it again (provide).
	announcedMu sync.Mutex
	announced   map[cid.Cid]time.Time
	// removed: names removed here since the start, and when; a record of
	// one found in the DHT counts only if it is newer.
	removedMu sync.Mutex
	removed   map[string]int64
	server    *rpcbridge.Server
	ln        net.Listener
	metrics   *nodeMetrics // nil without Config.Metrics
	cancel    context.CancelFunc
	served    chan error
	once      sync.Once
	// fetchedFrom: gets into files that wait for the sources of their
	// fetch, for the debug log (getfile.go)
	fetchedFrom sourceWatch
}

var _ rpcbridge.Backend = (*Node)(nil)

// ID returns the node's peer ID.
func (n *Node) ID() peer.ID { return n.host.ID() }

// Addrs returns the node's multiaddrs with /p2p/<ID>.
func (n *Node) Addrs() []string { return peerhost.FullAddrs(n.host) }

// Host returns the node's libp2p host.
func (n *Node) Host() host.Host { return n.host }

// Close stops serving, leaves the tree, closes the store and releases the
// home directory. It is safe to call more than once.
func (n *Node) Close() error {
	var errs []error
	n.once.Do(func() {
		errs = append(errs, n.metrics.close())
		if n.server != nil {
			errs = append(errs, n.server.Close())
			if n.served != nil {
				select {
				case <-n.served:
				case <-time.After(5 * time.Second):
				}
			}
		}
		if n.tree != nil {
			errs = append(errs, n.tree.Close())
		}
		if n.engine != nil {
			errs = append(errs, n.engine.Close())
		}
		if n.cancel != nil {
			n.cancel()
		}
		if n.loc != nil {
			errs = append(errs, n.loc.Close())
		}
		if n.dht != nil {
			errs = append(errs, n.dht.Close())
		}
		if n.host != nil {
			errs = append(errs, n.host.Close())
		}
		if n.store != nil {
			errs = append(errs, n.store.Close())
		}
		n.lock.release()
	})
	return errors.Join(errs...)
}

func (n *Node) chunkSize(opts rpcbridge.PutOptions) int {
	if opts.ChunkSize == 0 {
		return n.cfg.ChunkSize
	}
	return opts.ChunkSize
}

// Put stores the bytes of r under name on this node (pinned) and announces
// the name up the tree.
func (n *Node) Put(ctx context.Context, name string, r io.Reader, opts rpcbridge.PutOptions) (rpcbridge.Info, error) {
	if err := n.adm.MayWrite(name); err != nil {
		return rpcbridge.Info{}, err
	}
	rec, err := n.store.IngestWith(ctx, name, r, n.chunkSize(opts), n.host.ID().String(), n.userPut(ctx, name))
	if err != nil {
		return rpcbridge.Info{}, fmt.Errorf("put %q: %w", name, err)
	}
	return n.published(ctx, rec)
}

// Store stores the bytes of r under name on this node (pinned) as Put
// does, without announcing the name: PublishMany does (PUT_MANY,
// rpcbridge.ManyPutter). The StoredPut is the name's blob.Record.
func (n *Node) Store(ctx context.Context, name string, r io.Reader, opts rpcbridge.PutOptions) (rpcbridge.StoredPut, error) {
	if err := n.adm.MayWrite(name); err != nil {
		return nil, err
	}
	rec, err := n.store.IngestWith(ctx, name, r, n.chunkSize(opts), n.host.ID().String(), n.userPut(ctx, name))
	if err != nil {
		return nil, fmt.Errorf("put %q: %w", name, err)
	}
	return rec, nil
}

// PublishMany announces the records Store made up the tree together
// (tree.AnnounceMany: a batch per hop instead of a round trip each) and
// returns, once the parent answered for them all as Put does for one, each
// put's Info or error in order.
func (n *Node) PublishMany(ctx context.Context, puts []rpcbridge.StoredPut) ([]rpcbridge.Info, []error) {
	infos := make([]rpcbridge.Info, len(puts))
	errs := make([]error, len(puts))
	recs := make([]blob.Record, 0, len(puts))
	for i, p := range puts {
		rec, ok := p.(blob.Record)
		if !ok {
			errs[i] = fmt.Errorf("publish: %T is not a put this node stored", p)
			continue
		}
		recs = append(recs, rec)
	}
	// As in Put: the puts have succeeded once stored here; names not
	// announced now are re-announced on reconnect.
	_ = n.tree.AnnounceMany(ctx, recs)
	for i, p := range puts {
		if errs[i] != nil {
			continue
		}
		infos[i], errs[i] = n.putDone(p.(blob.Record))
	}
	return infos, errs
}

func (n *Node) published(ctx context.Context, rec blob.Record) (rpcbridge.Info, error) {
	// The put has succeeded once the blob is stored here; a name that
	// could not be announced now is re-announced on reconnect.
	_ = n.tree.Announce(ctx, rec)
	return n.putDone(rec)
}

// putDone tells the DHT of a put's record its tree announce has taken,
// and returns its Info.
func (n *Node) putDone(rec blob.Record) (rpcbridge.Info, error) {
	n.publishName(rec)
	n.provide(rec.ID)
	m, err := n.store.Manifest(rec.ID)
	if err != nil {
		return rpcbridge.Info{}, fmt.Errorf("put %q: %w", rec.Name, err)
	}
	return n.info(rec, m), nil
}

// resolve looks name up (through the tree, then the DHT) and returns its
// record and manifest; toGet says the blob is to be fetched next (the tree
// lookup is then a LOOKUP_GET, whose answer may bring the first chunks). A name that parses as a blob ID (blob.ParseID) is
// one: its manifest is fetched from the blob's sources, and the record has
// the ID as its name, the origin if this node has seen one, no time. name
// comes checked (blob.ValidateName) from the local API's server, as
// rpcbridge.Backend's contract says: it is not checked again here.
func (n *Node) resolve(ctx context.Context, name string, toGet bool) (blob.Record, *blob.Manifest, error) {
	if id, ok := blob.ParseID(name); ok {
		m, err := n.engine.Manifest(ctx, id)
		if err != nil {
			return blob.Record{}, nil, err // names the manifest's ID
		}
		return blob.Record{Name: name, ID: id, Size: m.Size, Origin: n.tree.Origin(id)}, m, nil
	}
	rec, m, err := n.lookup(ctx, name, toGet)
	if err != nil {
		return blob.Record{}, nil, err
	}
	n.debugManifest(name, rec, m) // getlog.go
	if m != nil {                 // the lookup's answer brought it, verified
		return rec, m, nil
	}
	m, err = n.engine.Manifest(ctx, rec.ID)
	if errors.Is(err, blob.ErrNotFound) { // the name exists: its blob is what is missing
		err = fmt.Errorf("%w: %w", blob.ErrUnavailable, err)
	}
	if err != nil {
		return blob.Record{}, nil, fmt.Errorf("manifest of %q (%s): %w", name, rec.ID, err)
	}
	return rec, m, nil
}

// nameSearchTimeout bounds a name's search in the DHT.
const nameSearchTimeout = 10 * time.Second

// lookup resolves name: through the tree first (it is faster and knows the
// topology), then, if the tree does not know it or cannot be reached, in
// the DHT (the only path in a flat cluster); a record found there is kept.
// toGet: see resolve; then the manifest the tree's answer brought, if
// any, comes too (else nil).
func (n *Node) lookup(ctx context.Context, name string, toGet bool) (blob.Record, *blob.Manifest, error) {
	start := time.Now()
	var rec blob.Record
	var m *blob.Manifest
	var err error
	if toGet {
		rec, m, err = n.tree.LookupToGet(ctx, name)
	} else {
		rec, err = n.tree.Lookup(ctx, name)
	}
	n.debugLookup("tree", name, rec, start, err) // getlog.go
	if err == nil || n.dht == nil || !(errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrUnreachable)) {
		return rec, m, err
	}
	dctx, cancel := context.WithTimeout(ctx, nameSearchTimeout)
	defer cancel()
	drec, derr := n.dht.Name(dctx, name)
	n.removedMu.Lock()
	at, gone := n.removed[name]
	n.removedMu.Unlock()
	if derr == nil && gone && drec.Time <= at {
		derr = fmt.Errorf("removed here: %w", blob.ErrNotFound)
	}
	if derr == nil && n.withdrawn(drec) {
		derr = fmt.Errorf("withdrawn by a namespace rule here: %w", blob.ErrNotFound)
	}
	n.debugLookup("DHT", name, drec, start, derr)
	if derr != nil {
		if errors.Is(derr, blob.ErrNotFound) {
			return blob.Record{}, nil, err // the tree's answer says why
		}
		return blob.Record{}, nil, fmt.Errorf("%w; in the DHT: %w", err, derr)
	}
	if _, perr := n.store.PutRecordFrom(drec, ""); perr != nil {
		n.log.Warn("keep a record found in the DHT", "name", name, "err", perr)
	}
	return drec, nil, nil
}

// Open returns the verified bytes of the blob named name, fetching missing
// chunks through the tree.
func (n *Node) Open(ctx context.Context, name string) (rpcbridge.Info, io.ReadCloser, error) {
	start := time.Now()
	rec, m, err := n.resolve(ctx, name, true)
	n.debugResolved(name, rec, m, start, err) // getlog.go
	if err != nil {
		n.metrics.getFailed(err)
		return rpcbridge.Info{}, nil, err
	}
	rc, err := n.engine.OpenManifest(ctx, rec, m)
	if err != nil {
		n.metrics.getFailed(err)
		return rpcbridge.Info{}, nil, fmt.Errorf("get %q: %w", name, err)
	}
	return n.info(rec, m), n.newGetReader(rc, name, rec.ID, m, start), nil
}

// Stat returns what is known of name (looked up through the tree).
func (n *Node) Stat(ctx context.Context, name string) (rpcbridge.Info, error) {
	rec, m, err := n.resolve(ctx, name, false)
	if err != nil {
		return rpcbridge.Info{}, err
	}
	return n.info(rec, m), nil
}

// List returns the names this node knows with the given prefix: its own,
// those announced from below, and those it has looked up.
func (n *Node) List(ctx context.Context, prefix string) ([]rpcbridge.Info, error) {
	recs, err := n.store.List(prefix)
	if err != nil {
		return nil, err
	}
	out := make([]rpcbridge.Info, 0, len(recs))
	for _, r := range recs {
		m, err := n.store.Manifest(r.ID)
		if err != nil {
			m = nil
		}
		out = append(out, n.info(r, m))
	}
	n.fillManifests(ctx, recs, out) // listinfo.go
	return out, nil
}

// Remove forgets name on this node and unpins its blob here; other nodes
// keep their copies.
func (n *Node) Remove(ctx context.Context, name string) error {
	if err := blob.ValidateName(name); err != nil {
		return err
	}
	rec, recErr := n.store.Record(name)
	if err := n.store.RemoveNameIf(name, n.userMay(ctx, name, "remove")); err != nil {
		if errors.Is(err, blob.ErrNotFound) {
			return fmt.Errorf("remove %q: %w on this node", name, blob.ErrNotFound)
		}
		return err // the store's error names the name already
	}
	if recErr == nil && n.dht != nil {
		// Later lookups here must not find the name again in the DHT
		// unless it was put again since; a name put here is withdrawn
		// from the DHT too (only its origin can sign that).
		at := max(time.Now().UnixNano(), rec.Time+1)
		n.removedMu.Lock()
		n.removed[name] = at
		n.removedMu.Unlock()
		if rec.Origin == n.host.ID().String() {
			n.withdrawName(rec, at)
		}
	}
	return nil
}

// Status reports the node's place in the tree, its cache use and counters.
func (n *Node) Status(ctx context.Context) (rpcbridge.Status, error) {
	ts, es := n.tree.Status(), n.engine.Status()
	u := n.store.Usage()
	st := rpcbridge.Status{
		PeerID:              n.host.ID().String(),
		Site:                ts.Site,
		Addrs:               n.Addrs(),
		ParentConnected:     ts.ParentConnected,
		ParentError:         ts.ParentError,
		CacheUsed:           u.UsedBytes,
		CacheCap:            u.CapBytes,
		CachePinned:         u.PinnedBytes,
		Chunks:              u.Chunks,
		BytesServed:         es.BytesServed,
		BytesFetched:        es.BytesFetched,
		PeerErrors:          ts.PeerErrors + es.PeerErrors,
		CacheOrphaned:       u.OrphanedBytes,
		ChunksDamaged:       u.DamagedChunks,
		CorruptReceived:     es.CorruptReceived,
		CorruptReports:      es.CorruptReports,
		BytesIn:             es.BytesIn,
		BytesOut:            es.BytesOut,
		RedirectsSent:       es.RedirectsSent,
		RedirectsTaken:      es.RedirectsTaken,
		SiblingFailures:     es.SiblingFailures,
		UploadsRefused:      es.UploadsRefused,
		Hedges:              es.Hedges,
		DHTProvided:         n.provN.Load(),
		HedgesDeclined:      es.HedgesDeclined,
		HedgesBusy:          es.HedgesBusy,
		HedgesServed:        es.HedgesServed,
		HedgesDeferred:      es.HedgesDeferred,
		Directs:             es.Directs,
		DirectsServed:       es.DirectsServed,
		DirectsRedirected:   es.DirectsRedirected,
		DirectsBusy:         es.DirectsBusy,
		BytesPassedOn:       es.BytesPassedOn,
		PushSent:            es.PushSent,
		ServedUnhashed:      es.ServedUnhashed,
		ServedSendfile:      es.ServedSendfile,
		ReplicationsBatched: es.ReplicationsBatched,
		PushReceived:        es.PushReceived,
		Bulk:                n.bulkStatus(es),
		Warnings:            hostWarnings(),
		ErrorsByPeer:        map[string]uint64{},
		Version:             Version,
	}
	for _, tr := range n.engine.Transfers() {
		t := rpcbridge.Transfer{Name: tr.Name, ID: tr.ID.String(), Chunks: tr.Chunks, Done: tr.Done}
		for _, f := range tr.From {
			t.From = append(t.From, rpcbridge.TransferSource{Peer: f.ID.String(), Kind: f.Kind.String(), Bytes: f.Bytes})
		}
		st.Transfers = append(st.Transfers, t)
	}
	for p, n := range es.ErrorsByPeer {
		st.ErrorsByPeer[p.String()] = n
	}
	if ts.Parent != "" {
		st.Parent = ts.ParentAddr
	}
	for _, c := range ts.Children {
		st.Children = append(st.Children, rpcbridge.Child{ID: c.ID.String(), Site: c.Site, Addrs: c.Addrs, Connected: c.Connected})
	}
	if recs, err := n.store.List(""); err == nil {
		st.Names = len(recs)
	}
	if n.dht != nil {
		st.DHTPeers = n.dht.RoutingTableSize()
		st.DHTNames = n.namesN.Load()
		st.DHTRecordsRejected = n.dht.RecordsRejected()
		st.DHTServer = n.dht.Server()
	}
	st.Peers = n.peers()
	n.membershipStatus(&st)
	return st, nil
}

func (n *Node) info(r blob.Record, m *blob.Manifest) rpcbridge.Info {
	in := rpcbridge.Info{
		Name:   r.Name,
		ID:     r.ID.String(),
		Size:   r.Size,
		Time:   r.Time,
		Origin: r.Origin,
		Local:  n.holds(m),
		Pinned: n.store.Pinned(r.ID),
	}
	if m != nil {
		in.ChunkSize = m.ChunkSize
		in.Chunks = uint32(len(m.Chunks))
	}
	return in
}

func relayMode(storeForward bool) transfer.Mode {
	if storeForward {
		return transfer.ModeStoreForward
	}
	return transfer.ModeCutThrough
}

// Preheat asks this node's children (of the given sites, if any) to fetch
// the blob named name now (see tree.Tree.Preheat).
func (n *Node) Preheat(ctx context.Context, name string, sites []string) ([]rpcbridge.PreheatResult, error) {
	rec, _, err := n.resolve(ctx, name, false)
	if err != nil {
		return nil, err
	}
	var out []rpcbridge.PreheatResult
	for _, r := range n.tree.Preheat(ctx, rec, sites) {
		pr := rpcbridge.PreheatResult{Child: r.Child.String(), Site: r.Site, OK: r.Err == nil, Seconds: r.Elapsed.Seconds()}
		if r.Err != nil {
			pr.Error = r.Err.Error()
		}
		out = append(out, pr)
	}
	return out, nil
}

func parentList(p *peer.AddrInfo) []peer.AddrInfo {
	if p == nil {
		return nil
	}
	return []peer.AddrInfo{*p}
}
