//go:build unix && !linux

package localfile

import "golang.org/x/sys/unix"

// oPath opens a directory to name it in *at calls; without O_PATH that
// needs the right to read it.
const oPath = unix.O_RDONLY
