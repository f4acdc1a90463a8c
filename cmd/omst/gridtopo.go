package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/omst-project/omst/pkg/bytesize"
	"github.com/omst-project/omst/pkg/topology"
)

// gridValidateCmd checks a topology file (docs/topology.md) and prints the
// tree it describes.
func gridValidateCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a grid topology file and print the resolved tree: every host, its role, parent, ssh and settings",
		Long: "Read a topology file (TOML: [defaults], [root], one [[site]] per site with its head and workers;\n" +
			"see docs/topology.md) and print every host as the file resolves it: role, site, parent and\n" +
			"fallback, how ssh reaches it (through which jump hosts), where peers dial it, and its daemon's\n" +
			"settings. A bad file exits with code 2 and one 'FILE:LINE: key: what is wrong' line per error.\n" +
			"Runs locally: it contacts no host.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			top, err := topology.ParseFile(args[0])
			if err != nil {
				return topoError(err)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), topoJSON(top))
			}
			return printTopology(cmd.OutOrStdout(), args[0], top)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the resolved topology as JSON")
	return c
}

// topoError makes ParseFile's error a usage error (exit code 2). With
// several errors, each is on its own line, every line after the first
// starting with "omst: " as the first does when main prints it.
func topoError(err error) error {
	var l topology.ErrorList
	if errors.As(err, &l) {
		return usageError{errors.New(strings.ReplaceAll(l.Error(), "\n", "\nomst: "))}
	}
	return usageError{err}
}

// topoHostJSON is a host with what the CLI derives from it.
type topoHostJSON struct {
	*topology.Host
	Dial      string `json:"dial"`               // multiaddr peers dial, without /p2p/
	SSHTarget string `json:"ssh_target"`         // [user@]host
	SSHJump   string `json:"ssh_jump,omitempty"` // ssh -J value
}

// topoJSON is the resolved topology as --json prints it.
func topoJSON(t *topology.Topology) any {
	hosts := make([]topoHostJSON, len(t.Hosts))
	for i, h := range t.Hosts {
		hosts[i] = topoHostJSON{Host: h, Dial: h.DialAddr(), SSHTarget: h.SSH.Target(), SSHJump: h.SSH.JumpSpec()}
	}
	return struct {
		Hosts []topoHostJSON  `json:"hosts"`
		Sites []topology.Site `json:"sites"`
	}{hosts, t.Sites}
}

// printTopology prints the tree: the root, then each site with its head
// and, under the head, its workers; each host on one line with its role
// and parents, then a line for ssh and one for its daemon.
func printTopology(w io.Writer, file string, t *topology.Topology) error {
	workers := 0
	for _, s := range t.Sites {
		workers += len(s.Workers)
	}
	fmt.Fprintf(w, "%s: valid: 1 root, %d %s, %d %s\n\n", file, len(t.Sites), plural(len(t.Sites), "site"), workers, plural(workers, "worker"))
	printTopoHost(w, "", t.Root())
	for _, s := range t.Sites {
		fmt.Fprintf(w, "  site %s (%d %s)\n", s.Name, len(s.Workers), plural(len(s.Workers), "worker"))
		printTopoHost(w, "    ", t.Host(s.Head))
		for _, name := range s.Workers {
			printTopoHost(w, "      ", t.Host(name))
		}
	}
	return nil
}

// printTopoHost prints host h at indent.
func printTopoHost(w io.Writer, indent string, h *topology.Host) {
	rel := ""
	if h.Parent != "" {
		rel = " <- parent " + h.Parent
		if len(h.Fallbacks) > 0 {
			rel += ", fallback " + strings.Join(h.Fallbacks, ", ")
		}
	}
	fmt.Fprintf(w, "%s%s %s%s\n", indent, h.Role, h.Host, rel)
	more := indent + strings.Repeat(" ", len(h.Role)+1)

	ssh := "ssh " + h.SSH.Target()
	if h.SSH.Port != 0 {
		ssh += " -p " + strconv.Itoa(h.SSH.Port)
	}
	if j := h.SSH.JumpSpec(); j != "" {
		ssh += " -J " + j
	}
	if h.SSH.Key != "" {
		ssh += " -i " + h.SSH.Key
	}
	fmt.Fprintf(w, "%s%s\n", more, ssh)

	d := []string{"dial " + h.DialAddr(), "dir " + h.Dir}
	if h.Daemon.CacheSize > 0 {
		d = append(d, "cache "+bytesize.Format(h.Daemon.CacheSize))
	} else {
		d = append(d, "cache default")
	}
	if h.Daemon.ChunkSize > 0 {
		d = append(d, "chunk "+bytesize.Format(h.Daemon.ChunkSize))
	}
	d = append(d, h.Daemon.RelayMode)
	p := strconv.Itoa(h.Daemon.Port)
	if l := h.Daemon.Listen; len(l) != 2 || l[0] != "/ip4/0.0.0.0/tcp/"+p || l[1] != "/ip4/0.0.0.0/udp/"+p+"/quic-v1" {
		d = append(d, "listen "+strings.Join(l, " "))
	}
	if len(h.Daemon.ExtraArgs) > 0 {
		d = append(d, "args "+strings.Join(h.Daemon.ExtraArgs, " "))
	}
	fmt.Fprintf(w, "%s%s\n", more, strings.Join(d, ", "))
}
