package tree

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/omst-project/omst/internal/dialerr"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/namespace"
)

// Store is what the tree needs from the local store (pkg/cache.Store
// implements it): name records and their routes. Every method is safe for
// concurrent use.
type Store interface {
	// Record returns the name record of name, or blob.ErrNotFound.
	Record(name string) (blob.Record, error)
	// PutRecordFrom stores r only if r.Newer(current) (or there is none)
	// and reports whether it did; a record it stores gets via (the child
	// the record came up through, or "") as its name's route, replacing
	// any earlier route.
	PutRecordFrom(r blob.Record, via string) (changed bool, err error)
	// Routes returns name -> via for every name whose current record came
	// up through a child.
	Routes() (map[string]string, error)
	// List returns the records whose names start with prefix.
	List(prefix string) ([]blob.Record, error)
	// Manifest returns the manifest of blob id, or blob.ErrNotFound; the
	// tree sends a small one along with a name it looks up for a child.
	Manifest(id cid.Cid) (*blob.Manifest, error)
	// PutManifest stores m (the tree has checked it against its blob ID).
	PutManifest(m *blob.Manifest) (cid.Cid, error)
}

// Defaults for Config.
const (
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 30 * time.Second
	DefaultKeepalive      = 5 * time.Second
	DefaultRetryPreferred = 30 * time.Second
)

// Config configures New.
type Config struct {
	// CheckRecord, when set, accepts or refuses every name record this
	// node is given (a child's ANNOUNCE, a parent's FOUND or PREHEAT)
	// before it is stored or forwarded (pkg/member: the origin's proof).
	CheckRecord func(blob.Record) error
	// Rules, when set, keeps the namespace rules (rules.go) this node
	// takes from its neighbours and publishes; CheckRule, when set,
	// accepts or refuses every rule a neighbour sends before it is
	// applied or passed on (pkg/member: the origin's proof and rights).
	Rules     Rules
	CheckRule func(namespace.Rule) error
	// Peers, when set on a node with no parent, lists the other nodes of
	// a flat cluster (the daemon: the DHT neighbours it is connected
	// to): namespace rules go to them as to a tree's neighbours, and are
	// taken from any peer (rules.go). Ignored on a node with a parent.
	Peers func() []peer.ID
	// Members, when set and closed, decides by the peers' certificates
	// which peers may be children (MayAdopt) and which records a child's
	// ANNOUNCE moves routing for (MayRoute): see roles.go. nil, or an
	// open grid: any peer, any record (an open daemon).
	Members Members
	Host    host.Host      // a libp2p host built by the caller
	Store   Store          // the local store
	Parent  *peer.AddrInfo // nil for the root
	// Parents, when set, are the node's parents instead of Parent and
	// Fallbacks (which must then be empty): made by NewParents before the
	// tree, for a part that follows them from before the tree exists.
	Parents *Parents
	// Fallbacks are further parents, tried in order when the current
	// parent cannot be reached (e.g. the root, for a worker whose head
	// node dies). They are also sources of last resort.
	Fallbacks []peer.AddrInfo
	// RetryPreferred is how often a node on a fallback checks whether a
	// parent earlier in the list (the head that died) can be reached
	// again, and goes back to it when it can (default 30s; negative:
	// never, the node stays where it is until that parent fails too).
	RetryPreferred time.Duration
	Site           string
	DialTimeout    time.Duration // default 5s
	RequestTimeout time.Duration // per names request to a peer, default 30s
	// Keepalive is the PING interval on the tree stream (default 5s); a
	// peer silent for three intervals is considered gone.
	Keepalive time.Duration
	Logger    *slog.Logger

	// namesVersions, in tests, limits the names versions this node
	// serves and asks with (default namesProtos): an older peer.
	namesVersions []protocol.ID
}

// Tree is one node's place in the overlay tree. Its methods are safe for
// concurrent use.
type Tree struct {
	cfg     Config
	h       host.Host
	store   Store
	log     *slog.Logger
	self    peer.ID
	parents []peer.AddrInfo // the parent first, then the fallbacks; empty on the root
	up      *Parents        // parents, and which of them is current
	protos  []protocol.ID   // the names versions served and asked with, the newest first
	eng     Engine          // set by Subscribe before Start; nil: none

	ctx    context.Context // lives from Start to Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	children   map[peer.ID]*childInfo
	via        map[cid.Cid]peer.ID      // blob ID -> child it was announced through
	origins    map[cid.Cid]string       // blob ID -> origin of the newest record seen for it
	parentSite string                   // the last parent's site (its WELCOME)
	parentSeen bool                     // a parent has welcomed this node
	pushing    map[string]chan struct{} // names with a LOOKUP_GET to the parent under way; closed when it is done
	announcing []*announceWait          // records waiting for the next ANNOUNCE_BATCH (announce.go)
	senders    int                      // ANNOUNCE_BATCH senders running (at most AnnounceWindow)
	connected  bool                     // the parent session is up
	parentErr  string                   // why the last parent session failed or ended ("" if none did)
	started    bool
	closed     bool

	peerErrors   atomic.Uint64
	refusals     atomic.Uint64 // HELLOs refused (MayAdopt), and sessions ended by a recheck
	unrouted     atomic.Uint64 // announced records stored without a route (MayRoute)
	rulesRefused atomic.Uint64 // namespace rules refused (CheckRule)
	recRefused   atomic.Uint64 // records children announced that CheckRecord refused
	batches      atomic.Uint64 // ANNOUNCE_BATCHes sent to a parent
}

type childInfo struct {
	site      string         // as the child claimed it
	group     string         // its group for the sibling exchange (groupOf)
	role      grid.Role      // its certificate's role (0: an open grid)
	addrs     []string       // as the child sent them
	maddrs    []ma.Multiaddr // those that parse
	session   uint64         // distinguishes reconnects
	connected bool
}

// New checks cfg, fills in defaults and returns a Tree; Start makes it serve.
func New(cfg Config) (*Tree, error) {
	if cfg.Host == nil {
		return nil, errors.New("tree: no host")
	}
	if cfg.Store == nil {
		return nil, errors.New("tree: no store")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Keepalive <= 0 {
		cfg.Keepalive = DefaultKeepalive
	}
	if cfg.RetryPreferred == 0 {
		cfg.RetryPreferred = DefaultRetryPreferred
	}
	if len(cfg.Site) > maxSite {
		return nil, fmt.Errorf("tree: site name of %d bytes exceeds %d", len(cfg.Site), maxSite)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	t := &Tree{
		cfg:      cfg,
		h:        cfg.Host,
		store:    cfg.Store,
		log:      cfg.Logger.With("component", "tree"),
		self:     cfg.Host.ID(),
		children: map[peer.ID]*childInfo{},
		via:      map[cid.Cid]peer.ID{},
		origins:  map[cid.Cid]string{},
		pushing:  map[string]chan struct{}{},
		protos:   namesProtos,
	}
	if len(cfg.namesVersions) > 0 {
		t.protos = cfg.namesVersions
	}
	t.up = cfg.Parents
	if t.up == nil {
		up, err := NewParents(cfg.Parent, cfg.Fallbacks)
		if err != nil {
			return nil, err
		}
		t.up = up
	} else if cfg.Parent != nil || len(cfg.Fallbacks) > 0 {
		return nil, errors.New("tree: both Parents and Parent or Fallbacks")
	}
	t.parents = t.up.list
	for _, p := range t.parents {
		if p.ID == t.self {
			return nil, errors.New("tree: a parent is this node itself")
		}
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	return t, nil
}

// Start registers the stream handlers and, on a node with a parent, starts
// the parent keeper. ctx bounds the background work as Close does.
func (t *Tree) Start(ctx context.Context) error {
	t.mu.Lock()
	if t.started || t.closed {
		t.mu.Unlock()
		return errors.New("tree: already started or closed")
	}
	t.started = true
	t.mu.Unlock()
	stop := context.AfterFunc(ctx, t.cancel)
	t.wg.Go(func() { <-t.ctx.Done(); stop() })

	// Learn which blobs came up through which child.
	if err := t.loadRoutes(); err != nil {
		t.log.Warn("routes at start", "err", err)
	}
	t.h.SetStreamHandler(ProtoTree, t.handleTree)
	t.h.SetStreamHandler(ProtoTree10, t.handleTree)
	for _, proto := range t.protos {
		t.h.SetStreamHandler(proto, t.handleNames)
	}
	for _, p := range t.parents {
		t.h.Peerstore().AddAddrs(p.ID, p.Addrs, peerstore.PermanentAddrTTL)
		t.h.ConnManager().Protect(p.ID, protectTag)
	}
	if len(t.parents) > 0 {
		t.wg.Go(t.keepParent)
	}
	if t.flat() && t.cfg.Rules != nil {
		t.wg.Go(t.keepFlatRules)
	}
	return nil
}

const protectTag = "omst-tree"

// Close stops the handlers and background work and cancels outstanding
// fetches. It does not close the host. Safe to call more than once.
func (t *Tree) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.mu.Unlock()
	t.h.RemoveStreamHandler(ProtoTree)
	t.h.RemoveStreamHandler(ProtoTree10)
	for _, proto := range t.protos {
		t.h.RemoveStreamHandler(proto)
	}
	t.cancel()
	for _, p := range t.parents {
		t.h.ConnManager().Unprotect(p.ID, protectTag)
	}
	t.wg.Wait()
	return nil
}

var errClosed = errors.New("tree closed")

// goTracked runs f in a goroutine that Close waits for; it returns false
// (and runs nothing) once Close has begun.
func (t *Tree) goTracked(f func()) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.wg.Go(f)
	return true
}

// Child describes a node that registered with this one over the tree protocol.
type Child struct {
	ID        peer.ID
	Site      string
	Addrs     []string
	Connected bool
}

// Status is a snapshot of the node's place in the tree and its counters.
type Status struct {
	Parent          peer.ID
	ParentAddr      string
	ParentConnected bool
	// ParentError is why the last session with a parent failed or ended,
	// e.g. "connection refused" or a peer ID mismatch (the parent's
	// address, which Describe puts first, left out); "" if none did.
	ParentError string
	Site        string
	Children    []Child
	// PeerErrors counts names and tree requests that failed because of a
	// peer: malformed messages, a record for another name, a HELLO that
	// does not decode (the transfer engine counts its own).
	PeerErrors uint64
	// ChildrenRefused counts peers this node refused as children (their
	// certificate's role or claimed site does not allow it: MayAdopt).
	ChildrenRefused uint64
	// Unrouted counts records children announced that this node stored
	// without a route, because the child neither put them nor may write
	// their names (MayRoute).
	Unrouted uint64
	// RulesRefused counts namespace rules from neighbours that CheckRule
	// refused (a member removing outside its rights, a bad proof).
	RulesRefused uint64
	// RecordsRefused counts records children announced that CheckRecord
	// refused (each alone: the rest of its batch is taken).
	RecordsRefused uint64
	// BatchesSent counts the ANNOUNCE_BATCHes this node sent its parent.
	BatchesSent uint64
}

// Status returns a snapshot.
func (t *Tree) Status() Status {
	st := Status{
		Parent:     t.parentID(),
		ParentAddr: t.parentAddr(),
		Site:       t.cfg.Site,
		PeerErrors: t.peerErrors.Load(),

		ChildrenRefused: t.refusals.Load(),
		Unrouted:        t.unrouted.Load(),
		RulesRefused:    t.rulesRefused.Load(),
		RecordsRefused:  t.recRefused.Load(),
		BatchesSent:     t.batches.Load(),
	}
	t.mu.Lock()
	st.ParentConnected = t.connected
	st.ParentError = t.parentErr
	for id, c := range t.children {
		st.Children = append(st.Children, Child{ID: id, Site: c.site, Addrs: slices.Clone(c.addrs), Connected: c.connected})
	}
	t.mu.Unlock()
	slices.SortFunc(st.Children, func(a, b Child) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	})
	return st
}

// parentID returns the current parent, "" on the root.
func (t *Tree) parentID() peer.ID {
	if len(t.parents) == 0 {
		return ""
	}
	return t.parents[t.up.cur.Load()].ID
}

// parentIndex returns the index of p in t.parents, or -1.
func (t *Tree) parentIndex(p peer.ID) int {
	if p == "" {
		return -1
	}
	for i, q := range t.parents {
		if q.ID == p {
			return i
		}
	}
	return -1
}

// parentIDs returns every configured parent, the current one first.
// checkRecord applies Config.CheckRecord.
func (t *Tree) checkRecord(r blob.Record) error {
	if t.cfg.CheckRecord == nil {
		return nil
	}
	return t.cfg.CheckRecord(r)
}

// Parents returns the parents' peer IDs, the current one first (nil at
// the root).
func (t *Tree) Parents() []peer.ID { return t.parentIDs() }

func (t *Tree) parentIDs() []peer.ID { return t.up.IDs() }

// addrOf names a parent as multiaddr/p2p/ID (its first address).
func addrOf(p peer.AddrInfo) string {
	if len(p.Addrs) == 0 {
		return "/p2p/" + p.ID.String()
	}
	return p.Addrs[0].String() + "/p2p/" + p.ID.String()
}

// parentAddr names the current parent as multiaddr/p2p/ID.
func (t *Tree) parentAddr() string {
	if len(t.parents) == 0 {
		return ""
	}
	return addrOf(t.parents[t.up.cur.Load()])
}

// Describe names a peer for messages: its ID, and for a parent its address.
func (t *Tree) Describe(p peer.ID) string {
	if i := t.parentIndex(p); i == 0 {
		return "parent " + addrOf(t.parents[i])
	} else if i > 0 {
		return "fallback parent " + addrOf(t.parents[i])
	}
	t.mu.Lock()
	_, isChild := t.children[p]
	t.mu.Unlock()
	if isChild {
		return "child " + p.String()
	}
	return "peer " + p.String()
}

func (t *Tree) isChild(p peer.ID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.children[p]
	return ok && c.connected
}

// notePeerError counts and logs a failure blamed on p.
func (t *Tree) notePeerError(p peer.ID, what string, err error) {
	t.peerErrors.Add(1)
	t.log.Warn("peer error", "peer", p, "what", what, "err", err)
}

// connect makes sure there is a connection to p, bounded by DialTimeout;
// failures wrap blob.ErrUnreachable and name the peer.
func (t *Tree) connect(ctx context.Context, p peer.ID) error {
	if len(t.h.Network().ConnsToPeer(p)) > 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	info := peer.AddrInfo{ID: p}
	if i := t.parentIndex(p); i >= 0 {
		info = t.parents[i]
	}
	if err := t.h.Connect(dctx, info); err != nil {
		return fmt.Errorf("%s: %w: %s", t.Describe(p), blob.ErrUnreachable, dialerr.Text(err))
	}
	return nil
}

// learnVia remembers that blob id came up through child v.
func (t *Tree) learnVia(id cid.Cid, v peer.ID) {
	if v == "" {
		return
	}
	t.mu.Lock()
	t.via[id] = v
	t.mu.Unlock()
}
