//go:build unix && !linux

package localfile

import "golang.org/x/sys/unix"

// oPath opens a directory to name it in *at calls; without O_PATH that
// needs the right to read it.
const oPath = unix.O_RDONLY

// renameNoReplace renames old onto new in the directory dfd unless new
// exists (EEXIST): a hard link, which never replaces, then the old name
// removed.
func renameNoReplace(dfd int, old, new string) error {
	if err := unix.Linkat(dfd, old, dfd, new, 0); err != nil {
		return err
	}
	return unix.Unlinkat(dfd, old, 0)
}
