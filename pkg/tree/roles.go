package tree

import (
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
)

// The tree's roles in a closed grid, as plain code. A child gets more than
// any member: its parent lists it under the site it claims (a PREHEAT of
// that site reaches it, its parent pushes it a blob's first chunks across
// sites, groups it with that site's children for the sibling exchange),
// serves it past the upload caps that apply to other peers, and takes its
// ANNOUNCEs, which decide where the parent fetches a blob from first and
// where a name is re-announced from. So a node accepts as children only
// peers whose certificate's role allows it where it stands (MayAdopt), and
// an ANNOUNCE moves routing only for records the child may answer for
// (MayRoute). Certificates carry no site: a site is the word of the node
// that claims it, checked against the parent's own site where the parent
// can (a head takes workers of its own site only); under the root a head
// claims any site, and a worker (a fallback, its head down) too, but the
// root groups it with the other workers that claim that site, never with
// the site's head (FallbackGroup): it does not stand in a head's place.
//
// An open daemon (no grid material) takes any peer, as before.

// ErrRefused wraps every refusal of a peer as a child: by this node (its
// HELLO), or of this node by its parent (REFUSED).
var ErrRefused = fmt.Errorf("refused as a child (%w)", blob.ErrForbidden)

// Members is what the tree needs from the grid's admission
// (pkg/member.Admission implements it). Its methods are safe for
// concurrent use.
type Members interface {
	// Open reports whether the grid is open (no grid material): then
	// every peer may be a child and route any record.
	Open() bool
	// Cert returns this node's own certificate, and whether it has one.
	Cert() (grid.Cert, bool)
	// PeerCert returns the certificate peer p was admitted with, and
	// whether p is admitted now.
	PeerCert(p peer.ID) (grid.Cert, bool)
}

// Position is where a node stands when it decides on a child.
type Position struct {
	Root bool      // it has no parent
	Role grid.Role // its own certificate's role (0: it has none)
	Site string    // its site
}

// MayAdopt decides whether a peer whose certificate has role role, and
// which claims site in its HELLO, may be a child of a node at pos; the
// error wraps ErrRefused and says why. The rules:
//
//   - a reader is no node's child (it looks names up and fetches through
//     its --parent as any other member does, without a tree session);
//   - the root (a node with no parent) takes heads, workers (a worker
//     whose head is down falls back to the root) and clients, of any site;
//   - a head takes workers and clients of its own site only;
//   - a node with a parent whose role is not head (a worker, a reader, a
//     client) takes no children, and a head's parent is the root.
func MayAdopt(pos Position, role grid.Role, site string) error {
	switch {
	case pos.Role == 0:
		return fmt.Errorf("%w: this node has no membership certificate", ErrRefused)
	case role == grid.RoleReader:
		return fmt.Errorf("%w: role reader (a reader is no node's child: it looks names up and fetches through its parent without a tree session)", ErrRefused)
	case role != grid.RoleHead && role != grid.RoleWorker && role != grid.RoleClient:
		return fmt.Errorf("%w: role %s", ErrRefused, role)
	case pos.Root:
		return nil
	case pos.Role != grid.RoleHead:
		return fmt.Errorf("%w: this node is a %s with a parent (only the root and heads take children)", ErrRefused, pos.Role)
	case role == grid.RoleHead:
		return fmt.Errorf("%w: role head under the head of site %q (a head's parent is the root)", ErrRefused, pos.Site)
	case site != pos.Site:
		return fmt.Errorf("%w: a %s of site %q under the head of site %q (a head takes children of its own site only)", ErrRefused, role, site, pos.Site)
	}
	return nil
}

// MayRoute decides whether a record r that child (the holder of the
// certificate) announced moves routing at its parent: the record's route
// (the child it came up through, where the parent fetches its blob from
// first and re-announces it from). It does if the child put the record
// (its origin), or if the child's certificate allows writing r's name:
// then the child answers for that name anyway (a head for its workers'
// names under its prefixes, a client for every name). Any other record,
// validly signed by another member, is still stored if it is newer, but
// with no route: a member cannot make itself the first source of a blob
// it did not put, or draw a name's traffic through itself.
func MayRoute(child grid.Cert, r blob.Record) error {
	if r.Origin == child.Peer.String() {
		return nil
	}
	if err := child.MayWrite(r.Name); err != nil {
		return fmt.Errorf("record of %q put by %s, announced by %s, which neither put it nor may write its name: %w", r.Name, r.Origin, child.Peer, err)
	}
	return nil
}

// position returns where this node stands now, and whether its grid is
// closed (false: everything is allowed).
func (t *Tree) position() (Position, bool) {
	m := t.cfg.Members
	if m == nil || m.Open() {
		return Position{}, false
	}
	pos := Position{Root: len(t.parents) == 0, Site: t.cfg.Site}
	if c, ok := m.Cert(); ok {
		pos.Role = c.Role
	}
	return pos, true
}

// checkChild applies MayAdopt to peer p claiming site, and returns p's
// role (0 and nil in an open grid).
func (t *Tree) checkChild(p peer.ID, site string) (grid.Role, error) {
	pos, closed := t.position()
	if !closed {
		return 0, nil
	}
	c, ok := t.cfg.Members.PeerCert(p)
	if !ok {
		return 0, fmt.Errorf("%w: %s is not an admitted member", ErrRefused, p)
	}
	return c.Role, MayAdopt(pos, c.Role, site)
}

// FallbackGroup is the group (transfer.Grouper) of the root's children
// that are workers, claiming site: apart from the head of that site, so
// that a worker under the root never stands in a head's place.
func FallbackGroup(site string) string { return site + " (fallback workers)" }

// groupOf returns the group of a child of role role claiming site.
func (t *Tree) groupOf(role grid.Role, site string) string {
	if role == grid.RoleWorker && len(t.parents) == 0 {
		return FallbackGroup(site)
	}
	return site
}

// errNoRoute wraps MayRoute's refusals.
var errNoRoute = errors.New("no route")

// mayRoute applies MayRoute to a record child p announced (nil in an open
// grid).
func (t *Tree) mayRoute(p peer.ID, r blob.Record) error {
	if _, closed := t.position(); !closed {
		return nil
	}
	c, ok := t.cfg.Members.PeerCert(p)
	if !ok {
		return fmt.Errorf("%w: %s is not an admitted member", errNoRoute, p)
	}
	if err := MayRoute(c, r); err != nil {
		return fmt.Errorf("%w: %w", errNoRoute, err)
	}
	return nil
}
