package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/gridstore"
	"github.com/omst-project/omst/pkg/peerhost"
)

// defaultCertTTL is how long a certificate lives unless --cert-ttl says
// otherwise (members renew theirs before it ends).
const defaultCertTTL = "7d"

func gridCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "grid",
		Short: "Make a grid only members get into: its key, join tokens, admissions, revocations",
		Long: "A grid's root holds the grid key (HOME/grid/grid.key, made by 'omst grid init'). Only nodes\n" +
			"with a certificate of that key are members: a node gets one by redeeming a join token\n" +
			"('omst grid token', used once) with the root, or offline ('omst grid admit'). These\n" +
			"commands work on the files in HOME/grid and need no running daemon; all but init\n" +
			"run on the root. 'omst grid validate|up|status|down FILE' work on a whole grid described\n" +
			"by a topology file (docs/topology.md), from the master's machine, over ssh.",
	}
	c.AddCommand(gridInitCmd(g), gridTokenCmd(g), gridAdmitCmd(g), gridRevokeCmd(g), gridMembersCmd(g), gridIDCmd(g), gridValidateCmd(g),
		gridUpCmd(g), gridStatusCmd(g), gridDownCmd(g))
	return c
}

// rootError explains ErrNoKey: the command runs on the root only.
func rootError(d gridstore.Dir, err error) error {
	if errors.Is(err, gridstore.ErrNoKey) {
		return fmt.Errorf("no grid key in %s: run this on the grid's root (omst grid init there)", d.Path())
	}
	return err
}

// ttlFlag reads the value of --name with grid.ParseTTL.
func ttlFlag(name, s string) (time.Duration, error) {
	d, err := grid.ParseTTL(s)
	if err != nil {
		return 0, usageError{fmt.Errorf("--%s: %w", name, err)}
	}
	return d, nil
}

// roleFlags reads --role and --prefix: a head or a worker writes under its
// prefixes (none: nowhere); a client writes anywhere and a reader nowhere,
// so prefixes are refused for them.
func roleFlags(w io.Writer, role string, prefixes []string) (grid.Role, error) {
	if role == "" {
		return 0, usageError{errors.New("--role: missing (client, head, worker or reader)")}
	}
	r, err := grid.ParseRole(role)
	if err != nil {
		return 0, usageError{fmt.Errorf("--role: %w", err)}
	}
	if len(prefixes) > 0 && (r == grid.RoleClient || r == grid.RoleReader) {
		return 0, usageError{fmt.Errorf("--prefix: a %s has none (a client writes any name, a reader none); prefixes are for a head or a worker", r)}
	}
	if len(prefixes) > grid.MaxPrefixes {
		return 0, usageError{fmt.Errorf("--prefix: %d of them, more than %d", len(prefixes), grid.MaxPrefixes)}
	}
	for _, p := range prefixes {
		if p == "" {
			return 0, usageError{errors.New("--prefix: empty")}
		}
		if err := blob.ValidatePrefix(p); err != nil {
			return 0, usageError{fmt.Errorf("--prefix: %w", err)}
		}
		if !strings.HasSuffix(p, "/") {
			fmt.Fprintf(w, "note: --prefix %q also covers names such as %q (end it with / to mean a directory)\n", p, p+"x/y")
		}
	}
	return r, nil
}

// describe says what a role and prefixes may do.
func describe(r grid.Role, prefixes []string) string {
	switch {
	case r == grid.RoleClient:
		return "client (writes any name)"
	case r == grid.RoleReader:
		return "reader (writes nothing)"
	case len(prefixes) == 0:
		return r.String() + " with no prefix (writes nothing)"
	}
	q := make([]string, len(prefixes))
	for i, p := range prefixes {
		q[i] = fmt.Sprintf("%q", p)
	}
	return r.String() + " writing under " + strings.Join(q, ", ")
}

func days(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

func gridInitCmd(g *globals) *cobra.Command {
	var certTTL string
	c := &cobra.Command{
		Use:   "init",
		Short: "Make this node the root of a new grid (its key and its own certificate); prints the grid ID",
		Long: "Make the grid key in HOME/grid (once: run again, it keeps the key and prints the same\n" +
			"grid ID) and give this node, the root, its own certificate. From then on only members get\n" +
			"in: hand out tokens with 'omst grid token' or certificates with 'omst grid admit'.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ttl, err := ttlFlag("cert-ttl", certTTL)
			if err != nil {
				return err
			}
			home := g.homeDir()
			self, err := homePeerID(home)
			if err != nil {
				return err
			}
			d := gridstore.Open(home)
			id, created, err := d.Init(self, time.Now(), ttl)
			if err != nil {
				return err
			}
			if !g.quiet {
				state := "created in"
				if !created {
					state = "already existed (its key is kept) in"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%s %s %s; root peer %s.\n"+
					"A daemon running on this home picks it up within a few seconds; from then on only members get in.\n",
					id, state, d.Path(), self)
			}
			fmt.Fprintln(cmd.OutOrStdout(), id)
			return nil
		},
	}
	c.Flags().StringVar(&certTTL, "cert-ttl", defaultCertTTL, "lifetime of the root's own certificate (e.g. 12h, 7d; 1s .. 30d)")
	return c
}

// homePeerID returns the peer ID of the identity in home, creating the
// home (0700) and the identity key if they do not exist yet.
func homePeerID(home string) (peer.ID, error) {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return "", fmt.Errorf("create home %s: %w", home, err)
	}
	k, err := peerhost.LoadOrCreateKey(filepath.Join(home, "identity.key"))
	if err != nil {
		return "", err
	}
	self, err := peer.IDFromPrivateKey(k)
	if err != nil {
		return "", fmt.Errorf("identity key: %w", err)
	}
	return self, nil
}

func gridIDCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "id",
		Short: "Print this home's peer ID (making its identity if there is none), daemon running or not: for 'omst grid admit' at the root",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := homePeerID(g.homeDir())
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), self)
			return nil
		},
	}
}

func gridTokenCmd(g *globals) *cobra.Command {
	var (
		role, ttl, certTTL string
		prefixes           []string
	)
	c := &cobra.Command{
		Use:   "token --role ROLE [--prefix P]... [--ttl 1h] [--cert-ttl 7d]",
		Short: "Make a join token (one node, once, before --ttl ends); prints it",
		Long: "Make a join token of this grid: the node started with 'omst daemon --join TOKEN' redeems it\n" +
			"with the root (once: a second node is refused) before --ttl ends, and gets a certificate of\n" +
			"--role and --prefix valid --cert-ttl, which it renews while it runs. Roles: client (writes\n" +
			"any name), head and worker (write under their --prefix only), reader (writes nothing).\n" +
			"Prints the token alone on the last line of standard output.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := roleFlags(cmd.ErrOrStderr(), role, prefixes)
			if err != nil {
				return err
			}
			life, err := ttlFlag("ttl", ttl)
			if err != nil {
				return err
			}
			clife, err := ttlFlag("cert-ttl", certTTL)
			if err != nil {
				return err
			}
			d := gridstore.Open(g.homeDir())
			now := time.Now()
			tok, err := d.NewToken(r, prefixes, life, clife, now)
			if err != nil {
				return rootError(d, err)
			}
			if !g.quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "join token for a %s; redeemable once until %s; certificates last %s.\n"+
					"Start the node with: omst daemon --join TOKEN\n",
					describe(r, prefixes), now.Add(life).UTC().Format(time.RFC3339), days(clife))
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&role, "role", "", "client, head, worker or reader (required)")
	f.StringArrayVar(&prefixes, "prefix", nil, "a name prefix a head or worker may write under, e.g. results/siteA/ (repeatable)")
	f.StringVar(&ttl, "ttl", "1h", "how long the token can be redeemed (e.g. 90s, 1h, 2d; 1s .. 30d)")
	f.StringVar(&certTTL, "cert-ttl", defaultCertTTL, "lifetime of the certificate it gives (1s .. 30d)")
	return c
}

// peerArg reads a peer ID argument.
func peerArg(s string) (peer.ID, error) {
	p, err := peer.Decode(s)
	if err != nil {
		return "", usageError{fmt.Errorf("peer ID %q: %w", s, err)}
	}
	return p, nil
}

func gridAdmitCmd(g *globals) *cobra.Command {
	var (
		role, certTTL string
		prefixes      []string
	)
	c := &cobra.Command{
		Use:   "admit PEER_ID --role ROLE [--prefix P]... [--cert-ttl 7d]",
		Short: "Admit a node offline: prints a certificate to start it with",
		Long: "Issue a certificate for the node whose peer ID is PEER_ID (its 'omst id' lines end in\n" +
			"/p2p/PEER_ID), without a token or a round trip to the root: start that node with\n" +
			"'omst daemon --join CERT'. Prints the certificate alone on the last line of standard output.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := peerArg(args[0])
			if err != nil {
				return err
			}
			r, err := roleFlags(cmd.ErrOrStderr(), role, prefixes)
			if err != nil {
				return err
			}
			life, err := ttlFlag("cert-ttl", certTTL)
			if err != nil {
				return err
			}
			d := gridstore.Open(g.homeDir())
			now := time.Now()
			text, err := d.Admit(p, r, prefixes, life, now)
			if err != nil {
				return rootError(d, err)
			}
			if !g.quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "admitted %s as a %s until %s.\nStart that node with: omst daemon --join %s\n",
					p, describe(r, prefixes), now.Add(life).UTC().Format(time.RFC3339), text)
			}
			fmt.Fprintln(cmd.OutOrStdout(), text)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&role, "role", "", "client, head, worker or reader (required)")
	f.StringArrayVar(&prefixes, "prefix", nil, "a name prefix a head or worker may write under, e.g. results/siteA/ (repeatable)")
	f.StringVar(&certTTL, "cert-ttl", defaultCertTTL, "lifetime of the certificate (1s .. 30d)")
	return c
}

func gridRevokeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke PEER_ID",
		Short: "Revoke every certificate of a member; it can no longer join or renew",
		Long: "Revoke every certificate the root issued to PEER_ID and sign a new revocation list\n" +
			"(HOME/grid/revocations): members refuse it from then on, and the root refuses its tokens\n" +
			"and renewals.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := peerArg(args[0])
			if err != nil {
				return err
			}
			d := gridstore.Open(g.homeDir())
			list, n, err := d.Revoke(p, time.Now())
			if err != nil {
				return rootError(d, err)
			}
			k, err := d.Key()
			if err != nil {
				return rootError(d, err)
			}
			l, err := grid.DecodeRevocations(list, k.Public())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %d %s of %s; revocation list %d (%d %s)\n",
				n, plural(n, "certificate"), p, l.Seq, len(l.Serials), plural(len(l.Serials), "serial"))
			if !g.quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "written to %s; a daemon running on this home picks it up within a few seconds\n",
					filepath.Join(d.Path(), "revocations"))
			}
			return nil
		},
	}
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// memberJSON is a member as 'omst grid members --json' prints it.
type memberJSON struct {
	Peer      string   `json:"peer"`
	Role      string   `json:"role"`
	Prefixes  []string `json:"prefixes"`
	Serial    uint64   `json:"serial"`
	NotBefore string   `json:"not_before"`
	NotAfter  string   `json:"not_after"`
	State     string   `json:"state"`
	How       string   `json:"how"`
}

// memberState is valid, expired or revoked.
func memberState(m gridstore.Member, now time.Time) string {
	switch {
	case m.Revoked:
		return "revoked"
	case now.After(m.NotAfter):
		return "expired"
	}
	return "valid"
}

func gridMembersCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "members",
		Short: "List the grid's members (the newest certificate of each) from the root's ledger",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d := gridstore.Open(g.homeDir())
			ms, err := d.Members()
			if err != nil {
				return rootError(d, err)
			}
			now := time.Now()
			if asJSON {
				out := make([]memberJSON, 0, len(ms))
				for _, m := range ms {
					ps := m.Prefixes
					if ps == nil {
						ps = []string{}
					}
					out = append(out, memberJSON{Peer: m.Peer.String(), Role: m.Role.String(), Prefixes: ps, Serial: m.Serial,
						NotBefore: m.NotBefore.UTC().Format(time.RFC3339), NotAfter: m.NotAfter.UTC().Format(time.RFC3339),
						State: memberState(m, now), How: m.How})
				}
				return printJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "PEER\tROLE\tPREFIXES\tSERIAL\tEXPIRES\tSTATE\tHOW")
			for _, m := range ms {
				ps := strings.Join(m.Prefixes, ",")
				if ps == "" {
					ps = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.Peer, m.Role, ps, m.Serial,
					m.NotAfter.UTC().Format(time.RFC3339), memberState(m, now), m.How)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
