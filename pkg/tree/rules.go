package tree

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/namespace"
)

// Namespace rules (pkg/namespace: a prefix removed everywhere, TTLs)
// travel the tree as names do, but both ways: a node that takes a new
// rule (Publish, or RULE from a neighbour) applies it (Rules.ApplyRule)
// and sends it to every neighbour but the one it came from (its parent,
// its children), each of which does the same before it answers: a rule
// stops where it is not new, so it crosses each link once. A node that
// was away learns the rules it missed, and hands up the ones it made,
// when its parent session comes up (SYNC_RULES, before its re-announce,
// so that nothing withdrawn is announced again).
//
// A flat cluster has no tree: its nodes have no parent and no children.
// There a node with Config.Peers (the daemon: its DHT neighbours) sends a
// rule to those peers too, and takes RULE and SYNC_RULES from any peer (a
// rule's proof and the rights of its origin, CheckRule, decide whether it
// is taken, not who passed it on); it synchronises its rules with each
// peer once per connection (keepFlatRules), so a node that was down
// learns the rules it missed, and hands on its own, when it returns.

// Rules is the node's keeper of namespace rules (the daemon: its store,
// and its DHT's filter). Safe for concurrent use.
type Rules interface {
	// TakeRule keeps r if it is newer than the rule of its kind and scope
	// held, and reports whether it did; from then on the node answers no
	// name r withdraws.
	TakeRule(r namespace.Rule) (changed bool, err error)
	// Enforce drops what r, taken, withdraws (records, pins); the tree
	// runs it while it passes r on.
	Enforce(r namespace.Rule) error
	// Rules returns every rule held.
	Rules() []namespace.Rule
}

// Spread is how far a rule went: the nodes that took it (this one
// included, when it was new here) and the neighbours it could not be sent
// to now (down, or not answering; each takes it when it returns).
type Spread struct {
	Reached   int
	Unreached int
	// Failed names the neighbours not reached and why.
	Failed []string
}

func (s *Spread) add(o Spread) {
	s.Reached += o.Reached
	s.Unreached += o.Unreached
	s.Failed = append(s.Failed, o.Failed...)
}

// ErrNoRules is returned by Publish on a tree configured without Rules.
var ErrNoRules = errors.New("this node keeps no namespace rules")

// Publish applies r, made on this node (its proof already added), and
// sends it to every neighbour, waiting (within ctx) until each has passed
// it on through its own subtree: on return, every node reachable now has
// applied it. The error is r's own (invalid, refused here); neighbours
// that could not be reached are in the Spread.
func (t *Tree) Publish(ctx context.Context, r namespace.Rule) (Spread, error) {
	if t.cfg.Rules == nil {
		return Spread{}, ErrNoRules
	}
	if err := r.Validate(); err != nil {
		return Spread{}, err
	}
	changed, err := t.cfg.Rules.TakeRule(r)
	if err != nil {
		return Spread{}, err
	}
	// Sent even if not new here: a rule made again reaches the nodes
	// that missed it, and those that hold it answer at once.
	return t.enforceAndSpread(ctx, r, changed, ""), nil
}

// enforceAndSpread passes r on (spread) while it enforces it here, if it
// was new here (changed), and returns when both are done.
func (t *Tree) enforceAndSpread(ctx context.Context, r namespace.Rule, changed bool, from peer.ID) Spread {
	done := make(chan struct{})
	if changed {
		go func() {
			defer close(done)
			if err := t.cfg.Rules.Enforce(r); err != nil {
				t.log.Warn("namespace rule not enforced in full here", "scope", r.Scope, "kind", r.Kind, "err", err)
			}
		}()
	} else {
		close(done)
	}
	sp := t.spread(ctx, r, from)
	<-done
	if changed {
		sp.Reached++
	}
	return sp
}

// spread sends r to every neighbour but from, in parallel, and sums what
// they report.
func (t *Tree) spread(ctx context.Context, r namespace.Rule, from peer.ID) Spread {
	var targets []peer.ID
	var sp Spread
	if p := t.parentID(); p != "" && p != from {
		t.mu.Lock()
		up := t.connected
		t.mu.Unlock()
		if up {
			targets = append(targets, p)
		} else {
			sp.Unreached++
			sp.Failed = append(sp.Failed, t.Describe(p)+": not connected")
		}
	}
	t.mu.Lock()
	for id, c := range t.children {
		if id == from {
			continue
		}
		if c.connected {
			targets = append(targets, id)
		} else {
			sp.Unreached++
			sp.Failed = append(sp.Failed, "child "+id.String()+": not connected")
		}
	}
	t.mu.Unlock()
	for _, p := range t.flatPeers() {
		if p != from {
			targets = append(targets, p)
		}
	}
	// Each hop down takes part of what is left, so that a stuck node
	// deep down is reported, not waited for to the end.
	fctx, cancel := context.WithTimeout(ctx, t.hopTimeout(ctx))
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range targets {
		wg.Go(func() {
			got, err := t.sendRule(fctx, p, r)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				sp.Unreached++
				sp.Failed = append(sp.Failed, err.Error())
				t.log.Warn("namespace rule not passed on; the neighbour takes it when its session comes up again", "scope", r.Scope, "kind", r.Kind, "err", err)
				return
			}
			sp.add(got)
		})
	}
	wg.Wait()
	return sp
}

// hopTimeout is how long one hop of a rule's spread may take: three
// quarters of what ctx leaves, at most RequestTimeout.
func (t *Tree) hopTimeout(ctx context.Context) time.Duration {
	d := t.cfg.RequestTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)*3/4)
	}
	return max(d, 10*time.Millisecond)
}

// sendRule sends r to p and returns what its subtree reports.
func (t *Tree) sendRule(ctx context.Context, p peer.ID, r namespace.Rule) (Spread, error) {
	rep, err := t.namesCallTimeout(ctx, p, namesRequest{Type: msgRule, Rule: r}, t.hopTimeout(ctx))
	if err != nil {
		return Spread{}, err
	}
	if rep.Type != msgRuleAck {
		return Spread{}, fmt.Errorf("%s: %w", t.Describe(p), malformed("reply 0x%02x to RULE", rep.Type))
	}
	return Spread{Reached: int(rep.Reached), Unreached: int(rep.Unreached)}, nil
}

// takeRule checks r, from neighbour p, and applies it; it reports whether
// it was new here. Refusals are counted.
func (t *Tree) takeRule(p peer.ID, r namespace.Rule) (bool, error) {
	if t.cfg.Rules == nil {
		return false, ErrNoRules
	}
	if t.cfg.CheckRule != nil {
		if err := t.cfg.CheckRule(r); err != nil {
			t.rulesRefused.Add(1)
			t.log.Warn("refused a namespace rule", "peer", p, "scope", r.Scope, "kind", r.Kind, "origin", r.Origin, "err", err)
			return false, fmt.Errorf("%s at %s: %w", r.Kind, t.self, err)
		}
	}
	changed, err := t.cfg.Rules.TakeRule(r)
	if err != nil {
		return false, fmt.Errorf("%s %q at %s: %w", r.Kind, r.Scope, t.self, err)
	}
	if changed {
		t.log.Info("namespace rule taken", "scope", r.Scope, "kind", r.Kind, "ttl", r.TTL, "origin", r.Origin, "from", p)
	}
	return changed, nil
}

// serveRule answers a RULE from p, a parent or a connected child: a new
// rule is applied and passed on before the answer.
func (t *Tree) serveRule(ctx context.Context, p peer.ID, r namespace.Rule) []byte {
	if t.parentIndex(p) < 0 && !t.isChild(p) && !t.flat() {
		return errorFrame(fmt.Errorf("%s %q: %s is neither a parent nor a child of %s", r.Kind, r.Scope, p, t.self))
	}
	changed, err := t.takeRule(p, r)
	if err != nil {
		return errorFrame(err)
	}
	var sp Spread
	if changed {
		sp = t.enforceAndSpread(ctx, r, true, p)
	}
	return encodeRuleAck(sp)
}

// syncRules runs at the start of a parent session: this node sends the
// parent the rules it holds and takes the parent's, a page at a time. A
// rule new here is passed on to this node's children; the parent passes
// on those new to it.
func (t *Tree) syncRules(ctx context.Context) {
	t.syncRulesWith(ctx, t.parentID())
}

// syncRulesWith synchronises this node's rules with neighbour p (its
// parent, or a peer of a flat cluster) as syncRules does, and reports
// whether it is done with p (it went through, or p keeps no rules).
func (t *Tree) syncRulesWith(ctx context.Context, p peer.ID) bool {
	if t.cfg.Rules == nil {
		return false
	}
	mine := t.cfg.Rules.Rules()
	from := uint32(0)
	var fresh []namespace.Rule
	for page := 0; ; page++ {
		var batch []namespace.Rule
		size := 0
		for len(mine) > 0 && size+len(mine[0].Encode())+2 <= maxRulesBytes-16 {
			size += len(mine[0].Encode()) + 2
			batch = append(batch, mine[0])
			mine = mine[1:]
		}
		rep, err := t.namesCall(ctx, p, namesRequest{Type: msgSyncRules, From: from, Rules: batch})
		if errors.Is(err, errOldNames) {
			// Nothing to synchronise with it, now or at the next check.
			t.log.Info("a neighbour keeps no namespace rules (names 1.2.0 or before)", "err", err)
			return true
		}
		if err != nil {
			t.log.Warn("namespace rules not synchronised with a neighbour; its next session will", "err", err)
			return false
		}
		if rep.Type != msgRules {
			t.notePeerError(p, "sync rules", malformed("reply 0x%02x to SYNC_RULES", rep.Type))
			return false
		}
		for _, r := range rep.Rules {
			changed, err := t.takeRule(p, r)
			if err != nil {
				continue
			}
			if changed {
				fresh = append(fresh, r)
			}
		}
		if rep.Next == 0 && len(mine) == 0 {
			break
		}
		from = rep.Next
		if from == 0 {
			from = math.MaxUint32 // the parent's are all here: empty pages while this node sends the rest of its own
		}
		if page > namespace.MaxRules {
			break
		}
	}
	for _, r := range fresh {
		t.enforceAndSpread(ctx, r, true, p)
	}
	if len(fresh) > 0 {
		t.log.Info("namespace rules learned from a neighbour", "count", len(fresh), "from", t.Describe(p))
	}
	return true
}

// flat reports whether this node is one of a flat cluster: no parent, and
// Config.Peers set.
func (t *Tree) flat() bool { return t.cfg.Peers != nil && len(t.parents) == 0 }

// flatPeers returns Config.Peers on a node of a flat cluster, without
// this node, its children and duplicates; nil elsewhere.
func (t *Tree) flatPeers() []peer.ID {
	if !t.flat() {
		return nil
	}
	var out []peer.ID
	seen := map[peer.ID]bool{t.self: true}
	for _, p := range t.cfg.Peers() {
		if seen[p] {
			continue
		}
		seen[p] = true
		t.mu.Lock()
		_, child := t.children[p]
		t.mu.Unlock()
		if !child {
			out = append(out, p)
		}
	}
	return out
}

// keepFlatRules, on a node of a flat cluster, synchronises the rules
// with every peer of Config.Peers once while it is listed (again after it
// left the list and came back: a peer that restarted), checking every
// Keepalive, until Close.
func (t *Tree) keepFlatRules() {
	synced := map[peer.ID]bool{}
	tick := time.NewTicker(t.cfg.Keepalive)
	defer tick.Stop()
	for {
		now := map[peer.ID]bool{}
		for _, p := range t.flatPeers() {
			now[p] = true
			if synced[p] {
				continue
			}
			ctx, cancel := context.WithTimeout(t.ctx, t.cfg.RequestTimeout)
			synced[p] = t.syncRulesWith(ctx, p)
			cancel()
		}
		for p := range synced {
			if !now[p] {
				delete(synced, p)
			}
		}
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// serveSyncRules answers a child's SYNC_RULES: its rules are taken (those
// new here passed on in the background), and a page of this node's rules
// from index q.From is returned, with the index of the next page (0: the
// last).
func (t *Tree) serveSyncRules(p peer.ID, q namesRequest) []byte {
	if !t.isChild(p) && !t.flat() {
		return errorFrame(fmt.Errorf("sync rules: %s is not a child of %s", p, t.self))
	}
	if t.cfg.Rules == nil {
		return encodeRules(nil, 0)
	}
	for _, r := range q.Rules {
		if changed, err := t.takeRule(p, r); err == nil && changed {
			t.goTracked(func() {
				ctx, cancel := context.WithTimeout(t.ctx, t.cfg.RequestTimeout)
				defer cancel()
				t.enforceAndSpread(ctx, r, true, p)
			})
		}
	}
	all := t.cfg.Rules.Rules()
	i := int(q.From)
	var page []namespace.Rule
	size := 0
	for ; i < len(all); i++ {
		n := len(all[i].Encode()) + 2
		if size+n > maxRulesBytes-16 {
			break
		}
		size += n
		page = append(page, all[i])
	}
	next := uint32(0)
	if i < len(all) {
		next = uint32(i)
	}
	return encodeRules(page, next)
}

// ---- wire (docs/protocol.md, "Namespace rules") ----

// maxRulesBytes bounds a SYNC_RULES or RULES frame.
const maxRulesBytes = 4 << 20

// encodeRuleAck encodes a RULE_ACK: reached u32, unreached u32.
func encodeRuleAck(sp Spread) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(max(sp.Reached, 0)))
	return appendFrame(nil, msgRuleAck, binary.BigEndian.AppendUint32(b, uint32(max(sp.Unreached, 0))))
}

// encodeRules encodes a RULES reply: next u32, then rules (u16 length +
// namespace.Rule.Encode()) to the end.
func encodeRules(rules []namespace.Rule, next uint32) []byte {
	return appendFrame(nil, msgRules, appendRuleList(binary.BigEndian.AppendUint32(nil, next), rules))
}

func appendRuleList(b []byte, rules []namespace.Rule) []byte {
	for _, r := range rules {
		b = appendString16(b, string(r.Encode()))
	}
	return b
}

// decodeRuleList parses rules (u16 length + encoded rule) to the end of b.
func decodeRuleList(b []byte) ([]namespace.Rule, error) {
	var out []namespace.Rule
	for len(b) > 0 {
		rb, rest, err := takeString16(b, namespace.MaxEncodedLen)
		if err != nil {
			return nil, fmt.Errorf("rule list: %w", err)
		}
		r, err := namespace.Decode([]byte(rb))
		if err != nil {
			return nil, fmt.Errorf("rule list: %w", err)
		}
		out = append(out, r)
		b = rest
	}
	return out, nil
}
