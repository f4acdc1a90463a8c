package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/spf13/cobra"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/bytesize"
	"github.com/omst-project/omst/pkg/namespace"
	"github.com/omst-project/omst/pkg/node"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/transfer"
	"github.com/omst-project/omst/pkg/tree"
)

// putStream uploads in under name with a progress bar (total bytes, 0 if
// unknown). The upload ends, and the daemon stores it, only when in returns
// io.EOF (for a stablefile.Reader: the whole file, unchanged); an error
// from in, or ctx ending (SIGINT, SIGTERM), sends ABORT instead, at once
// even if a read of in blocks, and the daemon stores nothing.
func putStream(ctx context.Context, cl *rpcbridge.Client, name string, in io.Reader, total int64, quiet bool,
	opts rpcbridge.PutOptions) (rpcbridge.Info, error) {
	p := newProgress("put "+name, total, quiet)
	r := interruptible(ctx, p.reader(in))
	info, err := cl.Put(ctx, name, r, opts)
	r.Close()
	p.finish()
	return info, err
}

func daemonCmd(g *globals) *cobra.Command {
	var (
		listen      []string
		parents     []string
		bootstrap   []string
		noDHT       bool
		relayMode   string
		site        string
		cacheSize   string
		userQuota   string
		chunkSize   string
		window      int
		noReplicate bool
		noSiblings  bool
		upRate      string
		upStreams   int
		syncPuts    bool
		logLevel    string
		cpuProfile  string
		parentRetry time.Duration
		sockGroup   string
		join        string
		metrics     string
		bulkListen  string
		bulkConns   int
		trustedLAN  bool
		sendfile    bool
	)
	c := &cobra.Command{
		Use:   "daemon",
		Short: "Run the omst daemon for this host",
		Long: "Run the omst daemon: it keeps the local cache, joins the tree under --parent, serves\n" +
			"chunks to its children and peers, and answers the local API on HOME/omst.sock.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := node.Config{Home: g.homeDir(), Listen: listen, Site: site, Window: window, NoReplicate: noReplicate,
				NoSiblingExchange: noSiblings, Sync: syncPuts, Bootstrap: bootstrap, NoDHT: noDHT, Join: join}
			cfg.SocketGroup = sockGroup
			cfg.Metrics = metrics
			if len(parents) > 0 {
				cfg.Parent, cfg.Fallbacks = parents[0], parents[1:]
			}
			switch {
			case parentRetry < 0:
				return usageError{fmt.Errorf("--parent-retry %s: want a positive duration, or 0 for never", parentRetry)}
			case parentRetry == 0:
				cfg.RetryPreferred = -1
			default:
				cfg.RetryPreferred = parentRetry
			}
			switch relayMode {
			case "cut-through":
			case "store-forward":
				cfg.StoreForward = true
			default:
				return usageError{fmt.Errorf("--relay-mode %q: want cut-through or store-forward", relayMode)}
			}
			var err error
			if upRate != "" {
				if cfg.MaxUploadRate, err = bytesize.Parse(upRate); err != nil {
					return usageError{fmt.Errorf("--max-upload-rate: %w", err)}
				}
			}
			if upStreams < 0 {
				return usageError{fmt.Errorf("--max-upload-streams %d: want 0 (no limit) or more", upStreams)}
			}
			cfg.MaxUploadStreams = upStreams
			if bulkConns < 0 || bulkConns > transfer.MaxBulkConns {
				return usageError{fmt.Errorf("--bulk-conns %d: want 0 (libp2p streams only) to %d", bulkConns, transfer.MaxBulkConns)}
			}
			cfg.BulkConns, cfg.TrustedLAN, cfg.BulkNoSendfile = bulkConns, trustedLAN, !sendfile
			if bulkListen != "off" {
				if _, _, err := net.SplitHostPort(bulkListen); err != nil {
					return usageError{fmt.Errorf("--bulk-listen %q: want HOST:PORT (port 0: any) or off: %v", bulkListen, err)}
				}
				if !cmd.Flags().Changed("bulk-listen") {
					bulkListen = defaultBulkListen(listen)
				}
				cfg.BulkListen = bulkListen
			}
			if cacheSize != "" {
				if cfg.CacheSize, err = bytesize.Parse(cacheSize); err != nil {
					return usageError{fmt.Errorf("--cache-size: %w", err)}
				}
			}
			if userQuota != "" {
				if userQuota == "none" {
					cfg.UserQuota = -1
				} else if cfg.UserQuota, err = bytesize.Parse(userQuota); err != nil || cfg.UserQuota == 0 {
					return usageError{fmt.Errorf("--user-quota %q: want a size such as 10G, or none", userQuota)}
				}
			}
			if chunkSize != "" {
				cs, err := bytesize.Parse(chunkSize)
				if err != nil {
					return usageError{fmt.Errorf("--chunk-size: %w", err)}
				}
				cfg.ChunkSize = int(cs)
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)}
			}
			logFormat, _ := cmd.Flags().GetString("log-format")
			h, err := newLogHandler(logFormat, lvl)
			if err != nil {
				return err
			}
			cfg.Logger = slog.New(h)
			if cpuProfile != "" {
				stop, err := startCPUProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer stop()
			}
			n, err := node.Start(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			// For omst config show: the settings this daemon runs with.
			if stop, err := writeRunningSettings(cfg.Home, cmd); err != nil {
				cfg.Logger.Warn("settings for omst config show not written", "err", err)
			} else {
				defer stop()
			}
			for _, a := range routableFirst(n.Addrs()) {
				fmt.Fprintln(cmd.OutOrStdout(), a)
			}
			<-cmd.Context().Done()
			cfg.Logger.Info("shutting down")
			return n.Close()
		},
	}
	f := c.Flags()
	f.StringArrayVar(&listen, "listen", nil, "libp2p listen multiaddr, repeatable (default /ip4/0.0.0.0/tcp/4040 and /ip4/0.0.0.0/udp/4040/quic-v1)")
	f.StringArrayVar(&parents, "parent", nil, "parent node's multiaddr ending in /p2p/<ID> (a line of the parent's 'omst id' output); none for the root.\n"+
		"Repeat it to add fallback parents, used in order when the current one cannot be reached (e.g. the root, for a worker under a head node)")
	f.StringArrayVar(&bootstrap, "bootstrap", nil, "a peer to join omst's private DHT through (multiaddr ending in /p2p/<ID>), repeatable; the --parent peers always are")
	f.BoolVar(&noDHT, "no-dht", false, "do not join omst's private DHT (provider records of the blobs this node holds)")
	f.DurationVar(&parentRetry, "parent-retry", tree.DefaultRetryPreferred, "on a fallback parent, how often to check whether an earlier --parent is reachable again and go back to it (0: never)")
	f.StringVar(&relayMode, "relay-mode", "cut-through", "how this node forwards a blob to its children: cut-through (each verified chunk at once)\n"+
		"or store-forward (only after the whole blob is here; OmniStorage's original behaviour, for comparison)")
	f.StringVar(&site, "site", "", "site (cluster) this host belongs to")
	f.StringVar(&cacheSize, "cache-size", "", "cap on cached bytes, e.g. 20G (default 25% of the free disk)")
	f.StringVar(&userQuota, "user-quota", "", "with --socket-group: the bytes each user other than the daemon's may keep here through its puts,\n"+
		"e.g. 10G, or none (default a quarter of --cache-size)")
	f.StringVar(&chunkSize, "chunk-size", "", "default chunk size for puts (default 1M)")
	f.IntVar(&window, "window", 0, "chunks in flight per fetch (default 16; raise for long fat WAN links)")
	f.BoolVar(&syncPuts, "sync", false, "make every put durable before acknowledging it (syncfs of the cache's file system, then the index): survives a power loss, at the disk's write speed")
	f.BoolVar(&noReplicate, "no-replicate", false, "do not copy blobs put by children (results are then only on the worker that made them)")
	f.BoolVar(&noSiblings, "no-sibling-exchange", false, "as a relay, send every chunk to every child itself instead of sending children of one site to each other\n"+
		"(by default this node's port carries about one copy of each chunk per site; turn off for comparison)")
	f.StringVar(&bulkListen, "bulk-listen", "0.0.0.0:0", "TCP address of the bulk listener: members fetch chunks over plain TCP connections opened with one-time\n"+
		"tickets granted over libp2p (port 0: any; off: none, peers use libp2p streams; by default the IP of every --listen if they share one)")
	f.IntVar(&bulkConns, "bulk-conns", transfer.DefaultBulkConns, "bulk connections opened to a peer this node fetches from (0: libp2p streams only)")
	f.BoolVar(&trustedLAN, "trusted-lan", false, "the site's LAN is trusted: bulk bytes between two such nodes of the same --site go in plain text\n"+
		"(otherwise AES-256-GCM; across sites always encrypted)")
	f.BoolVar(&sendfile, "bulk-sendfile", true, "send stored chunks on plain bulk connections from their files with sendfile(2), not read into the daemon\n"+
		"(false: read and written, as on sealed connections)")
	f.StringVar(&upRate, "max-upload-rate", "", "cap on the bytes per second this node sends to peers, e.g. 50M (default: no cap)")
	f.IntVar(&upStreams, "max-upload-streams", 0, "cap on the fetch streams served at once to peers that are neither children nor parents\n"+
		"(on a worker: its siblings; refused ones get the chunk from their head instead; default 0: no cap)")
	f.StringVar(&join, "join", "", "join a grid on the first start: a join token (omst-join-..., from omst grid token), redeemed with the root\n"+
		"through --parent, or a certificate (omst-cert-..., from omst grid admit); ignored once this node is a member")
	f.StringVar(&metrics, "metrics", "", "serve Prometheus metrics at http://`ADDR`/metrics, e.g. 127.0.0.1:9464 (default: off);\n"+
		"unauthenticated: listen on loopback or a management network only (see docs/operations.md)")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.String("log-format", "text", "text (key=value lines) or json (one JSON object per line, for log collectors)")
	f.StringVar(&sockGroup, "socket-group", "", "open the local API socket to this group (name or GID): socket mode 0660 and HOME mode 0710 with that group,\n"+
		"so that its members (e.g. jobs running as other users) can connect; the daemon's user must be a member (default: socket 0600, this user only)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a Go CPU profile of the daemon to this file until it stops (for go tool pprof)")
	return c
}

// startCPUProfile profiles this process into path until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func putCmd(g *globals) *cobra.Command {
	var (
		chunkSize string
		preheat   bool
		sites     []string
		ttl       string // namespaces.go
		recursive bool   // getmany.go
		asJSON    bool
	)
	c := &cobra.Command{
		Use:   "put NAME [FILE|-] | put -r DIR PREFIX",
		Short: "Publish a file (or standard input) under NAME; prints the blob ID",
		Long: "Publish FILE, or standard input (FILE omitted or -), under NAME; prints the blob ID. NAME comes\n" +
			"first: `omst put data.bin` puts standard input under the name data.bin. With FILE omitted, an\n" +
			"empty standard input is refused (exit 2): it is nearly always a forgotten NAME, not an empty\n" +
			"blob; `omst put NAME - </dev/null` stores an empty blob. A FILE that cannot be read (missing,\n" +
			"a directory, no right to read it) exits 1, a bad NAME or flag 2.\n\n" +
			"With -r, every regular file under DIR is put as PREFIX/<its path relative to DIR>, in one\n" +
			"request; a summary line follows (--json: an object). A file that fails (a name refused, a file\n" +
			"that cannot be read or changed while it was read) is named on standard error and the others\n" +
			"are put; the exit status is then 1.",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if recursive || asJSON {
				if !recursive || len(args) != 2 {
					return usageError{fmt.Errorf("put -r takes DIR PREFIX (and --json needs -r)")}
				}
				if preheat || len(sites) > 0 || ttl != "" {
					return usageError{fmt.Errorf("put -r: --preheat, --site and --ttl are for one name (omst ttl sets a prefix's)")}
				}
			}
			name := args[0]
			if recursive {
				name = args[1]
				if _, err := namespace.PrefixScope(name); err != nil {
					return err
				}
			} else if err := blob.ValidateName(name); err != nil {
				return nameFirst(err, name) // putfile.go
			}
			var opts rpcbridge.PutOptions
			if chunkSize != "" {
				cs, err := bytesize.Parse(chunkSize)
				if err != nil {
					return usageError{fmt.Errorf("--chunk-size: %w", err)}
				}
				if err := blob.ValidateChunkSize(int(cs)); err != nil {
					return usageError{fmt.Errorf("--chunk-size: %w", err)}
				}
				opts.ChunkSize = int(cs)
			}
			cl, err := g.dial()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx := cmd.Context()
			if recursive {
				r, err := putRecursive(ctx, cl, args[0], args[1], opts)
				if err != nil {
					return err
				}
				return finishMany(g, cmd.OutOrStdout(), cmd.ErrOrStderr(), r, asJSON)
			}
			var info rpcbridge.Info
			if len(args) == 1 || args[1] == "-" {
				info, err = putStdin(ctx, g, cl, cmd.InOrStdin(), cmd.ErrOrStderr(), name, len(args) == 1, opts) // putfile.go
			} else {
				info, err = putFile(ctx, g, cl, name, args[1], opts) // putfile.go
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), info.ID)
			if err := putTTL(ctx, cl, cmd.ErrOrStderr(), name, ttl); err != nil { // namespaces.go
				return err
			}
			if preheat || len(sites) > 0 {
				return runPreheat(ctx, cl, cmd.ErrOrStderr(), name, sites)
			}
			return nil
		},
	}
	c.Flags().StringVar(&chunkSize, "chunk-size", "", "chunk size for this blob, e.g. 4M (default: the daemon's)")
	c.Flags().BoolVar(&preheat, "preheat", false, "then have this node's children (at the root: the head nodes) fetch the blob at once (see omst preheat)")
	c.Flags().StringArrayVar(&sites, "site", nil, "with --preheat, only the children of this site (repeatable; implies --preheat)")
	c.Flags().StringVar(&ttl, "ttl", "", "the name expires grid-wide this long after the put, e.g. 2h, 30m, 7d (see omst ttl)")
	c.Flags().BoolVarP(&recursive, "recursive", "r", false, "put every file under DIR as PREFIX/<path>: omst put -r DIR PREFIX")
	c.Flags().BoolVar(&asJSON, "json", false, "with -r, print the summary as a JSON object")
	return c
}

func preheatCmd(g *globals) *cobra.Command {
	var sites []string
	c := &cobra.Command{
		Use:   "preheat NAME",
		Short: "Have this node's children (at the root: the head nodes) fetch NAME now, before their workers ask",
		Long: "Ask every child of this daemon (only those of the given sites, with --site) to fetch the blob\n" +
			"named NAME into its cache now, and wait until each has it: a job's first gets then run at LAN\n" +
			"speed from the head nodes. Prints one line per child; exits 1 if any failed.",
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
			return runPreheat(cmd.Context(), cl, cmd.OutOrStdout(), args[0], sites)
		},
	}
	c.Flags().StringArrayVar(&sites, "site", nil, "only the children of this site (repeatable)")
	return c
}

// runPreheat preheats name at the children of the daemon behind cl and
// prints one line per child to w; it fails if any child failed.
func runPreheat(ctx context.Context, cl *rpcbridge.Client, w io.Writer, name string, sites []string) error {
	res, err := cl.Preheat(ctx, name, sites)
	if err != nil {
		return err
	}
	if len(res) == 0 {
		fmt.Fprintf(w, "preheat %q: no connected child to preheat\n", name)
		return nil
	}
	failed := 0
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range res {
		state := fmt.Sprintf("ok in %.2fs", r.Seconds)
		if !r.OK {
			failed++
			state = "FAILED: " + r.Error
		}
		fmt.Fprintf(tw, "%s\tsite %s\t%s\n", r.Child, r.Site, state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("preheat %q: %d of %d children failed", name, failed, len(res))
	}
	return nil
}

func getCmd(g *globals) *cobra.Command {
	var (
		out                      string
		recursive, force, asJSON bool // getmany.go
	)
	c := &cobra.Command{
		Use:   "get NAME|ID [-o FILE|-] | get -r PREFIX -o DIR",
		Short: "Fetch the blob named NAME (or the blob ID) into FILE (default: standard output)",
		Long: "Fetch the blob named NAME, or the blob whose ID (a CID, as put prints) is given, found through\n" +
			"the tree, else the DHT, into FILE or standard output. The daemon writes FILE atomically (the\n" +
			"file appears complete or not at all; an existing file's mode and group kept, a new one 0644) for\n" +
			"a regular or new file, through a symlink to its target, in place for a device or FIFO\n" +
			"(-o /dev/null). On a terminal a progress line shows the bytes, rate and ETA.\n\n" +
			"The exit status is 0 on success, 2 for bad usage or an invalid name, 3 for an unknown name or ID,\n" +
			"4 when the daemon or a peer cannot be reached, 130 or 143 when SIGINT or SIGTERM ended it, and\n" +
			"1 for anything else (a known blob whose bytes no source has, FILE that cannot be written).\n\n" +
			"With -r, every name under PREFIX (job1 and job1/ both mean the names under job1/) that the\n" +
			"daemon lists, in one request, into DIR/<name relative to PREFIX>: directories are made as\n" +
			"needed, each file written atomically; a file that exists in DIR is kept (that name fails)\n" +
			"unless --force, and nothing in DIR is deleted. A summary line follows (--json: an object);\n" +
			"each name that failed is named on standard error, the others are fetched, and the exit status\n" +
			"is then 3 if every failure was a missing name, else 1.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if recursive {
				if out == "" || out == "-" {
					return usageError{fmt.Errorf("get -r needs -o DIR")}
				}
				cl, err := g.dial()
				if err != nil {
					return err
				}
				defer cl.Close()
				r, err := getRecursive(cmd.Context(), g, cl, name, out, force)
				if err != nil {
					return withParentReason(cmd.Context(), g, err)
				}
				return finishMany(g, cmd.OutOrStdout(), cmd.ErrOrStderr(), r, asJSON)
			}
			if force || asJSON {
				return usageError{fmt.Errorf("--force and --json need -r")}
			}
			if err := blob.ValidateName(name); err != nil {
				return err
			}
			cl, err := g.dial()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx := cmd.Context()
			if out == "" || out == "-" {
				return withParentReason(ctx, g, getToWriter(ctx, g, cl, name, cmd.OutOrStdout())) // getfile.go
			}
			path, err := filepath.Abs(out)
			if err != nil {
				return err
			}
			return withParentReason(ctx, g, getToFile(ctx, g, cl, name, path)) // getfile.go: one way, terminal or not
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "write to FILE instead of standard output (with -r: into the directory DIR)")
	c.Flags().BoolVarP(&recursive, "recursive", "r", false, "every name under PREFIX into DIR/<name relative to PREFIX>: omst get -r PREFIX -o DIR")
	c.Flags().BoolVar(&force, "force", false, "with -r, replace files that exist in DIR")
	c.Flags().BoolVar(&asJSON, "json", false, "with -r, print the summary as a JSON object")
	return c
}

func lsCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls [PREFIX]",
		Short: "List the names this node knows, optionally under PREFIX",
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
			infos, err := cl.List(cmd.Context(), prefix)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), toInfosJSON(infos)) // infojson.go
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSIZE\tLOCAL\tID")
			for _, in := range infos {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", in.Name, in.Size, yesNo(in.Local), in.ID)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func statCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "stat NAME",
		Short: "Show the blob behind NAME",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := blob.ValidateName(args[0]); err != nil {
				return err
			}
			cl, err := g.dial()
			if err != nil {
				return err
			}
			defer cl.Close()
			in, err := cl.Stat(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), toInfoJSON(in)) // infojson.go
			}
			put := putTime(in.Time)
			if put == "" {
				put = "unknown"
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "name\t%s\nid\t%s\nsize\t%d (%s)\nchunks\t%d x %s\nput\t%s\norigin\t%s\nlocal\t%s\npinned\t%s\n",
				in.Name, in.ID, in.Size, bytesize.Format(int64(in.Size)), in.Chunks, bytesize.Format(int64(in.ChunkSize)),
				put, in.Origin, yesNo(in.Local), yesNo(in.Pinned))
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

func idCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "id",
		Short: "Print this node's multiaddrs with /p2p/ID, one per line, those other hosts can reach first (each usable as --parent)",
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
			for _, a := range routableFirst(st.Addrs) { // addrorder.go
				fmt.Fprintln(cmd.OutOrStdout(), a)
			}
			return nil
		},
	}
}

func statusCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "status",
		Short: "Show the daemon's parent, children, site, cache use and byte counters",
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
				return printJSON(cmd.OutOrStdout(), st)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			parent := "none (root)"
			if st.Parent != "" {
				parent = st.Parent + " (" + map[bool]string{true: "connected", false: "DISCONNECTED"}[st.ParentConnected] + ")"
				if !st.ParentConnected && st.ParentError != "" {
					parent = st.Parent + " (DISCONNECTED: " + st.ParentError + ")"
				}
			}
			fmt.Fprintf(tw, "peer\t%s\nversion\t%s\nsite\t%s\nparent\t%s\nchildren\t%d\n", st.PeerID, st.Version, st.Site, parent, len(st.Children))
			for _, ch := range st.Children {
				fmt.Fprintf(tw, "  %s\tsite %s, %s\n", ch.ID, ch.Site, map[bool]string{true: "connected", false: "disconnected"}[ch.Connected])
			}
			fmt.Fprintf(tw, "cache\t%s used of %s (%s pinned, %s orphaned), %d chunks\nnames\t%d\nbytes_served\t%d\nbytes_fetched\t%d\npeer_errors\t%d\n",
				bytesize.Format(st.CacheUsed), bytesize.Format(st.CacheCap), bytesize.Format(st.CachePinned), bytesize.Format(st.CacheOrphaned),
				st.Chunks, st.Names, st.BytesServed, st.BytesFetched, st.PeerErrors)
			fmt.Fprintf(tw, "bytes_in\tparent %d, child %d, sibling %d, other %d\nbytes_out\tparent %d, child %d, sibling %d, other %d\n",
				st.BytesIn["parent"], st.BytesIn["child"], st.BytesIn["sibling"], st.BytesIn["other"],
				st.BytesOut["parent"], st.BytesOut["child"], st.BytesOut["sibling"], st.BytesOut["other"])
			fmt.Fprintf(tw, "redirects\t%d sent, %d taken, %d of them failed, %d hedged, %d hedges declined\nuploads_refused\t%d\n",
				st.RedirectsSent, st.RedirectsTaken, st.SiblingFailures, st.Hedges, st.HedgesDeclined, st.UploadsRefused)
			fmt.Fprintf(tw, "push\t%d bytes sent, %d received\n", st.PushSent, st.PushReceived)
			fmt.Fprintf(tw, "served_from_store\t%d chunks with their kept outboard (not hashed again), %d of them by sendfile\nreplications\t%d children's small puts copied in batches\n",
				st.ServedUnhashed, st.ServedSendfile, st.ReplicationsBatched)
			printBulkStatus(tw, st.Bulk)
			fmt.Fprintf(tw, "dht\t%s, %d peers in the routing table, %d announcements, %d names put, %d records rejected\n",
				map[bool]string{true: "server", false: "client"}[st.DHTServer], st.DHTPeers, st.DHTProvided, st.DHTNames, st.DHTRecordsRejected)
			if m := st.Membership; m != nil {
				fmt.Fprintf(tw, "grid\t%s, role %s %s, certificate until %s, revocations #%d%s\n", m.Grid, m.Role, strings.Join(m.Prefixes, " "),
					m.CertExpires, m.RevocationSeq, map[bool]string{true: ", issuer (root)"}[m.Issuer])
				fmt.Fprintf(tw, "members\t%d admitted, %d certificates refused, %d connections without one, %d streams denied, %d records rejected, %d joins served\n",
					m.Admitted, m.Refused, m.Unshown, m.Denied, m.RecordsRejected, m.Joins)
			} else if st.Open {
				fmt.Fprintf(tw, "grid\tOPEN: admits anyone who can reach it\n")
			}
			fmt.Fprintf(tw, "chunks_damaged\t%d (found damaged in this node's store and dropped)\ncorrupt_received\t%d (from peers)\ncorrupt_reports\t%d (peers told us they received a corrupt chunk)\n",
				st.ChunksDamaged, st.CorruptReceived, st.CorruptReports)
			for _, p := range slices.Sorted(maps.Keys(st.ErrorsByPeer)) {
				fmt.Fprintf(tw, "  errors from\t%s: %d\n", p, st.ErrorsByPeer[p])
			}
			fmt.Fprintf(tw, "addrs\t%s\n", strings.Join(routableFirst(st.Addrs), "\n\t"))
			for _, tr := range st.Transfers {
				var from []string
				for _, f := range tr.From {
					from = append(from, fmt.Sprintf("%s %s (%s)", f.Kind, shortPeer(f.Peer), bytesize.Format(int64(f.Bytes))))
				}
				if len(from) == 0 {
					from = []string{"nothing from peers yet"}
				}
				fmt.Fprintf(tw, "transfer\t%s: %d of %d chunks; from %s\n", tr.Name, tr.Done, tr.Chunks, strings.Join(from, ", "))
			}
			for _, w := range st.Warnings {
				fmt.Fprintf(tw, "WARNING\t%s\n", w)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}

// shortPeer shortens a peer ID for a table: its last 8 characters.
func shortPeer(p string) string {
	if len(p) <= 12 {
		return p
	}
	return "…" + p[len(p)-8:]
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// defaultBulkListen is the bulk listener's address when --bulk-listen is
// not given: any port on the one IP address every TCP --listen address
// names (127.0.0.1 for a daemon that listens on loopback only), else any
// port on every IPv4 interface, as libp2p's default listens.
func defaultBulkListen(listen []string) string {
	ip := ""
	for _, l := range listen {
		a, err := ma.NewMultiaddr(l)
		if err != nil {
			return "0.0.0.0:0" // the daemon refuses it with a clearer error
		}
		if _, err := a.ValueForProtocol(ma.P_TCP); err != nil {
			continue // QUIC: UDP
		}
		nip, err := manet.ToIP(a)
		if err != nil || nip.IsUnspecified() || (ip != "" && ip != nip.String()) {
			return "0.0.0.0:0"
		}
		ip = nip.String()
	}
	if ip == "" {
		return "0.0.0.0:0"
	}
	return net.JoinHostPort(ip, "0")
}
