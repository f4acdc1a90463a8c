package rpcbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/namespace"
)

// Job namespaces over the local API (protocol version 6; docs/rpcbridge.md
// §6.13): REMOVE_PREFIX, SET_TTL and DU, each answered by one
// NAMESPACE_JSON (or ERROR).
const (
	FrameRemovePrefix FrameType = 0x1D // str prefix, u32 flags (bit 0: everywhere)
	FrameSetTTL       FrameType = 0x1E // str scope (a prefix ending in '/', or a name), u64 TTL in nanoseconds (0 clears)
	FrameDu           FrameType = 0x1F // str prefix ("" everything)
	FrameNamespaceJ   FrameType = 0x36 // the reply of the three, a JSON object
)

// NamespaceVersion is the protocol version that brings the three.
const NamespaceVersion = 6

// RemoveEverywhere is REMOVE_PREFIX's flag: remove at every node of the
// grid, not only on this daemon.
const RemoveEverywhere = 1 << 0

func init() {
	frameNames[FrameRemovePrefix] = "REMOVE_PREFIX"
	frameNames[FrameSetTTL] = "SET_TTL"
	frameNames[FrameDu] = "DU"
	frameNames[FrameNamespaceJ] = "NAMESPACE_JSON"
}

// NamespaceBackend is what a Backend serves for job namespaces; a Backend
// without it answers the three requests with ERROR INTERNAL. Prefixes and
// scopes reach it checked (namespace.PrefixScope, ValidateScope,
// blob.ValidatePrefix).
type NamespaceBackend interface {
	// RemovePrefix removes every name under scope (a prefix ending in
	// '/'): on this node only, or with everywhere at every node of the
	// grid (and in the DHT), those down now when they return.
	RemovePrefix(ctx context.Context, scope string, everywhere bool) (RuleResult, error)
	// SetTTL gives the names of scope (a prefix ending in '/': every
	// name under it, now and later; a name: its current record) ttl to
	// live, grid-wide; 0 clears a prefix's TTL.
	SetTTL(ctx context.Context, scope string, ttl time.Duration) (RuleResult, error)
	// DiskUsage reports what prefix holds on this node.
	DiskUsage(ctx context.Context, prefix string) (DiskUsage, error)
}

// RuleResult is the answer to REMOVE_PREFIX and SET_TTL.
type RuleResult struct {
	Scope      string  `json:"scope"`
	Kind       string  `json:"kind"` // "remove" or "ttl"
	TTLSeconds float64 `json:"ttl_seconds,omitempty"`
	Everywhere bool    `json:"everywhere"`
	// Removed is the names this node dropped.
	Removed int `json:"removed"`
	// Reached counts the nodes that took the rule (this one included);
	// Unreached the neighbours it could not be passed to now, which take
	// it when they return; Failed says why, per neighbour.
	Reached   int      `json:"reached"`
	Unreached int      `json:"unreached"`
	Failed    []string `json:"failed,omitempty"`
	Seconds   float64  `json:"seconds"`
}

// DiskUsage is the answer to DU.
type DiskUsage struct {
	Prefix string `json:"prefix"`
	Names  int    `json:"names"`
	Blobs  int    `json:"blobs"`
	// Bytes is the blobs' sizes; Held the bytes of their chunks stored
	// here, Pinned the part that cannot be evicted, Unpinned the rest.
	Bytes       uint64     `json:"bytes"`
	Held        int64      `json:"held"`
	Pinned      int64      `json:"pinned"`
	Unpinned    int64      `json:"unpinned"`
	Complete    int        `json:"complete"`
	PinnedBlobs int        `json:"pinned_blobs"`
	Rules       []RuleInfo `json:"rules"`
}

// RuleInfo is a namespace rule held by the node.
type RuleInfo struct {
	Kind       string  `json:"kind"`
	Scope      string  `json:"scope"`
	Time       int64   `json:"time"` // Unix nanoseconds
	TTLSeconds float64 `json:"ttl_seconds,omitempty"`
	Origin     string  `json:"origin"`
}

// appendRemovePrefixReq appends a REMOVE_PREFIX body: str prefix, u32 flags.
func appendRemovePrefixReq(dst []byte, prefix string, flags uint32) []byte {
	return appendU32(appendStr(dst, prefix), flags)
}

func decodeRemovePrefixReq(b []byte) (prefix string, flags uint32, err error) {
	d := decoder{b: b}
	prefix = d.str("prefix")
	flags = d.u32("flags")
	if d.err == nil && flags&^RemoveEverywhere != 0 {
		d.fail("REMOVE_PREFIX with unknown flags 0x%x", flags)
	}
	return prefix, flags, d.end()
}

// appendSetTTLReq appends a SET_TTL body: str scope, u64 TTL (ns).
func appendSetTTLReq(dst []byte, scope string, ttl time.Duration) []byte {
	return appendU64(appendStr(dst, scope), uint64(ttl))
}

func decodeSetTTLReq(b []byte) (scope string, ttl time.Duration, err error) {
	d := decoder{b: b}
	scope = d.str("scope")
	v := d.u64("ttl")
	if d.err == nil && v > uint64(namespace.MaxTTL) {
		d.fail("SET_TTL of %d ns, more than %v", v, namespace.MaxTTL)
	}
	return scope, time.Duration(v), d.end()
}

// namespaceOp serves REMOVE_PREFIX, SET_TTL and DU.
func (sc *conn) namespaceOp(ctx context.Context, t FrameType, body []byte) bool {
	nb, ok := sc.s.b.(NamespaceBackend)
	var res any
	var err error
	switch t {
	case FrameRemovePrefix:
		prefix, flags, derr := decodeRemovePrefixReq(body)
		if derr != nil {
			return sc.badRequest(derr)
		}
		scope, serr := namespace.PrefixScope(prefix)
		switch {
		case serr != nil:
			err = serr
		case !ok:
			err = errNoNamespaces
		default:
			res, err = nb.RemovePrefix(ctx, scope, flags&RemoveEverywhere != 0)
		}
	case FrameSetTTL:
		scope, ttl, derr := decodeSetTTLReq(body)
		if derr != nil {
			return sc.badRequest(derr)
		}
		switch serr := namespace.ValidateScope(scope); {
		case serr != nil:
			err = serr
		case !ok:
			err = errNoNamespaces
		default:
			res, err = nb.SetTTL(ctx, scope, ttl)
		}
	default:
		prefix, derr := decodeNameReq(body)
		if derr != nil {
			return sc.badRequest(derr)
		}
		switch perr := blob.ValidatePrefix(prefix); {
		case perr != nil:
			err = perr
		case !ok:
			err = errNoNamespaces
		default:
			var du DiskUsage
			du, err = nb.DiskUsage(ctx, prefix)
			if du.Rules == nil {
				du.Rules = []RuleInfo{}
			}
			res = du
		}
	}
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	js, err := json.Marshal(res)
	if err != nil {
		return sc.sendError(errorFor(err))
	}
	sc.fc.frame(FrameNamespaceJ, js)
	return sc.fc.flush() == nil
}

var errNoNamespaces = errors.New("this daemon does not serve job namespaces")

// ErrNoNamespaces is returned by RemovePrefix, SetTTL and DiskUsage when
// the daemon speaks a protocol version without them (before 6).
var ErrNoNamespaces = errors.New("the daemon does not support job namespaces (protocol version 6)")

func (c *Client) namespaceCall(ctx context.Context, op string, t FrameType, body func([]byte) []byte, out any) error {
	c.mu.Lock()
	version := c.version
	c.mu.Unlock()
	if version != 0 && version < NamespaceVersion {
		return fmt.Errorf("%s: %w", op, ErrNoNamespaces)
	}
	return c.call(ctx, op, t, body, FrameNamespaceJ, func(b []byte) error {
		if err := json.Unmarshal(b, out); err != nil {
			return malformed("NAMESPACE_JSON: %v", err)
		}
		return nil
	})
}

// RemovePrefix removes every name under prefix ("job1" and "job1/" both
// mean the names under "job1/"): on the daemon's node only, or with
// everywhere at every node of the grid, as a signed rule the nodes down
// now apply when they return.
func (c *Client) RemovePrefix(ctx context.Context, prefix string, everywhere bool) (RuleResult, error) {
	scope, err := namespace.PrefixScope(prefix)
	if err != nil {
		return RuleResult{}, err
	}
	var flags uint32
	if everywhere {
		flags = RemoveEverywhere
	}
	var res RuleResult
	err = c.namespaceCall(ctx, fmt.Sprintf("remove %q", scope), FrameRemovePrefix,
		func(b []byte) []byte { return appendRemovePrefixReq(b, scope, flags) }, &res)
	return res, err
}

// SetTTL gives the names of scope ttl to live, grid-wide: a prefix ending
// in '/' (every name under it, put now or later; ttl 0 clears it), or one
// name (its current record).
func (c *Client) SetTTL(ctx context.Context, scope string, ttl time.Duration) (RuleResult, error) {
	if err := namespace.ValidateScope(scope); err != nil {
		return RuleResult{}, err
	}
	if ttl < 0 || ttl > namespace.MaxTTL {
		return RuleResult{}, fmt.Errorf("TTL %v: not within 0 and %v", ttl, namespace.MaxTTL)
	}
	var res RuleResult
	err := c.namespaceCall(ctx, fmt.Sprintf("ttl of %q", scope), FrameSetTTL,
		func(b []byte) []byte { return appendSetTTLReq(b, scope, ttl) }, &res)
	return res, err
}

// DiskUsage reports what prefix ("" everything) holds on the daemon's
// node.
func (c *Client) DiskUsage(ctx context.Context, prefix string) (DiskUsage, error) {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return DiskUsage{}, err
	}
	var res DiskUsage
	err := c.namespaceCall(ctx, fmt.Sprintf("du %q", prefix), FrameDu,
		func(b []byte) []byte { return appendNameReq(b, prefix) }, &res)
	return res, err
}
