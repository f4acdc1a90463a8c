package locate

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"

	"github.com/omst-project/omst/pkg/transfer"
)

// Searcher finds the nodes that announced a blob (pkg/dht.DHT).
type Searcher interface {
	// Providers returns up to limit nodes that announced id, this node
	// excluded, with their addresses; what it found when ctx ends.
	Providers(ctx context.Context, id cid.Cid, limit int) []peer.AddrInfo
}

// Defaults for Config.
const (
	DefaultSearchTimeout = 3 * time.Second
	DefaultInfoTimeout   = 2 * time.Second
	// DefaultFoundFor is how long the providers found for a blob are
	// used before a new search (a source that fails in between triggers
	// one sooner: Want.Force).
	DefaultFoundFor = 30 * time.Second
	// DefaultInfoFor is how long a peer's INFO is kept.
	DefaultInfoFor = 5 * time.Minute
	// DefaultMaxProviders bounds the providers used per search.
	DefaultMaxProviders = 20
	// forceFresh: a forced search reuses a result younger than this (the
	// chunks of one blob failing at once make one search, not one each).
	forceFresh = 2 * time.Second
	// maxCached bounds the blobs whose search results are kept.
	maxCached = 4096
)

// Config configures New.
type Config struct {
	Host     host.Host
	Searcher Searcher
	// Self returns this node's site and whether it is a gateway, now (it
	// changes as the parent session comes and goes).
	Self func() Info
	// Origin, when set, returns the origin of a blob (the peer ID, as
	// text, of the node that put it; "") when a Want does not carry it.
	Origin        func(id cid.Cid) string
	SearchTimeout time.Duration
	InfoTimeout   time.Duration
	FoundFor      time.Duration
	InfoFor       time.Duration
	MaxProviders  int
	Logger        *slog.Logger
}

// Locator finds sources beyond the tree; it is a transfer.Finder and
// answers ProtoInfo. Its methods are safe for concurrent use.
type Locator struct {
	cfg    Config
	h      host.Host
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	found    map[cid.Cid]*search
	infos    map[peer.ID]infoEntry
	searches uint64 // searches made
}

var _ transfer.Finder = (*Locator)(nil)

// search is one search for a blob's providers, shared by its callers; its
// result is kept for FoundFor once done.
type search struct {
	done  chan struct{}
	at    time.Time // when it finished
	peers []Peer
}

type infoEntry struct {
	in    Info
	ok    bool
	until time.Time
}

// New returns a Locator and registers the ProtoInfo handler on cfg.Host;
// Close removes it.
func New(cfg Config) (*Locator, error) {
	switch {
	case cfg.Host == nil:
		return nil, errors.New("locate: no host")
	case cfg.Searcher == nil:
		return nil, errors.New("locate: no searcher")
	case cfg.Self == nil:
		return nil, errors.New("locate: no Self")
	}
	if cfg.SearchTimeout <= 0 {
		cfg.SearchTimeout = DefaultSearchTimeout
	}
	if cfg.InfoTimeout <= 0 {
		cfg.InfoTimeout = DefaultInfoTimeout
	}
	if cfg.FoundFor <= 0 {
		cfg.FoundFor = DefaultFoundFor
	}
	if cfg.InfoFor <= 0 {
		cfg.InfoFor = DefaultInfoFor
	}
	if cfg.MaxProviders <= 0 {
		cfg.MaxProviders = DefaultMaxProviders
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	l := &Locator{cfg: cfg, h: cfg.Host, log: cfg.Logger.With("component", "locate"),
		found: map[cid.Cid]*search{}, infos: map[peer.ID]infoEntry{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	cfg.Host.SetStreamHandler(ProtoInfo, serveInfo(cfg.Self))
	return l, nil
}

// Close stops the searches under way and stops answering ProtoInfo.
func (l *Locator) Close() error {
	l.h.RemoveStreamHandler(ProtoInfo)
	l.cancel()
	return nil
}

func (l *Locator) self() Self {
	in := l.cfg.Self()
	return Self{ID: l.h.ID(), Site: in.Site, Gateway: in.Gateway}
}

// Find implements transfer.Finder (see ShouldSearch and Rank).
func (l *Locator) Find(ctx context.Context, w transfer.Want, given []transfer.Source) []transfer.Source {
	self := l.self()
	origin := w.Origin
	if origin == "" && l.cfg.Origin != nil {
		origin = l.cfg.Origin(w.ID)
	}
	if peers, age, ok := l.cached(w.ID); ok && (!w.Force || age < forceFresh) {
		return Rank(self, given, peers, w.Exclude)
	}
	if !ShouldSearch(self, given, origin, w.Force) {
		return given
	}
	return Rank(self, given, l.search(ctx, w.ID, w.Force), w.Exclude)
}

// Providers searches now for the nodes that announced blob id and returns
// them with what they told of themselves, in the order found.
func (l *Locator) Providers(ctx context.Context, id cid.Cid) []Peer {
	return l.search(ctx, id, true)
}

// Searches returns the number of searches made.
func (l *Locator) Searches() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.searches
}

// Known returns what p told of itself, if it was asked recently.
func (l *Locator) Known(p peer.ID) (Info, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.infos[p]
	return e.in, ok && e.ok && time.Now().Before(e.until)
}

// cached returns the finished search for id, if fresh, and its age.
func (l *Locator) cached(id cid.Cid) ([]Peer, time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.found[id]
	if s == nil || s.at.IsZero() {
		return nil, 0, false
	}
	age := time.Since(s.at)
	if age > l.cfg.FoundFor {
		return nil, 0, false
	}
	return s.peers, age, true
}

// search returns the providers of id: one search at a time per blob,
// shared by every caller (a fresh one unless a result younger than
// forceFresh exists when fresh is set); a caller whose ctx ends gets what
// is known. The search runs on its own bound (SearchTimeout), not the
// caller's.
func (l *Locator) search(ctx context.Context, id cid.Cid, fresh bool) []Peer {
	l.mu.Lock()
	s := l.found[id]
	if s == nil || (!s.at.IsZero() && (time.Since(s.at) > l.cfg.FoundFor || fresh && time.Since(s.at) >= forceFresh)) {
		if len(l.found) >= maxCached {
			l.evictLocked()
		}
		s = &search{done: make(chan struct{})}
		l.found[id] = s
		l.searches++
		go l.run(id, s)
	}
	l.mu.Unlock()
	select {
	case <-s.done:
		return s.peers
	case <-ctx.Done():
		return nil
	}
}

// run makes search s: providers from the Searcher, then each one's INFO.
func (l *Locator) run(id cid.Cid, s *search) {
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.SearchTimeout)
	defer cancel()
	start := time.Now()
	provs := l.cfg.Searcher.Providers(ctx, id, l.cfg.MaxProviders)
	peers := make([]Peer, len(provs))
	var wg sync.WaitGroup
	for i, ai := range provs {
		if len(ai.Addrs) > 0 {
			l.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.AddressTTL)
		}
		wg.Go(func() { peers[i] = l.describe(ctx, ai.ID) })
	}
	wg.Wait()
	l.mu.Lock()
	s.peers, s.at = peers, time.Now()
	l.mu.Unlock()
	close(s.done)
	l.log.Debug("searched for providers", "blob", id, "found", len(peers), "took", time.Since(start))
}

// describe returns p with its INFO (asked, or remembered).
func (l *Locator) describe(ctx context.Context, p peer.ID) Peer {
	l.mu.Lock()
	e, ok := l.infos[p]
	l.mu.Unlock()
	if !ok || time.Now().After(e.until) {
		ictx, cancel := context.WithTimeout(ctx, l.cfg.InfoTimeout)
		in, err := AskInfo(ictx, l.h, p)
		if err != nil && ictx.Err() == nil {
			// Once more, past a dial backoff left by a failed dial (e.g.
			// the two nodes dialled each other at once).
			if sw, ok := l.h.Network().(interface{ Backoff() *swarm.DialBackoff }); ok {
				sw.Backoff().Clear(p)
			}
			in, err = AskInfo(ictx, l.h, p)
		}
		cancel()
		e = infoEntry{in: in, ok: err == nil, until: time.Now().Add(l.cfg.InfoFor)}
		if err != nil {
			l.log.Debug("provider did not tell its place", "peer", p, "err", err)
			e.until = time.Now().Add(l.cfg.InfoFor / 10)
		}
		l.mu.Lock()
		l.infos[p] = e
		l.mu.Unlock()
	}
	return Peer{ID: p, Site: e.in.Site, Gateway: e.in.Gateway, Known: e.ok}
}

// evictLocked drops the finished searches older than FoundFor, or, if
// none is, the oldest finished one.
func (l *Locator) evictLocked() {
	var oldest cid.Cid
	var at time.Time
	for id, s := range l.found {
		if s.at.IsZero() {
			continue
		}
		if time.Since(s.at) > l.cfg.FoundFor {
			delete(l.found, id)
			continue
		}
		if at.IsZero() || s.at.Before(at) {
			oldest, at = id, s.at
		}
	}
	if len(l.found) >= maxCached && !at.IsZero() {
		delete(l.found, oldest)
	}
	for p, e := range l.infos {
		if time.Now().After(e.until) {
			delete(l.infos, p)
		}
	}
}
