package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/gridstore"
	"github.com/omst-project/omst/pkg/member"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/tree"
)

// gridPoll is how often the daemon looks at HOME/grid for material the
// CLI changed (omst grid init on a running root, a revocation list written
// by omst grid revoke) and whether its certificate is due for renewal.
const gridPoll = 2 * time.Second

// openWarning is logged, and shown by status, when the daemon has no grid
// material.
const openWarning = "this daemon is OPEN: any host that can reach it may join the tree, read every blob and publish names " +
	"(run `omst grid init` on the root, start the others with --join, see docs/security.md)"

// newAdmission reads the grid material in HOME/grid (first keeping the
// certificate of a `--join omst-cert-...`) and returns the Admission that
// decides who this node serves; it forwards join requests up through up
// (the tree's parents, the current one first).
func (n *Node) newAdmission(self peer.ID, up *tree.Parents) (*member.Admission, error) {
	n.gdir = gridstore.Open(n.cfg.Home)
	join := strings.TrimSpace(n.cfg.Join)
	switch {
	case join == "", strings.HasPrefix(join, grid.TokenPrefix):
	case strings.HasPrefix(join, grid.CertTextPrefix):
		if err := n.installCert(self, join); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("--join: neither a join token (%s...) nor a certificate (%s...)", grid.TokenPrefix, grid.CertTextPrefix)
	}
	m, err := n.material()
	if err != nil {
		return nil, err
	}
	cfg := member.Config{
		Logger:        n.log,
		Up:            up.IDs,
		OnRevocations: n.keepRevocations,
		Joining:       strings.HasPrefix(join, grid.TokenPrefix),
	}
	if _, err := n.gdir.Key(); err == nil {
		cfg.Issuer = n.gdir
	}
	return member.New(cfg, m)
}

// installCert keeps the certificate of a `--join omst-cert-...` unless
// the one kept in HOME/grid is the same or newer, a higher serial (a
// renewal of it: the flag may stay in a service's command line). A later
// `omst grid admit` has a higher serial than every renewal before it, so
// its certificate replaces the kept one even if it ends sooner (a lesser
// role, a shorter life): the root renews only a peer's newest.
func (n *Node) installCert(self peer.ID, text string) error {
	pub, cert, c, err := grid.ParseCertText(text)
	if err != nil {
		return fmt.Errorf("--join: %w", err)
	}
	if c.Peer != self {
		return fmt.Errorf("--join: the certificate is for %s, this node is %s", c.Peer, self)
	}
	if cur, err := n.gdir.Material(); err == nil && cur.Cert != nil && cur.Pub.Equal(pub) {
		if old, err := grid.DecodeCert(cur.Cert, pub); err == nil && old.Peer == self && old.Serial >= c.Serial {
			n.log.Info("--join: this node keeps its newer certificate", "serial", old.Serial)
			return nil
		}
	}
	if err := n.gdir.SaveMember(pub, cert); err != nil {
		return fmt.Errorf("--join: %w", err)
	}
	return nil
}

// material reads HOME/grid (a zero Material: none, open).
func (n *Node) material() (member.Material, error) {
	m, err := n.gdir.Material()
	if errors.Is(err, gridstore.ErrNoGrid) {
		return member.Material{}, nil
	}
	if err != nil {
		return member.Material{}, fmt.Errorf("grid material: %w", err)
	}
	return member.Material{GridKey: m.Pub, Cert: m.Cert, Revocations: m.Revocations}, nil
}

func (n *Node) keepRevocations(b []byte) {
	if err := n.gdir.SaveRevocations(b); err != nil {
		n.log.Warn("keep the revocation list", "err", err)
	}
}

// joinGrid redeems a `--join omst-join-...` token through the parents (in
// order) unless this node already holds a certificate, keeps what it gets
// and closes the node to outsiders.
func (n *Node) joinGrid(ctx context.Context, parents []peer.AddrInfo) error {
	tok := strings.TrimSpace(n.cfg.Join)
	if !strings.HasPrefix(tok, grid.TokenPrefix) {
		return nil
	}
	if c, ok := n.adm.Cert(); ok {
		if err := n.adm.CheckOwn(time.Now()); err == nil {
			n.log.Info("already a member of the grid: --join ignored", "grid", n.adm.Stats().Grid)
			return nil
		} else {
			n.log.Warn("this node's certificate no longer holds: joining again with the token", "serial", c.Serial, "err", err)
		}
	}
	if len(parents) == 0 {
		return errors.New("--join TOKEN needs --parent: the token is redeemed with the grid's root, through the tree")
	}
	var errs []error
	for _, p := range parents {
		jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		m, err := n.adm.Join(jctx, p, tok)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := n.gdir.SaveMember(m.GridKey, m.Cert); err != nil {
			return fmt.Errorf("--join: keep the certificate: %w", err)
		}
		if m.Revocations != nil {
			n.keepRevocations(m.Revocations)
		}
		if err := n.adm.SetMaterial(m); err != nil {
			return fmt.Errorf("--join: %w", err)
		}
		c, _ := n.adm.Cert()
		n.log.Info("joined the grid", "grid", grid.IDOf(m.GridKey), "role", c.Role, "prefixes", c.Prefixes,
			"expires", time.Unix(c.NotAfter, 0).UTC().Format(time.RFC3339))
		return nil
	}
	return fmt.Errorf("--join: %w", errors.Join(errs...))
}

// gridLoop picks up grid material the CLI changed and renews this node's
// certificate when due.
func (n *Node) gridLoop(ctx context.Context) {
	t := time.NewTicker(gridPoll)
	defer t.Stop()
	var lastRenew time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.reloadGrid()
		c, ok := n.adm.Cert()
		if !ok || !member.RenewDue(c, time.Now()) || time.Since(lastRenew) < time.Minute {
			continue
		}
		lastRenew = time.Now()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cert, err := n.adm.Renew(rctx)
		cancel()
		if err != nil {
			n.log.Warn("renew the membership certificate (retried in a minute)", "err", err,
				"expires", time.Unix(c.NotAfter, 0).UTC().Format(time.RFC3339))
			continue
		}
		if err := n.gdir.SaveMember(n.adm.GridKey(), cert); err != nil {
			n.log.Warn("keep the renewed certificate", "err", err)
		}
		nc, _ := n.adm.Cert()
		n.log.Info("membership certificate renewed", "expires", time.Unix(nc.NotAfter, 0).UTC().Format(time.RFC3339))
	}
}

// reloadGrid installs material found in HOME/grid that differs from what
// the node runs with.
func (n *Node) reloadGrid() {
	m, err := n.material()
	if err != nil {
		n.log.Warn("grid material", "err", err)
		return
	}
	if m.GridKey == nil {
		return
	}
	wasOpen := n.adm.Open()
	if _, err := n.gdir.Key(); err == nil {
		n.adm.SetIssuer(n.gdir)
	}
	if !wasOpen && !n.certChanged(m.Cert) && m.Revocations == nil {
		return
	}
	if err := n.adm.SetMaterial(m); err != nil {
		n.log.Warn("grid material", "err", err)
		return
	}
	if wasOpen {
		n.log.Info("closed to outsiders: grid material found", "grid", n.adm.Stats().Grid)
	}
}

func (n *Node) certChanged(b []byte) bool {
	if b == nil {
		return false
	}
	_, has := n.adm.Cert()
	return !has || !bytes.Equal(b, n.adm.CertBytes())
}

// seal adds this node's proof to a record it puts (see member.Prove).
func (n *Node) seal(key crypto.PrivKey) func(r blob.Record) (blob.Record, error) {
	return func(r blob.Record) (blob.Record, error) { return n.adm.Prove(key, r) }
}

// membershipStatus fills status's membership fields (and the warning of
// an open daemon).
func (n *Node) membershipStatus(st *rpcbridge.Status) {
	ms := n.adm.Stats()
	st.Open = ms.Open
	if ms.Open {
		if n.cfg.Host == nil { // an in-process grid (omst demo) is closed to the network anyway
			st.Warnings = append(st.Warnings, openWarning)
		}
		return
	}
	m := &rpcbridge.Membership{Grid: ms.Grid, Role: ms.Role, Prefixes: ms.Prefixes, RevocationSeq: ms.RevSeq,
		Admitted: ms.Admitted, Refused: ms.Refused, Unshown: ms.Unshown, Denied: ms.Denied,
		RecordsRejected: ms.RecordsRejected, Joins: ms.Joins, LastRefusal: ms.LastRefusal, Issuer: ms.Issuer}
	if !ms.CertExpires.IsZero() {
		m.CertExpires = ms.CertExpires.UTC().Format(time.RFC3339)
	} else {
		st.Warnings = append(st.Warnings, "no membership certificate: this node is refused by every member (start it with --join TOKEN)")
	}
	st.Membership = m
}
