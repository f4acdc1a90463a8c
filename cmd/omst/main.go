// Command omst is the omst CLI: it runs the daemon (omst daemon) and talks
// to a running daemon over its local socket for everything else. It parses
// flags and prints; the work happens in the daemon (pkg/node).
package main

import (
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/node"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1 // any other failure
	exitUsage       = 2 // bad flags, arguments or names
	exitNotFound    = 3 // no such name
	exitUnreachable = 4 // no daemon, or a peer could not be reached
)

// globals holds the flags every command shares.
type globals struct {
	home  string
	quiet bool
}

func (g *globals) socket() string {
	if s := os.Getenv("OMST_SOCKET"); s != "" && g.home == "" {
		return s
	}
	if g.home == "" && os.Getenv("OMST_HOME") == "" {
		if s := slurmSocket(os.Getenv, os.Hostname, os.Geteuid()); s != "" { // slurmsock.go
			return s
		}
	}
	return node.SocketPath(g.homeDir())
}

func (g *globals) homeDir() string {
	if g.home != "" {
		return g.home
	}
	return node.DefaultHome()
}

func (g *globals) dial() (*rpcbridge.Client, error) {
	return rpcbridge.Dial(g.socket())
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "omst",
		Short:         "omst: named blobs distributed through a tree of caches",
		Long:          "omst distributes large named blobs to grid and cluster workers through a topology-aware\noverlay of daemons: one per host, caches on head nodes, chunks verified end to end.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.home, "home", "", "daemon home directory (default $OMST_HOME, else ~/.omst)")
	root.PersistentFlags().BoolVarP(&g.quiet, "quiet", "q", false, "no progress output")
	root.AddCommand(
		withConfigFile(g, withDetach(g, daemonCmd(g))), waitCmd(g), putCmd(g), getCmd(g), preheatCmd(g), lsCmd(g), statCmd(g), rmCmd(g), duCmd(g), ttlCmd(g), idCmd(g), statusCmd(g), providersCmd(g), peersCmd(g), demoCmd(g), gridCmd(g),
		configCmd(g), versionCmd(), slurmCmd(g),
	)
	root.Version = readBuildInfo().String()
	root.SetVersionTemplate("omst {{.Version}}\n")
	return root
}

func main() {
	// A command ended by SIGINT or SIGTERM exits 130 or 143 (exitcodes.go).
	ctx, received, stop := signalContext()
	root := newRoot()
	usageErrors(root)
	err := root.ExecuteContext(ctx)
	stop()
	os.Exit(finish(os.Stderr, err, received()))
}

// usageError marks errors in flags or arguments.
type usageError struct{ error }

func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue), errors.Is(err, blob.ErrInvalidName):
		return exitUsage
	case errors.Is(err, blob.ErrUnavailable): // the name exists; its bytes are what is missing
		return exitError
	case errors.Is(err, blob.ErrNotFound):
		return exitNotFound
	case errors.Is(err, blob.ErrUnreachable), errors.Is(err, rpcbridge.ErrNoDaemon):
		return exitUnreachable
	}
	return exitError
}
