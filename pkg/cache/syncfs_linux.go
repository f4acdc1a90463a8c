package cache

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// syncFileSystem flushes every dirty page and metadata change of the file
// system that holds dir (syncfs(2)): one call for all the chunk files of a
// put, cheaper than an fsync per file and per directory.
func syncFileSystem(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}
