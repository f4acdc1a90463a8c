package transfer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/bulk"
	"github.com/omst-project/omst/pkg/transfer/internal/coalesce"
	"github.com/omst-project/omst/pkg/transfer/internal/exchange"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchclient"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
	"github.com/omst-project/omst/pkg/transfer/internal/server"
	"github.com/omst-project/omst/pkg/transfer/internal/source"
	"github.com/omst-project/omst/pkg/transfer/internal/stats"
)

// Store is what the engine needs from the local store (pkg/cache.Store
// implements it). Every method is safe for concurrent use.
type Store interface {
	// HasChunk reports whether the chunk is stored.
	HasChunk(h blob.Hash) bool
	// ReadChunk returns the chunk's bytes, verified against h since they
	// were last read from disk (the engine serves them without hashing
	// them again), or an error wrapping blob.ErrNotFound if it is absent.
	// A stored copy found damaged is dropped from the store and reported
	// with an error (wrapping blob.ErrCorrupt), so that the engine fetches
	// it again. The bytes are shared: the engine never modifies them.
	ReadChunk(h blob.Hash) ([]byte, error)
	// RecheckChunk reads the stored chunk again from disk and verifies it,
	// forgetting any verified copy in memory; a damaged one is dropped and
	// reported as damaged. An absent chunk is not damaged.
	RecheckChunk(h blob.Hash) (damaged bool, err error)
	// PutVerifiedChunk stores data, which the engine has verified against
	// h; blob.ErrNoSpace on failure. The engine never modifies data
	// afterwards.
	PutVerifiedChunk(h blob.Hash, data []byte) error
	// Manifest returns the manifest of blob id, or blob.ErrNotFound.
	Manifest(id cid.Cid) (*blob.Manifest, error)
	// PutManifest stores m and returns its blob ID.
	PutManifest(m *blob.Manifest) (cid.Cid, error)
}

// Mode selects how a relay forwards a blob downstream.
type Mode int

const (
	// ModeCutThrough forwards every verified chunk as soon as it arrives.
	ModeCutThrough Mode = iota
	// ModeStoreForward makes a relay fetch and store the whole blob before
	// it serves any chunk of it to a child (OmniStorage's original
	// behaviour, kept for comparison).
	ModeStoreForward
)

// Defaults for Config.
const (
	DefaultWindow         = 16
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 30 * time.Second
	DefaultStreamsPerPeer = 2
	DefaultSiblingTimeout = 10 * time.Second
	// DefaultPeerReplyBytes is Config.PeerReplyBytes's default: what one
	// peer's requests may make this node hold (internal/server says how).
	DefaultPeerReplyBytes = 64 << 20
	// DefaultWriteStall is Config.WriteStall's default.
	DefaultWriteStall = 10 * time.Second
)

// Config configures New.
type Config struct {
	Host    host.Host // a libp2p host built by the caller
	Store   Store     // the local store
	Sources Provider  // where blobs come from
	// Finder, when set, looks for sources beyond Sources' (a DHT): when its
	// policy says a closer one may exist, and when Sources' have failed.
	Finder Finder
	// OthersFromStore, when set and true, makes this node serve a peer
	// that is neither its child nor its parent (Relation KindOther) only
	// what is in its store: NOT_FOUND for the rest, no pull-through on
	// that peer's behalf. A gateway (root, head, a flat cluster's node)
	// sets it: its other peers are nodes of other sites that found it in
	// a DHT, and a provider that evicted a blob must send them to the
	// next provider, not fetch it for them. Workers leave it unset: their
	// siblings ask them for chunks they are still receiving.
	OthersFromStore func() bool
	// OnComplete, when set, is called with a blob's ID each time a fetch
	// of the whole blob into the store (Fetch, Replicate, Preheat, a
	// store-and-forward relay's) has completed.
	OnComplete func(id cid.Cid)
	// BlobSink, when set, is called as a fetch of a whole blob whose
	// chunks are not all stored starts (a reader's, Fetch's, a relay's
	// pull-through), so that the store may keep the chunks it is given
	// in one file of the blob (cache.Store.OwnSink); the function it
	// returns (nil: none) is called once the fetch has ended and every
	// chunk it was storing is stored.
	BlobSink func(id cid.Cid, m *blob.Manifest) (release func())
	// Window is the number of chunks in flight per blob fetch (default 16).
	Window         int
	DialTimeout    time.Duration // default 5s
	RequestTimeout time.Duration // per chunk or manifest request to a peer, default 30s
	// Mode is the relay forwarding mode (default ModeCutThrough).
	Mode Mode
	// StreamsPerPeer is the number of fetch streams opened to one peer
	// (default 2: a second stream measured ~1.3x the throughput of one on
	// loopback when replies were written in request order).
	StreamsPerPeer int
	// SiblingExchange makes this node, as a relay, answer a child's chunk
	// request with a REDIRECT to a sibling of the child's site that holds
	// the chunk or is receiving it, once it sent the chunk itself
	// (Distributor), so that its port carries about one copy of each chunk
	// per site. It needs a Provider that is a Grouper. Any node follows
	// the redirects it receives, whatever this setting.
	SiblingExchange bool
	// Distribution tunes the relay's redirects (zero: the defaults).
	Distribution DistributorConfig
	// SiblingTimeout bounds a request to a sibling that a relay redirected
	// this node to (default 10s): the give-up derived from the rates
	// measured is at most this; past it, or on any failure, the chunk is
	// asked from the relay itself (GET_DIRECT).
	SiblingTimeout time.Duration
	// MaxUploadRate bounds the bytes per second this node sends to peers
	// (chunks and manifests, all peers together); 0 means no bound.
	MaxUploadRate int64
	// MaxUploadStreams bounds the fetch streams this node serves at once
	// to peers that are neither its children nor its parents (on a worker:
	// its siblings); more are refused (reset), and a sibling refused so
	// asks the relay instead. A bulk connection counts as a stream (a
	// sibling opens up to Bulk.Conns of them). 0 means no bound.
	MaxUploadStreams int
	// PeerReplyBytes bounds the reply bytes this node holds for one peer
	// at once, over all its fetch streams (server.go; default
	// DefaultPeerReplyBytes).
	PeerReplyBytes int64
	// WriteStall ends a fetch stream whose peer has taken no reply bytes
	// for this long (default DefaultWriteStall, at most RequestTimeout).
	WriteStall time.Duration
	// ReplicateQueue bounds the Replicate calls that wait, per origin (a
	// child), while one of its blobs is being copied; past it a record is
	// not copied (default DefaultReplicateQueue).
	ReplicateQueue int
	// CopyMany, if set, copies small blobs in one request: it brings into
	// the store what it can of recs (blobs of at most CopyManyMax bytes
	// put below this node) and reports which of them are now whole in the
	// store. Replicate then copies an origin's waiting small puts together
	// and bounds them by the bytes of their records
	// (ReplicateSmallBytes), not by ReplicateQueue; those CopyMany did not
	// store are fetched one at a time as any other put.
	CopyMany    func(ctx context.Context, recs []blob.Record) []bool
	CopyManyMax uint64
	// ReplicateSmallBytes bounds, per origin, the bytes of the records of
	// small puts (CopyMany's) waiting to be copied (default
	// DefaultReplicateSmallBytes).
	ReplicateSmallBytes int
	// Bulk configures the bulk path (docs/protocol.md, "The bulk path"):
	// chunk requests and replies over plain TCP connections opened with
	// tickets this node's peers grant over libp2p. Zero: none.
	Bulk   BulkConfig
	Logger *slog.Logger
}

// DefaultBulkConns is the daemon's bulk connections per peer (its
// --bulk-conns); MaxBulkConns the most BulkConfig.Conns may be.
const (
	DefaultBulkConns = 4
	MaxBulkConns     = bulk.MaxTickets
)

// BulkConfig configures the bulk path (Config.Bulk).
type BulkConfig struct {
	// Listen is the TCP address ("host:port", port 0 for any) of this
	// node's bulk listener, whose tickets it grants to the members that
	// ask; "" grants none (askers use libp2p streams).
	Listen string
	// Conns is the number of bulk connections this node opens to a peer
	// it fetches from, in place of its StreamsPerPeer libp2p streams; 0
	// opens none.
	Conns int
	// TrustedLAN says this node's operator trusts its site's LAN: bulk
	// connections between two such nodes of the same Site carry bytes in
	// plain text; every other is sealed (AES-256-GCM, a key per
	// connection).
	TrustedLAN bool
	Site       string
	// NoSendfile sends stored chunks on plain bulk connections from
	// memory instead of with sendfile(2) from their files (the default),
	// e.g. where sendfile moves work onto the receivers or a file
	// system's sendfile is slow; sealed connections never use it.
	NoSendfile bool
	// Idle is how long a bulk connection this node opened may stay
	// unused before it is closed (default 5 s): each holds a socket at
	// both ends.
	Idle time.Duration
}

// ChildLeft tells the engine that p is no longer a connected child (its
// tree session ended): as a relay, it forgets p as a holder of chunks, so
// that no child is sent to p for what it held, even once p is back (a
// worker that comes back may have lost its store). The tree calls it
// (tree.Config.OnChildLeft). Safe to call for any peer, at any time.
func (e *Engine) ChildLeft(p peer.ID) { e.server.ChildLeft(p) }

// DistributorConfig tunes a relay's redirects (Config.Distribution): the
// copies of a chunk it sends itself before it redirects (Direct, default
// 1), the siblings one holder is sent per chunk (Fanout, default 2), the
// failures after which a holder is no target for a blob (MaxFailures,
// default 2), and how long a blob's state is kept after its last request
// (Idle, default 10 minutes).
type DistributorConfig = exchange.DistributorConfig

// HedgeGrace is how long after a relay first sent a chunk into a site it
// declines hedges for it while it has not measured how fast its children
// take its replies; with that measured, the grace is the time the chunk
// takes to reach the asker through the site (docs/protocol.md). The chunk
// is then still moving from sibling to sibling (Status.HedgesDeclined).
const HedgeGrace = exchange.HedgeGrace

// Engine moves blob bytes between nodes: it serves the fetch protocol and
// fetches manifests and chunks from the sources its Provider names, with
// coalescing, cut-through forwarding and retries. Its methods are safe for
// concurrent use.
type Engine struct {
	cfg     Config
	h       host.Host
	store   Store
	sources Provider
	log     *slog.Logger
	self    peer.ID

	ctx    context.Context // lives from Start to Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	replicas map[cid.Cid]*backgroundFetch // blobs being fetched with no reader (Replicate, Preheat)
	repl     map[string]*replQueue        // Replicate's queues, by origin (replicate.go)
	active   map[*blobFetch]struct{}      // blob fetches under way (Transfers)
	whole    map[cid.Cid]*wholeBlobCall   // store-and-forward fetches in flight
	relaying map[cid.Cid]*relaySink       // Config.BlobSink of blobs relayed chunk by chunk
	started  bool
	closed   bool

	stats *stats.Counters // what every part counts (Status)

	client *fetchclient.Client // the fetch streams to the peers this node asks

	chunks *coalesce.Chunks // the chunk fetches in flight, one per hash

	server *server.Server // serves the fetch protocol: decisions, reply budgets, upload limit

	bulkL *bulk.Listener // nil without Config.Bulk.Listen (set by Start)
	// bulkGone closes a peer's bulk connections when its libp2p session
	// ends (with bulkL).
	bulkGone *network.NotifyBundle
	bulkK    bulk.Counters // the bulk path's, at both ends (Status)
}

// New checks cfg, fills in defaults and returns an Engine; Start makes it
// serve.
func New(cfg Config) (*Engine, error) {
	switch {
	case cfg.Host == nil:
		return nil, errors.New("transfer: no host")
	case cfg.Store == nil:
		return nil, errors.New("transfer: no store")
	case cfg.Sources == nil:
		return nil, errors.New("transfer: no source provider")
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.StreamsPerPeer <= 0 {
		cfg.StreamsPerPeer = DefaultStreamsPerPeer
	}
	if cfg.SiblingTimeout <= 0 {
		cfg.SiblingTimeout = DefaultSiblingTimeout
	}
	if cfg.PeerReplyBytes <= 0 {
		cfg.PeerReplyBytes = DefaultPeerReplyBytes
	}
	if cfg.WriteStall <= 0 {
		cfg.WriteStall = DefaultWriteStall
	}
	if cfg.ReplicateQueue <= 0 {
		cfg.ReplicateQueue = DefaultReplicateQueue
	}
	if cfg.ReplicateSmallBytes <= 0 {
		cfg.ReplicateSmallBytes = DefaultReplicateSmallBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxUploadRate < 0 || cfg.MaxUploadStreams < 0 {
		return nil, errors.New("transfer: negative upload limit")
	}
	var grouper Grouper
	if cfg.SiblingExchange {
		g, ok := cfg.Sources.(Grouper)
		if !ok {
			return nil, errors.New("transfer: sibling exchange needs a source provider that knows its children (a Grouper)")
		}
		grouper = g
	}
	e := &Engine{
		cfg:      cfg,
		h:        cfg.Host,
		store:    cfg.Store,
		sources:  cfg.Sources,
		log:      cfg.Logger.With("component", "transfer"),
		self:     cfg.Host.ID(),
		replicas: map[cid.Cid]*backgroundFetch{},
		repl:     map[string]*replQueue{},
		active:   map[*blobFetch]struct{}{},
		whole:    map[cid.Cid]*wholeBlobCall{},
		relaying: map[cid.Cid]*relaySink{},
		stats:    &stats.Counters{},
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	if cfg.Bulk.Conns < 0 || cfg.Bulk.Conns > MaxBulkConns {
		return nil, fmt.Errorf("transfer: %d bulk connections per peer (0 to %d)", cfg.Bulk.Conns, MaxBulkConns)
	}
	var dialer *bulk.Dialer
	if cfg.Bulk.Conns > 0 {
		dialer = &bulk.Dialer{Host: cfg.Host, Policy: bulk.Policy{TrustedLAN: cfg.Bulk.TrustedLAN, Site: cfg.Bulk.Site}, Dial: min(cfg.DialTimeout, 2*time.Second), Counters: &e.bulkK}
	}
	e.client = fetchclient.New(fetchclient.Config{Host: cfg.Host, DialTimeout: cfg.DialTimeout, RequestTimeout: cfg.RequestTimeout,
		StreamsPerPeer: cfg.StreamsPerPeer, Describe: e.describe, NotePeerError: e.notePeerError, Stats: e.stats,
		Bulk: dialer, BulkConns: cfg.Bulk.Conns, BulkIdle: cfg.Bulk.Idle})
	e.chunks = coalesce.New(coalesce.Config{Client: e.client, Store: cfg.Store, Addrs: cfg.Host.Peerstore(), Ctx: e.ctx, Go: e.goTracked,
		SiblingTimeout: cfg.SiblingTimeout, RequestTimeout: cfg.RequestTimeout, Describe: e.describe, NotePeerError: e.notePeerError,
		Stats: e.stats, Log: e.log})
	e.server = server.New(server.Config{Store: cfg.Store, Peers: cfg.Sources, Upstream: upstream{e}, Grouper: grouper,
		SiblingExchange: cfg.SiblingExchange, Distribution: cfg.Distribution, MaxUploadStreams: cfg.MaxUploadStreams,
		OthersFromStore: cfg.OthersFromStore, StoreForward: cfg.Mode == ModeStoreForward, MaxUploadRate: cfg.MaxUploadRate, NoSendfile: cfg.Bulk.NoSendfile,
		PeerReplyBytes: cfg.PeerReplyBytes, WriteStall: cfg.WriteStall, RequestTimeout: cfg.RequestTimeout, Self: e.self,
		Ctx: e.ctx, Describe: e.describe, NotePeerError: e.notePeerError, Stats: e.stats, Log: e.log})
	return e, nil
}

// Start registers the fetch protocol's handler. ctx bounds the engine's
// background work as Close does.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	if e.started || e.closed {
		e.mu.Unlock()
		return errors.New("transfer: already started or closed")
	}
	e.started = true
	e.mu.Unlock()
	if b := e.cfg.Bulk; b.Listen != "" {
		l, err := bulk.Listen(bulk.ListenerConfig{Addr: b.Listen, Table: &bulk.Table{}, Policy: bulk.Policy{TrustedLAN: b.TrustedLAN, Site: b.Site},
			Member: func(p peer.ID) bool { return e.h.Network().Connectedness(p) == network.Connected },
			Serve:  func(c *bulk.Conn) { e.server.Serve(c, c.Peer, true) }, Counters: &e.bulkK, Log: e.log})
		if err != nil {
			e.mu.Lock()
			e.started = false
			e.mu.Unlock()
			return fmt.Errorf("transfer: %w", err)
		}
		e.bulkL = l
		// A peer whose libp2p session ended (a revoked member's is
		// closed) is no longer served on the bulk connections it holds.
		e.bulkGone = &network.NotifyBundle{DisconnectedF: func(n network.Network, c network.Conn) {
			if p := c.RemotePeer(); n.Connectedness(p) != network.Connected {
				l.ClosePeer(p)
			}
		}}
		e.h.Network().Notify(e.bulkGone)
		e.h.SetStreamHandler(bulk.ProtoTickets, l.HandleTickets)
	}
	stop := context.AfterFunc(ctx, e.cancel)
	e.wg.Go(func() { <-e.ctx.Done(); stop() })
	e.h.SetStreamHandler(ProtoFetch, e.server.HandleStream)
	e.h.SetStreamHandler(ProtoFetch130, e.server.HandleStream)
	e.h.SetStreamHandler(ProtoFetch120, e.server.HandleStream)
	e.h.SetStreamHandler(ProtoFetch110, e.server.HandleStream)
	return nil
}

// Close stops the handler and background work and cancels outstanding
// fetches. It does not close the host. Safe to call more than once.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.mu.Unlock()
	e.chunks.Close()
	e.h.RemoveStreamHandler(ProtoFetch)
	e.h.RemoveStreamHandler(ProtoFetch130)
	e.h.RemoveStreamHandler(ProtoFetch120)
	e.h.RemoveStreamHandler(ProtoFetch110)
	e.cancel()
	if e.bulkL != nil {
		e.h.RemoveStreamHandler(bulk.ProtoTickets)
		e.h.Network().StopNotify(e.bulkGone)
		e.bulkL.Close()
	}
	e.client.Close()
	e.wg.Wait()
	e.releaseRelaySinks()
	return nil
}

// errClosed is the error of what is asked of a closed engine.
var errClosed = fetchclient.ErrClosed

// goTracked runs f in a goroutine that Close waits for; it returns false
// (and runs nothing) once Close has begun.
func (e *Engine) goTracked(f func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	e.wg.Go(f)
	return true
}

// Status is a snapshot of the engine's counters.
type Status struct {
	// BytesServed counts chunk and manifest bytes sent to peers,
	// BytesFetched those received from peers.
	BytesServed, BytesFetched uint64
	// BytesIn counts verified chunk bytes received by kind of source
	// (parent, child, sibling, other); BytesOut chunk bytes sent by the
	// asker's relation to this node: its parent, a child, a sibling (a
	// node of this site, neither parent nor child, that asked with
	// GET_SIBLING), or another peer.
	BytesIn, BytesOut map[string]uint64
	// UploadsRefused counts fetch streams refused for MaxUploadStreams.
	UploadsRefused uint64
	// Hedges counts sibling requests that were slow enough to be asked
	// of the relay too.
	Hedges uint64
	// HedgesDeclined counts children's hedges this relay declined because
	// it had sent the chunk into the site less than its hedge grace before,
	// or (HedgesBusy, counted in both) because its port had other replies
	// to write or its budget of second copies was spent; HedgesServed
	// those it answered with the chunk: second copies into the site.
	HedgesDeclined, HedgesBusy, HedgesServed uint64
	// HedgesDeferred counts hedges this node did not send when they were
	// due because its own hedge budget was spent (exchange.HedgeBudget).
	HedgesDeferred uint64
	// Directs counts the plain GET_DIRECTs this node sent after giving up
	// on a sibling; DirectsServed those of its children this relay
	// answered with the chunk; DirectsRedirected and DirectsBusy those it
	// answered (fetch 1.4.0) with a REDIRECT to a sibling holding the chunk
	// complete, and with BUSY (ask again later).
	Directs, DirectsServed, DirectsRedirected, DirectsBusy uint64
	// BytesPassedOn counts the chunk bytes this node sent in verified
	// pieces (fetch 1.3.0) while it was itself still receiving the chunk:
	// what cut-through below the chunk saved a store-and-forward hop.
	BytesPassedOn uint64
	// PushSent counts the chunk bytes this node pushed to children in
	// other sites with its answers to their lookups, PushReceived the
	// verified bytes its parent pushed to it (push.go).
	PushSent, PushReceived uint64
	// RedirectsSent counts requests this relay answered with a sibling;
	// RedirectsTaken redirects this node followed; SiblingFailures those
	// whose sibling could not deliver (the chunk then came from the relay).
	RedirectsSent, RedirectsTaken, SiblingFailures uint64
	// PeerErrors counts failed requests blamed on a peer: corrupt data,
	// broken streams, ERROR replies, malformed messages (NOT_FOUND is an
	// answer, not an error). ErrorsByPeer splits them by peer (for at most
	// 64 peers).
	PeerErrors   uint64
	ErrorsByPeer map[peer.ID]uint64
	// CorruptReceived counts chunks received from peers that did not match
	// their hash (each was reported to its sender and fetched again).
	CorruptReceived uint64
	// CorruptReports counts peers' reports that a chunk this node sent them
	// did not match its hash.
	CorruptReports uint64
	// ServedUnhashed counts the chunks this node read from its store and
	// sent in pieces with the outboard it keeps for them, without hashing
	// them (the receivers verify every piece; a damaged copy comes back
	// as a REPORT, counted in CorruptReports).
	ServedUnhashed uint64
	// ServedSendfile counts those of them sent from their file with
	// sendfile(2), on a plain bulk connection: not read into memory.
	ServedSendfile uint64
	// ReplyBytesHeld is the reply bytes held for peers now: replies being
	// made or waiting to be written (Config.PeerReplyBytes per peer).
	ReplyBytesHeld int64
	// ReplicationsWaiting counts children's puts waiting to be copied
	// (Replicate); ReplicationsDropped those not copied because their
	// origin had Config.ReplicateQueue waiting already (small puts: their
	// records' Config.ReplicateSmallBytes); ReplicationsBatched the small
	// puts copied together (Config.CopyMany).
	ReplicationsWaiting int64
	ReplicationsDropped uint64
	ReplicationsBatched uint64
	// BulkOpened counts the bulk connections this node opened to peers,
	// BulkFallbacks those it could not (it asked over libp2p streams);
	// BulkAccepted the bulk connections it served, BulkRefused those it
	// refused (no valid ticket, or a peer no longer a member).
	BulkOpened, BulkFallbacks, BulkAccepted, BulkRefused uint64
	// BulkServing is the bulk connections this node's listener holds
	// open now (an asker closes one unused for BulkConfig.Idle).
	BulkServing int
	// BulkOpen is the bulk connections open now at either end (opened by
	// this node or served by its listener).
	BulkOpen int64
	// BulkTicketsIssued counts the tickets this node's listener granted,
	// BulkTicketsRedeemed those it took for a connection,
	// BulkTicketsRefused the hellos whose ticket it refused (unknown,
	// expired, replayed, or its peer no longer a member), and
	// BulkRequestsRefused the ticket requests it answered UNAVAILABLE
	// (another site, not a member, too many outstanding, malformed).
	BulkTicketsIssued, BulkTicketsRedeemed, BulkTicketsRefused, BulkRequestsRefused uint64
	// BulkSentPlain, BulkSentSealed, BulkReceivedPlain and
	// BulkReceivedSealed count the fetch protocol's bytes this node's bulk
	// connections carried, by mode (a sealed connection's AES-GCM framing
	// not counted).
	BulkSentPlain, BulkSentSealed, BulkReceivedPlain, BulkReceivedSealed uint64
}

// BulkPort is the port of this node's bulk listener (0: none; set by
// Start).
func (e *Engine) BulkPort() uint16 {
	if e.bulkL == nil {
		return 0
	}
	return e.bulkL.Port()
}

// Status returns a snapshot.
func (e *Engine) Status() Status {
	st := Status{
		BytesServed:       e.stats.BytesServed.Load(),
		BytesFetched:      e.stats.BytesFetched.Load(),
		BytesIn:           map[string]uint64{},
		BytesOut:          map[string]uint64{},
		UploadsRefused:    e.stats.UploadsRefused.Load(),
		Hedges:            e.stats.Hedges.Load(),
		HedgesDeclined:    e.stats.HedgesDeclined.Load(),
		HedgesBusy:        e.stats.HedgesBusy.Load(),
		HedgesServed:      e.stats.HedgesServed.Load(),
		HedgesDeferred:    e.stats.HedgesDeferred.Load(),
		Directs:           e.stats.Directs.Load(),
		DirectsServed:     e.stats.DirectsServed.Load(),
		DirectsRedirected: e.stats.DirectsRedirected.Load(),
		DirectsBusy:       e.stats.DirectsBusy.Load(),
		BytesPassedOn:     e.stats.BytesPassedOn.Load(),
		PushSent:          e.stats.PushSent.Load(),
		PushReceived:      e.stats.PushReceived.Load(),
		RedirectsSent:     e.stats.RedirectsSent.Load(),
		RedirectsTaken:    e.stats.RedirectsTaken.Load(),
		SiblingFailures:   e.stats.SiblingFailures.Load(),
		PeerErrors:        e.stats.PeerErrors.Load(),
		CorruptReceived:   e.stats.CorruptReceived.Load(),
		CorruptReports:    e.stats.ReportsReceived.Load(),
		ServedUnhashed:    e.stats.ServedUnhashed.Load(),
		ServedSendfile:    e.stats.ServedSendfile.Load(),

		ReplyBytesHeld:      e.stats.ReplyHeld.Load(),
		ReplicationsWaiting: e.stats.ReplWaiting.Load(),
		ReplicationsDropped: e.stats.ReplDropped.Load(),
		ReplicationsBatched: e.stats.ReplBatched.Load(),
		BulkOpened:          e.stats.BulkOpened.Load(),
		BulkFallbacks:       e.stats.BulkFallbacks.Load(),
	}
	if e.bulkL != nil {
		st.BulkAccepted, st.BulkRefused = e.bulkL.Stats.Accepted.Load(), e.bulkL.Stats.Refused.Load()
		st.BulkServing = e.bulkL.Open()
		st.BulkTicketsIssued = e.bulkL.Stats.Granted.Load()
	}
	k := &e.bulkK
	st.BulkOpen = k.Open.Load()
	st.BulkTicketsRedeemed, st.BulkTicketsRefused, st.BulkRequestsRefused = k.TicketsRedeemed.Load(), k.TicketsRefused.Load(), k.RequestsRefused.Load()
	st.BulkSentPlain, st.BulkSentSealed = k.SentPlain.Load(), k.SentSealed.Load()
	st.BulkReceivedPlain, st.BulkReceivedSealed = k.ReceivedPlain.Load(), k.ReceivedSealed.Load()
	for k := range SourceKind(source.NumKinds) {
		st.BytesIn[k.String()] = e.stats.BytesIn[k].Load()
		st.BytesOut[k.String()] = e.stats.BytesOut[k].Load()
	}
	st.ErrorsByPeer = e.stats.ErrorsByPeer()
	return st
}

// describe names a peer for messages.
func (e *Engine) describe(p peer.ID) string { return e.sources.Describe(p) }

// notePeerError counts and logs a failure blamed on p.
func (e *Engine) notePeerError(p peer.ID, what string, err error) {
	e.stats.PeerError(p)
	e.log.Warn("peer error", "peer", e.describe(p), "what", what, "err", err)
}

// ChunkOutboard returns the chunk hash of data (blob.HashChunk's) and the
// chunk's Bao outboard (docs/protocol.md, "A chunk in pieces"), in one
// pass over data: a store that keeps it with the chunk
// (pkg/cache.Options.ChunkOutboard) lets the engine serve the chunk in
// verified pieces without hashing it again. data must not be empty.
func ChunkOutboard(data []byte) (blob.Hash, []byte) { return piece.HashOutboard(data) }
