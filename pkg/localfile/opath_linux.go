package localfile

import "golang.org/x/sys/unix"

// oPath opens a directory only to name it in *at calls (no read right
// needed).
const oPath = unix.O_PATH

// renameNoReplace renames old onto new in the directory dfd unless new
// exists (EEXIST).
func renameNoReplace(dfd int, old, new string) error {
	return unix.Renameat2(dfd, old, dfd, new, unix.RENAME_NOREPLACE)
}
