// Package dht is omst's private Kademlia DHT (go-libp2p-kad-dht): which
// nodes hold which blobs (provider records) and which blob each name is
// (name records signed by the node that made the put; names.go), so that a
// blob can be found outside the tree's paths: from another site's head,
// with the parent down, or in a flat cluster with no tree at all.
//
// The DHT is private: its protocols are under /omst (/omst/kad/1.0.0), every
// node runs in server mode (in a closed network, automatic mode leaves the
// routing tables empty), and it is bootstrapped only from the peers the node
// is given (its parents and --bootstrap peers) and those that connect to it
// (children); it never contacts the public IPFS network.
//
// Contracts:
//   - Provide announces that this node holds a complete blob; Held lists what
//     the node holds, and every ReprovideEvery the node announces it all
//     again, before the records (kept MaxRecordAge by the nodes storing them)
//     expire. A blob no longer held is not reprovided and its records expire.
//   - Providers returns the nodes that announced a blob, this node excluded,
//     with the addresses they or the DHT know; it returns what it found when
//     its context ends or enough are found.
//   - Name records (PutName, RemoveName, Name) are stored under
//     NameKey(name), signed with the key of the record's origin; every
//     node's validator rejects (and counts) a value that does not verify,
//     and of valid ones the newest record wins (blob.Record.Newer) unless
//     a newer removal by its origin, or by a client, withdraws it
//     (selectName). Only this namespace is accepted. Names whose origin is
//     this node (Config.Names) are republished with the provider records.
//   - What other nodes make this node keep (their name and provider
//     records) stays within Config.Limits (StoreLimits): records past a
//     bound are refused; this node's own never are.
package dht

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
	kad "github.com/libp2p/go-libp2p-kad-dht"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/core/routing"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"

	"github.com/omst-project/omst/pkg/blob"
)

// Prefix is the protocol prefix of omst's DHT: its protocol is Prefix +
// "/kad/1.0.0".
const Prefix = "/omst"

// Defaults for Config.
const (
	// DefaultReprovideEvery is how often held blobs are announced again.
	DefaultReprovideEvery = 12 * time.Hour
	// DefaultRecordAge is how long a node keeps a provider record it was
	// given (kad-dht's default: 48 h); reproviding every 12 h leaves three
	// chances before a record of a held blob expires.
	DefaultRecordAge = 48 * time.Hour
)

// Config configures New.
type Config struct {
	Host host.Host // the node's libp2p host
	// Bootstrap are the peers to join the DHT through (the node's parents
	// and --bootstrap peers). Peers that connect later (children) join the
	// routing table when they speak the DHT protocol.
	Bootstrap []peer.AddrInfo
	// Held lists the blobs this node holds in full, for reproviding; nil:
	// only blobs passed to Provide since the start are reprovided.
	Held func() []cid.Cid
	// Names lists the name records this node put (their origin is this
	// node), republished with the provider records.
	Names func() []blob.Record
	// CheckRecord, when set, must accept a name record (not a removal)
	// for the validator to: a closed grid checks its origin's proof
	// (pkg/member). Refusals count as rejected.
	CheckRecord func(blob.Record) error
	// CheckRemoval, when set, must accept a removal for the validator to,
	// and says whether its remover has the client role (whose removal
	// withdraws a record of any origin; anyone else's only its own): a
	// closed grid checks the remover's proof (pkg/member). Unset (an open
	// grid): every removal signed by its Origin is accepted, none is a
	// client's. Refusals count as rejected.
	CheckRemoval func(blob.Record) (byClient bool, err error)
	// Withdrawn, when set, reports whether a namespace rule this node
	// holds (pkg/namespace) withdraws a name record: the validator then
	// refuses it (neither stored nor returned; counted as rejected), and
	// DropWithdrawn deletes the ones stored already.
	Withdrawn func(blob.Record) bool
	// Limits bound the records other nodes can make this node keep
	// (zero fields: the defaults).
	Limits StoreLimits
	// Now is the validator's clock (a removal dated more than ClockSkew
	// after it is refused); time.Now when nil.
	Now func() time.Time
	// ReprovideEvery (default DefaultReprovideEvery) and RecordAge
	// (default DefaultRecordAge).
	ReprovideEvery time.Duration
	RecordAge      time.Duration
	Logger         *slog.Logger
	// Client starts the node as a DHT client (SetServer switches it): a
	// node with a parent does not yet know whether it is a worker, and a
	// worker that served the DHT for its first moments stays in other
	// nodes' routing tables, so that their queries dial it, across sites.
	Client bool
}

// DHT is a node's member of the private DHT. Its methods are safe for
// concurrent use.
type DHT struct {
	cfg    Config
	kad    *kad.IpfsDHT
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	provided map[cid.Cid]struct{} // blobs passed to Provide (when Held is nil)

	rejected atomic.Uint64 // name records that failed validation
	store    *boundedStore // what kad stores, within cfg.Limits

	reach  event.Emitter // EvtLocalReachabilityChanged: how SetServer tells kad
	server atomic.Int32  // 0 unknown, 1 server, 2 client (as last set)
}

// New joins the private DHT on cfg.Host and starts reproviding; Close
// leaves it. It does not wait for the bootstrap peers to answer: a node
// whose bootstrap peers are down joins when they come back (the routing
// table is refreshed periodically) or when peers connect to it.
func New(cfg Config) (*DHT, error) {
	if cfg.Host == nil {
		return nil, errors.New("dht: no host")
	}
	if cfg.ReprovideEvery <= 0 {
		cfg.ReprovideEvery = DefaultReprovideEvery
	}
	if cfg.RecordAge <= 0 {
		cfg.RecordAge = DefaultRecordAge
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &DHT{cfg: cfg, log: cfg.Logger.With("component", "dht"), cancel: cancel, provided: map[cid.Cid]struct{}{},
		store: newBoundedStore(cfg.Host.ID(), cfg.Limits)}
	// Server mode from the start unless cfg.Client (in a closed network
	// kad's automatic mode would stay a client), switched by SetServer.
	reach, err := cfg.Host.EventBus().Emitter(new(event.EvtLocalReachabilityChanged), eventbus.Stateful)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("dht: %w", err)
	}
	d.reach = reach
	mode := kad.ModeAutoServer
	if cfg.Client {
		mode = kad.ModeAuto // a client until told otherwise
		// The emitter is stateful: kad reads this when it subscribes.
		if err := reach.Emit(event.EvtLocalReachabilityChanged{Reachability: network.ReachabilityPrivate}); err != nil {
			cancel()
			reach.Close()
			return nil, fmt.Errorf("dht: %w", err)
		}
		d.server.Store(2)
	}
	k, err := kad.New(cfg.Host,
		kad.Mode(mode),
		kad.ProtocolPrefix(Prefix),
		kad.BootstrapPeers(cfg.Bootstrap...),
		kad.MaxRecordAge(cfg.RecordAge),
		// In memory, within cfg.Limits: a member putting millions of
		// names or provider records is refused past its share.
		kad.Datastore(d.store),
		// Only omst's name records: no public-key or IPNS values.
		kad.Validator(record.NamespacedValidator{NameNamespace: nameValidator{
			rejected: &d.rejected, check: cfg.CheckRecord, checkRemoval: cfg.CheckRemoval, now: cfg.Now,
			withdrawn: cfg.Withdrawn}}),
	)
	if err != nil {
		cancel()
		reach.Close()
		return nil, fmt.Errorf("dht: %w", err)
	}
	d.kad = k
	d.wg.Go(func() { d.reprovideLoop(ctx) })
	return d, nil
}

// Provide announces that this node holds blob id in full: the record is
// stored on the nodes closest to id. It returns once they have it, or with
// an error when no node could be reached (the blob is still reprovided
// later).
func (d *DHT) Provide(ctx context.Context, id cid.Cid) error {
	if d.cfg.Held == nil {
		d.mu.Lock()
		d.provided[id] = struct{}{}
		d.mu.Unlock()
	}
	if err := d.kad.Provide(ctx, id, true); err != nil {
		return fmt.Errorf("dht: provide %s: %w", id, err)
	}
	return nil
}

// Providers returns up to limit nodes (limit <= 0: 20) that announced
// blob id, this node excluded. It ends when limit are found, the search is
// over, or ctx ends; what was found by then is returned.
func (d *DHT) Providers(ctx context.Context, id cid.Cid, limit int) []peer.AddrInfo {
	if limit <= 0 {
		limit = 20
	}
	// Stopping early must end the search too: its sender waits on ctx.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []peer.AddrInfo
	for ai := range d.kad.FindProvidersAsync(ctx, id, limit+1) {
		if ai.ID == d.cfg.Host.ID() || ai.ID == "" {
			continue
		}
		out = append(out, ai)
		if len(out) == limit {
			break
		}
	}
	return out
}

// PutName stores r, signed with this node's key, in the DHT: r's origin
// must be this node. It returns once the nodes closest to the name's key
// have it, or with an error when none could be reached.
func (d *DHT) PutName(ctx context.Context, r blob.Record) error {
	return d.putSigned(ctx, r, SignRecord)
}

// RemoveName stores the removal of r's name, signed with this node's key:
// r is the record removed with its Time the removal's, its Origin this
// node, and, in a closed grid, its Proof this node's removal proof
// (pkg/member, ProveRemoval). Name reports the name missing once the
// removal withdraws its newest record: a removal withdraws only records of
// its remover's, or, made by a client, of any origin (selectName).
func (d *DHT) RemoveName(ctx context.Context, r blob.Record) error {
	return d.putSigned(ctx, r, SignRemoval)
}

func (d *DHT) putSigned(ctx context.Context, r blob.Record, sign func(crypto.PrivKey, blob.Record) ([]byte, error)) error {
	key := d.cfg.Host.Peerstore().PrivKey(d.cfg.Host.ID())
	if key == nil {
		return fmt.Errorf("dht: put name %q: this node's key is not in its peerstore", r.Name)
	}
	val, err := sign(key, r)
	if err != nil {
		return fmt.Errorf("dht: %w", err)
	}
	if err := d.kad.PutValue(ctx, NameKey(r.Name), val); err != nil {
		return fmt.Errorf("dht: put name %q: %w", r.Name, err)
	}
	return nil
}

// nameQuorum: see Name.
const nameQuorum = 3

// Name returns the newest valid record of name in the DHT; an error
// wrapping blob.ErrNotFound if there is none.
func (d *DHT) Name(ctx context.Context, name string) (blob.Record, error) {
	// A lookup ends once nameQuorum+1 nodes have answered with a valid
	// record (the newest of theirs wins) instead of walking on to the
	// closest nodes: a name is stored on the 20 closest, each put reaches
	// all of them, and kad corrects the stale ones it met afterwards.
	val, err := d.kad.GetValue(ctx, NameKey(name), kad.Quorum(nameQuorum))
	if errors.Is(err, routing.ErrNotFound) {
		return blob.Record{}, fmt.Errorf("dht: name %q: %w", name, blob.ErrNotFound)
	}
	if err != nil {
		return blob.Record{}, fmt.Errorf("dht: name %q: %w", name, err)
	}
	r, removed, err := OpenRecord(val) // the validator checked it; check again here
	if err != nil {
		return blob.Record{}, fmt.Errorf("dht: name %q: %w", name, err)
	}
	if removed {
		return blob.Record{}, fmt.Errorf("dht: name %q: removed by %s at %s: %w", name, r.Origin, r.When().UTC().Format(time.RFC3339), blob.ErrNotFound)
	}
	return r, nil
}

// DropWithdrawn deletes the name records this node stores for the DHT
// that Config.Withdrawn withdraws (after a namespace rule arrived), and
// returns how many.
func (d *DHT) DropWithdrawn() int {
	if d.cfg.Withdrawn == nil {
		return 0
	}
	return d.store.dropNames(d.cfg.Withdrawn)
}

// RecordsRejected counts the name records this node's validator rejected
// (forged, unsigned, malformed, or under another name's key), whoever sent
// them.
func (d *DHT) RecordsRejected() uint64 { return d.rejected.Load() }

// StoreStats reports what this node's DHT keeps for other nodes and how
// many records it refused for a bound (Config.Limits).
func (d *DHT) StoreStats() StoreStats { return d.store.stats() }

// RoutingTableSize is the number of peers in the routing table.
func (d *DHT) RoutingTableSize() int { return d.kad.RoutingTable().Size() }

// SetServer makes this node a DHT server (it answers other nodes'
// queries, stores records and sits in their routing tables) or a client
// (it queries, announces and puts, but serves none of that). A node is a
// server from New on; a worker (a node whose parent is in its own site)
// is made a client, so that the DHT's traffic and connections stay on the
// gateways and off the workers' transfers (measured: 2 sites x 8 workers,
// 64 MiB, 7.1 s with clients against 9.9 s with every worker a server).
func (d *DHT) SetServer(server bool) {
	v, r := int32(2), network.ReachabilityPrivate
	if server {
		v, r = 1, network.ReachabilityPublic
	}
	if d.server.Swap(v) == v {
		return
	}
	if err := d.reach.Emit(event.EvtLocalReachabilityChanged{Reachability: r}); err != nil {
		d.log.Warn("switch DHT mode", "server", server, "err", err)
	}
}

// Server reports whether this node serves the DHT now (kad serves its
// protocol only in server mode).
func (d *DHT) Server() bool {
	return slices.Contains(d.cfg.Host.Mux().Protocols(), protocol.ID(Prefix+"/kad/1.0.0"))
}

// InRoutingTable reports whether p is in the routing table.
func (d *DHT) InRoutingTable(p peer.ID) bool { return d.kad.RoutingTable().Find(p) != "" }

// Refresh refreshes the routing table now (e.g. after new peers were
// added) and waits until it is done or ctx ends.
func (d *DHT) Refresh(ctx context.Context) error {
	select {
	case err := <-d.kad.RefreshRoutingTable():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close leaves the DHT.
func (d *DHT) Close() error {
	d.cancel()
	d.wg.Wait()
	err := d.kad.Close()
	d.reach.Close()
	return err
}

// reprovideLoop announces every held blob again every ReprovideEvery.
func (d *DHT) reprovideLoop(ctx context.Context) {
	t := time.NewTicker(d.cfg.ReprovideEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, failed := 0, 0
		for _, id := range d.held() {
			pctx, cancel := context.WithTimeout(ctx, time.Minute)
			if err := d.kad.Provide(pctx, id, true); err != nil {
				failed++
			}
			cancel()
			n++
			if ctx.Err() != nil {
				return
			}
		}
		names := 0
		if d.cfg.Names != nil {
			for _, r := range d.cfg.Names() {
				pctx, cancel := context.WithTimeout(ctx, time.Minute)
				if err := d.PutName(pctx, r); err != nil {
					failed++
				}
				cancel()
				names++
				if ctx.Err() != nil {
					return
				}
			}
		}
		d.log.Info("reprovided held blobs and republished names", "blobs", n, "names", names, "failed", failed)
	}
}

// held is what to reprovide.
func (d *DHT) held() []cid.Cid {
	if d.cfg.Held != nil {
		return d.cfg.Held()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]cid.Cid, 0, len(d.provided))
	for id := range d.provided {
		out = append(out, id)
	}
	return out
}
