package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"

	"github.com/omst-project/omst/pkg/transfer/internal/exchange"
	"github.com/omst-project/omst/pkg/transfer/internal/peerrate"
	"github.com/omst-project/omst/pkg/transfer/internal/schedule"
)

// This file holds one site's simulation: the root, the site's head and
// workers, the fetch streams between them, and what each node does with a
// request or a reply. Every decision is the engine's own code, fed what
// the engine feeds it with the simulated time: the head's (and every
// node's) exchange.ServeState, each worker's schedule.Schedule and
// exchange.Hedger. What the engine does around them (coalescing fetches of
// a chunk, pull-through, pipelined streams, the push after a LOOKUP_GET)
// is modelled here after pkg/transfer and its internal parts.

type role uint8

const (
	roleRoot role = iota
	roleHead
	roleWorker
)

// reqKind is a request's message type, as the server sees it.
type reqKind uint8

const (
	reqGet     reqKind = iota // GET: to a node's parent (a worker's head, a head's root)
	reqSibling                // GET_SIBLING: a redirected worker to the sibling named
	reqHedge                  // GET_DIRECT if-present, naming the sibling slow or not
	reqDirect                 // GET_DIRECT naming the sibling that failed
	reqPush                   // a chunk the root pushes after its FOUND (no request on the wire)
)

type status uint8

const (
	stOK status = iota
	stRedirect
	stNotFound
	stBusy // fetch 1.4.0: ask again after the reply's retry
)

// site is one site's simulation.
type site struct {
	cfg   *Config
	index int
	q     queue
	net   network
	now   float64
	base  time.Time
	blob  cid.Cid
	group string
	rng   *rand.Rand

	nChunks int
	piece   float64

	root    *node
	head    *node
	workers []*node
	byPeer  map[peer.ID]*node

	remaining int // workers without every chunk
	siteResult
}

// siteResult is what one site measured.
type siteResult struct {
	workerDone                   []float64
	headOut, wanIn, siblingOut   float64
	redirects, hedges            int64
	hedgesDeclined, hedgesServed int64
	hedgesBusy                   int64 // declined for the backlog
	deferred                     int64 // hedges and give-ups held back for the workers' budgets
	hedgesNotHere, timeouts      int64
	directs, events, truncated   int64
	// GET_DIRECTs the head answered (fetch 1.4.0) with a REDIRECT to a
	// complete holder, with BUSY; and served.
	directsRedirected, directsBusy, directsServed int64
	// depth: hops from the head of each worker's copy of each chunk as
	// the head decided it (1: the head's own copy; a redirect: the
	// target's + 1); the most, and the sum over the decisions.
	maxDepth, sumDepth, nDepth int64
	firstServed                float64 // when the head first served a hedge
}

// node is a simulated daemon.
type node struct {
	s     *site
	id    peer.ID
	role  role
	name  string
	serve *exchange.ServeState // its server's decisions

	lanUp, lanDown *resource // head and workers: the LAN port
	wanIn          *resource // head: the WAN link from the root

	have   []bool
	calls  []*call         // the fetch in flight per chunk, as coalesce.Chunks holds them
	served map[*node]*conn // the connections it serves, by client
	// childOut: the chunk bytes of the replies it finished writing to
	// its children (a drain rate's count, with those being written).
	childOut int64
	parent   *node

	depth []uint16 // per chunk, as the head's decisions made it (see siteResult)

	// a worker's get
	sch    *schedule.Schedule
	hedger *exchange.Hedger
	rates  *peerrate.Table // how long each peer's replies take: the Hedger's timers (coalesce.Chunks)
	cursor int             // the reader's next chunk
}

// conn is the fetch streams from a client to a server: the client's
// requests outstanding per stream, and per stream the server's replies
// ready to be written, written one at a time in the order they became
// ready (server.writeReplies).
type conn struct {
	srv, cli *node
	lanes    []lane // StreamsPerPeer streams (the root's to a head: one more, the push)
	pending  []int  // per stream, the requests the client waits on
	group    flowGroup
	res      [maxRes]*resource
	nres     int
	lat      float64
	ss       *slowStart // a WAN connection's congestion window; nil on a LAN
}

// slowStart is a WAN connection's congestion window as a resource of its
// own: InitWindow bytes per round trip at first, doubling every round
// trip from the connection's first byte until it is above the link's rate.
type slowStart struct {
	ev      event
	s       *site
	res     *resource
	window  float64 // bytes per round trip
	rtt     float64
	link    float64 // the link's rate: the window stops growing past it
	started bool
}

func (ss *slowStart) begin() {
	if !ss.started {
		ss.started = true
		ss.s.q.schedule(&ss.ev, ss.s.now+ss.rtt)
	}
}

func (ss *slowStart) fire() {
	ss.window *= 2
	rate := ss.window / ss.rtt
	if rate >= ss.link {
		rate = 4 * ss.link // no longer a limit
	} else {
		ss.s.q.schedule(&ss.ev, ss.s.now+ss.rtt)
	}
	ss.s.net.setCap(ss.res, rate)
}

type lane struct {
	queue []*reply
	cur   *reply
}

// request is one request on its way to, or being resolved by, a server.
type request struct {
	ev       event
	kind     reqKind
	cli, srv *node
	c        *conn
	lane     int
	chunk    int
	call     *call             // the client's fetch it serves
	hreq     exchange.HedgeReq // which request of a followed redirect
	failed   peer.ID
	slow     bool
	late     bool             // the client stopped waiting: its reply is read and dropped
	pend     peerrate.Pending // the client's timing of it (a worker's requests)
}

func (q *request) fire() { q.srv.handle(q) }

// reply is a server's answer; a chunk's bytes are a flow.
type reply struct {
	ev     event
	req    *request
	status status
	target *node         // stRedirect
	retry  time.Duration // stBusy
	from   *call         // the server's fetch whose bytes it forwards; nil: from the store
	size   float64
	fl     flow
}

func (p *reply) fire() { p.req.cli.receive(p) }

// call is a node's fetch of one chunk in flight (coalesce.Call): every
// request for the chunk that the node serves waits on it, as does the
// node's own get.
type call struct {
	n      *node
	chunk  int
	own    bool     // the node's get waits on it
	parked []*reply // replies waiting for its bytes
	done   bool

	// feed is what the replies the node forwards are fed from: with
	// whole chunks, the first bytes on their way to it; with pieces, of
	// the flows bringing it the chunk (in, whichever request they answer),
	// the one furthest along: verified pieces are pieces, whoever sent
	// them. cross is when another one overtakes it.
	feed  *flow
	in    []*flow
	cross crossing
	wait  bool // a firstPiece waiter is set on feed

	// a followed redirect (coalesce.fromSibling)
	sf      *exchange.SiblingFetch
	sibling *node
	reqs    [exchange.NumHedgeReqs]*request
	timer   event
}

// crossing is the event of a call's flow overtaking its feed.
type crossing struct {
	ev event
	cl *call
}

func (c *crossing) fire() { c.cl.recheckFeed() }

// retry is a get's request for a chunk after a pause (schedule.RetryDelay).
type retry struct {
	ev    event
	n     *node
	chunk int
}

func (r *retry) fire() { r.n.fetch(r.chunk) }

// startGet is a worker's get once its LOOKUP_GET is answered.
type startGet struct {
	ev event
	n  *node
}

func (g *startGet) fire() { g.n.startGet() }

// lookupAtRoot is the first LOOKUP_GET of the site reaching the root,
// which answers with a FOUND and pushes the blob's first chunks.
type lookupAtRoot struct {
	ev event
	s  *site
}

func (l *lookupAtRoot) fire() { l.s.push() }

func runSite(cfg *Config, index int) (siteResult, error) {
	s, err := newSite(cfg, index)
	if err != nil {
		return siteResult{}, err
	}
	s.net.maxDepth = relaxDepth
	return s.run()
}

// relaxDepth, when > 0, replaces maxDepth (TestRelaxationDepth).
var relaxDepth int

func newSite(cfg *Config, index int) (*site, error) {
	h, err := mh.Sum([]byte("omst-sim blob"), mh.SHA2_256, -1)
	if err != nil {
		return nil, fmt.Errorf("blob id: %w", err)
	}
	s := &site{
		cfg:     cfg,
		index:   index,
		base:    time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		blob:    cid.NewCidV1(cid.Raw, h),
		group:   fmt.Sprintf("site%d", index),
		rng:     rand.New(rand.NewPCG(cfg.Seed, uint64(index))),
		nChunks: int((cfg.BlobSize + cfg.ChunkSize - 1) / cfg.ChunkSize),
		piece:   float64(cfg.PieceSize),
	}
	s.net.q, s.net.clock = &s.q, &s.now
	wan := cfg.WANRate * cfg.WANGoodput / 8
	lan := cfg.LANRate * cfg.LANGoodput / 8
	s.root = s.newNode(roleRoot, "root", nil)
	for i := range s.root.have {
		s.root.have[i] = true
	}
	s.head = s.newNode(roleHead, fmt.Sprintf("s%d-head", index), s.root)
	s.head.wanIn = newResource(s.head.name+" wan in", wan)
	s.head.lanUp = newResource(s.head.name+" lan up", lan)
	s.head.lanDown = newResource(s.head.name+" lan down", lan)
	for w := range cfg.Workers {
		n := s.newNode(roleWorker, fmt.Sprintf("s%d-w%d", index, w), s.head)
		n.lanUp = newResource(n.name+" lan up", lan)
		n.lanDown = newResource(n.name+" lan down", lan)
		if !cfg.ConstantTimers {
			n.rates = peerrate.New()
		}
		n.hedger = exchange.NewHedger(cfg.SiblingTimeout, n.rates)
		if cfg.Budgets {
			n.hedger.SetBudget(exchange.NewBudget(exchange.HedgeShare, exchange.HedgeBurst))
		}
		s.workers = append(s.workers, n)
	}
	s.remaining = cfg.Workers
	return s, nil
}

func (s *site) newNode(r role, name string, parent *node) *node {
	if s.byPeer == nil {
		s.byPeer = map[peer.ID]*node{}
	}
	n := &node{
		s: s, id: peer.ID(name), role: r, name: name, parent: parent,
		serve:  exchange.NewServeState(exchange.ServeConfig{SiblingExchange: true, Distribution: s.cfg.distribution(), HedgeBacklog: s.cfg.HedgeBacklog}),
		have:   make([]bool, s.nChunks),
		depth:  make([]uint16, s.nChunks),
		calls:  make([]*call, s.nChunks),
		served: map[*node]*conn{},
	}
	s.byPeer[n.id] = n
	return n
}

// chunkLen is the length of chunk i.
func (s *site) chunkLen(i int) float64 {
	return float64(min(s.cfg.ChunkSize, s.cfg.BlobSize-int64(i)*s.cfg.ChunkSize))
}

// jitter is a message's extra delay (Config.MessageJitter).
func (s *site) jitter() float64 {
	if s.cfg.MessageJitter <= 0 {
		return 0
	}
	return s.rng.Float64() * s.cfg.MessageJitter.Seconds()
}

// at converts simulated seconds to the clock the decisions read.
func (s *site) at(t float64) time.Time { return s.base.Add(time.Duration(math.Round(t * 1e9))) }

// since converts a decision's time back to simulated seconds.
func (s *site) since(t time.Time) float64 { return t.Sub(s.base).Seconds() }

func (s *site) wallNow() time.Time { return s.at(s.now) }

func (s *site) run() (siteResult, error) {
	wan := s.cfg.WANLatency.Seconds()
	lan := s.cfg.LANLatency.Seconds()
	// Each worker's LOOKUP_GET goes to its head, which asks the root; the
	// FOUND carries the manifest. The site's first one brings the push.
	first := math.Inf(1)
	for _, w := range s.workers {
		t0 := 0.0
		if j := s.cfg.StartJitter.Seconds(); j > 0 {
			t0 = s.rng.Float64() * j
		}
		first = min(first, t0)
		g := &startGet{n: w}
		g.ev.h = g
		s.q.schedule(&g.ev, t0+2*lan+2*wan)
	}
	if s.cfg.PushBytes > 0 {
		l := &lookupAtRoot{s: s}
		l.ev.h = l
		s.q.schedule(&l.ev, first+lan+wan)
	}
	limit := s.cfg.MaxTime.Seconds()
	for s.remaining > 0 {
		e := s.q.next()
		if e == nil {
			return siteResult{}, fmt.Errorf("site %d: stalled at %.3f s with %d of %d workers incomplete (a simulator bug)", s.index, s.now, s.remaining, len(s.workers))
		}
		if e.at < s.now-1e-9 {
			return siteResult{}, fmt.Errorf("site %d: event at %.9f s before now %.9f s (a simulator bug)", s.index, e.at, s.now)
		}
		if e.at > limit {
			s.now = limit
			break
		}
		s.now = max(s.now, e.at)
		s.events++
		e.h.fire()
	}
	// Bytes still on the wire count as sent so far.
	for _, c := range s.head.served {
		for _, l := range c.lanes {
			if l.cur != nil {
				s.headOut += l.cur.fl.xAt(s.now)
			}
		}
	}
	for _, c := range s.root.served {
		for _, l := range c.lanes {
			if l.cur != nil {
				s.wanIn += l.cur.fl.xAt(s.now)
			}
		}
	}
	for _, w := range s.workers {
		for _, c := range w.served {
			for _, l := range c.lanes {
				if l.cur != nil {
					s.siblingOut += l.cur.fl.xAt(s.now)
				}
			}
		}
	}
	s.truncated = s.net.truncated
	return s.siteResult, nil
}

// push: the root answers the site's first LOOKUP_GET and pushes the
// blob's leading chunks (at most PushBytes in all) on the FOUND's stream;
// the head registers them as fetches in flight (coalesce Expect).
func (s *site) push() {
	c := s.root.connTo(s.head)
	sum := 0.0
	for i := 0; i < s.nChunks; i++ {
		if sum += s.chunkLen(i); sum > float64(s.cfg.PushBytes) {
			break
		}
		cl := s.head.newCall(i)
		q := &request{kind: reqPush, cli: s.head, srv: s.root, c: c, lane: len(c.lanes) - 1, chunk: i, call: cl}
		s.root.ready(&reply{req: q, status: stOK, size: s.chunkLen(i)})
	}
}

// connTo returns the connection on which n serves client cli, made on
// first use (and again after it was forgotten idle: a client's streams
// are then all idle, and a fresh one behaves the same).
func (n *node) connTo(cli *node) *conn {
	if c := n.served[cli]; c != nil {
		return c
	}
	s := n.s
	streams := s.cfg.StreamsPerPeer
	if n.role == roleRoot {
		streams++ // the names stream the push comes on
	}
	c := &conn{srv: n, cli: cli, lanes: make([]lane, streams), pending: make([]int, s.cfg.StreamsPerPeer)}
	switch n.role {
	case roleRoot:
		c.res[0], c.nres = cli.wanIn, 1
		c.lat = s.cfg.WANLatency.Seconds()
		if s.cfg.InitWindow > 0 && c.lat > 0 {
			rtt := 2 * c.lat
			c.ss = &slowStart{s: s, window: float64(s.cfg.InitWindow), rtt: rtt, link: cli.wanIn.cap}
			c.ss.ev.h = c.ss
			c.ss.res = newResource(n.name+" cwnd", c.ss.window/rtt)
			c.res[c.nres] = c.ss.res
			c.nres++
		}
	default:
		c.res[0], c.res[1], c.nres = n.lanUp, cli.lanDown, 2
		c.lat = s.cfg.LANLatency.Seconds()
	}
	n.served[cli] = c
	return c
}

// forgetIfIdle drops c once nothing is pending or being written on it
// (not a WAN connection: its congestion window is kept).
func (c *conn) forgetIfIdle() {
	if c.ss != nil {
		return
	}
	for _, p := range c.pending {
		if p > 0 {
			return
		}
	}
	for _, l := range c.lanes {
		if l.cur != nil || len(l.queue) > 0 {
			return
		}
	}
	if c.srv.served[c.cli] == c {
		delete(c.srv.served, c.cli)
	}
}

// send makes a request from n to srv on the stream fetchclient would pick
// (the least loaded; ties to the first) and puts it on its way.
func (n *node) send(kind reqKind, srv *node, chunk int, cl *call) *request {
	c := srv.connTo(n)
	best := 0
	for i, p := range c.pending {
		if p < c.pending[best] {
			best = i
		}
	}
	c.pending[best]++
	q := &request{kind: kind, cli: n, srv: srv, c: c, lane: best, chunk: chunk, call: cl}
	if n.rates != nil {
		q.pend = n.rates.Sent(n.s.wallNow(), srv.id)
	}
	q.ev.h = q
	n.s.q.schedule(&q.ev, n.s.now+c.lat+n.s.jitter())
	return q
}

// forget stops waiting for q's reply (fetchStream.forget): it no longer
// counts as pending, and its reply is dropped when it comes.
func (q *request) forget() {
	if q == nil || q.late {
		return
	}
	q.late = true
	if q.kind != reqPush {
		q.c.pending[q.lane]--
	}
	if q.cli.rates != nil {
		q.cli.rates.Lost(q.pend) // cancelled: no measure (coalesce.measured)
	}
}

// measured ends q's timing at its client as coalesce.measured does: a
// chunk measures the server's pace; a REDIRECT or a declined hedge, made
// at once, a round trip; anything else nothing.
func (q *request) measured(p *reply) {
	r := q.cli.rates
	if r == nil {
		return
	}
	now := q.cli.s.wallNow()
	switch {
	case p.status == stOK:
		r.Replied(now, q.pend, int(p.size))
	case p.status == stRedirect, q.kind == reqHedge && p.status == stNotFound:
		r.Answered(now, q.pend)
	default:
		r.Lost(q.pend)
	}
}

// handle resolves request q at its server n (server.serveChunk).
func (n *node) handle(q *request) {
	s := n.s
	a := exchange.Ask{Blob: s.blob, Index: uint32(q.chunk), Child: q.cli.id,
		Direct: q.kind == reqDirect || q.kind == reqHedge, Hedge: q.kind == reqHedge}
	if q.cli.parent == n {
		a.Grouped, a.Group = true, s.group
		if q.cli.role == roleHead {
			a.Group = "head " + s.group // the root's children: one head per site
		}
	}
	if q.slow {
		a.Slow = q.failed
	} else {
		a.Failed = q.failed
	}
	a.Deflect = q.kind == reqDirect && !s.cfg.NoDeflect
	ev := exchange.ServeEvent{Kind: exchange.ServeAsk, Ask: a}
	if q.kind == reqHedge || (a.Grouped && !s.cfg.NoDeflect) {
		// The bytes handed on feed the drain rate (a deflectable
		// GET_DIRECT's BUSY): every child's ask, as the server does.
		b, sent := n.backlog()
		ev.Backlog = exchange.Backlog{Bytes: b, Sent: sent, Known: true}
	}
	d := n.serve.Step(s.wallNow(), ev)
	switch d.Action {
	case exchange.ActBusy:
		s.directsBusy++
		n.ready(&reply{req: q, status: stBusy, retry: d.Wait})
		return
	case exchange.ActDecline:
		s.hedgesDeclined++
		if d.Busy {
			s.hedgesBusy++
		}
		n.ready(&reply{req: q, status: stNotFound})
		return
	case exchange.ActRedirect:
		target := s.byID(d.Target)
		if target == nil {
			panic(fmt.Sprintf("sim: redirect to unknown peer %s", d.Target))
		}
		s.redirects++
		if q.kind == reqDirect {
			s.directsRedirected++
		}
		s.noteDepth(q.cli, q.chunk, int(target.depth[q.chunk])+1)
		n.ready(&reply{req: q, status: stRedirect, target: target})
		return
	}
	if n.role == roleHead && q.kind != reqHedge {
		s.noteDepth(q.cli, q.chunk, 1)
	}
	if q.kind == reqDirect && n.role == roleHead {
		s.directsServed++
	}
	if n.have[q.chunk] {
		if q.kind == reqHedge && n.role == roleHead {
			if s.hedgesServed == 0 {
				s.firstServed = s.now
			}
			s.hedgesServed++
		}
		n.ready(&reply{req: q, status: stOK, size: s.chunkLen(q.chunk)})
		return
	}
	if q.kind == reqHedge {
		s.hedgesNotHere++
		n.ready(&reply{req: q, status: stNotFound})
		return
	}
	// Pull-through: wait on the fetch in flight, or start one from this
	// node's parent (never the asker: a worker's parent is its head).
	cl := n.calls[q.chunk]
	if cl == nil {
		cl = n.newCall(q.chunk)
		cl.fetchFromParent()
	}
	cl.park(&reply{req: q, status: stOK, size: s.chunkLen(q.chunk), from: cl})
}

// backlog is what n has to write to its children (server.backlog): of
// the replies on their streams, the bytes each could send now and has not
// (a flow's bytes that its feeder brought and it has not passed on; a
// queued reply's bytes in the store, or brought by the fetch it
// forwards). The engine counts the bytes its writers hold in writes the
// streams have not taken; with no buffers modelled, that is this.
//
// It also returns the chunk bytes n has handed its children so far
// (Backlog.Sent): those of replies done and of the ones being written.
func (n *node) backlog() (b, sent int64) {
	s := n.s
	sent = n.childOut // whole bytes: the sums do not depend on the map's order
	for cli, c := range n.served {
		if cli.parent != n {
			continue
		}
		for _, l := range c.lanes {
			if p := l.cur; p != nil {
				b += int64(math.Max(p.fl.avail(s.now)-p.fl.xAt(s.now), 0))
				sent += int64(p.fl.xAt(s.now))
			}
			for _, p := range l.queue {
				switch {
				case p.status != stOK:
				case p.from == nil || p.from.done:
					b += int64(p.size)
				case p.from.feed != nil:
					b += int64(math.Min(p.from.feed.xAt(s.now), p.size))
				}
			}
		}
	}
	return b, sent
}

// noteDepth records that worker w gets chunk i through depth hops from
// the head.
func (s *site) noteDepth(w *node, i, depth int) {
	depth = min(depth, math.MaxUint16)
	w.depth[i] = uint16(depth)
	s.maxDepth = max(s.maxDepth, int64(depth))
	s.sumDepth += int64(depth)
	s.nDepth++
}

// byID returns the node of this site named id, or nil.
func (s *site) byID(id peer.ID) *node { return s.byPeer[id] }

// ready puts reply p on its stream's queue: it is written after the
// replies ready before it on that stream (server.writeReplies). A chunk
// counts as sent into the site now (ServeSent).
func (n *node) ready(p *reply) {
	s := n.s
	p.ev.h = p
	q := p.req
	if p.status == stOK && q.kind != reqPush {
		// A connected child's hedge or plain GET_DIRECT is a second copy
		// into the site (server.countSecond).
		second := q.cli.parent == n && (q.kind == reqHedge || q.kind == reqDirect)
		n.serve.Step(s.wallNow(), exchange.ServeEvent{Kind: exchange.ServeSent, Ask: exchange.Ask{Blob: s.blob, Index: uint32(q.chunk)}, Second: second})
	}
	l := &q.c.lanes[q.lane]
	l.queue = append(l.queue, p)
	q.c.kick(q.lane)
}

// kick starts writing the next reply of stream li if it is idle.
func (c *conn) kick(li int) {
	s := c.srv.s
	l := &c.lanes[li]
	for l.cur == nil && len(l.queue) > 0 {
		p := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		if p.status != stOK {
			s.q.schedule(&p.ev, s.now+c.lat+s.jitter())
			continue
		}
		l.cur = p
		f := &p.fl
		f.res, f.nres, f.group, f.owner, f.size = c.res, c.nres, &c.group, p, p.size
		if p.from != nil && !p.from.done {
			f.up, f.lag = p.from.feed, math.Min(s.piece, p.size)
		}
		s.net.start(f)
		if c.ss != nil {
			c.ss.begin()
		}
		if cl := p.req.call; cl != nil && !cl.done {
			cl.arriving(p)
		}
	}
	if len(l.queue) == 0 {
		l.queue = nil
	}
}

// flowSent: the reply's last byte left; it arrives after the latency, and
// the stream writes its next reply.
func (p *reply) flowSent(f *flow) {
	q := p.req
	s := q.srv.s
	switch {
	case q.srv.role == roleRoot:
		s.wanIn += f.size
	case q.srv.role == roleHead:
		s.headOut += f.size
	default:
		s.siblingOut += f.size
	}
	if q.cli.parent == q.srv && p.status == stOK && q.kind != reqPush {
		// The child's stream took the last byte: it holds the chunk
		// complete (server.writeReplies' written, ServeDelivered).
		q.srv.childOut += int64(f.size)
		a := exchange.Ask{Blob: s.blob, Index: uint32(q.chunk), Child: q.cli.id, Grouped: true, Group: s.group}
		if q.cli.role == roleHead {
			a.Group = "head " + s.group
		}
		q.srv.serve.Step(s.wallNow(), exchange.ServeEvent{Kind: exchange.ServeDelivered, Ask: a})
	}
	s.q.schedule(&p.ev, s.now+q.c.lat+s.jitter())
	q.c.lanes[q.lane].cur = nil
	q.c.kick(q.lane)
	q.c.forgetIfIdle()
}

// receive is reply p read by its client n.
func (n *node) receive(p *reply) {
	q := p.req
	if !q.late && q.kind != reqPush {
		q.c.pending[q.lane]--
		q.measured(p)
	}
	q.c.forgetIfIdle()
	cl := q.call
	if q.late {
		// Read and dropped (fetchStream.readReplies); but with pieces, the
		// pieces the call forwarded were verified as they came: whole,
		// they are the chunk, whichever request brought them.
		if !n.s.cfg.wholeChunks() && p.status == stOK && cl != nil && !cl.done {
			cl.complete(q)
		}
		return
	}
	if cl.done {
		return
	}
	switch q.kind {
	case reqGet, reqPush:
		switch p.status {
		case stOK:
			cl.complete(q)
		case stRedirect:
			cl.follow(p.target)
		default:
			cl.fail()
		}
	default: // a request of a followed redirect
		var act exchange.HedgeAction
		switch {
		case p.status == stOK:
			act = n.hedger.Arrived(cl.sf, n.s.wallNow(), q.hreq)
		case q.hreq == exchange.ReqDirect && p.status == stRedirect:
			act = n.hedger.Redirected(cl.sf, n.s.wallNow(), p.target.id)
			cl.sibling = p.target // the target of act.Follow
		case q.hreq == exchange.ReqDirect && p.status == stBusy:
			act = n.hedger.Busy(cl.sf, n.s.wallNow(), p.retry)
		default:
			act = n.hedger.Failed(cl.sf, n.s.wallNow(), q.hreq)
		}
		switch {
		case act.Deliver:
			cl.complete(q)
		case act.Fail:
			cl.fail()
		default:
			cl.carryOut(act)
		}
	}
}

func (n *node) newCall(i int) *call {
	cl := &call{n: n, chunk: i}
	cl.timer.h = cl
	cl.cross.cl = cl
	cl.cross.ev.h = &cl.cross
	n.calls[i] = cl
	return cl
}

// fetchFromParent asks the node's parent for the chunk (GET).
func (cl *call) fetchFromParent() {
	cl.n.send(reqGet, cl.n.parent, cl.chunk, cl)
}

// follow carries out a relay's redirect to sibling sib
// (coalesce.fromSibling): ask it, and do what the Hedger decides.
func (cl *call) follow(sib *node) {
	n := cl.n
	cl.sibling = sib
	sf, act := n.hedger.Follow(n.s.wallNow(), sib.id, n.parent.id, int(n.s.cfg.ChunkSize))
	cl.sf = sf
	q := n.send(reqSibling, sib, cl.chunk, cl)
	q.hreq = exchange.ReqSibling
	cl.reqs[exchange.ReqSibling] = q
	cl.carryOut(act)
}

// carryOut does what the hedging policy decided (fromSibling's carryOut).
func (cl *call) carryOut(act exchange.HedgeAction) {
	n := cl.n
	s := n.s
	if act.Deferred || act.DirectDeferred {
		s.deferred++
	}
	if act.GiveUp {
		cl.reqs[exchange.ReqSibling].forget()
		if act.TimedOut {
			s.timeouts++
		}
	}
	if act.Hedge {
		s.hedges++
		q := n.send(reqHedge, n.parent, cl.chunk, cl)
		q.hreq = exchange.ReqHedge
		if act.Slow {
			q.failed, q.slow = cl.sibling.id, true
		}
		cl.reqs[exchange.ReqHedge] = q
	}
	if act.Direct {
		s.directs++
		q := n.send(reqDirect, n.parent, cl.chunk, cl)
		q.hreq = exchange.ReqDirect
		q.failed = act.Failed
		cl.reqs[exchange.ReqDirect] = q
	}
	if act.Follow != "" {
		// fetch 1.4.0: the relay sent the plain request to a complete
		// holder (cl.sibling, set by receive).
		q := n.send(reqSibling, cl.sibling, cl.chunk, cl)
		q.hreq = exchange.ReqSibling
		cl.reqs[exchange.ReqSibling] = q
	}
	if act.Wake.IsZero() {
		s.q.cancel(&cl.timer)
	} else {
		s.q.schedule(&cl.timer, max(s.since(act.Wake), s.now))
	}
}

// fire is the hedging policy's timer.
func (cl *call) fire() {
	if cl.done || cl.sf == nil {
		return
	}
	cl.carryOut(cl.n.hedger.Tick(cl.sf, cl.n.s.wallNow()))
}

// arriving: the bytes of reply p started toward the call's node. With
// whole chunks the first of a request still waited for feeds the call;
// with pieces, any does, and the one furthest along feeds it.
func (cl *call) arriving(p *reply) {
	if cl.n.s.cfg.wholeChunks() {
		if !p.req.late && cl.feed == nil {
			cl.feed = &p.fl
			cl.awaitFeed()
		}
		return
	}
	cl.in = append(cl.in, &p.fl)
	if cl.feed == nil {
		cl.feed = &p.fl
		cl.awaitFeed()
	}
	cl.recheckFeed()
}

// recheckFeed makes the flow furthest along the call's feed (the replies
// it feeds move to it, and fall behind it: they catch up as they can),
// and plans the moment another one overtakes it.
func (cl *call) recheckFeed() {
	s := cl.n.s
	if cl.done || cl.feed == nil {
		return
	}
	// Furthest along; of flows as far along, the fastest (so that one
	// about to overtake is not waited for at the same instant).
	best := cl.feed
	for _, f := range cl.in {
		fx, bx := f.xAt(s.now), best.xAt(s.now)
		if fx > bx+byteEps || fx >= bx-byteEps && f.rate > best.rate {
			best = f
		}
	}
	if best != cl.feed {
		old := cl.feed
		cl.feed = best
		for _, d := range old.downs {
			s.net.advance(d)
			d.up, d.capped = best, false
			best.downs = append(best.downs, d)
			s.net.touch(d)
		}
		old.downs = nil
		if cl.wait {
			old.waiter = nil
			cl.wait = false
			cl.awaitFeed()
		}
		s.net.update()
	}
	next := math.Inf(1)
	bx, br := best.xAt(s.now), best.rate
	for _, f := range cl.in {
		if f != best && !f.sent && f.rate > br {
			next = min(next, s.now+(bx-f.xAt(s.now))/(f.rate-br))
		}
	}
	if math.IsInf(next, 1) {
		s.q.cancel(&cl.cross.ev)
	} else {
		s.q.schedule(&cl.cross.ev, max(next, s.now))
	}
}

// park makes reply p wait for the call's bytes: whole (store and
// forward), or from its first piece on.
func (cl *call) park(p *reply) {
	if cl.done || cl.feedReady() {
		cl.n.ready(p)
		return
	}
	cl.parked = append(cl.parked, p)
	cl.awaitFeed()
}

// feedReady reports whether a piece of the chunk is in to forward.
func (cl *call) feedReady() bool {
	s := cl.n.s
	if s.cfg.wholeChunks() || cl.feed == nil {
		return false
	}
	return cl.feed.xAt(s.now) >= math.Min(s.piece, s.chunkLen(cl.chunk))-byteEps
}

// awaitFeed asks the feed to tell when its first piece is in, when
// replies wait for it and pieces are forwarded.
func (cl *call) awaitFeed() {
	s := cl.n.s
	if s.cfg.wholeChunks() || cl.feed == nil || cl.wait || len(cl.parked) == 0 {
		return
	}
	cl.wait = true
	s.net.waitFirstPiece(cl.feed, cl, math.Min(s.piece, s.chunkLen(cl.chunk)))
}

// firstPiece: the feed's first piece is in: the parked replies are ready.
func (cl *call) firstPiece(*flow) {
	cl.wait = false
	if cl.done {
		return
	}
	cl.readyParked()
}

func (cl *call) readyParked() {
	parked := cl.parked
	cl.parked = nil
	for _, p := range parked {
		cl.n.ready(p)
	}
}

// complete: the chunk is in at the call's node, verified (the reply to q
// delivered it): its waiters get it, and it is stored.
func (cl *call) complete(q *request) {
	n := cl.n
	s := n.s
	cl.done = true
	n.have[cl.chunk] = true
	n.calls[cl.chunk] = nil
	s.q.cancel(&cl.timer)
	s.q.cancel(&cl.cross.ev)
	for _, r := range cl.reqs {
		if r != q {
			r.forget()
		}
	}
	if cl.feed != nil {
		s.net.release(cl.feed)
	}
	cl.readyParked()
	if cl.own {
		n.chunkDone(cl.chunk)
	}
}

// fail: the call failed (no source delivered): its waiters get an error.
func (cl *call) fail() {
	n := cl.n
	s := n.s
	cl.done = true
	n.calls[cl.chunk] = nil
	s.q.cancel(&cl.timer)
	s.q.cancel(&cl.cross.ev)
	for _, r := range cl.reqs {
		r.forget()
	}
	if cl.feed != nil {
		s.net.release(cl.feed)
	}
	parked := cl.parked
	cl.parked = nil
	for _, p := range parked {
		p.status, p.from, p.size = stNotFound, nil, 0
		n.ready(p)
	}
	if cl.own {
		if a := n.sch.Failed(cl.chunk, schedule.FailNotFound); a == schedule.GiveUp {
			panic(fmt.Sprintf("sim: %s gave up chunk %d", n.name, cl.chunk))
		}
		n.pump()
	}
}

// startGet begins a worker's get: a Schedule over one source (its head),
// Window chunks in flight, at most 2 × Window past the reader.
func (n *node) startGet() {
	n.sch = schedule.New(n.s.nChunks, n.s.cfg.Window, 1, nil)
	n.sch.SetAhead(2 * n.s.cfg.Window)
	n.pump()
}

// pump issues what the schedule says (blobFetch.pump).
func (n *node) pump() {
	for _, r := range n.sch.Next() {
		if d := schedule.RetryDelay(r.Attempt); d > 0 {
			rt := &retry{n: n, chunk: r.Chunk}
			rt.ev.h = rt
			n.s.q.schedule(&rt.ev, n.s.now+d.Seconds())
			continue
		}
		n.fetch(r.Chunk)
	}
}

// fetch gets chunk i for the node's get (coalesce.Get, no asker): it
// waits on the fetch in flight, or starts one from the head.
func (n *node) fetch(i int) {
	if n.have[i] {
		n.chunkDone(i)
		return
	}
	cl := n.calls[i]
	if cl == nil {
		cl = n.newCall(i)
		cl.fetchFromParent()
	}
	cl.own = true
}

// chunkDone: the get has chunk i; the reader takes what is in order.
func (n *node) chunkDone(i int) {
	n.sch.Done(i)
	for n.cursor < n.s.nChunks && n.sch.IsDone(n.cursor) {
		n.cursor++
	}
	if n.cursor > 0 {
		n.sch.Deliver(n.cursor - 1)
	}
	if n.sch.Complete() {
		n.s.workerDone = append(n.s.workerDone, n.s.now)
		n.s.remaining--
		return
	}
	n.pump()
}
