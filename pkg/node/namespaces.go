package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/namespace"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/tree"
)

// Job namespaces (docs/operations.md, "Job namespaces"): a prefix removed
// at every node, TTLs. A rule is made here (signed and, in a closed grid,
// proved: member.ProveRule), applied to the store (which drops and unpins
// what it withdraws) and the DHT's store, and passed through the tree
// (tree.Publish), whose nodes do the same.

var _ rpcbridge.NamespaceBackend = (*Node)(nil)

// publishTimeout bounds how long a rule's spread is waited for.
const publishTimeout = time.Minute

// expireEvery is how often TTLs that fell due are swept (names past their
// TTL are never answered meanwhile: the store checks on every read).
const expireEvery = 5 * time.Second

// nodeRules is the node as the tree's keeper of rules.
type nodeRules Node

func (r *nodeRules) TakeRule(rule namespace.Rule) (bool, error) {
	return (*Node)(r).store.KeepRule(rule)
}

func (r *nodeRules) Enforce(rule namespace.Rule) error {
	n := (*Node)(r)
	removed, err := n.store.DropWithdrawnBy(rule)
	dropped := 0
	if n.dht != nil {
		dropped = n.dht.DropWithdrawn()
	}
	n.log.Info("namespace rule applied", "kind", rule.Kind, "scope", rule.Scope, "ttl", rule.TTL,
		"origin", rule.Origin, "names_removed", len(removed), "dht_records_dropped", dropped)
	return err
}

func (r *nodeRules) Rules() []namespace.Rule { return (*Node)(r).store.Rules("") }

// withdrawn reports whether a rule held here withdraws rec (the DHT's
// filter).
func (n *Node) withdrawn(rec blob.Record) bool {
	_, ok := n.store.Withdrawn(rec)
	return ok
}

// expireLoop drops the names whose TTL passed, until ctx ends.
func (n *Node) expireLoop(ctx context.Context) {
	t := time.NewTicker(expireEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			gone, err := n.store.Expire()
			if err != nil {
				n.log.Warn("expire names", "err", err)
			}
			if len(gone) > 0 {
				if n.dht != nil {
					n.dht.DropWithdrawn()
				}
				n.log.Info("names expired", "count", len(gone))
			}
		}
	}
}

// mayMakeRules refuses a rule to a local caller other than the daemon's
// own user or root: a rule ends names of every origin and user.
func mayMakeRules(ctx context.Context, what string) error {
	c, ok := rpcbridge.CallerOf(ctx)
	if !ok || c.Trusted() {
		return nil
	}
	return fmt.Errorf("%w: %s: only the daemon's own user (or root) may; %s may remove only names it put here (omst rm NAME)", blob.ErrForbidden, what, c)
}

// publish proves rule as this node's and passes it through the tree.
func (n *Node) publish(ctx context.Context, rule namespace.Rule) (rpcbridge.RuleResult, error) {
	start := time.Now()
	rule.Origin = n.host.ID().String()
	rule, err := n.adm.ProveRule(n.host.Peerstore().PrivKey(n.host.ID()), rule)
	if err != nil {
		return rpcbridge.RuleResult{}, fmt.Errorf("%w: %w", blob.ErrForbidden, err)
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	sp, err := n.tree.Publish(ctx, rule)
	if err != nil {
		return rpcbridge.RuleResult{}, fmt.Errorf("%s %q: %w", rule.Kind, rule.Scope, err)
	}
	res := rpcbridge.RuleResult{Scope: rule.Scope, Kind: rule.Kind.String(), Everywhere: true,
		Reached: sp.Reached, Unreached: sp.Unreached, Failed: sp.Failed, Seconds: time.Since(start).Seconds()}
	if rule.Kind == namespace.KindTTL {
		res.TTLSeconds = rule.TTL.Seconds()
	}
	return res, nil
}

// RemovePrefix removes every name under scope ("job1/"): with everywhere,
// as a rule every node of the grid applies (those down now when they
// return); else on this node only, name by name, as `omst rm` does.
func (n *Node) RemovePrefix(ctx context.Context, scope string, everywhere bool) (rpcbridge.RuleResult, error) {
	if _, err := namespace.PrefixScope(scope); err != nil {
		return rpcbridge.RuleResult{}, err
	}
	recs, err := n.store.List(scope)
	if err != nil {
		return rpcbridge.RuleResult{}, err
	}
	if !everywhere {
		res := rpcbridge.RuleResult{Scope: scope, Kind: namespace.KindRemove.String(), Reached: 1}
		var refused error
		for _, r := range recs {
			err := n.Remove(ctx, r.Name)
			switch {
			case err == nil:
				res.Removed++
			case errors.Is(err, blob.ErrNotFound):
			case errors.Is(err, blob.ErrForbidden):
				refused = err
			default:
				return res, err
			}
		}
		if refused != nil {
			return res, fmt.Errorf("removed %d names under %q, not all: %w", res.Removed, scope, refused)
		}
		if len(recs) == 0 {
			return res, fmt.Errorf("remove %q: no names under it on this node: %w", scope, blob.ErrNotFound)
		}
		return res, nil
	}
	if err := mayMakeRules(ctx, fmt.Sprintf("remove %q everywhere", scope)); err != nil {
		return rpcbridge.RuleResult{}, err
	}
	// Dated after every name under it known here (a put's time may run
	// ahead of this clock by a few nanoseconds).
	at := time.Now().UnixNano()
	for _, r := range recs {
		at = max(at, r.Time)
	}
	res, err := n.publish(ctx, namespace.Rule{Kind: namespace.KindRemove, Scope: scope, Time: at})
	res.Removed = len(recs)
	return res, err
}

// SetTTL gives the names of scope ttl to live, grid-wide (see
// rpcbridge.NamespaceBackend).
func (n *Node) SetTTL(ctx context.Context, scope string, ttl time.Duration) (rpcbridge.RuleResult, error) {
	if err := namespace.ValidateScope(scope); err != nil {
		return rpcbridge.RuleResult{}, err
	}
	if err := mayMakeRules(ctx, fmt.Sprintf("set the TTL of %q", scope)); err != nil {
		return rpcbridge.RuleResult{}, err
	}
	at := time.Now().UnixNano()
	rule := namespace.Rule{Kind: namespace.KindTTL, Scope: scope, TTL: ttl}
	if !rule.Prefix() {
		// One name's TTL covers its current record (and no later put).
		rec, err := n.store.Record(scope)
		if err != nil {
			return rpcbridge.RuleResult{}, fmt.Errorf("ttl of %q: %w", scope, err)
		}
		at = max(at, rec.Time)
	}
	rule.Time = at
	return n.publish(ctx, rule) // which checks the rule once it has its origin
}

// DiskUsage reports what prefix holds on this node.
func (n *Node) DiskUsage(ctx context.Context, prefix string) (rpcbridge.DiskUsage, error) {
	du, err := n.store.DiskUsage(prefix)
	if err != nil {
		return rpcbridge.DiskUsage{}, err
	}
	out := rpcbridge.DiskUsage{Prefix: prefix, Names: du.Names, Blobs: du.Blobs, Bytes: du.Bytes, Held: du.Held,
		Pinned: du.Pinned, Unpinned: du.Unpinned, Complete: du.Complete, PinnedBlobs: du.PinnedBlobs, Rules: []rpcbridge.RuleInfo{}}
	for _, r := range du.Rules {
		out.Rules = append(out.Rules, rpcbridge.RuleInfo{Kind: r.Kind.String(), Scope: r.Scope, Time: r.Time, TTLSeconds: r.TTL.Seconds(), Origin: r.Origin})
	}
	return out, nil
}

var _ tree.Rules = (*nodeRules)(nil)
