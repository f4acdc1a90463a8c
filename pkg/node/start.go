package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/batchfetch"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/cache"
	"github.com/omst-project/omst/pkg/dht"
	"github.com/omst-project/omst/pkg/locate"
	"github.com/omst-project/omst/pkg/member"
	"github.com/omst-project/omst/pkg/peerhost"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/transfer"
	"github.com/omst-project/omst/pkg/tree"
)

// Start opens the home directory (refusing one held by another daemon),
// the store, the libp2p host, joins the tree and serves the local API. ctx
// bounds the start only: once ctx ends, Start stops at the next step and
// returns an error wrapping ctx's (the node, once started, lives until
// Close). On error everything already opened is closed again.
//
// The parts are built in dependency order, each from parts built before
// it: the parents' list (tree.Parents, which the admission forwards join
// requests up through), the admission, the host, the DHT, the tree, the
// locator, the transfer engine (the tree is its source provider); the
// engine then subscribes to the tree's events (tree.Engine), and both
// start.
func Start(ctx context.Context, cfg Config) (n *Node, err error) {
	cfg, top, err := checkConfig(cfg)
	if err != nil {
		return nil, err
	}
	nd := &Node{cfg: cfg, log: cfg.Logger, removed: map[string]int64{}, announced: map[cid.Cid]time.Time{}}
	defer func() {
		// The returns below set n to nil on error; close what nd opened.
		if err != nil {
			nd.Close()
			n = nil
		}
	}()
	n = nd
	started := func(step string) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("start stopped before %s: %w", step, context.Cause(ctx))
		}
		return nil
	}
	if err = started("locking the home"); err != nil {
		return nil, err
	}
	if n.lock, err = lockHome(cfg.Home); err != nil {
		return nil, err
	}
	if top.sockGroup.gid >= 0 && !cfg.NoSocket {
		if err = shareHome(cfg.Home, top.sockGroup); err != nil {
			return nil, err
		}
	}
	if err = n.startMetrics(); err != nil {
		return nil, err
	}
	if n.store, err = cache.Open(filepath.Join(cfg.Home, "cache"), cache.Options{MaxBytes: cfg.CacheSize, Logger: cfg.Logger, Sync: cfg.Sync, ChunkOutboard: transfer.ChunkOutboard}); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err = started("starting the host"); err != nil {
		return nil, err
	}
	if err = n.startHost(top); err != nil {
		return nil, err
	}
	if cfg.Join != "" && cfg.Host == nil {
		if err = n.joinGrid(ctx, append(parentList(top.parent), top.fallbacks...)); err != nil {
			return nil, err
		}
	}
	if n.adm.Open() && cfg.Host == nil {
		n.log.Warn(openWarning)
	}
	if !cfg.NoDHT {
		bootstrap := top.bootstrap
		if top.parent != nil {
			bootstrap = append(append(bootstrap, *top.parent), top.fallbacks...)
		}
		if n.dht, err = dht.New(dht.Config{Host: n.host, Bootstrap: bootstrap, Held: n.heldBlobs, Names: n.ownNames,
			CheckRecord: n.adm.CheckRecord, CheckRemoval: n.adm.CheckRemoval, Withdrawn: n.withdrawn,
			Logger: cfg.Logger, Client: top.parent != nil}); err != nil {
			return nil, err
		}
		n.provQ = make(chan provideItem, provideQueue)
	}
	if n.tree, err = tree.New(n.treeConfig(top)); err != nil {
		return nil, fmt.Errorf("tree: %w", err)
	}
	if err = n.newEngine(); err != nil {
		return nil, err
	}
	// Small blobs asked many at once (GET_MANY's gather, openmany.go).
	batchfetch.Serve(n.host, n.store, n.pullSmall, cfg.Logger)
	if err = started("joining the tree"); err != nil {
		return nil, err
	}
	tctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	if err = n.engine.Start(tctx); err != nil {
		return nil, fmt.Errorf("transfer: %w", err)
	}
	if err = n.tree.Start(tctx); err != nil {
		return nil, fmt.Errorf("tree: %w", err)
	}
	if cfg.Host == nil {
		go n.gridLoop(tctx)
	}
	go n.expireLoop(tctx)
	if n.dht != nil {
		go n.provideLoop(tctx)
		if top.parent != nil {
			go n.dhtModeLoop(tctx)
		}
	}
	if !cfg.NoSocket {
		n.server = rpcbridge.NewServer(n, rpcbridge.ServerOptions{Logger: cfg.Logger})
		if n.ln, err = n.server.ListenGroup(SocketPath(cfg.Home), top.sockGroup.gid); err != nil {
			return nil, fmt.Errorf("local API: %w", err)
		}
		n.served = make(chan error, 1)
		go func() { n.served <- n.server.Serve(n.ln) }()
	}
	n.metrics.setReady()
	n.log.Info("omst daemon started", "peer", n.host.ID(), "addrs", peerhost.FullAddrs(n.host),
		"parent", cfg.Parent, "site", cfg.Site, "home", cfg.Home)
	return n, nil
}

// topology is what Start parsed from a Config: the peers it names and the
// local API's group.
type topology struct {
	parent    *peer.AddrInfo // nil for the root
	fallbacks []peer.AddrInfo
	parents   *tree.Parents // parent, then fallbacks: the tree's, and the admission's way up
	bootstrap []peer.AddrInfo
	sockGroup socketGroup
}

// checkConfig fills in cfg's defaults and parses the peers it names,
// before anything is opened.
func checkConfig(cfg Config) (Config, topology, error) {
	var top topology
	if cfg.Home == "" {
		cfg.Home = DefaultHome()
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = blob.DefaultChunkSize
	}
	if err := blob.ValidateChunkSize(cfg.ChunkSize); err != nil {
		return cfg, top, fmt.Errorf("default chunk size: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	var err error
	if cfg.Parent != "" {
		if top.parent, err = peerhost.ParsePeerAddr(cfg.Parent); err != nil {
			return cfg, top, fmt.Errorf("--parent: %w", err)
		}
	}
	for _, f := range cfg.Fallbacks {
		if top.parent == nil {
			return cfg, top, errors.New("fallback parents need a parent")
		}
		fb, err := peerhost.ParsePeerAddr(f)
		if err != nil {
			return cfg, top, fmt.Errorf("--parent %s: %w", f, err)
		}
		top.fallbacks = append(top.fallbacks, *fb)
	}
	if top.parents, err = tree.NewParents(top.parent, top.fallbacks); err != nil {
		return cfg, top, fmt.Errorf("--parent: %w", err)
	}
	if top.sockGroup, err = lookupSocketGroup(cfg.SocketGroup); err != nil {
		return cfg, top, err
	}
	for _, b := range cfg.Bootstrap {
		ai, err := peerhost.ParsePeerAddr(b)
		if err != nil {
			return cfg, top, fmt.Errorf("--bootstrap: %w", err)
		}
		top.bootstrap = append(top.bootstrap, *ai)
	}
	return cfg, top, nil
}

// startHost sets n.adm and n.host: Config.Host (an in-process host, open
// membership) or a libp2p host of the home's identity, gated by the
// admission of the home's grid material (which forwards join requests to
// top's parents). It refuses a parent that is this node itself.
func (n *Node) startHost(top topology) (err error) {
	cfg := n.cfg
	if cfg.Host != nil {
		// An in-process host: membership is the caller's (open here).
		n.host = cfg.Host
		if n.adm, err = member.New(member.Config{Logger: cfg.Logger}, member.Material{}); err != nil {
			return err
		}
	} else {
		key, err := peerhost.LoadOrCreateKey(filepath.Join(cfg.Home, "identity.key"))
		if err != nil {
			return err
		}
		self, _ := peer.IDFromPrivateKey(key)
		if n.adm, err = n.newAdmission(self, top.parents); err != nil {
			return err
		}
		if n.host, err = peerhost.New(peerhost.Options{Key: key, Listen: cfg.Listen, Admission: n.adm, Registerer: n.metrics.registerer()}); err != nil {
			return err
		}
	}
	if key := n.host.Peerstore().PrivKey(n.host.ID()); key != nil {
		n.store.SetSeal(n.seal(key))
	}
	if top.parent != nil && top.parent.ID == n.host.ID() {
		return fmt.Errorf("--parent %s is this node itself", cfg.Parent)
	}
	for i, fb := range top.fallbacks {
		if fb.ID == n.host.ID() {
			return fmt.Errorf("--parent %s is this node itself", cfg.Fallbacks[i])
		}
	}
	return nil
}

// treeConfig is the tree's configuration: n's host, store, admission and
// DHT (all built before the tree) and top's parents.
func (n *Node) treeConfig(top topology) tree.Config {
	cfg := n.cfg
	tcfg := tree.Config{
		CheckRecord:    n.adm.CheckRecord,
		Rules:          (*nodeRules)(n), // job namespaces (namespaces.go)
		CheckRule:      n.adm.CheckRule,
		Members:        n.adm, // in a closed grid: which peers may be children, which records route (tree/roles.go)
		Host:           n.host,
		Store:          n.store,
		Parents:        top.parents,
		RetryPreferred: cfg.RetryPreferred,
		Site:           cfg.Site,
		Logger:         cfg.Logger,
	}
	if top.parent == nil && n.dht != nil {
		// With no parent (a flat cluster's node, or the root), namespace
		// rules go to the DHT neighbours too: in a flat cluster the only
		// other nodes it knows (tree/rules.go).
		h, d := n.host, n.dht
		tcfg.Peers = func() []peer.ID {
			var out []peer.ID
			for _, p := range h.Network().Peers() {
				if d.InRoutingTable(p) {
					out = append(out, p)
				}
			}
			return out
		}
	}
	return tcfg
}

// newEngine sets n.loc (with a DHT) and n.engine, built on n.tree as their
// source of parents, children and siblings, and subscribes the engine to
// the tree's events: a parent's PREHEAT, a child's put (unless
// NoReplicate), a child leaving, pushes.
func (n *Node) newEngine() (err error) {
	cfg := n.cfg
	var finder transfer.Finder
	if n.dht != nil {
		t := n.tree
		n.loc, err = locate.New(locate.Config{
			Host:     n.host,
			Searcher: n.dht,
			Self:     func() locate.Info { return locate.Info{Site: cfg.Site, Gateway: t.Gateway()} },
			Origin:   t.Origin,
			Logger:   cfg.Logger,
		})
		if err != nil {
			return err
		}
		finder = n.loc
	}
	n.engine, err = transfer.New(transfer.Config{
		Host:             n.host,
		Store:            n.store,
		Sources:          n.tree,
		Finder:           finder,
		OthersFromStore:  n.tree.Gateway,
		OnComplete:       n.fetchComplete,
		BlobSink:         n.ownSink,
		CopyMany:         n.copySmall,
		CopyManyMax:      batchfetch.InlineMax,
		Mode:             relayMode(cfg.StoreForward),
		Window:           cfg.Window,
		SiblingExchange:  !cfg.NoSiblingExchange,
		MaxUploadRate:    cfg.MaxUploadRate,
		MaxUploadStreams: cfg.MaxUploadStreams,
		Bulk:             transfer.BulkConfig{Listen: cfg.BulkListen, Conns: cfg.BulkConns, TrustedLAN: cfg.TrustedLAN, Site: cfg.Site, NoSendfile: cfg.BulkNoSendfile},
		Logger:           cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("transfer: %w", err)
	}
	var sub tree.Engine = n.engine
	if cfg.NoReplicate {
		sub = noReplicate{n.engine}
	}
	if err = n.tree.Subscribe(sub); err != nil {
		return fmt.Errorf("tree: %w", err)
	}
	return nil
}

// noReplicate is the engine of a node with Config.NoReplicate: it copies
// no blob a child put.
type noReplicate struct{ *transfer.Engine }

// Replicate does nothing.
func (noReplicate) Replicate(blob.Record) {}
