//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/omst-project/omst/internal/wanemu"
)

func cmdCleanup(args []string) int {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	prefix := fs.String("prefix", wanemu.RunIDPrefix, "remove namespaces and scratch directories (in /tmp, /dev/shm and -scratch) whose names start with this")
	scratch := fs.String("scratch", "", "also look for scratch directories in this directory (a run's -scratch)")
	force := fs.Bool("force", false, "also remove what runs that are still alive use")
	dry := fs.Bool("n", false, "only list what would be removed")
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage, "\nflags of cleanup:\n"); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if err := wanemu.Preflight(); err != nil && !*dry {
		logf("%v", err)
		return failCode(err)
	}
	if *dry {
		ls, err := wanemu.FindLeftovers(*prefix, extraRoots(*scratch)...)
		if err != nil {
			logf("%v", err)
			return exitFailed
		}
		for _, l := range ls {
			state := "dead run"
			if l.Live {
				state = fmt.Sprintf("run %d still alive: kept without -force", l.Owner)
			}
			fmt.Printf("%s\t(%s)\n", l.Path, state)
		}
		return exitOK
	}
	removed, err := wanemu.Cleanup(context.Background(), *prefix, *force, extraRoots(*scratch)...)
	for _, l := range removed {
		fmt.Printf("removed %s\n", l.Path)
	}
	if err != nil {
		logf("%v", err)
		return exitFailed
	}
	if len(removed) == 0 {
		fmt.Println("nothing to remove")
	}
	return exitOK
}

// extraRoots is the -scratch flag as a list of extra scratch roots.
func extraRoots(scratch string) []string {
	if scratch == "" {
		return nil
	}
	return []string{scratch}
}
