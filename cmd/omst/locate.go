package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/omst-project/omst/pkg/blob"
)

func providersCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "providers NAME|ID",
		Short: "List the nodes that hold a blob in full (found in the DHT), with their sites",
		Long: "Look the blob named NAME (or the blob with ID) up in the private DHT and list the nodes that\n" +
			"announced it, each with the site and place (gateway: the root or a head node) it told, this\n" +
			"daemon first if it holds the blob.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := blob.ValidateName(args[0]); err != nil {
				return err
			}
			cl, err := g.dial()
			if err != nil {
				return err
			}
			defer cl.Close()
			res, err := cl.Providers(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "blob %s: %d provider(s)\n", res.ID, len(res.Providers))
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			for _, p := range res.Providers {
				var notes []string
				if p.Self {
					notes = append(notes, "this node")
				}
				if p.Gateway {
					notes = append(notes, "gateway")
				}
				site := "site " + p.Site
				if !p.Known {
					site = "site unknown (did not answer)"
				} else if p.Site == "" {
					site = "no site"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Peer, site, strings.Join(notes, ", "))
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func peersCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "peers",
		Short: "List the peers this daemon is connected to, with their role (parent, child, sibling, dht, other)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cl, err := g.dial()
			if err != nil {
				return err
			}
			defer cl.Close()
			st, err := cl.Status(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), st.Peers)
			}
			if len(st.Peers) == 0 {
				// On standard error: standard output stays a list, empty.
				fmt.Fprintln(cmd.ErrOrStderr(), "omst: no peers connected (no --parent, child, sibling or DHT peer is connected to this daemon now)")
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			for _, p := range st.Peers {
				site := p.Site
				if site == "" {
					site = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\tsite %s\t%s\n", p.Role, p.ID, site, strings.Join(p.Addrs, " "))
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
