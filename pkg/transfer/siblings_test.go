package transfer_test

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer"
)

// siteOf starts a root with a slow store (one chunk every delay), a head
// with sibling exchange, and n workers (with opts) under it.
func siteOf(t *testing.T, n int, delay time.Duration, opts ...nodeOpt) (root, head *testNode, ws []*testNode) {
	t.Helper()
	root = newNode(t, nil, "master", func(m *memStore) nodeStore { return &slowStore{memStore: m, delay: delay} })
	head = newNode(t, root, "siteA", nil, siblings)
	for range n {
		ws = append(ws, newNode(t, head, "siteA", nil, append([]nodeOpt{siblings}, opts...)...))
	}
	waitConnected(t, append([]*testNode{head}, ws...)...)
	return root, head, ws
}

// readAllAsync reads name at every worker but skip, in parallel.
func readAllAsync(t *testing.T, ws []*testNode, name string, skip int) [][]byte {
	var wg sync.WaitGroup
	got := make([][]byte, len(ws))
	for i, w := range ws {
		if i != skip {
			wg.Go(func() { got[i] = readAll(t, w, name) })
		}
	}
	wg.Wait()
	return got
}

// TestSiblingKilledMidBroadcast: a worker stops serving while its siblings
// fetch chunks from it (its transfer engine closes; its tree session stays
// up, so the head keeps sending children to it until they report it); they
// complete with exact bytes, in bounded time. (A killed process, whose
// tree session ends with it, is in the fault suite.)
func TestSiblingKilledMidBroadcast(t *testing.T) {
	root, _, ws := siteOf(t, 5, 10*time.Millisecond)
	data := randBlob(96*16<<10, 12) // 96 chunks of 16 KiB: about a second from the root
	put(t, root, "b/x", data, 16<<10)
	victim := 2
	go func() { // the victim fetches too, so that the head sends siblings to it
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if r, err := ws[victim].tree.Lookup(ctx, "b/x"); err == nil {
			ws[victim].eng.Fetch(ctx, r)
		}
	}()
	go func() {
		// Stop once siblings are fetching from it (it served one chunk
		// to one), else at 400 ms: a fixed time alone sometimes came
		// before the head had sent anyone to it, and proved nothing.
		time.Sleep(400 * time.Millisecond)
		for deadline := time.Now().Add(2 * time.Second); ws[victim].eng.Status().BytesOut["sibling"] == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		ws[victim].eng.Close()
	}()
	start := time.Now()
	var wg sync.WaitGroup
	got := make([][]byte, len(ws))
	for i, w := range ws {
		if i == victim {
			continue
		}
		wg.Go(func() { got[i] = readAll(t, w, "b/x") })
	}
	wg.Wait()
	took := time.Since(start)
	var failures, directs uint64
	for i, w := range ws {
		if i == victim {
			continue
		}
		if !bytes.Equal(got[i], data) {
			t.Fatalf("worker %d got wrong bytes", i)
		}
		failures += w.eng.Status().SiblingFailures
		directs += w.eng.Status().Directs
	}
	t.Logf("broadcast took %v with a sibling gone from 400ms on; %d sibling failures, %d GET_DIRECTs", took, failures, directs)
	if failures == 0 {
		t.Fatal("no request went to the dead sibling: the test proves nothing")
	}
	// Each failure is replaced by a plain GET_DIRECT to the relay, once
	// per redirect (Status.Directs), whatever the hedge budget.
	if directs != failures {
		t.Fatalf("%d GET_DIRECTs for %d sibling failures, want as many", directs, failures)
	}
	if took > 8*time.Second {
		t.Fatalf("broadcast took %v: a dead sibling stalled it", took)
	}
}

// corruptAll serves a damaged copy of every chunk it holds and never
// admits it (a sibling with a bad disk and a lying store).
type corruptAll struct{ *memStore }

func (c *corruptAll) ReadChunk(h blob.Hash) ([]byte, error) {
	b, err := c.memStore.ReadChunk(h)
	if err == nil {
		b = bytes.Clone(b)
		b[0] ^= 1
	}
	return b, err
}

func (c *corruptAll) RecheckChunk(blob.Hash) (bool, error) { return false, nil }

// TestCorruptSiblingDropped: a sibling that serves corrupt chunks gets no
// corrupt byte accepted; the head stops sending children to it; every
// worker completes.
func TestCorruptSiblingDropped(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", nil, siblings)
	bad := newNode(t, head, "siteA", func(m *memStore) nodeStore { return &corruptAll{m} }, siblings)
	bad.speaks120() // sends chunks whole: TestCorruptPiecesRefused has a liar in pieces
	var ws []*testNode
	for range 4 {
		ws = append(ws, newNode(t, head, "siteA", nil, siblings))
	}
	waitConnected(t, append([]*testNode{head, bad}, ws...)...)
	data := randBlob(64*16<<10, 13)
	put(t, root, "c/x", data, 16<<10)
	// The bad sibling fetches first, so it holds (and is asked for) chunks.
	readAll(t, bad, "c/x")
	got := readAllAsync(t, ws, "c/x", -1)
	var corrupt uint64
	for i := range ws {
		if !bytes.Equal(got[i], data) {
			t.Fatalf("worker %d got wrong bytes", i)
		}
		corrupt += ws[i].eng.Status().CorruptReceived
	}
	hs := head.eng.Status()
	t.Logf("workers received %d corrupt chunks from the bad sibling; head redirected %d requests", corrupt, hs.RedirectsSent)
	if corrupt == 0 {
		t.Fatal("the bad sibling was never asked: the test proves nothing")
	}
	// Dropped after MaxFailures failures; what was already in flight to it
	// fails once more per worker and window.
	if limit := uint64(2 + len(ws)*transfer.DefaultWindow); corrupt > limit {
		t.Fatalf("%d corrupt chunks received, want at most %d: the bad sibling was not dropped", corrupt, limit)
	}
}

// TestHeadKilledSiblingsAndFallback: the head dies mid-broadcast; workers
// with the root as fallback parent complete, from the root and from each
// other.
func TestHeadKilledSiblingsAndFallback(t *testing.T) {
	root := newNode(t, nil, "master", func(m *memStore) nodeStore { return &slowStore{memStore: m, delay: 5 * time.Millisecond} }, siblings)
	head := newNode(t, root, "siteA", nil, siblings)
	fallback := func(c *nodeCfg) {
		c.Fallbacks = []peer.AddrInfo{*root.info()}
		c.Keepalive = 200 * time.Millisecond
		c.Engine.SiblingExchange = true
	}
	var ws []*testNode
	for range 4 {
		ws = append(ws, newNode(t, head, "siteA", nil, fallback))
	}
	waitConnected(t, append([]*testNode{head}, ws...)...)
	data := randBlob(128*16<<10, 14)
	put(t, root, "h/x", data, 16<<10)
	go func() {
		time.Sleep(300 * time.Millisecond)
		head.stop()
	}()
	got := readAllAsync(t, ws, "h/x", -1)
	for i := range ws {
		if !bytes.Equal(got[i], data) {
			t.Fatalf("worker %d got wrong bytes", i)
		}
	}
}

// TestSlowSiblingHedged: a sibling that takes seconds per chunk does not
// stall the others: their requests to it are doubled by a request to the
// head (declined for the hedge grace after the head sent the chunk into
// the site, then served), and the first copy wins. The sibling timeout is
// set far above the bound, so only hedges can meet it.
func TestSlowSiblingHedged(t *testing.T) {
	took, _, _ := slowSiblingRun(t, false)
	// Each chunk waits at most HedgeGrace plus two hedge delays (4 s at
	// most each, with the constants; less with the rates measured); in
	// series, the slow reads alone would take 3 s a chunk.
	if limit := transfer.HedgeGrace + 10*time.Second; took > limit {
		t.Fatalf("a slow sibling stalled the others for %v (limit %v)", took, limit)
	}
}

// TestSlowSiblingMeasuredGrace: the same after a first blob read by every
// worker, and the timers follow the rates measured on both sides: the
// workers hedge at their measured rates instead of after 2 to 4 s, and
// the head declines hedges only for as long as a chunk takes to reach the
// asker at the pace its children take its replies (a hop of milliseconds
// on loopback) instead of 4 s, so that it serves hedges: with its constant
// grace it declined every one (the chunks went into the site less than
// 4 s before), and with the constants on both sides this took 8.1-8.4 s.
// The head speaks fetch 1.2.0: over 1.3.0 it times no chunk reply (pieces
// leave at their source's pace) and keeps the constant grace.
func TestSlowSiblingMeasuredGrace(t *testing.T) {
	took, hedges, declined := slowSiblingRun(t, true, func(head *testNode) { head.speaks120() })
	if limit := 6 * time.Second; took > limit {
		t.Fatalf("a slow sibling stalled the others for %v (limit %v)", took, limit)
	}
	if declined >= hedges {
		t.Fatalf("the head declined %d of %d hedges: its grace did not follow the pace it measured", declined, hedges)
	}
}

// slowSiblingRun has three workers read a blob whose every chunk the head
// sends them to a sibling for, a sibling that then takes 3 s a read, and
// returns how long they took, the hedges they made and those the head
// declined. With warm, every worker and the slow one read another blob
// first (each measures its peers, the head its children).
func slowSiblingRun(t *testing.T, warm bool, adjust ...func(head *testNode)) (took time.Duration, hedges, declined uint64) {
	t.Helper()
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", nil, siblings)
	for _, f := range adjust {
		f(head)
	}
	patient := func(c *nodeCfg) {
		c.Engine.SiblingExchange = true
		c.Engine.SiblingTimeout = time.Minute
	}
	var slow *slowStore
	sw := newNode(t, head, "siteA", func(m *memStore) nodeStore { slow = &slowStore{memStore: m}; return slow }, patient)
	var ws []*testNode
	for range 3 {
		ws = append(ws, newNode(t, head, "siteA", nil, patient))
	}
	waitConnected(t, append([]*testNode{head, sw}, ws...)...)
	if warm {
		put(t, root, "s/warm", randBlob(32*16<<10, 23), 16<<10)
		readAllAsync(t, append([]*testNode{sw}, ws...), "s/warm", -1)
	}
	data := randBlob(32*16<<10, 15)
	put(t, root, "s/x", data, 16<<10)
	readAll(t, sw, "s/x") // the slow worker holds every chunk: the head sends siblings to it
	slow.mu.Lock()
	slow.delay = 3 * time.Second
	slow.mu.Unlock()
	start := time.Now()
	got := readAllAsync(t, ws, "s/x", -1)
	took = time.Since(start)
	for i, w := range ws {
		if !bytes.Equal(got[i], data) {
			t.Fatalf("worker %d got wrong bytes", i)
		}
		hedges += w.eng.Status().Hedges
	}
	declined = head.eng.Status().HedgesDeclined
	t.Logf("three workers done in %v with a sibling taking 3s a chunk; %d hedged requests, %d declined by the head",
		took, hedges, declined)
	if hedges == 0 {
		t.Fatal("no request was hedged: the test proves nothing")
	}
	return took, hedges, declined
}

// stuckStore holds its chunks but, once stuck, answers no read until the
// test ends (a sibling whose disk hangs).
type stuckStore struct {
	*memStore
	stuck   atomic.Bool
	release chan struct{}
}

func (s *stuckStore) ReadChunk(h blob.Hash) ([]byte, error) {
	if s.stuck.Load() {
		<-s.release
	}
	return s.memStore.ReadChunk(h)
}

// TestSiblingTimeoutAsksRelay: a sibling that never answers is given up on
// after SiblingTimeout (half a second here, under the 2 s hedge delay, so
// no hedge comes first) and the chunk is asked of the head plainly: the
// workers finish in bounded time, well before the 10 s request timeout
// would have ended the requests to the sibling.
func TestSiblingTimeoutAsksRelay(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", nil, siblings)
	impatient := func(c *nodeCfg) {
		c.Engine.SiblingExchange = true
		c.Engine.SiblingTimeout = 500 * time.Millisecond
	}
	var st *stuckStore
	sw := newNode(t, head, "siteA", func(m *memStore) nodeStore {
		st = &stuckStore{memStore: m, release: make(chan struct{})}
		return st
	}, impatient)
	var ws []*testNode
	for range 2 {
		ws = append(ws, newNode(t, head, "siteA", nil, impatient))
	}
	t.Cleanup(func() { close(st.release) }) // before the nodes stop
	waitConnected(t, append([]*testNode{head, sw}, ws...)...)
	data := randBlob(32*16<<10, 16)
	put(t, root, "t/x", data, 16<<10)
	readAll(t, sw, "t/x") // the stuck worker holds every chunk: the head sends siblings to it
	st.stuck.Store(true)
	start := time.Now()
	got := readAllAsync(t, ws, "t/x", -1)
	took := time.Since(start)
	var failures, hedges uint64
	for i, w := range ws {
		if !bytes.Equal(got[i], data) {
			t.Fatalf("worker %d got wrong bytes", i)
		}
		failures += w.eng.Status().SiblingFailures
		hedges += w.eng.Status().Hedges
	}
	t.Logf("two workers done in %v with a sibling that never answers; %d sibling failures, %d hedges", took, failures, hedges)
	if failures == 0 {
		t.Fatal("no request went to the stuck sibling: the test proves nothing")
	}
	if took > 5*time.Second {
		t.Fatalf("a stuck sibling stalled the others for %v", took)
	}
}

// TestStuckSiblingMeasuredTimers: the redirect follower's timers follow
// the rates it measured. The workers first read a blob (measuring the
// head's and each other's replies: milliseconds per chunk on loopback);
// then a sibling that holds every chunk of another blob stops answering.
// They give up on it after five times the site's patience (at least 1 s;
// about a second on a quiet machine) and finish in bounded time. With the
// constants tuned at 200 Mbit/s they hedged after 2 s, the head declined
// hedges for 4 s after the chunk went into the site, and the give-up came
// after the sibling timeout: 4 s and more.
//
// The workers' sibling timeout is a minute, so that a give-up from the
// constants (at the sibling timeout) and one from the rates measured
// (well under it) cannot be confused: every give-up for lateness the
// workers log must come before a quarter of it (a run may have none: its
// hedges, at the measured pace, won every chunk). The time to finish is
// bounded by 6 s, or by 15 times the warm-up read if that is longer (the
// machine's pace in this run: 6-13 times under load, 5 quiet), plus six
// of the longest give-up. A fixed 6 s failed 9 runs of 19 with three
// nice'd CPU burners beside the test: the warm-up measured the loaded
// machine's chunk times, and the give-ups they gave (2-5.5 s) were right
// for them; and once with every give-up at the 1 s floor (32 of them, in
// 6.5 s, the machine at load 60).
func TestStuckSiblingMeasuredTimers(t *testing.T) {
	const siblingTimeout = time.Minute
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", nil, siblings)
	var st *stuckStore
	sw := newNode(t, head, "siteA", func(m *memStore) nodeStore {
		st = &stuckStore{memStore: m, release: make(chan struct{})}
		return st
	}, siblings)
	giveUps := &giveUpLog{}
	patient := func(c *nodeCfg) {
		c.Engine.SiblingExchange = true
		c.Engine.SiblingTimeout = siblingTimeout
		c.Logger = slog.New(giveUps)
	}
	var ws []*testNode
	for range 2 {
		ws = append(ws, newNode(t, head, "siteA", nil, patient))
	}
	t.Cleanup(func() { close(st.release) }) // before the nodes stop
	waitConnected(t, append([]*testNode{head, sw}, ws...)...)
	put(t, root, "m/warm", randBlob(32*16<<10, 21), 16<<10)
	warmStart := time.Now()
	readAllAsync(t, append([]*testNode{sw}, ws...), "m/warm", -1) // every node measures its peers
	warm := time.Since(warmStart)
	data := randBlob(32*16<<10, 22)
	put(t, root, "m/x", data, 16<<10)
	readAll(t, sw, "m/x") // the stuck worker holds every chunk: the head sends siblings to it
	giveUps.reset()       // the warm-up's give-ups, if any, are not the stuck sibling's
	st.stuck.Store(true)
	start := time.Now()
	got := readAllAsync(t, ws, "m/x", -1)
	took := time.Since(start)
	var failures, hedges uint64
	for i, w := range ws {
		if !bytes.Equal(got[i], data) {
			t.Fatalf("worker %d got wrong bytes", i)
		}
		failures += w.eng.Status().SiblingFailures
		hedges += w.eng.Status().Hedges
	}
	late := giveUps.after()
	t.Logf("two workers done in %v with a sibling that never answers (the warm-up in %v); %d sibling failures (%d for lateness, after %v), %d hedges",
		took, warm, failures, len(late), late, hedges)
	if failures+hedges == 0 {
		t.Fatal("no request went to the stuck sibling: the test proves nothing")
	}
	var longest time.Duration
	if len(late) > 0 {
		longest = slices.Max(late)
	}
	if longest >= siblingTimeout/4 {
		t.Fatalf("a give-up came after %v, near the sibling timeout %v: not from the rates measured", longest, siblingTimeout)
	}
	if limit := max(6*time.Second, 15*warm) + 6*longest; took > limit {
		t.Fatalf("a stuck sibling stalled the others for %v (limit %v: the warm-up took %v, the longest give-up %v)", took, limit, warm, longest)
	}
}

// giveUpLog is a slog.Handler that keeps, of the records a node logs, how
// long each sibling given up on for lateness was waited for (the "no
// chunk within" of the redirect follower's give-up); it prints nothing.
type giveUpLog struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (*giveUpLog) Enabled(context.Context, slog.Level) bool { return true }
func (g *giveUpLog) WithAttrs([]slog.Attr) slog.Handler     { return g }
func (g *giveUpLog) WithGroup(string) slog.Handler          { return g }

func (g *giveUpLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "err" {
			return true
		}
		s, ok := strings.CutPrefix(a.Value.String(), "no chunk within ")
		if !ok {
			return false
		}
		if d, err := time.ParseDuration(s); err == nil {
			g.mu.Lock()
			g.waits = append(g.waits, d)
			g.mu.Unlock()
		}
		return false
	})
	return nil
}

func (g *giveUpLog) reset() {
	g.mu.Lock()
	g.waits = nil
	g.mu.Unlock()
}

func (g *giveUpLog) after() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.waits)
}

// Transfers shows a fetch under way and where its bytes came from.
func TestTransfersView(t *testing.T) {
	root := newNode(t, nil, "master", func(m *memStore) nodeStore { return &slowStore{memStore: m, delay: 20 * time.Millisecond} })
	head := newNode(t, root, "siteA", nil, siblings)
	w := newNode(t, head, "siteA", nil, siblings)
	waitConnected(t, head, w)
	put(t, root, "v/x", randBlob(64*16<<10, 16), 16<<10)
	done := make(chan struct{})
	go func() { readAll(t, w, "v/x"); close(done) }()
	waitFor(t, "a transfer with bytes from the head", 5*time.Second, func() bool {
		for _, tr := range w.eng.Transfers() {
			if tr.Name == "v/x" && tr.Done > 0 && tr.Done < tr.Chunks && len(tr.From) == 1 &&
				tr.From[0].ID == head.h.ID() && tr.From[0].Kind == transfer.KindParent && tr.From[0].Bytes > 0 {
				return true
			}
		}
		return false
	})
	<-done
	waitFor(t, "the transfer to leave the view", 5*time.Second, func() bool { return len(w.eng.Transfers()) == 0 })
}

// TestDepartedWorkerNoRedirectTarget: a worker that held every chunk of a
// blob leaves the head (its tree session ends). While it is away, the head
// sends no sibling to it; once it is back with an empty store (restarted),
// it holds nothing of the blob, and the head must not send siblings to it
// for chunks it held before it left: the next worker to read gets the blob
// from the head, and the restarted worker serves no sibling.
func TestDepartedWorkerNoRedirectTarget(t *testing.T) {
	root := newNode(t, nil, "master", nil)
	head := newNode(t, root, "siteA", nil, siblings)
	w1 := newNode(t, head, "siteA", nil, siblings)
	w2 := newNode(t, head, "siteA", nil, siblings)
	w3 := newNode(t, head, "siteA", nil, siblings)
	waitConnected(t, head, w1, w2, w3)
	data := randBlob(16*16<<10, 17)
	put(t, root, "d/x", data, 16<<10)
	data2 := randBlob(16*16<<10, 18)
	put(t, root, "d/y", data2, 16<<10)
	// w1 reads both blobs first: the head serves it every chunk itself and
	// remembers it as their holder.
	readAll(t, w1, "d/x")
	readAll(t, w1, "d/y")
	id := w1.h.ID()
	w1.stop()
	waitFor(t, "the head to see w1 leave", 5*time.Second, func() bool { _, _, ok := head.tree.Group(id); return !ok })

	// Away: w2 is not sent to w1.
	if got := readAll(t, w2, "d/x"); !bytes.Equal(got, data) {
		t.Fatal("w2 got wrong bytes")
	}
	if st := w2.eng.Status(); st.RedirectsTaken != 0 || st.SiblingFailures != 0 {
		t.Fatalf("w2 was sent to a sibling %d times (%d failed) while the only other holder, w1, was away", st.RedirectsTaken, st.SiblingFailures)
	}

	// Back, with an empty store: w3 is not sent to w1 for d/y, which only
	// w1 held before it left.
	w1 = w1.restart(t, head, "siteA")
	waitConnected(t, w1)
	waitFor(t, "the head to see w1 back", 5*time.Second, func() bool { _, _, ok := head.tree.Group(id); return ok })
	if got := readAll(t, w3, "d/y"); !bytes.Equal(got, data2) {
		t.Fatal("w3 got wrong bytes")
	}
	st, st1 := w3.eng.Status(), w1.eng.Status()
	t.Logf("w3: %d redirects taken, %d sibling failures; restarted w1 sent %d bytes to siblings", st.RedirectsTaken, st.SiblingFailures, st1.BytesOut["sibling"])
	if st.RedirectsTaken != 0 || st1.BytesOut["sibling"] != 0 {
		t.Fatalf("w3 was sent %d times to w1, which left and came back empty (w1 sent it %d bytes it had to fetch first)", st.RedirectsTaken, st1.BytesOut["sibling"])
	}
}
