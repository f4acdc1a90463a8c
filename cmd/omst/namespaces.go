package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/bytesize"
	"github.com/omst-project/omst/pkg/namespace"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// Job namespaces (docs/operations.md, "Job namespaces"): omst rm -r
// PREFIX [--everywhere], omst ttl PREFIX DURATION, omst put --ttl, omst du.

func rmCmd(g *globals) *cobra.Command {
	var recursive, everywhere, asJSON bool
	c := &cobra.Command{
		Use:   "rm NAME | rm -r PREFIX [--everywhere]",
		Short: "Forget NAME on this node and unpin its blob here (other nodes keep theirs); -r: every name under PREFIX; --everywhere: at every node of the grid",
		Long: `Forget NAME on this node and unpin its blob here; other nodes keep theirs.

With -r, every name under PREFIX (job1 and job1/ both mean the names under
job1/, never job10/...): on this node only, or with --everywhere at every
node of the grid, the DHT included, as one signed removal that nodes down
now apply when they return. A name put under PREFIX after the removal
lives. Removing everywhere needs the right to write every name under
PREFIX (a client anywhere, a head or worker within its prefixes) and the
daemon's own user.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if everywhere && !recursive {
				return usageError{fmt.Errorf("--everywhere needs -r: omst rm -r %s --everywhere", args[0])}
			}
			if !recursive {
				if asJSON {
					return usageError{fmt.Errorf("--json needs -r")}
				}
				if err := blob.ValidateName(args[0]); err != nil {
					return err
				}
				cl, err := g.dial()
				if err != nil {
					return err
				}
				defer cl.Close()
				return cl.Remove(cmd.Context(), args[0])
			}
			scope, err := namespace.PrefixScope(args[0])
			if err != nil {
				return err
			}
			cl, err := g.dial()
			if err != nil {
				return err
			}
			defer cl.Close()
			res, err := cl.RemovePrefix(cmd.Context(), scope, everywhere)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			if !everywhere {
				fmt.Fprintf(w, "removed %d names under %s on this node\n", res.Removed, scope)
				return nil
			}
			fmt.Fprintf(w, "removed %s everywhere: %d names here; %d nodes took the removal in %.2f s\n", scope, res.Removed, res.Reached, res.Seconds)
			printUnreached(cmd.ErrOrStderr(), res)
			return nil
		},
	}
	c.Flags().BoolVarP(&recursive, "recursive", "r", false, "every name under PREFIX")
	c.Flags().BoolVar(&everywhere, "everywhere", false, "with -r: at every node of the grid (tree and DHT), not only this one")
	c.Flags().BoolVar(&asJSON, "json", false, "with -r: print the result as JSON")
	return c
}

func printUnreached(w io.Writer, res rpcbridge.RuleResult) {
	if res.Unreached == 0 {
		return
	}
	fmt.Fprintf(w, "%d nodes not reached now; each applies it when it reconnects:\n", res.Unreached)
	for _, f := range res.Failed {
		fmt.Fprintf(w, "  %s\n", f)
	}
}

// parseTTL reads a TTL: a Go duration (90s, 30m, 2h), a number of days
// (7d), or "none" / 0 (no TTL). Bad input names what was wrong.
func parseTTL(s string) (time.Duration, error) {
	switch s {
	case "none", "0", "off":
		return 0, nil
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n float64
		n, err = strconv.ParseFloat(days, 64)
		d = time.Duration(n * float64(24*time.Hour))
	} else {
		d, err = time.ParseDuration(s)
	}
	switch {
	case err != nil:
		return 0, fmt.Errorf("TTL %q: not a duration such as 90s, 30m, 2h or 7d", s)
	case d <= 0:
		return 0, fmt.Errorf("TTL %q: must be positive (none clears a prefix's TTL)", s)
	case d > namespace.MaxTTL:
		return 0, fmt.Errorf("TTL %q: more than %v", s, namespace.MaxTTL)
	}
	return d, nil
}

// putTTL gives name, just put, its TTL (put --ttl); "" does nothing.
func putTTL(ctx context.Context, cl *rpcbridge.Client, w io.Writer, name, ttl string) error {
	if ttl == "" {
		return nil
	}
	d, err := parseTTL(ttl)
	if err != nil {
		return usageError{fmt.Errorf("--ttl: %w", err)}
	}
	if d == 0 {
		return nil
	}
	res, err := cl.SetTTL(ctx, name, d)
	if err != nil {
		return fmt.Errorf("%q was put, but its TTL was not set: %w", name, err)
	}
	printUnreached(w, res)
	return nil
}

func ttlCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ttl PREFIX DURATION",
		Short: "Names under PREFIX expire grid-wide DURATION after their put (2h, 30m, 7d; none clears)",
		Long: `Give every name under PREFIX, put before or after, DURATION to live: at
every node of the grid, a name whose put is older than DURATION is no
longer answered and its blob is unpinned (evictable). Set once for a job:
omst ttl job1 2h. The newest TTL of a prefix replaces the older; none
clears it. A node judges a name's age by its own clock against the time
of the put: clocks ahead by d expire names d early (keep hosts on NTP).
One name's TTL: omst put --ttl.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			scope, err := namespace.PrefixScope(args[0])
			if err != nil {
				return err
			}
			d, err := parseTTL(args[1])
			if err != nil {
				return usageError{err}
			}
			cl, err := g.dial()
			if err != nil {
				return err
			}
			defer cl.Close()
			res, err := cl.SetTTL(cmd.Context(), scope, d)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), res)
			}
			if d == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: no TTL; %d nodes took it\n", scope, res.Reached)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: names expire %v after their put; %d nodes took it\n", scope, d, res.Reached)
			}
			printUnreached(cmd.ErrOrStderr(), res)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func duCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "du [PREFIX]",
		Short: "What PREFIX (default: everything) holds on this node: names, blobs, bytes, pinned and evictable",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			if err := blob.ValidatePrefix(prefix); err != nil {
				return err
			}
			cl, err := g.dial()
			if err != nil {
				return err
			}
			defer cl.Close()
			du, err := cl.DiskUsage(cmd.Context(), prefix)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), du)
			}
			what := prefix
			if what == "" {
				what = "(everything)"
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "prefix\t%s\nnames\t%d\nblobs\t%d (%d whole here, %d pinned)\nbytes\t%d (%s)\nheld here\t%d (%s)\npinned\t%d (%s)\nevictable\t%d (%s)\n",
				what, du.Names, du.Blobs, du.Complete, du.PinnedBlobs, du.Bytes, bytesize.Format(int64(du.Bytes)),
				du.Held, bytesize.Format(du.Held), du.Pinned, bytesize.Format(du.Pinned), du.Unpinned, bytesize.Format(du.Unpinned))
			for _, r := range du.Rules {
				switch r.Kind {
				case "remove":
					fmt.Fprintf(tw, "rule\t%s removed %s\n", r.Scope, time.Unix(0, r.Time).UTC().Format(time.RFC3339))
				default:
					fmt.Fprintf(tw, "rule\t%s ttl %v\n", r.Scope, time.Duration(r.TTLSeconds*float64(time.Second)))
				}
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
