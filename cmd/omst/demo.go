package main

import (
	"github.com/spf13/cobra"

	"github.com/omst-project/omst/internal/emugrid"
	"github.com/omst-project/omst/pkg/bytesize"
)

func demoCmd(g *globals) *cobra.Command {
	cfg := emugrid.DefaultDemo()
	var size string
	c := &cobra.Command{
		Use:   "demo",
		Short: "Distribute a blob through an emulated in-process grid and compare with the master sending to every worker",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if size != "" {
				s, err := bytesize.Parse(size)
				if err != nil {
					return usageError{err}
				}
				cfg.Size = s
			}
			if cfg.Topology.Sites < 1 || cfg.Topology.WorkersPerSite < 1 || cfg.Size < 1 {
				return usageError{emugrid.ErrBadDemo}
			}
			_, err := emugrid.RunDemo(cmd.Context(), cmd.OutOrStdout(), cfg)
			return err
		},
	}
	c.Flags().IntVar(&cfg.Topology.Sites, "sites", cfg.Topology.Sites, "number of sites")
	c.Flags().IntVar(&cfg.Topology.WorkersPerSite, "workers", cfg.Topology.WorkersPerSite, "workers per site")
	c.Flags().StringVar(&size, "size", "", "blob size (default 32M)")
	return c
}
