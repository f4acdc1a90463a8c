package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/omst-project/omst/pkg/node"
)

// buildInfo is what `omst version` reports.
type buildInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"` // vcs.revision, when built from a checkout
	Time     string `json:"commit_time,omitempty"`
	Modified bool   `json:"modified,omitempty"` // built from a checkout with changes
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// buildCommit is set by `make build` (-ldflags -X main.buildCommit=...):
// the commit, "-modified" appended for a checkout with changes.
var buildCommit string

func readBuildInfo() buildInfo {
	b := buildInfo{Version: node.Version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if c, ok := strings.CutSuffix(buildCommit, "-modified"); buildCommit != "" {
		b.Commit, b.Modified = c, ok
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision": // when built with -buildvcs
				b.Commit = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	return b
}

// String is the one line of `omst --version`.
func (b buildInfo) String() string {
	s := b.Version
	if b.Commit != "" {
		c := b.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " (" + c
		if b.Modified {
			s += ", modified"
		}
		if b.Time != "" {
			s += ", " + b.Time
		}
		s += ")"
	}
	return s + " " + b.Go + " " + b.Platform
}

func versionCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print omst's version, the commit it was built from, and the Go toolchain",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b := readBuildInfo()
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(b)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "omst %s\n", b)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "JSON")
	return c
}
